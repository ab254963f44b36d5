#!/usr/bin/env bash
# The reliability suite on one H200, in one call of at most 300 s: the kernel library built through the library
# (vidattn.build), then the GPU reliability tests beside compute-sanitizer memcheck, racecheck and synccheck (three
# processes at once: their time is mostly host-side instrumentation), then the soak alone (it reads the device's
# memory). Logs and JSON under $OUT; $OUT/reliability_summary.json for bench/results/; a short table last.
#   bash dev/device_reliability.sh
# Estimates on an H200 (16 cores): build 75 s (cached: 2 s), tests ~60 s beside the sanitizers ~60-120 s, soak
# 60-100 s (capped by what is left of 285 s). docs/reliability.md describes each part.
set -uo pipefail
export PYTHONUNBUFFERED=1
export VIDATTN_CACHE_DIR=${VIDATTN_CACHE_DIR:-/tmp/vidattn-cache}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BUDGET=${RELIABILITY_BUDGET_S:-285}
t0=$(date +%s)
left() { echo $(( BUDGET - ($(date +%s) - t0) )); }
declare -A rc secs

nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > "$OUT/env.txt" 2>&1
python3 -c "import torch; print('torch', torch.__version__, 'cuda', torch.version.cuda)" >> "$OUT/env.txt" 2>&1
(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1) >> "$OUT/env.txt"
git rev-parse HEAD >> "$OUT/env.txt" 2>/dev/null
cat "$OUT/env.txt"

s=$(date +%s)
timeout 200 python3 -c "import vidattn, time; t = time.time(); p = vidattn.build(); print('built', p, round(time.time() - t, 1), 's')" \
  > "$OUT/build.log" 2>&1; rc[build]=$?; secs[build]=$(( $(date +%s) - s ))
tail -1 "$OUT/build.log"

s=$(date +%s)
timeout 175 python3 dev/stress/sanitize.py --no-build --timeout 150 --out "$OUT/sanitizer" --json "$OUT/sanitizer.json" \
  > "$OUT/sanitizer.log" 2>&1 &
san=$!
timeout 170 python3 -m pytest -q -m gpu -p no:cacheprovider -rfEx tests/test_reliability_gpu.py \
  > "$OUT/gpu_tests.log" 2>&1; rc[gpu_tests]=$?; secs[gpu_tests]=$(( $(date +%s) - s ))
wait $san; rc[sanitizer]=$?; secs[sanitizer]=$(( $(date +%s) - s ))
cat "$OUT/sanitizer.log"
tail -1 "$OUT/gpu_tests.log"; grep -E "^(FAILED|ERROR|XPASS)" "$OUT/gpu_tests.log" | head -20

s=$(date +%s)
soak_s=$(( $(left) - 15 )); [ $soak_s -gt 150 ] && soak_s=150; [ $soak_s -lt 30 ] && soak_s=30
timeout $(( soak_s + 150 )) python3 dev/stress/soak.py --max-seconds $soak_s --json "$OUT/soak.json" \
  > "$OUT/soak.log" 2>&1; rc[soak]=$?; secs[soak]=$(( $(date +%s) - s ))
cat "$OUT/soak.log"

python3 - "$OUT" "${rc[build]}" "${rc[gpu_tests]}" "${rc[sanitizer]}" "${rc[soak]}" "${secs[build]}" \
  "${secs[gpu_tests]}" "${secs[sanitizer]}" "${secs[soak]}" "$(( $(date +%s) - t0 ))" <<'EOF'
import json, re, sys
from pathlib import Path
out = Path(sys.argv[1])
rc = dict(zip(("build", "gpu_tests", "sanitizer", "soak"), map(int, sys.argv[2:6])))
secs = dict(zip(("build", "gpu_tests", "sanitizer", "soak"), map(int, sys.argv[6:10])))
load = lambda name: json.loads((out / name).read_text()) if (out / name).is_file() else None
tests = (out / "gpu_tests.log").read_text(errors="replace") if (out / "gpu_tests.log").is_file() else ""
last = [ln for ln in tests.splitlines() if re.search(r"\d+ (passed|failed|error)", ln) and " in " in ln][-1:]
counts = {k: int(n) for n, k in re.findall(r"(\d+) (passed|failed|errors?|skipped|xfailed|xpassed)", "".join(last))}
summary = {"env": (out / "env.txt").read_text().splitlines(), "rc": rc, "seconds": secs, "total_seconds": int(sys.argv[10]),
           "gpu_tests": {"counts": counts, "failed": re.findall(r"^(?:FAILED|ERROR) (\S+)", tests, flags=re.M)},
           "sanitizer": load("sanitizer.json"), "soak": load("soak.json")}
(out / "reliability_summary.json").write_text(json.dumps(summary, indent=1))
print(f"== reliability summary ({summary['total_seconds']} s)")
print(f"{'part':<12} {'rc':>3} {'s':>4}  result")
print(f"{'build':<12} {rc['build']:>3} {secs['build']:>4}")
print(f"{'gpu tests':<12} {rc['gpu_tests']:>3} {secs['gpu_tests']:>4}  " + ", ".join(f"{v} {k}" for k, v in counts.items()))
for t in (summary["sanitizer"] or {}).get("tools", []):
    print(f"{t['tool']:<12} {0 if t['ok'] else 1:>3} {int(t['seconds']):>4}  errors found: {t['errors']}"
          f"{'' if t['cases_ok'] else ', cases FAILED'}")
if summary["sanitizer"] is None:
    print(f"{'sanitizer':<12} {rc['sanitizer']:>3} {secs['sanitizer']:>4}  no result (see sanitizer.log)")
s = summary["soak"]
if s:
    print(f"{'soak':<12} {rc['soak']:>3} {secs['soak']:>4}  {s['calls']} calls = {s['hour_equivalents']} h-equiv, "
          f"exact mismatches {s['exact_mismatches']}, 8-bit worst rel-L2 {s['eight_bit_worst_rel_l2']:.1e}, "
          f"peak {s['memory']['peak_over_baseline'] / 2**20:.0f}/{s['memory']['documented_bound'] / 2**20:.0f} MiB, "
          f"checks {'ok' if s['ok'] else 'FAILED'}")
else:
    print(f"{'soak':<12} {rc['soak']:>3} {secs['soak']:>4}  no result (see soak.log)")
EOF
