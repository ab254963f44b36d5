#!/bin/bash
# One device stage for the 8-bit path's new defaults (D=128: sequential + score conversion 2; D=64: sequential +
# conversion 1) and its two-launch pre-pass (q8_stats_q_kernel), from the repository root with the library built
# from HEAD (vidattn's cache, or VIDATTN_LIBRARY):
#   OUT=... bash dev/q8_prep_ab.sh [TOTAL_SECONDS, default 90]
# 1. dev/q8_prep_ab.py: each variant's correctness cases, then 2 alternating passes on Wan 1.3B self, seed 8K,
#    CogVideoX and LTX against the same kernel with the three-launch pre-pass and the old defaults (TFLOPS synced per
#    call, queued back to back, kernel-only; pre-pass device ms; relative L2 against fp64);
# 2. tests/test_8bit_gpu.py at the new defaults, with what is left (all but the torch.compile case, whose compile
#    alone can take the stage's time).
# The A/B's table is printed last. Everything under $OUT/q8/: gpu.txt, q8_prep_ab.log, q8_prep_ab.json,
# pytest_8bit.log.
set -o pipefail
TOTAL=${1:-90}
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
D=${OUT:-/tmp}/q8
mkdir -p "$D"
export PYTHONUNBUFFERED=1
# VIDATTN_COMMIT (or VIDATTN_GIT_COMMIT) names the commit when set: a copied tree's git may name an older one.
commit=${VIDATTN_COMMIT:-${VIDATTN_GIT_COMMIT:-}}
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown) (from this tree's git)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$D/gpu.txt" 2>&1
echo "commit $commit library ${VIDATTN_LIBRARY:-vidattn cache}" >> "$D/gpu.txt"
# The A/B first (its passes stop starting after --budget seconds), then the tests with what is left.
OUT=$D timeout $(( $(left) * 60 / 100 )) python3 dev/q8_prep_ab.py --passes 2 --budget $(( $(left) * 30 / 100 )) \
  > "$D/q8_prep_ab.log" 2>&1
echo "q8_prep_ab rc=$?"
grep -a "ERROR\|FAIL\|Traceback\|out of time" "$D/q8_prep_ab.log" | head -8
timeout $(( $(left) - 3 )) python3 -m pytest -q -p no:cacheprovider tests/test_8bit_gpu.py -k "not compile_graph" \
  > "$D/pytest_8bit.log" 2>&1
echo "pytest tests/test_8bit_gpu.py rc=$? $(tail -1 "$D/pytest_8bit.log")"
grep -a "^FAILED\|^ERROR" "$D/pytest_8bit.log" | head -8
sed -n '/== 8-bit defaults and pre-pass A\/B/,$p' "$D/q8_prep_ab.log"
echo "done in $(( $(date +%s) - t0 )) s"
