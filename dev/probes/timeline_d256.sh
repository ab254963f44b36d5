#!/usr/bin/env bash
# Where D=256's tile boundary goes at 1K keys (issue 26; dev/NOTES.md, "The D=256 boundary: a timeline"): a timeline
# build of the kernel subset (-DVIDATTN_DIAG_TIMELINE -DVIDATTN_KERNEL_SUBSET=1: the bf16 D=256 O-in-V builds and the
# D=128 N=128 build only, so nvcc is a short wait), then dev/probes/timeline_probe.py on 16 x 8 x 1024 at D=256 and
# D=128, whose per-phase tables (us per tile and share of the period, per consumer warpgroup) are printed last.
#   timeout 300 bash dev/probes/timeline_d256.sh $OUT/d256b
# TL_LEVEL=2 builds the level with wait sums (it moves the key loop's schedule: diag_timeline.cuh); TL_VARIANTS
# (e.g. "5") also runs D=256 under each VIDATTN_HD_NARROW setting named, at TL_VARIANT_SHAPES (default d256_1k);
# TL_REBUILD=1 builds even if the library exists;
# TL_SHAPES names the probe's shapes (default "d256_1k d128_1k"; d192_1k is D=192 at 1K, the subset builds it too;
# d256_8k and d256_32k are D=256 at 8K and 32K keys).
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
DIR=${1:-${OUT:-/tmp/out}/d256b}
mkdir -p "$DIR" .build/tl
LEVEL=${TL_LEVEL:-1}
LIB=$PWD/.build/tl/lib_tl${LEVEL}_subset.so
mapfile -t FLAGS < <(python3 scripts/nvcc_flags.py)  # the flags vidattn/_ext.py builds with
source dev/probes/find_nvcc.sh  # NVCC: the nvcc vidattn/_ext.py would build with
[[ -n $NVCC ]] || { echo "timeline_d256: nvcc not found"; exit 2; }
t0=$(date +%s)
if [[ ! -f $LIB || ${TL_REBUILD:-0} == 1 ]]; then
  if ! "$NVCC" "${FLAGS[@]}" -DVIDATTN_DIAG_TIMELINE="$LEVEL" -DVIDATTN_KERNEL_SUBSET=1 -I csrc csrc/capi.cu -o "$LIB" \
      >"$DIR/tl_build.log" 2>&1; then
    tail -20 "$DIR/tl_build.log"; echo "timeline_d256: build failed"; exit 2
  fi
fi
echo "timeline_d256: library $(basename "$LIB") ready in $(( $(date +%s) - t0 )) s," \
     "$(grep -c 'Compiling entry' "$DIR/tl_build.log" 2>/dev/null || echo '?') kernels compiled" | tee "$DIR/env.txt"
nvidia-smi --query-gpu=name,clocks.sm,power.draw,power.limit --format=csv >> "$DIR/env.txt" 2>&1
export PYTHONUNBUFFERED=1 VIDATTN_LIBRARY=$LIB
rc=0
timeout 90 python3 dev/probes/timeline_probe.py ${TL_SHAPES:-d256_1k d128_1k} --json "$DIR/timeline.json" \
  >"$DIR/timeline.log" 2>&1 || rc=$?
for v in ${TL_VARIANTS:-}; do
  # shellcheck disable=SC2086
  VIDATTN_HD_NARROW=$v timeout 90 python3 dev/probes/timeline_probe.py ${TL_VARIANT_SHAPES:-d256_1k} \
    --json "$DIR/timeline_hd$v.json" >"$DIR/timeline_hd$v.log" 2>&1 || rc=$?
  tail -18 "$DIR/timeline_hd$v.log"
done
tail -42 "$DIR/timeline.log"
echo "timeline_d256: rc $rc, $(( $(date +%s) - t0 )) s in all"
exit $rc
