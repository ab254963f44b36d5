#!/bin/bash
# One device stage of the 8-bit path: dev/q8_selector_ab.py's PLAN with its GPU tests, from the repository root with the
# library built from HEAD (vidattn's cache, or VIDATTN_LIBRARY):
#   OUT=... [VIDATTN_COMMIT=<commit>] bash dev/q8_selector_ab.sh PLAN [TOTAL_SECONDS, default the plan's]
# - prep (default 90 s; under $OUT/q8/): the A/B of the defaults and the two-launch pre-pass (its correctness cases,
#   then 2 alternating passes on Wan 1.3B self, seed 8K, CogVideoX and LTX against the same kernel with the
#   three-launch pre-pass and the old defaults), then tests/test_8bit_gpu.py with what is left (all but the
#   torch.compile case, whose compile alone can take the stage's time);
# - sched (default 85 s; under $OUT/q8/): the schedules' A/B (dev/NOTES_8bit.md v8; up to 6 alternating passes:
#   D=128's default, schedule 3, against its earlier default, schedule 1 with conversion 2, and D=64's default
#   against itself forced, the noise floor; per-pass ratios) under a hard share (a hang in a turn schedule shows as
#   its timeout, and the tests still run), then the 8-bit GPU suite with what is left: tests/test_8bit_gpu.py (every
#   built schedule against fp64, the refusals of the pruned builds, the defaults; all but the torch.compile case: the
#   session's GPU suite runs it) and tests/test_8bit.py -m gpu (the pre-pass modes);
# - prep2 (default 58 s; under $OUT/q8prep/): first tests/test_8bit.py's GPU tests of the pre-pass (mode 2 against
#   fp64 and the fused pre-pass: odd lengths, kv_lens, fp16, strided views, both layouts, LSE, the D=64 ping-pong
#   builds, fresh scales on every call), then the A/B of mode 2 (Q quantized inside the attention kernel) against the
#   fused pre-pass (device ms of the kernel and the pre-pass).
# Files: gpu.txt, q8_PLAN_ab.log, q8_PLAN_ab.json and the tests' log (pytest_8bit.log; prep2: pytest_prep.log). The
# A/B's table is printed last. The commit printed is VIDATTN_COMMIT's (or VIDATTN_GIT_COMMIT's) when set: a copied
# tree's git may name an older one.
set -o pipefail
PLAN=$1
case "$PLAN" in
  prep) TOTAL=${2:-90}; D=${OUT:-/tmp}/q8 ;;
  sched) TOTAL=${2:-85}; D=${OUT:-/tmp}/q8 ;;
  prep2) TOTAL=${2:-58}; D=${OUT:-/tmp}/q8prep ;;
  *) echo "usage: OUT=... bash dev/q8_selector_ab.sh prep|prep2|sched [TOTAL_SECONDS]" >&2; exit 2 ;;
esac
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
mkdir -p "$D"
export PYTHONUNBUFFERED=1
commit=${VIDATTN_COMMIT:-${VIDATTN_GIT_COMMIT:-}}
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown) (from this tree's git)"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$D/gpu.txt" 2>&1
echo "commit $commit library ${VIDATTN_LIBRARY:-vidattn cache}" | tee -a "$D/gpu.txt"

# ab TIMEOUT ARGS...: the A/B (its passes stop starting after --budget seconds), its failures, under a hard timeout.
ab() {
  local t=$1; shift
  OUT=$D timeout "$t" python3 dev/q8_selector_ab.py "$PLAN" "$@" > "$D/q8_${PLAN}_ab.log" 2>&1
  echo "q8_${PLAN}_ab rc=$?"
  grep -a "ERROR\|FAIL\|Traceback\|out of time" "$D/q8_${PLAN}_ab.log" | head -8
}
# tests TIMEOUT LOG LABEL PYTEST_ARGS...
tests() {
  local t=$1 log=$2 label=$3; shift 3
  timeout "$t" python3 -m pytest -q -p no:cacheprovider "$@" > "$D/$log" 2>&1
  echo "pytest $label rc=$? $(tail -1 "$D/$log")"
  grep -a "^FAILED\|^ERROR" "$D/$log" | head -8
}

case "$PLAN" in
  prep)
    ab $(( $(left) * 60 / 100 )) --passes 2 --budget $(( $(left) * 30 / 100 ))
    tests $(( $(left) - 3 )) pytest_8bit.log tests/test_8bit_gpu.py tests/test_8bit_gpu.py -k "not compile_graph"
    ;;
  sched)  # call Q's A/B, with five variants and 6 passes, took 21 s
    ab $(( $(left) * 50 / 100 )) --passes 6 --reps 16 --budget $(( $(left) * 35 / 100 ))
    tests $(( $(left) - 3 )) pytest_8bit.log "(8-bit GPU suite)" -m gpu -k "not compile_graph" \
      tests/test_8bit_gpu.py tests/test_8bit.py
    ;;
  prep2)
    tests 22 pytest_prep.log "tests/test_8bit.py -m gpu -k prep" tests/test_8bit.py -m gpu -k "prep"
    L=$(left)
    ab $(( L - 2 )) --passes 3 --budget $(( L * 50 / 100 ))
    ;;
esac
# The table: from its header (the plan's table's first line, "== 8-bit ...") to the end.
sed -n '/^== 8-bit /,$p' "$D/q8_${PLAN}_ab.log"
echo "done in $(( $(date +%s) - t0 )) s"
