#!/usr/bin/env bash
# Ninth session, device call 5: fin (the deferred O store as validated in call 4, 94a8692) against dnorm (3477887 with
# -DVIDATTN_DEFER_O_NORMALISE=1: O also normalised and packed under the next tile's S_0, the first P V overwriting
# O instead of a zeroed O), every anchor shape, 7 rounds. If dnorm is ahead on the geometric mean it is validated
# (GPU tests, memcheck + racecheck, bench_kernel.py --rounds 7, Wan e2e); if not, fin gets a second full benchmark
# run and the sustained ratios (clock_probe.py).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
VARIANTS="fin|| dnorm||" AB_TIME_ARGS="--rounds 7" T_SMOKE=45 T_TIME=300 bash scripts/kernel_ab.sh > /tmp/ab.log 2>&1
echo "ab rc=$?"
cp /tmp/ab.log $OUT/ab.log
best=$(python3 scripts/kernel_ab_time.py --pick "$OUT/ab_times.json" fin,dnorm)
echo "picked: $best"
if [[ $best == dnorm ]]; then
  VIDATTN_LIBRARY=$PWD/.build/ab/lib_dnorm.so VIDATTN_GIT_COMMIT=$(cat .build/ab/dnorm.commit) \
    VIDATTN_LIBRARY_FLAGS="-DVIDATTN_DEFER_O_NORMALISE=1 (candidate dnorm)" OUT_FILE_LIMIT=1000 BENCH_ARGS="--rounds 7" \
    BUDGET_S=$(( 560 - SECONDS )) bash scripts/device_run.sh gpu-tests sanitizer bench e2e > /tmp/dr.log 2>&1
  echo "device_run rc=$?"
else
  export VIDATTN_LIBRARY=$PWD/.build/ab/lib_fin.so VIDATTN_GIT_COMMIT=$(cat .build/ab/fin.commit)
  timeout 200 python3 scripts/bench_kernel.py --rounds 7 --no-progress --out $OUT/kernel_run2.json > $OUT/bench_run2.log 2>&1
  echo "bench rc=$?"
  timeout 120 python3 scripts/clock_probe.py seed4k wan_cross wan13b_self wan14b_self --seconds 4 > $OUT/clock_probe.log 2>&1
  echo "clock_probe rc=$?"
fi
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
grep -A14 "ratio table" /tmp/ab.log; grep -A3 "== summary" /tmp/ab.log; tail -22 /tmp/dr.log 2>/dev/null; tail -16 $OUT/bench_run2.log 2>/dev/null; tail -8 $OUT/clock_probe.log 2>/dev/null
(cd $OUT && tar czf /tmp/results.tgz . && rm -rf ./* && mv /tmp/results.tgz .)
