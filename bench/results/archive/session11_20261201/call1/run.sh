#!/usr/bin/env bash
# Eleventh session, device call 1: the level-1 timeline build (tl1: the tree at this call, -DVIDATTN_DIAG_TIMELINE=1;
# no clock in the key loop) on six shapes: how often K_j / V_{j-1} had not landed when a key iteration waited for
# them, over all iterations and over the first iteration (j = 1) alone.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv > $OUT/smi_start.txt
VIDATTN_LIBRARY=$PWD/.build/ab/lib_tl1.so timeout 200 python3 scripts/timeline_probe.py seed4k seed16k wan13b_self \
  wan14b_self wan_cross fa1k_d128 --json $OUT/timeline_tl1.json > $OUT/timeline_tl1.log 2>&1
echo "timeline rc=$?"
grep -E "^==|^[a-z]|late_share|first iteration|steady|blocks/tile" $OUT/timeline_tl1.log | head -80
