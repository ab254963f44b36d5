#!/usr/bin/env bash
# Eleventh session, device call 6 (the last of the session's device time): qd (b6e36c9, the default) against thr4k
# (the same tree with -DVIDATTN_D128_SHORT_KV_MAX=4096: seed 4K's 4096 keys on the N=128 build, whose Q is now in
# registers; refuted twice with Q in shared memory, tenth session) on the three seed shapes (only seed 4K differs),
# 9 rounds; then the better one validated: GPU tests and a full bench_kernel.py --rounds 7.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
CANDIDATES="qd thr4k" AB_TIME_ARGS="--rounds 9 --shapes seed" T_SMOKE=45 T_TIME=150 \
  STAGES="gpu-tests bench" BENCH_ARGS="--rounds 7" BUDGET_S=470 \
  bash scripts/device_ab_validate.sh > /tmp/validate.log 2>&1
echo "validate rc=$?"
cp /tmp/validate.log $OUT/validate.log
grep -E "ratio table" -A5 /tmp/validate.log; grep "\[pick\]" /tmp/validate.log; tail -24 /tmp/validate.log
