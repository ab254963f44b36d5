#!/usr/bin/env bash
# Tenth session, device call 1. (1) What a steady key iteration waits for: the timeline build (85465df,
# -DVIDATTN_DIAG_TIMELINE=1) now sums per tile the cycles spent in the K/V "full" waits, the ping-pong turn, the
# turn's issue + S_j's wait and the P V wait, and the producer's K / V "empty" waits. (2) A/B, every anchor shape,
# 7 rounds: base (85465df, the shipped machine code) against thr (-DVIDATTN_D128_SHORT_KV_MAX=4096: seed 4K on the
# N=128 build) and kah (csrc/experiments/k_ahead.patch: the producer issues K_{j+1} before V_j).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee /tmp/smi_start.txt
VIDATTN_LIBRARY=$PWD/.build/ab/lib_tl.so timeout 200 python3 scripts/timeline_probe.py \
  seed4k seed16k wan14b_self wan_cross fa1k_d128 --json /tmp/timeline.json > /tmp/timeline.log 2>&1
echo "timeline rc=$?"
VARIANTS="base|| thr|| kah||" AB_TIME_ARGS="--rounds 7" T_SMOKE=45 T_TIME=330 OUT=/tmp/abo bash scripts/kernel_ab.sh > /tmp/ab.log 2>&1
echo "ab rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee /tmp/smi_end.txt
grep -v "^   " /tmp/timeline.log | head -3; grep -E "^==|steady|waits|producer_waits|first_iter|last_iter" /tmp/timeline.log
grep -A16 "ratio table" /tmp/ab.log; grep -A4 "== summary" /tmp/ab.log
mkdir -p $OUT/r && cp /tmp/smi_*.txt /tmp/timeline.* /tmp/ab.log $OUT/r/ && cp /tmp/abo/* $OUT/r/ 2>/dev/null
(cd $OUT/r && tar czf $OUT/results.tgz . ) && rm -rf $OUT/r
