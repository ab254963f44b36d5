#!/usr/bin/env bash
# Fourteenth session, device call 3: the GPU suite with FlashAttention's max-|error| bound (12ca928), whole and
# without -x; then the error's tail on the two short cases where the fixed reference shows (777 x 777, D=128 and
# D=64) over 1000 draws each, the shipped build beside the exact online-softmax build, for the bound's margin.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?}
ROOT=$OUT
OUT=$ROOT OUT_FILE_LIMIT=1000 BUDGET_S=230 PYTEST_FLAGS="-q -rfEs --durations=5" \
  bash scripts/device_run.sh gpu-tests > $ROOT/gpu_tests.log 2>&1
echo "gpu-tests rc=$?"; grep -E "^FAILED|passed|failed" $ROOT/gpu_tests.log | tail -8
rm -f $ROOT/device_run.log
python3 scripts/accuracy_tail.py ship=.build/ab/lib_def.so online=.build/ab/lib_onl.so --seeds 1000 \
  --shapes 777_d128,777_d64 --json $ROOT/accuracy_tail_1000.json > $ROOT/accuracy_tail_1000.log 2>&1
echo "accuracy_tail rc=$?"; tail -17 $ROOT/accuracy_tail_1000.log
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
