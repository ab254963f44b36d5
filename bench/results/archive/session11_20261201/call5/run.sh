#!/usr/bin/env bash
# Eleventh session, device call 5: qd (b6e36c9, the new default) once more in full (bench_kernel.py --rounds 7), its
# sustained ratios on four shapes (clock_probe.py, 4 s per path), and its level-1 timeline build (qtl: b6e36c9 with
# -DVIDATTN_DIAG_TIMELINE=1) on the two N=128 shapes, to set beside call 1's (Q read from shared memory).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_qd.so VIDATTN_GIT_COMMIT=$(cat .build/ab/qd.commit) VIDATTN_LIBRARY_FLAGS="(tree defaults) (qd)"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv > $OUT/smi_start.txt
timeout 170 python3 scripts/bench_kernel.py --rounds 7 --no-progress --out $OUT/ > $OUT/bench_run2.log 2>&1
echo "bench rc=$?"
timeout 90 python3 scripts/clock_probe.py wan_cross fa1k_d128 wan13b_self wan14b_self --seconds 4 > $OUT/clock_probe.log 2>&1
echo "clock_probe rc=$?"
VIDATTN_LIBRARY=$PWD/.build/ab/lib_qtl.so timeout 60 python3 scripts/timeline_probe.py wan_cross fa1k_d128 \
  --json $OUT/timeline_qtl.json > $OUT/timeline_qtl.log 2>&1
echo "timeline rc=$?"
grep -E "^\| (seed|FA|Wan|Hun|Cog|LTX)" $OUT/bench_run2.log | cut -d'|' -f2,11; tail -8 $OUT/clock_probe.log
grep -E "^==|steady|first_iter|late_share|of the first" $OUT/timeline_qtl.log
