#!/usr/bin/env bash
# Thirteenth session, device call 1: scripts/neighbour_probe.py (NOTES lead 1) on the shipped machine code (def:
# built from 81002d1's csrc/, unchanged since): vidattn's and cuDNN's bench_kernel.py-sized windows right after idle,
# vidattn, cuDNN or FlashAttention-2, with per-call times and nvidia-smi clock and power, on three N=176 shapes.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so
for shape in wan13b_self wan14b_self seed8k; do
  python3 scripts/neighbour_probe.py $shape --reps 4 --json $OUT/neighbour_$shape.json > $OUT/neighbour_$shape.log 2>&1
  echo "$shape rc=$?"; tail -9 $OUT/neighbour_$shape.log
done
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
