#!/bin/bash
# One device stage for the 8-bit pre-pass's mode 2 (Q quantized inside the attention kernel; quant8.set_prep(2))
# against the default fused pre-pass, from the repository root with the library built from HEAD:
#   OUT=... bash dev/q8_prep2_ab.sh [TOTAL_SECONDS, default 58]
# 1. tests/test_8bit.py's GPU tests (mode 2 against fp64 and the fused pre-pass: odd lengths, kv_lens, fp16,
#    strided views, both layouts, LSE, the D=64 ping-pong builds, fresh scales on every call);
# 2. dev/q8_prep2_ab.py: its own checks, then alternating passes on Wan 1.3B self, seed 8K, CogVideoX and LTX
#    (TFLOPS synced per call, queued, kernel only; device ms of the kernel and the pre-pass).
# Everything under $OUT/q8prep/: gpu.txt, pytest_prep.log, q8_prep2_ab.log, q8_prep2_ab.json; the table printed last.
set -o pipefail
TOTAL=${1:-58}
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
D=${OUT:-/tmp}/q8prep
mkdir -p "$D"
export PYTHONUNBUFFERED=1
# VIDATTN_COMMIT (or VIDATTN_GIT_COMMIT) names the commit when set: a copied tree's git may name an older one.
commit=${VIDATTN_COMMIT:-${VIDATTN_GIT_COMMIT:-}}
[ -n "$commit" ] || commit="$(git rev-parse --short HEAD 2>/dev/null || echo unknown) (from this tree's git)"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,temperature.gpu --format=csv > "$D/gpu.txt" 2>&1
echo "commit $commit library ${VIDATTN_LIBRARY:-vidattn cache}" >> "$D/gpu.txt"
timeout 22 python3 -m pytest -q -p no:cacheprovider tests/test_8bit.py -m gpu -k "prep" > "$D/pytest_prep.log" 2>&1
echo "pytest tests/test_8bit.py -m gpu -k prep rc=$? $(tail -1 "$D/pytest_prep.log")"
grep -a "^FAILED\|^ERROR" "$D/pytest_prep.log" | head -8
L=$(left)
OUT=$D timeout $(( L - 2 )) python3 dev/q8_prep2_ab.py --passes 3 --budget $(( L * 50 / 100 )) > "$D/q8_prep2_ab.log" 2>&1
echo "q8_prep2_ab rc=$?"
grep -a "ERROR\|FAIL\|Traceback\|out of time" "$D/q8_prep2_ab.log" | head -8
sed -n '/== 8-bit pre-pass mode 2/,$p' "$D/q8_prep2_ab.log"
echo "done in $(( $(date +%s) - t0 )) s"
