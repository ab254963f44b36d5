#!/usr/bin/env bash
# Ninth session, device call 3: the deferred O store's timeline, and the merged boundary turn against it.
# dfr = the tree with the deferred O store (VIDATTN_DEFER_O_STORE=1; SASS identical to call 2's defer); tld = dfr
# with the timeline stamps (-DVIDATTN_DIAG_TIMELINE=1); mrg = dfr + the next tile's S_0 in the last P V's turn
# where Q has two buffers (VIDATTN_MERGE_TURN=1: the short-key D=128 build and the D=64 builds); base = the shipped
# machine code (call 2). Timeline first (short), then smoke + A/B on every anchor shape, 7 rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
VIDATTN_LIBRARY=$PWD/.build/ab/lib_tld.so timeout 200 python3 scripts/timeline_probe.py \
  seed4k seed16k wan_cross fa1k_d128 --json $OUT/timeline_dfr.json > $OUT/timeline_dfr.log 2>&1
echo "timeline rc=$?"
# The merged turn runs only where a CTA has more than one tile and Q two buffers: check mrg's output on those anchor
# shapes against SDPA first (bench_kernel.py's check, one quick round).
VIDATTN_LIBRARY=$PWD/.build/ab/lib_mrg.so timeout 120 python3 scripts/bench_kernel.py --shapes cross "1K" "8K D64" LTX \
  --rounds 1 --quick --backends vidattn,cudnn --no-progress --out $OUT/check_mrg.json > $OUT/check_mrg.log 2>&1
echo "check mrg rc=$?"
VARIANTS="base|| dfr|| mrg||" AB_TIME_ARGS="--rounds 7" T_SMOKE=45 T_TIME=430 bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
echo "ab rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
grep -A4 "== summary" $OUT/ab.log; tail -9 $OUT/check_mrg.log; grep -E "rel|max" $OUT/ab_smoke.log | grep -iv " ok " | head -5
grep -E "^==|blocks/tile|epilogue|S_0|last P V|gap_to" $OUT/timeline_dfr.log; tail -14 $OUT/ab_time.log
