#!/usr/bin/env bash
# Eleventh session, device call 4: qd (b6e36c9, Q in registers in the N=128 D=128 build by default; its 20 kernels
# are qr's of calls 2-3, cuobjdump) A/B'd once more against def (1ab58af's machine code, e1be025's), 7 rounds, then
# validated: GPU tests, memcheck + racecheck, bench_kernel.py --rounds 7, Wan e2e.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
REFERENCE="def" CANDIDATES="qd" AB_TIME_ARGS="--rounds 7" T_SMOKE=45 T_TIME=200 \
  STAGES="gpu-tests sanitizer bench e2e" BENCH_ARGS="--rounds 7" BUDGET_S=560 \
  bash scripts/device_ab_validate.sh > /tmp/validate.log 2>&1
echo "validate rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
cp /tmp/validate.log $OUT/validate.log
grep -E "ratio table" -A14 /tmp/validate.log; grep "\[pick\]" /tmp/validate.log; tail -32 /tmp/validate.log
