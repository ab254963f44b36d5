#!/bin/bash
# One device call for the 8-bit path: build the library (the project's own build), then dev/q8_check.py.
set -o pipefail
export PYTHONUNBUFFERED=1 VIDATTN_CACHE_DIR=/tmp/vidattn_cache
OUT=${OUT:-/tmp}
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw --format=csv | tee $OUT/gpu.txt
python3 -c "import torch; print(torch.__version__, torch.version.cuda, torch.backends.cudnn.version())"
python3 -c "import vidattn, time; t=time.time(); vidattn.build(verbose=True); print('build', time.time()-t)" 2>&1 \
  | grep -v "^ptxas info\|bytes stack frame\|^$" | tail -20 | tee $OUT/build.log
python3 dev/q8_check.py "$@" 2>&1 | tee $OUT/q8_check.log
