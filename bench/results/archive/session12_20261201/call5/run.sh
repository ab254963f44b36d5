#!/usr/bin/env bash
# Twelfth session, device call 5 (the last of the session's device time): a second full bench_kernel.py run of the
# shipped machine code in the Williams round order, 8 rounds (call 4 ran the first).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?} \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/def.variant) (def: csrc/ of $(cut -c1-7 .build/ab/def.commit), unchanged at ${COMMIT:0:7})"
BUDGET_S=${BUDGET_S:-230} BENCH_ARGS="--rounds 8 --order williams --out $OUT/kernel_2026-12-01_${COMMIT:0:7}_williams_run2.json" \
  bash scripts/device_run.sh bench > $OUT/run.log 2>&1
echo "rc=$?"; grep -A16 "bench table" $OUT/run.log | cut -d'|' -f2,7,9,11 | head -16
