#!/usr/bin/env bash
# Twelfth session, device call 1: (1) A/B, 7 rounds, every shape: def (the tree at 81002d1 = 0e5abfa's machine code,
# the shipped build) against Q partly in registers at N=176 (qp2 / qp3: 2 / 3 of Q's 8 k-steps,
# q_partial_regs.patch), the warpgroup index made warp-uniform (ucwg.patch) and both (uq3,
# q_partial_ucwg.patch); (2) the validation the eleventh session could not finish: the whole GPU suite and
# memcheck + racecheck on def.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
VARIANTS="${AB_LIBS:-def|| qp2|| qp3|| ucwg|| uq3||}" T_SMOKE=45 T_TIME=260 AB_TIME_ARGS="--rounds 7" \
  bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
echo "ab rc=$?"
VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=$(cat .build/ab/def.commit) \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/def.variant) (def)" OUT_FILE_LIMIT=1000 BUDGET_S=230 \
  bash scripts/device_run.sh gpu-tests sanitizer > /tmp/validate.log 2>&1
echo "validate rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
cp /tmp/validate.log $OUT/validate.log
grep -E "ratio table" -A16 $OUT/ab.log; grep -A8 "== summary" $OUT/ab.log; tail -14 /tmp/validate.log
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -f $f)
