#!/usr/bin/env bash
# Fourteenth session, device call 8 (the last device seconds): the Wan 1.3B e2e report on the unrounded row sums
# (lib_unr.so, -DVIDATTN_ROW_SUM_UNROUNDED=1), for its fidelity against SDPA beside def's 50.03 dB.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_unr.so VIDATTN_GIT_COMMIT=${COMMIT:?} VIDATTN_LIBRARY_FLAGS="-DVIDATTN_ROW_SUM_UNROUNDED=1"
timeout 70 python3 scripts/e2e_report.py --preset 1.3b --no-video --out-dir $OUT > $OUT/e2e.log 2>&1
echo "e2e rc=$?"; grep -iE "per call inside|speedup|fidelity" $OUT/e2e.log | tail -5
rm -f $OUT/first_frames.png
