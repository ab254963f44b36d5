#!/bin/bash
# One device stage for the 8-bit kernel's turn schedules (dev/NOTES_8bit.md v8), from the repository root with the
# library built from HEAD (vidattn's cache, or VIDATTN_LIBRARY):
#   OUT=... bash dev/q8_sched_ab.sh [TOTAL_SECONDS, default 115]
# 1. dev/q8_sched_ab.py: each variant's checks, then up to 6 alternating passes on Wan 1.3B self, seed 8K,
#    CogVideoX and LTX: schedule 3 (turns around the exponentials, D=128 and D=64) and schedule 2 with conversion 2
#    (D=128) against the default (TFLOPS synced, queued, kernel-only; per-pass ratios);
# 2. the GPU tests of the schedules: each new variant against fp64 (odd lengths, kv_lens, fp16, key offset, late
#    sink, row mass, many CTAs, against schedule 1's output), the refusals, the defaults.
# The A/B's table is printed last. Everything under $OUT/q8/: gpu.txt, q8_sched_ab.log, q8_sched_ab.json,
# pytest_sched.log.
set -o pipefail
TOTAL=${1:-115}
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
D=${OUT:-/tmp}/q8
mkdir -p "$D"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$D/gpu.txt" 2>&1
echo "commit $(git rev-parse --short HEAD 2>/dev/null) library ${VIDATTN_LIBRARY:-vidattn cache}" >> "$D/gpu.txt"
# The tests first, under a hard share (a hang in a turn schedule would show here, as a timeout, not eat the A/B).
timeout $(( $(left) * 40 / 100 )) python3 -m pytest -q -p no:cacheprovider tests/test_8bit_gpu.py \
  -k "turn_schedules or schedules_and_row_sum_modes or refused_off_their_builds or defaults_report_what_ran" \
  > "$D/pytest_sched.log" 2>&1
rc=$?
echo "pytest (schedules) rc=$rc $(tail -1 "$D/pytest_sched.log")"
grep -a "^FAILED\|^ERROR" "$D/pytest_sched.log" | head -8
if [ $rc -eq 124 ]; then
  # (The tests take ~20-30 s: a timeout means a launch that never returned; the A/B would only hang the same way.)
  echo "pytest timed out: a turn schedule may hang (named barriers); A/B skipped"
  exit 1
fi
# The A/B with what is left (its passes stop starting after --budget seconds).
OUT=$D timeout $(( $(left) - 2 )) python3 dev/q8_sched_ab.py --passes 6 --reps 16 \
  --budget $(( $(left) * 75 / 100 )) > "$D/q8_sched_ab.log" 2>&1
echo "q8_sched_ab rc=$?"
grep -a "ERROR\|FAIL\|Traceback\|out of time" "$D/q8_sched_ab.log" | head -8
sed -n '/== 8-bit turn schedules A\/B/,$p' "$D/q8_sched_ab.log"
echo "done in $(( $(date +%s) - t0 )) s"
