#!/usr/bin/env bash
# A/B kernel variants in one device call: build each variant of csrc/ (an optional patch from dev/experiments/
# plus -D flags) into its own library, smoke-check each with dev/probes/kernel_smoke.py in its own process under a
# timeout (a hanging variant costs seconds, not the lease), then time every variant that passed in one process,
# interleaved with cuDNN (dev/probes/kernel_ab_time.py). The first variant listed is the baseline.
#
#   bash dev/probes/kernel_ab.sh --build-only                # here (nvcc, no GPU): build every variant into .build/ab
#   bash dev/probes/kernel_ab.sh                             # on the H200 (carry .build): smoke per variant, then
#                                                         # all variants timed interleaved (kernel_ab_time.py)
#   VARIANTS="base|| rot||-DVIDATTN_KV_ROTATE=1" bash dev/probes/kernel_ab.sh
#
# VARIANTS: newline- or space-separated "name|patch|flags" (patch: a file name in dev/experiments, or empty;
# flags: extra nvcc -D flags, commas for spaces). Logs: $OUT/ab_smoke.log, $OUT/ab_time.log, ab_times.json.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
REPO=$PWD
OUT=${OUT:-$REPO/out}
BUILD=$REPO/.build/ab
T_SMOKE=${T_SMOKE:-90}
VARIANTS=${VARIANTS:-"base||
exact||-DVIDATTN_FIXED_REF=0
diag_exact_nomax||-DVIDATTN_FIXED_REF=0,-DVIDATTN_DIAG_SOFTMAX=1"}
mkdir -p "$OUT" "$BUILD"
mapfile -t NVCC_FLAGS < <(python3 scripts/nvcc_flags.py)  # the flags vidattn/_ext.py builds with

build_variant() {  # name patch flags
    local name=$1 patch=$2 flags=${3//,/ } src
    src=$(mktemp -d)
    cp -r csrc "$src/csrc"
    if [[ -n $patch ]]; then
        # only the patch's kernel part: the copy holds csrc/ alone (a patch may carry its tests too)
        (cd "$src" && git apply --include='csrc/*' "$REPO/dev/experiments/$patch") \
          || { echo "[ab] $name: patch $patch does not apply"; return 1; }
    fi
    # shellcheck disable=SC2086
    if nvcc "${NVCC_FLAGS[@]}" $flags -I "$src/csrc" "$src/csrc/capi.cu" -o "$BUILD/lib_$name.so" 2>"$BUILD/$name.ptxas.log"; then
        echo "[ab] built $name: $(grep -c 'Compiling entry' "$BUILD/$name.ptxas.log") kernels," \
             "$(grep -E 'spill stores' "$BUILD/$name.ptxas.log" | grep -vc ' 0 bytes spill stores') with spills"
    else
        echo "[ab] $name: build failed"; tail -20 "$BUILD/$name.ptxas.log"; return 1
    fi
    # What the build was, for whoever validates or records it later (device_ab_validate.sh): its flags, and the
    # commit its csrc/ is when the working tree's csrc/ was clean at build time (the device's copy has no .git, and
    # a commit typed by hand into VIDATTN_GIT_COMMIT once named the wrong build in a result file).
    echo "${patch:+patch $patch }${flags:-(tree defaults)}" >"$BUILD/$name.variant"
    rm -f "$BUILD/$name.commit"
    if git -C "$REPO" rev-parse --verify -q HEAD >/dev/null && git -C "$REPO" diff --quiet HEAD -- csrc; then
        git -C "$REPO" rev-parse HEAD >"$BUILD/$name.commit"
    else
        echo "[ab] $name: csrc/ has uncommitted changes; no commit recorded for this build"
    fi
    rm -rf "$src"
}

build_only=0
[[ ${1:-} == --build-only ]] && build_only=1
for spec in $VARIANTS; do
    IFS='|' read -r name patch flags <<<"$spec"
    [[ -f $BUILD/lib_$name.so && $build_only == 0 ]] || build_variant "$name" "$patch" "$flags"
done
((build_only)) && exit 0

export PYTHONUNBUFFERED=1
# Correctness first, one process per variant under a timeout (a hanging variant costs T_SMOKE seconds), then
# one process that times every variant that passed, interleaved round by round with cuDNN
# (dev/probes/kernel_ab_time.py: cross-process drift was as large as the effects being measured).
summary=()
passed=()
for spec in $VARIANTS; do
    IFS='|' read -r name _ _ <<<"$spec"
    [[ -f $BUILD/lib_$name.so ]] || { summary+=("$name: not built"); continue; }
    VIDATTN_LIBRARY=$BUILD/lib_$name.so timeout "$T_SMOKE" python3 dev/probes/kernel_smoke.py >"$BUILD/smoke.log" 2>&1
    rc=$?
    { echo "=== $name (rc=$rc)"; cat "$BUILD/smoke.log"; } >>"$OUT/ab_smoke.log"
    ok=$(grep -c '^(.*: ok ' "$BUILD/smoke.log")
    summary+=("$name: rc=$rc, $ok correctness cases ok$([[ $rc == 124 ]] && echo ', TIMED OUT (hang?)')")
    # diag_* variants are wrong on purpose (they leave work out to price it): timed if they did not hang.
    if ((rc == 0)) || [[ $name == diag_* && $rc != 124 ]]; then passed+=("$name=$BUILD/lib_$name.so"); fi
done
printf '%s\n' "${summary[@]}"
if ((${#passed[@]})); then
    # shellcheck disable=SC2086
    timeout "${T_TIME:-360}" python3 dev/probes/kernel_ab_time.py "${passed[@]}" --checked --json "$OUT/ab_times.json" \
        ${AB_TIME_ARGS:-} 2>&1 | tee "$OUT/ab_time.log"
fi
echo "== summary"
printf '%s\n' "${summary[@]}"
