#!/usr/bin/env bash
# Thirteenth session, device call 7 (the last of the session's device time): a full bench_kernel.py run of the
# shipped machine code at this session's head (Williams order, 8 rounds; vidattn.attention now takes the eager fast
# path), then the Wan 1.3B e2e report with the per-call attention times.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?} \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/def.variant) (def: csrc/ of $(cut -c1-7 .build/ab/def.commit), unchanged at ${COMMIT:0:7})"
ROOT=$OUT
mkdir -p $ROOT/bench $ROOT/e2e
OUT=$ROOT/bench OUT_FILE_LIMIT=1000 BUDGET_S=230 \
  BENCH_ARGS="--rounds 8 --order williams --out $ROOT/bench/kernel_2026-12-01_${COMMIT:0:7}_williams.json" \
  bash scripts/device_run.sh bench > $ROOT/bench/run.log 2>&1
echo "bench rc=$?"; grep -A16 "bench table" $ROOT/bench/run.log | cut -d'|' -f2,7,9,11 | head -16
OUT=$ROOT/e2e OUT_FILE_LIMIT=1000 BUDGET_S=120 E2E_ARGS="--preset 1.3b --no-video --out-dir $ROOT/e2e" \
  bash scripts/device_run.sh e2e > $ROOT/e2e/run.log 2>&1
echo "e2e rc=$?"; grep -E "per call inside|speedup|fidelity" $ROOT/e2e/run.log | tail -4
OUT=$ROOT
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f bench e2e)
