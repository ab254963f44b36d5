#!/usr/bin/env bash
# Ninth session, device call 1: where a tile boundary's time goes. A timeline build of the shipped kernel
# (-DVIDATTN_DIAG_TIMELINE=1, csrc/sm90/diag_timeline.cuh) stamps each tile's phases; scripts/timeline_probe.py
# prints the median cycles per phase on short-tile shapes (seed 4K, Wan cross, FA-bench 1K) and long ones.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
VIDATTN_LIBRARY=$PWD/.build/ab/lib_tl.so timeout 300 python3 scripts/timeline_probe.py \
  seed4k seed8k seed16k wan_cross fa1k_d128 wan13b_self --json $OUT/timeline.json > $OUT/timeline.log 2>&1
echo "timeline rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
cat $OUT/timeline.log | tail -80
