#!/usr/bin/env bash
# Tenth session, device call 5 (the last of the session's device time): def (e1be025, the shipped machine code) once
# more: bench_kernel.py --rounds 7, then the sustained ratios (clock_probe.py, 4 s per path) of the nine anchor
# shapes that call 4 did not probe. Results are written straight into $OUT (the call may be cut at the budget's end).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=$(cat .build/ab/def.commit) VIDATTN_LIBRARY_FLAGS="(tree defaults) (def)"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv > $OUT/smi_start.txt
timeout 170 python3 scripts/bench_kernel.py --rounds 7 --no-progress --out $OUT/ > $OUT/bench_run3.log 2>&1
echo "bench rc=$?"
timeout 150 python3 scripts/clock_probe.py seed8k seed16k hunyuan_720p fa1k_d128 wan_cross fa1k_d64 fa8k_d64 \
  cogvideox_d64 ltx_d64 --seconds 4 > $OUT/clock_probe.log 2>&1
echo "clock_probe rc=$?"
grep -E "^\| (seed|FA|Wan|Hun|Cog|LTX)" $OUT/bench_run3.log | cut -d'|' -f2,11; tail -20 $OUT/clock_probe.log
