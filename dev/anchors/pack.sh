#!/bin/bash
# Build the git-ignored anchors pack <checkout>/.anchors/ on this (CPU) machine, from local mirrors of the anchors'
# public repositories. The pack travels with the work tree to the GPU machine, where dev/anchors/device_build.sh
# compiles src.tar.xz and dev/device_anchors.sh installs the Python packages; the pack is never committed
# (docs/anchors.md: nothing of FA3, CUTLASS or SageAttention is in this repository).
#
#   bash dev/anchors/pack.sh                      # mirrors under /work/.mirror (the fetch tool's layout)
#   bash dev/anchors/pack.sh --mirrors DIR        # DIR/<owner>+<name>/repo, bare git directories
#   bash dev/anchors/pack.sh --fa3 GITDIR --cutlass GITDIR --sage GITDIR [--out DIR]
#
# It writes:
#   fa3.tar.xz     flash_attn_interface.py, flash_attn_config.py, flash_attn_3/ and a dist-info: FA3's Python side,
#                  laid out as site-packages, so that with flash_attn_3/_C.abi3.so added (the overlay) it imports
#   sage2.tar.xz   sageattention/ and a dist-info, the same way (its _qattn_sm90 and _fused modules come from the overlay)
#   src.tar.xz     fa3/hopper/ (headers, the API file, the scheduler helper, the forward sm90 instantiation files of
#                  the default and optional sets), fa3/csrc/cutlass/include/{cute,cutlass}, sage2/csrc/ (the sm90 and
#                  fused modules' sources): what device_build.sh compiles
#   anchors.json   commits, commit dates, features, kernel sets, when it was packed
#
# FA3_COMMIT / SAGE_COMMIT pick other commits (default: the ones last measured, dev/anchors/common.sh); a commit the
# mirror lacks falls back to the mirror's HEAD, and anchors.json records the commit actually used.
set -euo pipefail
HERE=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
ROOT=$(cd "$HERE/../.." && pwd)
# shellcheck source=common.sh
source "$HERE/common.sh"

MIRRORS=${MIRRORS:-/work/.mirror}
FA3_GIT="" CUTLASS_GIT="" SAGE_GIT="" OUT=""
while [ $# -gt 0 ]; do
  case "$1" in
    --mirrors) MIRRORS=$2; shift 2 ;;
    --fa3) FA3_GIT=$2; shift 2 ;;
    --cutlass) CUTLASS_GIT=$2; shift 2 ;;
    --sage) SAGE_GIT=$2; shift 2 ;;
    --out) OUT=$2; shift 2 ;;
    -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
    *) echo "pack.sh: unknown argument $1" >&2; exit 2 ;;
  esac
done
FA3_GIT=${FA3_GIT:-$MIRRORS/Dao-AILab+flash-attention/repo}
CUTLASS_GIT=${CUTLASS_GIT:-$MIRRORS/NVIDIA+cutlass/repo}
SAGE_GIT=${SAGE_GIT:-$MIRRORS/thu-ml+SageAttention/repo}
OUT=${OUT:-$ROOT/.anchors}
for g in "$FA3_GIT" "$CUTLASS_GIT" "$SAGE_GIT"; do
  git --git-dir="$g" rev-parse --git-dir >/dev/null 2>&1 || { echo "pack.sh: no git directory at $g" >&2; exit 1; }
done

pick() {  # git dir, wanted commit -> the commit to use (the wanted one when the mirror has it, else HEAD)
  if git --git-dir="$1" cat-file -e "$2^{commit}" 2>/dev/null; then echo "$2"
  else
    echo "pack.sh: $1 lacks $2; using its HEAD" >&2
    git --git-dir="$1" rev-parse HEAD
  fi
}
FA3_C=$(pick "$FA3_GIT" "${FA3_COMMIT:-$FA3_COMMIT_DEFAULT}")
# The CUTLASS commit FA3 pins as its csrc/cutlass submodule at that commit.
CUTLASS_PIN=$(git --git-dir="$FA3_GIT" ls-tree "$FA3_C" csrc/cutlass | awk '$2 == "commit" {print $3}')
CUTLASS_C=$(pick "$CUTLASS_GIT" "${CUTLASS_PIN:?FA3 $FA3_C pins no csrc/cutlass submodule}")
SAGE_C=$(pick "$SAGE_GIT" "${SAGE_COMMIT:-$SAGE_COMMIT_DEFAULT}")

STAGE=$(mktemp -d)
trap 'rm -rf "$STAGE"' EXIT
# git archive fails on a path the commit lacks, so a renamed file upstream stops the pack here, not on the GPU machine.
extract() {  # git dir, commit, destination, paths...
  local g=$1 c=$2 d=$3; shift 3
  mkdir -p "$d"
  # The mirrors leave out some large binary files (images, PDFs); git archive names each such object on stderr even
  # when the paths asked for do not include it, so those lines are dropped.
  git --git-dir="$g" archive --format=tar "$c" -- "$@" 2> >(grep -v '^error: invalid object' >&2) | tar -x -C "$d"
}

