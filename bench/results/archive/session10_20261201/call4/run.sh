#!/usr/bin/env bash
# Tenth session, device call 4: def (e1be025, the late V wait) against lvp (def + csrc/experiments/
# pass_before_v_wait.patch: the turn passes right after S_j is issued, before the wait for V_{j-1}, so the other
# warpgroup may issue behind S_j while V is late), every anchor shape, 7 rounds. If lvp is ahead on the geometric
# mean it is validated (GPU tests, memcheck + racecheck, bench_kernel.py --rounds 7, Wan e2e); if not, def gets a
# second full benchmark run and the sustained ratios (clock_probe.py).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee /tmp/smi_start.txt
VARIANTS="def|| lvp||" AB_TIME_ARGS="--rounds 7" T_SMOKE=45 T_TIME=200 OUT=/tmp/abo bash scripts/kernel_ab.sh > /tmp/ab.log 2>&1
echo "ab rc=$?"
best=$(python3 scripts/kernel_ab_time.py --pick /tmp/abo/ab_times.json def,lvp)
echo "picked: $best"
mkdir -p /tmp/dr
if [[ $best == lvp ]]; then
  OUT=/tmp/dr VIDATTN_LIBRARY=$PWD/.build/ab/lib_lvp.so VIDATTN_GIT_COMMIT=$(cat .build/ab/lvp.commit) \
    VIDATTN_LIBRARY_FLAGS="patch pass_before_v_wait.patch (candidate lvp)" OUT_FILE_LIMIT=1000 BENCH_ARGS="--rounds 7" \
    BUDGET_S=$(( 570 - SECONDS )) bash scripts/device_run.sh gpu-tests sanitizer bench e2e > /tmp/dr.log 2>&1
  echo "device_run rc=$?"
else
  export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=$(cat .build/ab/def.commit) VIDATTN_LIBRARY_FLAGS="(tree defaults) (def)"
  timeout 190 python3 scripts/bench_kernel.py --rounds 7 --no-progress --out /tmp/dr/ > /tmp/dr/bench_run2.log 2>&1
  echo "bench rc=$?"
  timeout 100 python3 scripts/clock_probe.py seed4k wan13b_self wan14b_self --seconds 4 > /tmp/dr/clock_probe.log 2>&1
  echo "clock_probe rc=$?"
fi
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee /tmp/smi_end.txt
grep -A14 "ratio table" /tmp/ab.log; grep -A3 "== summary" /tmp/ab.log | head -4; tail -22 /tmp/dr.log 2>/dev/null
grep -E "^\| (seed|FA|Wan|Hun|Cog|LTX)" /tmp/dr/bench_run2.log 2>/dev/null | cut -d'|' -f2,11; tail -8 /tmp/dr/clock_probe.log 2>/dev/null
mkdir -p $OUT/r && cp /tmp/smi_*.txt /tmp/ab.log $OUT/r/ && cp /tmp/abo/* $OUT/r/ 2>/dev/null; cp -r /tmp/dr $OUT/r/ 2>/dev/null; cp /tmp/dr.log $OUT/r/ 2>/dev/null
(cd $OUT/r && tar czf $OUT/results.tgz . ) && rm -rf $OUT/r
