#!/bin/bash
# One device stage for the 8-bit kernel's score conversion (q8_fwd.cuh's kCvt: 0 I2F per score, the default; 1 the
# integer row max and magic-number floats; 2 the bias added by the tensor cores), from the repository root with the
# library already built (vidattn's cache, or VIDATTN_LIBRARY):
#   OUT=... bash dev/q8_cvt_ab.sh [TOTAL_SECONDS, default 150]
# 1. dev/q8_cvt_ab.py: each variant's correctness cases, then 4 alternating passes on Wan 1.3B self, seed 8K,
#    CogVideoX and LTX (TFLOPS with quantization and kernel-only, relative L2 against fp64);
# 2. tests/test_8bit_gpu.py's kernel cases under VIDATTN_Q8_CVT=1 (D=128's default schedule and D=64's sequential one
#    then run conversion 1) plus the conversion tests, which force 1 and 2 (and their refusals elsewhere).
# The A/B's table is printed last.
# Everything under $OUT/q8/: gpu.txt, pytest_cvt1.log, q8_cvt_ab.log, q8_cvt_ab.json.
set -o pipefail
TOTAL=${1:-150}
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
D=${OUT:-/tmp}/q8
mkdir -p "$D"
export PYTHONUNBUFFERED=1
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv > "$D/gpu.txt" 2>&1
echo "commit $(git rev-parse --short HEAD 2>/dev/null) library ${VIDATTN_LIBRARY:-vidattn cache}" >> "$D/gpu.txt"
# The A/B first (its passes stop starting after --budget seconds), then the tests with what is left.
OUT=$D timeout $(( $(left) - 45 )) python3 dev/q8_cvt_ab.py --passes 4 --budget $(( $(left) - 62 )) \
  > "$D/q8_cvt_ab.log" 2>&1
echo "q8_cvt_ab rc=$?"
grep -a "ERROR\|FAIL\|Traceback\|out of time" "$D/q8_cvt_ab.log" | head -8
VIDATTN_Q8_CVT=1 timeout $(( $(left) - 3 )) python3 -m pytest -q -x -p no:cacheprovider tests/test_8bit_gpu.py \
  -k "conversions or polynomial or lengths or kv_lens or guards or row_mass or long_rows or poisoned or strided" \
  > "$D/pytest_cvt1.log" 2>&1
echo "pytest (VIDATTN_Q8_CVT=1) rc=$? $(tail -1 "$D/pytest_cvt1.log")"
grep -a "^FAILED\|Error" "$D/pytest_cvt1.log" | head -8
sed -n '/== score conversion A\/B/,$p' "$D/q8_cvt_ab.log"
echo "done in $(( $(date +%s) - t0 )) s"
