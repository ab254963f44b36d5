#!/usr/bin/env bash
# Thirteenth session, device call 6: where the reduced Wan forward's time goes (scripts/forward_overhead.py: 1560
# tokens, SDPA against vidattn: wall, host, kernels, cProfile), the host cost per call again
# (scripts/call_overhead.py, the sleep kernel now sized from the loop's pace) after trimming the eager call (profiler
# range only while profiling, no lse placeholder, device capability asked once), then the whole GPU suite on it.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?}
python3 scripts/call_overhead.py --shape 1,1560,12,128 --calls 300 --profile > $OUT/call_overhead.log 2>&1
echo "call_overhead rc=$?"; grep -A5 "^shape" $OUT/call_overhead.log
python3 scripts/forward_overhead.py --preset 1.3b --height 240 --width 416 --frames 21 > $OUT/forward_overhead.log 2>&1
echo "forward_overhead rc=$?"; grep "^## " $OUT/forward_overhead.log
OUT_FILE_LIMIT=1000 BUDGET_S=200 bash scripts/device_run.sh gpu-tests > $OUT/gpu_tests.log 2>&1
echo "gpu-tests rc=$?"; grep -E "passed|failed" $OUT/gpu_tests.log | tail -3
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
