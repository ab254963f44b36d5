#!/bin/bash
# Put the prebuilt anchors (FlashAttention-3, SageAttention2) on the GPU machine for scripts/bench_anchors.py.
# They are built from their public sources outside this repository (docs/anchors.md): dev/anchors/pack.sh makes the
# git-ignored .anchors/ folder next to the work tree (their Python packages, the sources to compile, anchors.json),
# dev/anchors/device_build.sh compiles the modules on the GPU machine into /tmp/anchors_build/overlay; this script
# only unpacks the packages and adds the overlay, it builds nothing:
#
#   bash dev/device_anchors.sh install     # unpack .anchors/*.tar.xz into /tmp/anchors, write /tmp/anchors/env.sh
#   source /tmp/anchors/env.sh             # PYTHONPATH and VIDATTN_ANCHORS_DIR for the rest of the shell
#   bash dev/device_anchors.sh check       # what scripts/anchor_impls.py can call here, and the build description
#   bash dev/device_anchors.sh uninstall
#
# VIDATTN_ANCHORS_PACK (default <repo>/.anchors) and VIDATTN_ANCHORS_DIR (default /tmp/anchors) move either end.
set -euo pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
PACK=${VIDATTN_ANCHORS_PACK:-$ROOT/.anchors}
DIR=${VIDATTN_ANCHORS_DIR:-/tmp/anchors}
PY=${PYTHON:-python3}

untar() {  # tar's xz filter needs the xz program; Python's tarfile reads xz without it
  if command -v xz >/dev/null 2>&1; then tar -xJf "$1" -C "$2"
  else "$PY" -c "import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])" "$1" "$2"; fi
}

check() {
  PYTHONPATH="$DIR/site${PYTHONPATH:+:$PYTHONPATH}" VIDATTN_ANCHORS_DIR="$DIR" "$PY" - "$ROOT" <<'EOF'
import json, sys
sys.path.insert(0, sys.argv[1] + "/scripts")
import anchor_impls
print(json.dumps({"available": anchor_impls.available(), "built": anchor_impls.versions()}, indent=1))
EOF
}

case "${1:-install}" in
  install)
    packs=()
    # the module packs only: src.tar.xz is what dev/anchors/device_build.sh compiles, into the overlay below
    for p in "$PACK"/fa3.tar.xz "$PACK"/sage2.tar.xz; do
      [ -f "$p" ] && packs+=("$p")
    done
    if [ ${#packs[@]} -eq 0 ]; then
      echo "device_anchors: no $PACK/fa3.tar.xz or sage2.tar.xz: carry .anchors/ with the call" \
        "(the anchors are not in the repository)" >&2
      exit 1
    fi
    rm -rf "$DIR"
    mkdir -p "$DIR/site"
    for p in "${packs[@]}"; do
      untar "$p" "$DIR/site"
      echo "device_anchors: unpacked $(basename "$p")"
    done
    [ -f "$PACK/anchors.json" ] && cp "$PACK/anchors.json" "$DIR/"
    # The modules dev/anchors/device_build.sh compiled on this machine (and its anchors.json, which describes them);
    # they outlive a second install in the same call.
    OVERLAY=${VIDATTN_ANCHORS_OVERLAY:-/tmp/anchors_build/overlay}
    if [ -d "$OVERLAY/site" ]; then
      cp -r "$OVERLAY/site/." "$DIR/site/"
      [ -f "$OVERLAY/anchors.json" ] && cp "$OVERLAY/anchors.json" "$DIR/"
      echo "device_anchors: added the modules built on this machine ($OVERLAY)"
    fi
    cat > "$DIR/env.sh" <<EOF
export PYTHONPATH="$DIR/site\${PYTHONPATH:+:\$PYTHONPATH}"
export VIDATTN_ANCHORS_DIR="$DIR"
EOF
    echo "device_anchors: source $DIR/env.sh   # $(head -1 "$DIR/env.sh")"
    check
    ;;
  check)
    check
    ;;
  uninstall)
    rm -rf "$DIR"
    ;;
  *)
    echo "usage: bash dev/device_anchors.sh [install|check|uninstall]" >&2
    exit 2
    ;;
esac
