#!/bin/bash
# One device stage for the 8-bit kernel's schedules (dev/NOTES_8bit.md v8), from the repository root with the
# library built from HEAD (vidattn's cache, or VIDATTN_LIBRARY):
#   OUT=... VIDATTN_COMMIT=<commit> bash dev/q8_sched_ab.sh [TOTAL_SECONDS, default 85]
# 1. dev/q8_sched_ab.py: each variant's checks, then up to 6 alternating passes on Wan 1.3B self, seed 8K,
#    CogVideoX and LTX: D=128's default (schedule 3) against its earlier default (schedule 1, conversion 2), and
#    D=64's default against itself forced (the noise floor) (TFLOPS synced, queued, kernel-only; per-pass ratios);
#    under a hard share (a hang in a turn schedule shows as its timeout, and the tests still run);
# 2. the 8-bit GPU suite with what is left: tests/test_8bit_gpu.py (every built schedule against fp64, the refusals
#    of the pruned builds, the defaults; all but the torch.compile case, whose compile alone can take the stage's
#    time: the session's GPU suite runs it) and tests/test_8bit.py -m gpu (the pre-pass modes).
# The A/B's table is printed last. Everything under $OUT/q8/: gpu.txt, q8_sched_ab.log, q8_sched_ab.json,
# pytest_8bit.log. The commit printed is VIDATTN_COMMIT's (or VIDATTN_GIT_COMMIT's) when set: a copied tree's git
# may name an older one.
set -o pipefail
TOTAL=${1:-85}
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
D=${OUT:-/tmp}/q8
mkdir -p "$D"
export PYTHONUNBUFFERED=1
commit=${VIDATTN_COMMIT:-${VIDATTN_GIT_COMMIT:-}}
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown) (from this tree's git)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$D/gpu.txt" 2>&1
echo "commit $commit library ${VIDATTN_LIBRARY:-vidattn cache}" | tee -a "$D/gpu.txt"
# The A/B (call Q's, with five variants and 6 passes, took 21 s; its passes stop starting after --budget seconds).
OUT=$D timeout $(( $(left) * 50 / 100 )) python3 dev/q8_sched_ab.py --passes 6 --reps 16 \
  --budget $(( $(left) * 35 / 100 )) > "$D/q8_sched_ab.log" 2>&1
echo "q8_sched_ab rc=$?"
grep -a "ERROR\|FAIL\|Traceback\|out of time" "$D/q8_sched_ab.log" | head -8
timeout $(( $(left) - 3 )) python3 -m pytest -q -p no:cacheprovider -m gpu -k "not compile_graph" \
  tests/test_8bit_gpu.py tests/test_8bit.py > "$D/pytest_8bit.log" 2>&1
echo "pytest (8-bit GPU suite) rc=$? $(tail -1 "$D/pytest_8bit.log")"
grep -a "^FAILED\|^ERROR" "$D/pytest_8bit.log" | head -8
sed -n '/== 8-bit schedules A\/B/,$p' "$D/q8_sched_ab.log"
echo "done in $(( $(date +%s) - t0 )) s"
