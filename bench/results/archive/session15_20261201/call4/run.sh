#!/usr/bin/env bash
# Fifteenth session, device call 4 (same lease as call 3): a second full run of the new default (ship15) on call
# 3's card, and the Wan 1.3B e2e report on it.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
export VIDATTN_GIT_COMMIT=${COMMIT:?}
B=.build/ship15
ROOT=$OUT
export VIDATTN_LIBRARY=$PWD/$B/lib_ship15.so \
  VIDATTN_LIBRARY_FLAGS="$(cat $B/ship15.variant) (ship15: csrc/ of $(cut -c1-7 $B/ship15.commit), the unrounded row sum by default)"
nvidia-smi --query-gpu=uuid,temperature.gpu,power.draw,clocks.sm --format=csv,noheader
mkdir -p $ROOT/bench2
OUT=$ROOT/bench2 OUT_FILE_LIMIT=1000 BUDGET_S=230 \
  BENCH_ARGS="--rounds 8 --order williams --out $ROOT/kernel_2026-12-01_${COMMIT:0:7}_williams_run2.json" \
  bash scripts/device_run.sh bench > $ROOT/bench2.log 2>&1
echo "bench rc=$?"; grep -A16 "bench table" $ROOT/bench2.log | cut -d'|' -f2,7,9,11 | head -16
rm -rf $ROOT/bench2
mkdir -p $ROOT/e2e
OUT=$ROOT/e2e OUT_FILE_LIMIT=1000 BUDGET_S=110 E2E_ARGS="--preset 1.3b --no-video --out-dir $ROOT/e2e" \
  bash scripts/device_run.sh e2e > $ROOT/e2e/run.log 2>&1
echo "e2e rc=$?"; grep -iE "attention share|per call inside|speedup|fidelity|psnr" $ROOT/e2e/run.log | tail -6
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f e2e)
