#!/usr/bin/env bash
# Fourteenth session, device call 5: a third full bench_kernel.py run of the shipped machine code at this session's
# head (Williams order, 8 rounds), on a fresh lease, to see whether call 4's two passes of every bar hold; and
# scripts/round_positions.py (round times by position and by predecessor).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?} \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/def.variant) (def: csrc/ of $(cut -c1-7 .build/ab/def.commit), unchanged at ${COMMIT:0:7})"
ROOT=$OUT
for run in 3; do
  suffix=""
  mkdir -p $ROOT/bench$run
  OUT=$ROOT/bench$run OUT_FILE_LIMIT=1000 BUDGET_S=250 \
    BENCH_ARGS="--rounds 8 --order williams --out $ROOT/kernel_2026-12-01_${COMMIT:0:7}_williams$suffix.json" \
    bash scripts/device_run.sh bench > $ROOT/bench$run.log 2>&1
  echo "bench $run rc=$?"; grep -A16 "bench table" $ROOT/bench$run.log | cut -d'|' -f2,7,9,11 | head -16
  rm -rf $ROOT/bench$run
done
python3 scripts/round_positions.py --by predecessor --shapes 1.3B,14B,LTX $ROOT/kernel_*.json
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
