#!/usr/bin/env bash
# One device call that A/Bs prebuilt kernel candidates and then validates the fastest with device_run.sh:
#   1. smoke-check every library in CANDIDATES (and REFERENCE) and time them interleaved with cuDNN
#      (dev/probes/kernel_ab.sh -> kernel_ab_time.py);
#   2. pick the candidate with the best geometric-mean ratio to cuDNN over the timed shapes among those whose smoke
#      check passed (and stop, validating nothing, when none was timed);
#   3. run device_run.sh STAGES with VIDATTN_LIBRARY set to it, and VIDATTN_LIBRARY_FLAGS naming its patch and
#      flags as kernel_ab.sh recorded them at build time (.build/ab/<name>.variant; they go into every JSON's
#      metadata, and the tree's defaults must then be set to them before committing);
#   4. pack every file under $OUT but device_run.log into results.tgz ($OUT returns at most 8 files; device_run.sh
#      is told it may leave more, so the e2e report files are not dropped as they were on 2026-11-30).
#
#   VARIANTS="base|| rot||-DVIDATTN_KV_ROTATE=1" bash dev/probes/kernel_ab.sh --build-only      # here, then
#   CANDIDATES="base rot" STAGES="build gpu-tests sanitizer bench e2e" bash dev/probes/device_ab_validate.sh   # device
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
REPO=$PWD
OUT=${OUT:-$REPO/out}
export OUT
BUILD=$REPO/.build/ab
T0=$SECONDS
BUDGET_S=${BUDGET_S:-580}
mkdir -p "$OUT"

variants=""
for n in ${REFERENCE:-} ${CANDIDATES:?name the candidate libraries}; do variants+="$n|| "; done
VARIANTS=$variants T_SMOKE=${T_SMOKE:-45} bash dev/probes/kernel_ab.sh 2>&1 | tail -n 25

if ! best=$(python3 dev/probes/kernel_ab_time.py --pick "$OUT/ab_times.json" "${CANDIDATES// /,}"); then
    echo "[ab+validate] no candidate passed its smoke check and timing: nothing validated" | tee "$OUT/picked.txt"
    exit 3
fi
export VIDATTN_LIBRARY=$BUILD/lib_$best.so
# The picked build's source commit, as kernel_ab.sh --build-only recorded it, names every result file; without one
# (csrc/ was dirty at build time) the caller's VIDATTN_GIT_COMMIT stands, with a warning.
if [[ -s $BUILD/$best.commit ]]; then
    VIDATTN_GIT_COMMIT=$(head -n 1 "$BUILD/$best.commit")
    export VIDATTN_GIT_COMMIT
else
    echo "[pick] $best: no commit recorded at build time (csrc/ was dirty); results name ${VIDATTN_GIT_COMMIT:-no commit}"
fi
VIDATTN_LIBRARY_FLAGS="$(cat "$BUILD/$best.variant" 2>/dev/null || echo "unrecorded build") (candidate $best)"
export VIDATTN_LIBRARY_FLAGS
echo "[pick] validating $best: VIDATTN_LIBRARY=$VIDATTN_LIBRARY flags: $VIDATTN_LIBRARY_FLAGS" \
     "commit: ${VIDATTN_GIT_COMMIT:-none}" | tee "$OUT/picked.txt"

left=$(( BUDGET_S - (SECONDS - T0) ))
# shellcheck disable=SC2086
OUT_FILE_LIMIT=1000 BUDGET_S=$left bash dev/probes/device_run.sh ${STAGES:-build gpu-tests sanitizer bench e2e}

files=()
while IFS= read -r f; do files+=("$f"); done < <(cd "$OUT" && find . -type f ! -name device_run.log ! -name results.tgz | sed 's|^\./||')
if ((${#files[@]})); then
    tar czf "$OUT/results.tgz" -C "$OUT" "${files[@]}" && (cd "$OUT" && rm -f "${files[@]}")
fi
echo "[ab+validate] picked $best; $(( SECONDS - T0 ))s; \$OUT: $(ls "$OUT" | tr '\n' ' ')"
