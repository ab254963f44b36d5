#!/usr/bin/env bash
# Fifteenth session, device call 2 (same lease as call 1): the shipped build (def) and unr, one full run each,
# back to back on the same card (Williams, 8 rounds), so unr's call-1 run (11/11 bars on a card whose cuDNN read
# 565 TFLOPS on Wan 1.3B) has a same-card comparison; then round_positions on all three runs.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_GIT_COMMIT=${COMMIT:?}
B=.build/ab
ROOT=$OUT
for v in def unr; do
  if [ $v = def ]; then fl="(def: csrc/ of $(cut -c1-7 $B/def.commit), unchanged at ${COMMIT:0:7})"; sfx=williams
  else fl="(unr: csrc/ of $(cut -c1-7 $B/unr.commit) + -DVIDATTN_ROW_SUM_UNROUNDED=1)"; sfx=unr_williams_run2; fi
  mkdir -p $ROOT/b_$v
  VIDATTN_LIBRARY=$PWD/$B/lib_$v.so VIDATTN_LIBRARY_FLAGS="$(cat $B/$v.variant) $fl" \
  OUT=$ROOT/b_$v OUT_FILE_LIMIT=1000 BUDGET_S=250 \
    BENCH_ARGS="--rounds 8 --order williams --out $ROOT/kernel_2026-12-01_${COMMIT:0:7}_$sfx.json" \
    bash scripts/device_run.sh bench > $ROOT/bench_$v.log 2>&1
  echo "bench $v rc=$?"; grep -A16 "bench table" $ROOT/bench_$v.log | cut -d'|' -f2,7,9,11 | head -16
  rm -rf $ROOT/b_$v
done
python3 scripts/round_positions.py --by predecessor --shapes 1.3B,14B,LTX $ROOT/kernel_*.json | tail -30
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
