#!/usr/bin/env bash
# Tenth session, device call 2: base (85465df, the shipped machine code) against lv (6723031 with
# -DVIDATTN_LATE_V_WAIT=1: a key iteration issues S_j after waiting for K_j only and waits for V_{j-1} inside the
# turn, before its P V) and lvk (lv + -DVIDATTN_K_AHEAD=1: the producer issues K_{j+1} before V_j), every anchor
# shape, 7 rounds; then the one with the best geometric mean validated: GPU tests, memcheck + racecheck,
# bench_kernel.py --rounds 7, Wan e2e.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
CANDIDATES="base lv lvk" AB_TIME_ARGS="--rounds 7" T_SMOKE=45 T_TIME=300 \
  STAGES="gpu-tests sanitizer bench e2e" BENCH_ARGS="--rounds 7" BUDGET_S=570 \
  bash scripts/device_ab_validate.sh > /tmp/validate.log 2>&1
echo "validate rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
cp /tmp/validate.log $OUT/validate.log
grep -E "ratio table" -A14 /tmp/validate.log; grep "\[pick\]" /tmp/validate.log; tail -32 /tmp/validate.log
