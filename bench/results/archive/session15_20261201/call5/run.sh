#!/usr/bin/env bash
# Fifteenth session, device call 5: compute-sanitizer memcheck and racecheck on the new default (ship15, the
# unrounded row sum), and its sustained ratios at the power limit (clock_probe.py, 4 s per path) on the shapes whose
# bars were tightest.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export VIDATTN_GIT_COMMIT=${COMMIT:?}
B=.build/ship15
ROOT=$OUT
export VIDATTN_LIBRARY=$PWD/$B/lib_ship15.so \
  VIDATTN_LIBRARY_FLAGS="$(cat $B/ship15.variant) (ship15: csrc/ of $(cut -c1-7 $B/ship15.commit), the unrounded row sum by default)"
nvidia-smi --query-gpu=uuid,temperature.gpu,power.draw,clocks.sm --format=csv,noheader
OUT=$ROOT OUT_FILE_LIMIT=1000 BUDGET_S=120 bash scripts/device_run.sh sanitizer > $ROOT/sanitizer.log 2>&1
echo "sanitizer rc=$?"; grep -E "ERROR SUMMARY|RACECHECK SUMMARY|clean|pass in|fail" $ROOT/sanitizer.log | head -8
timeout 150 python3 scripts/clock_probe.py wan13b_self wan14b_self wan_cross seed4k ltx_d64 --seconds 4 > $ROOT/clock_probe.log 2>&1
echo "clock_probe rc=$?"; tail -14 $ROOT/clock_probe.log | cut -c1-160
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
