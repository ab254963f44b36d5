#!/usr/bin/env bash
# Which clock limiter holds each workload back at the power cap: nvidia-smi's clock event reasons (the active mask
# every 100 ms, and the driver's cumulative per-reason counters before and after each run) while the bf16 wgmma loop
# of mufu_tensor_overlap.cu (f_bf16ss_4t) and then attention shapes run back to back, 6 s each (clock_probe.py).
#   bash dev/probes/clock_reasons.sh OUTDIR [shape ...]      # default shape: D=256 8K (2x8x8192x256)
# Writes OUTDIR/smi.csv (timestamp, SM clock, power, active reasons), OUTDIR/perf_<step>.txt (nvidia-smi -q -d
# PERFORMANCE), OUTDIR/marks.txt (each run's start and end, unix seconds), OUTDIR/mma.jsonl, OUTDIR/clock_*.log, and
# all of them again as OUTDIR.tar.gz.
set -uo pipefail
out=${1:?OUTDIR}; shift
shapes=("${@:-2x8x8192x256}")
mkdir -p "$out"
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
# built with mufu_tensor_overlap.py's own nvcc command (its flags and source)
python3 - "$ROOT" "$out/mto" <<'PY' || exit 1
import subprocess, sys
from pathlib import Path
sys.path.insert(0, sys.argv[1] + "/dev/probes")
import mufu_tensor_overlap as m
nvcc = m.find_nvcc()
if nvcc is None:
    raise SystemExit("clock_reasons.sh: no nvcc")
subprocess.run(m.nvcc_command(nvcc, Path(sys.argv[2])), check=True)
PY
# (clocks_event_reasons since driver 535; the older clocks_throttle_reasons name otherwise)
reasons=clocks_event_reasons.active
nvidia-smi --query-gpu=$reasons --format=csv > /dev/null 2>&1 || reasons=clocks_throttle_reasons.active
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,$reasons --format=csv,noheader -lms 100 > "$out/smi.csv" 2>&1 &
smi=$!
mark() { echo "$1 $(date +%s.%N)" >> "$out/marks.txt"; }
perf() { nvidia-smi -q -d PERFORMANCE > "$out/perf_$1.txt" 2>&1; }
perf start
mark mma_start; "$out/mto" --seconds 6 --pause 0 f_bf16ss_4t > "$out/mma.jsonl"; mark mma_end; perf mma
for s in "${shapes[@]}"; do
  for p in vidattn cudnn; do
    sleep 3
    mark "${s}_${p}_start"
    timeout 60 python3 "$ROOT/dev/probes/clock_probe.py" "$s" --paths "$p" --seconds 6 --pause 0 \
      > "$out/clock_${s}_${p}.log" 2>&1
    mark "${s}_${p}_end"; perf "${s}_${p}"
  done
done
kill "$smi" 2>/dev/null; wait "$smi" 2>/dev/null
rm -f "$out/mto"
# one archive beside the folder: the device tool returns a limited number of files per call
tar czf "$out.tar.gz" -C "$(dirname "$out")" "$(basename "$out")"
