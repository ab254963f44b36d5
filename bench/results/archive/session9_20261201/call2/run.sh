#!/usr/bin/env bash
# Ninth session, device call 2: A/B of two changes suggested by call 1's timeline, against the shipped machine code.
# base = the tree's defaults (SASS identical to the shipped library in all 20 kernels); pf = base with
# -DVIDATTN_KV_PREFETCH_L2=1 (the producer prefetches into L2 a share of the next tile's K/V); defer = base with
# -DVIDATTN_DEFER_O_STORE=1 (a tile's O stores issued behind the next tile's S_0). Smoke per library, then every
# anchor shape timed interleaved with cuDNN, 7 rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
VARIANTS="base|| pf|| defer||" AB_TIME_ARGS="--rounds 7" T_SMOKE=45 T_TIME=430 bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
echo "ab rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
grep -E "^\[ab\]|smoke" $OUT/ab.log | tail -12; tail -22 $OUT/ab_time.log
