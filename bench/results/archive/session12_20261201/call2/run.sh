#!/usr/bin/env bash
# Twelfth session, device call 2: call 1 read qp2 / qp3 (2 / 3 of Q's 8 k-steps in registers at N=176) up on the Wan
# shapes and down on seed 8K / 16K, each by 1-3%, inside the noise. So: the five N=176 shapes alone, 13 rounds,
# def against a copy of itself (defb: the A/A spread) and qp2, qp3; the best of def, qp2, qp3 by geometric mean then
# gets a full bench_kernel.py --rounds 7, and GPU tests + memcheck + racecheck when it is not def.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
VARIANTS="def|| defb|| qp2|| qp3||" T_SMOKE=45 T_TIME=200 \
  AB_TIME_ARGS="--rounds 13 --shapes seed8k,seed16k,wan13b,wan14b,hunyuan" bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
echo "ab rc=$?"
best=$(python3 scripts/kernel_ab_time.py --pick $OUT/ab_times.json def,qp2,qp3 2>>$OUT/ab.log) || best=def
echo "picked $best" | tee $OUT/picked.txt
stages="bench"; [[ $best != def ]] && stages="gpu-tests sanitizer bench"
VIDATTN_LIBRARY=$PWD/.build/ab/lib_$best.so VIDATTN_GIT_COMMIT=$(cat .build/ab/$best.commit 2>/dev/null || echo 81002d1) \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/$best.variant) ($best)" OUT_FILE_LIMIT=1000 BUDGET_S=330 BENCH_ARGS="--rounds 7" \
  bash scripts/device_run.sh $stages > /tmp/validate.log 2>&1
echo "validate rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
cp /tmp/validate.log $OUT/validate.log
grep -E "ratio table" -A7 $OUT/ab.log; grep "\[pick\]" $OUT/ab.log; tail -30 /tmp/validate.log
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -f $f)
