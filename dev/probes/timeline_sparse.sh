#!/usr/bin/env bash
# Where the block-sparse kernel's time goes (dev/NOTES.md, "The block-sparse timeline"): a timeline build
# (-DVIDATTN_DIAG_TIMELINE=$TL_LEVEL) of the block-sparse kernels (csrc/capi_sparse.cu) and of the dense bf16 D=64 ones
# only (capi.cu with -DVIDATTN_KERNEL_SUBSET=2, so nvcc is a short wait), then dev/probes/timeline_probe.py on
# TL_SHAPES (default "sparse:64:tile3d sparse:64:band sparse:64:scattered sparse:64:full sparse:64:dense": the
# block-sparse op at dev/probes/sparse_bench.py's D=64 shape with each mask and with every block kept, and the dense
# kernel there), whose per-phase tables are printed last.
#   timeout 400 bash dev/probes/timeline_sparse.sh $OUT/tls
# TL_LEVEL=2 adds the key loop's wait sums (it moves the loop's schedule: csrc/sm90/diag_timeline.cuh); TL_SUBSET=3
# leaves the dense kernels out (a library half the size, to carry; the default shapes then skip "dense"); TL_REBUILD=1
# builds even if the library exists; TL_LIB names the library (default .build/tl/lib_tl<level>_s<subset>.so).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DIR=${1:-${OUT:-/tmp/out}/tls}
mkdir -p "$DIR" .build/tl
LEVEL=${TL_LEVEL:-1}
SUBSET=${TL_SUBSET:-2}
LIB=${TL_LIB:-$PWD/.build/tl/lib_tl${LEVEL}_s${SUBSET}.so}
SHAPES="sparse:64:tile3d sparse:64:band sparse:64:scattered sparse:64:full"
[[ $SUBSET == 2 ]] && SHAPES="$SHAPES sparse:64:dense"
mapfile -t FLAGS < <(python3 scripts/nvcc_flags.py)  # the flags vidattn/_ext.py builds with
source dev/probes/find_nvcc.sh  # NVCC: the nvcc vidattn/_ext.py would build with
t0=$(date +%s)
if [[ ! -f $LIB || ${TL_REBUILD:-0} == 1 ]]; then
  [[ -n $NVCC ]] || { echo "timeline_sparse: nvcc not found"; exit 2; }
  "$NVCC" "${FLAGS[@]}" -DVIDATTN_DIAG_TIMELINE="$LEVEL" -DVIDATTN_KERNEL_SUBSET="$SUBSET" -I csrc csrc/capi.cu \
    csrc/capi_sparse.cu -o "$LIB" > "$DIR/tl_build.log" 2>&1 ||
    { tail -20 "$DIR/tl_build.log"; echo "timeline_sparse: build failed"; exit 2; }
fi
echo "timeline_sparse: library $(basename "$LIB") ready in $(( $(date +%s) - t0 )) s" | tee "$DIR/env.txt"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv >> "$DIR/env.txt" 2>&1
export PYTHONUNBUFFERED=1 VIDATTN_LIBRARY=$LIB
rc=0
# shellcheck disable=SC2086
timeout 240 python3 dev/probes/timeline_probe.py ${TL_SHAPES:-$SHAPES} \
  --json "$DIR/timeline.json" > "$DIR/timeline.log" 2>&1 || rc=$?
tail -60 "$DIR/timeline.log"
echo "timeline_sparse: rc $rc, $(( $(date +%s) - t0 )) s in all"
exit $rc
