#!/usr/bin/env bash
# Issue 26's device stage (dev/probes/envelope_ab.py): O-in-V routing at D=192/256, the causal schedule at 1K-4K timed
# through CUDA graphs, and where D=256 at 1K keys loses. The library must already be built (a plain load is given 20 s);
# FlashAttention-3 joins the rounds when /tmp/anchors/env.sh exists (an earlier stage installed it) or
# .anchors/fa3.tar.xz can be unpacked; without it the stage runs and says so. Each part has its own timeout and
# writes its JSON as it goes; the outcome table (each decision by its rule, envelope_rules.py) is printed last and
# kept in summary.txt.
#   timeout 200 bash dev/probes/envelope_ab.sh $OUT/envelope        # ~110-150 s
set -uo pipefail
DIR=${1:-${OUT:-/tmp/out}/envelope}
mkdir -p "$DIR"
export PYTHONUNBUFFERED=1 VIDATTN_CACHE_DIR=${VIDATTN_CACHE_DIR:-$PWD/.build/vcache}
t0=$(date +%s)
if [ -f /tmp/anchors/env.sh ]; then
  source /tmp/anchors/env.sh; anchors="installed before"
elif [ -f .anchors/fa3.tar.xz ]; then
  if timeout 20 bash dev/device_anchors.sh install > "$DIR/anchors_install.log" 2>&1; then
    source /tmp/anchors/env.sh; anchors="unpacked"
  else anchors="unpack failed (see anchors_install.log)"; fi
else
  anchors="absent: FA3 columns left out"
fi
echo "anchors: $anchors" | tee "$DIR/env.txt"
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv >> "$DIR/env.txt" 2>&1
timeout 20 python3 -c "import sys; from vidattn import _ext; lib = _ext.load();
print('library', 'loaded' if lib else _ext.build_error()); sys.exit(0 if lib else 1)" >> "$DIR/env.txt" 2>&1 || {
  tail -3 "$DIR/env.txt"; echo "envelope: the library is not built (or did not load in 20 s): build it first"; exit 3; }
declare -A rc
part() {  # part NAME TIMEOUT ARGS...
  local name=$1 t=$2; shift 2
  timeout "$t" python3 dev/probes/envelope_ab.py --part "$name" --out "$DIR" "$@" > "$DIR/$name.log" 2>&1
  rc[$name]=$?
  tail -2 "$DIR/$name.log"
}
part ov 70 --rounds 16
part causal 45 --causal-rounds 12
part d256 30 --d256-rounds 6 --preheat-ms 300
echo "== envelope stage: $(( $(date +%s) - t0 )) s; rc ov=${rc[ov]} causal=${rc[causal]} d256=${rc[d256]};" \
  "anchors $anchors"
timeout 10 python3 dev/probes/envelope_ab.py --summary "$DIR" | tee "$DIR/summary.txt"
