#!/usr/bin/env bash
# Tenth session, device call 3: def (e1be025, the late V wait on by default; the same machine code as call 2's
# validated lv) against three flag-only variants of it, every anchor shape, 5 rounds: thr2
# (-DVIDATTN_D128_SHORT_KV_MAX=4096: seed 4K on the N=128 build), ql2 (-DVIDATTN_Q_L2_PREFETCH=1: the next tile's Q
# asked into L2 a tile ahead where Q has one buffer), rot (-DVIDATTN_KV_ROTATE=1: each tile starts its key blocks at
# tile mod n). Then the lineage in one run (scripts/bench_lineage.py, the new step 14 = step 13 + the late V wait;
# builds carried in .build/lineage) and bench_kernel.py --rounds 7 of def.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee /tmp/smi_start.txt
VARIANTS="def|| thr2|| ql2|| rot||" AB_TIME_ARGS="--rounds 5" T_SMOKE=45 T_TIME=220 OUT=/tmp/abo bash scripts/kernel_ab.sh > /tmp/ab.log 2>&1
echo "ab rc=$?"
VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=1431428 timeout 170 python3 scripts/bench_lineage.py --out /tmp/lineage/ > /tmp/lineage.log 2>&1
echo "lineage rc=$?"
VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=$(cat .build/ab/def.commit) VIDATTN_LIBRARY_FLAGS="(tree defaults) (def)" \
  timeout 190 python3 scripts/bench_kernel.py --rounds 7 --no-progress --out /tmp/bench/ > /tmp/bench.log 2>&1
echo "bench rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee /tmp/smi_end.txt
grep -A14 "ratio table" /tmp/ab.log; grep -A5 "== summary" /tmp/ab.log | head -6; tail -22 /tmp/lineage.log | cut -c1-160; grep -E "^\| (seed|FA|Wan|Hun|Cog|LTX)" /tmp/bench.log | cut -d'|' -f2,11
mkdir -p $OUT/r && cp /tmp/smi_*.txt /tmp/ab.log /tmp/bench.log /tmp/lineage.log /tmp/bench/*.json /tmp/lineage/*.json $OUT/r/ && cp /tmp/abo/* $OUT/r/ 2>/dev/null
(cd $OUT/r && tar czf $OUT/results.tgz . ) && rm -rf $OUT/r
