#!/usr/bin/env bash
# The 8-bit path inside a model, on the GPU machine (the kernel library already built there):
#   bash dev/device_8bit_e2e.sh [budget_s]      # Wan 1.3B 480x832x81: forward timings of SDPA, vidattn exact,
#                                               # vidattn 8-bit and SageAttention2, then scripts/fidelity_8bit.py
#                                               # (per-layer error, one-step output, 4-step video, policy sweep)
#   bash dev/device_8bit_e2e.sh 14b [budget_s]  # Wan 14B at 1280x720x81 (75600 tokens): forward timings only
#                                               # (SDPA, exact, 8-bit, then Sage2 as the budget allows; 120 s
#                                               # is enough for the first three with one timed forward each)
# Carried: .whl_lite/ (the diffusers wheel; installed when present) and .anchors/ (SageAttention2; left out, with
# the reason in the JSON, when absent). Logs and JSON under $OUT; the fidelity table is printed last.
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
mode=1.3b
if [ "${1:-}" = "14b" ]; then mode=14b; shift; fi
budget=${1:-200}
t0=$(date +%s)
left() { echo $(( budget - ($(date +%s) - t0) )); }
export VIDATTN_GIT_COMMIT=${VIDATTN_GIT_COMMIT:-${VIDATTN_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}}
# shellcheck source=dev/device_env.sh
source dev/device_env.sh
install_wheels .whl_lite .whl
if [ -d .anchors ] && bash dev/device_anchors.sh install > "$OUT/anchors_install.log" 2>&1 \
    && [ -f /tmp/anchors/env.sh ]; then
  # shellcheck disable=SC1091
  source /tmp/anchors/env.sh
else
  echo "device_8bit_e2e: SageAttention2 not installed (no .anchors/ or install failed: $OUT/anchors_install.log)"
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv | tee "$OUT/env_8bit.txt"
echo "commit $VIDATTN_GIT_COMMIT" | tee -a "$OUT/env_8bit.txt"

if [ "$mode" = 14b ]; then
  # ~12 s per SDPA forward at 75600 tokens (the 32760-token forward of the family table scaled: attention
  # quadratic, the rest linear). --budget-s (counted from the interpreter's start) keeps room for a census forward
  # and one timed forward of every path still to come, so the timed forwards are cut first and SageAttention2, run
  # last, is the path left out when even that does not fit: 120 s covers SDPA, exact and 8-bit with one timed
  # forward each (imports and build ~15 s, SDPA ~25 s, each vidattn path ~20 s).
  timeout $(( $(left) > 30 ? $(left) + 20 : 50 )) python3 scripts/e2e_report.py --family wan14b --forward-only \
    --height 720 --width 1280 --frames 81 --precision both --warmup 1 --iters 2 --no-profile \
    --budget-s $(( $(left) > 40 ? $(left) - 2 : 38 )) \
    --out-dir "$OUT/e2e_wan14b_720p" > "$OUT/e2e_wan14b_720p.log" 2>&1
  echo "e2e wan14b 720p rc=$? ($(( $(date +%s) - t0 )) s in all)"
  grep -E "speedup|FAILED|error|budget|left out" "$OUT/e2e_wan14b_720p.log" | tail -10
  exit 0
fi

# 1. forward timings, all paths in one process (~45 s: build 12 s, 4 paths x (2 warm-up + 5 timed + 2 profiled))
timeout 110 python3 scripts/e2e_report.py --forward-only --preset 1.3b --precision both --warmup 2 --iters 5 \
  --out-dir "$OUT/e2e_wan1.3b_forward" > "$OUT/e2e_wan1.3b_forward.log" 2>&1
echo "e2e forward rc=$?"; grep -E "speedup|FAILED|error|NOTE" "$OUT/e2e_wan1.3b_forward.log" | tail -8

# 2. fidelity in what is left (the sweep is left out first when it does not fit; the JSON lists what was)
fb=$(( $(left) - 15 ))
if [ "$fb" -lt 40 ]; then fb=40; fi
timeout $(( fb + 60 )) python3 scripts/fidelity_8bit.py --family wan --budget-s "$fb" \
  --out-dir "$OUT/fidelity_wan1.3b" > "$OUT/fidelity_wan1.3b.log" 2>&1
echo "fidelity rc=$? ($(( $(date +%s) - t0 )) s in all)"
sed -n '/^# 8-bit fidelity/,$p' "$OUT/fidelity_wan1.3b.log"
