#!/usr/bin/env bash
# Fifteenth session, device call 1: NOTES lead 1, the unrounded row sum (unr: -DVIDATTN_ROW_SUM_UNROUNDED=1).
# Its error tail beside the shipped build (def) and the exact build (online) on every accuracy_tail case and input,
# the late attention sink included (never run before); the whole GPU suite on it (this also runs the suite's import
# of fa_atol from accuracy_tail.py for the first time); the Wan 1.3B e2e report on it (PSNR against def's 50.03 dB);
# and its first full bench_kernel.py run (Williams, 8 rounds).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_GIT_COMMIT=${COMMIT:?}
B=.build/ab
ROOT=$OUT
timeout 150 python3 scripts/accuracy_tail.py def=$B/lib_def.so unr=$B/lib_unr.so online=$B/lib_onl.so --seeds 100 \
  --inputs randn,shift,sink --json $ROOT/accuracy_tail.json > $ROOT/accuracy_tail.log 2>&1
echo "accuracy_tail rc=$?"; cat $ROOT/accuracy_tail.log | cut -c1-120
export VIDATTN_LIBRARY=$PWD/$B/lib_unr.so \
  VIDATTN_LIBRARY_FLAGS="$(cat $B/unr.variant) (unr: csrc/ of $(cut -c1-7 $B/unr.commit) + -DVIDATTN_ROW_SUM_UNROUNDED=1)"
OUT=$ROOT OUT_FILE_LIMIT=1000 BUDGET_S=170 PYTEST_FLAGS="-q -rfEs" bash scripts/device_run.sh gpu-tests \
  > $ROOT/gpu_tests.log 2>&1
echo "gpu-tests rc=$?"; grep -E "^FAILED|passed|failed" $ROOT/gpu_tests.log | tail -8
mkdir -p $ROOT/e2e
OUT=$ROOT/e2e OUT_FILE_LIMIT=1000 BUDGET_S=110 E2E_ARGS="--preset 1.3b --no-video --out-dir $ROOT/e2e" \
  bash scripts/device_run.sh e2e > $ROOT/e2e/run.log 2>&1
echo "e2e rc=$?"; grep -iE "attention share|per call inside|speedup|fidelity|psnr" $ROOT/e2e/run.log | tail -6
mkdir -p $ROOT/bench1
OUT=$ROOT/bench1 OUT_FILE_LIMIT=1000 BUDGET_S=230 \
  BENCH_ARGS="--rounds 8 --order williams --out $ROOT/kernel_2026-12-01_${COMMIT:0:7}_unr_williams.json" \
  bash scripts/device_run.sh bench > $ROOT/bench1.log 2>&1
echo "bench 1 rc=$?"; grep -A16 "bench table" $ROOT/bench1.log | cut -d'|' -f2,7,9,11 | head -16
rm -rf $ROOT/bench1
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f e2e)
