#!/usr/bin/env bash
# Ninth session, device call 4: the deferred O store as committed (fin = 94a8692's tree, built with its defaults)
# against late (fin + -DVIDATTN_O_STORE_UNDER_STEP1=1: in the short-key build the stores go behind the first S + P V
# turn instead of S_0) on the shapes the short-key build runs, seed 4K beside them as a control (the same N=176 code
# in both); then the faster one validated: GPU tests, memcheck + racecheck, bench_kernel.py --rounds 7, Wan e2e.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
CANDIDATES="fin late" AB_TIME_ARGS="--rounds 9 --shapes wan_cross,fa1k_d128,seed4k" T_SMOKE=45 \
  STAGES="gpu-tests sanitizer bench e2e" BENCH_ARGS="--rounds 7" BUDGET_S=560 \
  bash scripts/device_ab_validate.sh > /tmp/validate.log 2>&1
echo "validate rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
cp /tmp/validate.log $OUT/validate.log
grep -E "ratio table" -A5 /tmp/validate.log; grep "\[pick\]" /tmp/validate.log; tail -32 /tmp/validate.log