# --- src.tar.xz: what device_build.sh compiles ---
kernel_files=()
for k in $FA3_KERNELS_DEFAULT $FA3_KERNELS_OPTIONAL; do kernel_files+=("hopper/$(fa3_kernel_file "$k")"); done
# Every header of hopper/ (the kernels and the API include most of them; the folder's headers are ~0.5 MiB).
mapfile -t hopper_headers < <(git --git-dir="$FA3_GIT" ls-tree --name-only "$FA3_C" hopper/ | grep -E '\.(h|hpp|cuh)$')
extract "$FA3_GIT" "$FA3_C" "$STAGE/src/fa3" "${hopper_headers[@]}" "hopper/$FA3_API_FILE" "hopper/$FA3_SCHED_FILE" \
  "${kernel_files[@]}"
extract "$CUTLASS_GIT" "$CUTLASS_C" "$STAGE/src/fa3/csrc/cutlass" include/cute include/cutlass
# shellcheck disable=SC2086
extract "$SAGE_GIT" "$SAGE_C" "$STAGE/src/sage2" $SAGE_SRC_PATHS

# --- fa3.tar.xz: FA3's Python side, as site-packages ---
mkdir -p "$STAGE/fa3"
# shellcheck disable=SC2086
extract "$FA3_GIT" "$FA3_C" "$STAGE/fa3_tmp" $(for f in $FA3_PY_FILES; do echo "hopper/$f"; done) hopper/__init__.py
cp -r "$STAGE/fa3_tmp/hopper/." "$STAGE/fa3/"
FA3_VERSION=$(sed -n 's/^__version__ *= *"\(.*\)"/\1/p' "$STAGE/fa3/__init__.py")
rm "$STAGE/fa3/__init__.py"  # hopper/__init__.py is the source tree's, not an installed module
# flash_attn_config.py is written by FA3's setup from its FLASH_ATTENTION_DISABLE_* switches; the interface reads
# build_flags to round head dims. Ours states the switches device_build.sh compiles with (every head dim on: the
# kernels that are not compiled get stand-ins that say so).
python3 "$HERE/anchors_meta.py" fa3-config > "$STAGE/fa3/flash_attn_config.py"
python3 "$HERE/anchors_meta.py" dist-info "$STAGE/fa3" flash_attn_3 "${FA3_VERSION:-3.0.0}"

# --- sage2.tar.xz: SageAttention's Python package (not sageattention3_blackwell) ---
extract "$SAGE_GIT" "$SAGE_C" "$STAGE/sage2" sageattention
SAGE_VERSION=$(git --git-dir="$SAGE_GIT" show "$SAGE_C:setup.py" | sed -n "s/^ *version='\([^']*\)'.*/\1/p" | head -1)
python3 "$HERE/anchors_meta.py" dist-info "$STAGE/sage2" sageattention "${SAGE_VERSION:-2.2.0}"

# Python packages without any compiled module; bytecode and the like never come from a git archive, but be sure.
find "$STAGE" \( -name '*.so' -o -name '__pycache__' \) -prune -exec rm -rf {} +

mkdir -p "$OUT"
# Fixed owner and mtime-free sorting keep repeated packs byte-comparable in content listing.
tarxz() {  # archive, directory
  tar --sort=name --owner=0 --group=0 --numeric-owner -C "$2" -cf - . | xz -9 -T1 > "$1.tmp" && mv "$1.tmp" "$1"
}
tarxz "$OUT/fa3.tar.xz" "$STAGE/fa3"
tarxz "$OUT/sage2.tar.xz" "$STAGE/sage2"
tarxz "$OUT/src.tar.xz" "$STAGE/src"
date_of() { git --git-dir="$1" log -1 --format=%cI "$2"; }
python3 "$HERE/anchors_meta.py" pack-json \
  --fa3-commit "$FA3_C" --fa3-date "$(date_of "$FA3_GIT" "$FA3_C")" \
  --cutlass-commit "$CUTLASS_C" --cutlass-date "$(date_of "$CUTLASS_GIT" "$CUTLASS_C")" --cutlass-pinned "$CUTLASS_PIN" \
  --sage-commit "$SAGE_C" --sage-date "$(date_of "$SAGE_GIT" "$SAGE_C")" \
  --fa3-version "${FA3_VERSION:-3.0.0}" --sage-version "${SAGE_VERSION:-2.2.0}" \
  --kernels-default "$FA3_KERNELS_DEFAULT" --kernels-optional "$FA3_KERNELS_OPTIONAL" \
  --features "$FA3_FEATURES" > "$OUT/anchors.json.tmp"
mv "$OUT/anchors.json.tmp" "$OUT/anchors.json"
# An old layout's recipe folder would only mislead: the recipe lives in dev/anchors/ now.
rm -rf "$OUT/recipe"
du -b "$OUT"/*.tar.xz "$OUT/anchors.json" | awk '{s += $1; print} END {printf "pack.sh: %s, %.2f MiB\n", "'"$OUT"'", s / 1048576}'
