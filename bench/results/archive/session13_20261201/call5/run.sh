#!/usr/bin/env bash
# Thirteenth session, device call 5: the host-side cost of an attention call (scripts/call_overhead.py; call 4's GPU
# test ran the reduced Wan 1.3B forward at 1560 tokens in 88 ms under vidattn against 42 ms under SDPA), now that an
# eager vidattn.attention runs the custom op's body directly; then the whole GPU suite on that change (shipped kernels).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?}
for shape in 1,1560,12,128 1,32760,12,128; do
  python3 scripts/call_overhead.py --shape $shape --calls 300 $([[ $shape == 1,1560,12,128 ]] && echo --profile) \
    > $OUT/overhead_$shape.log 2>&1
  echo "overhead $shape rc=$?"; grep -A5 "^shape" $OUT/overhead_$shape.log
done
OUT_FILE_LIMIT=1000 BUDGET_S=200 bash scripts/device_run.sh gpu-tests > $OUT/gpu_tests.log 2>&1
echo "gpu-tests rc=$?"; grep -E "passed|failed" $OUT/gpu_tests.log | tail -3
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
