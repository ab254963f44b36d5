#!/usr/bin/env bash
# One transformer forward per family on the GPU, SDPA against vidattn, through e2e_report.py --family: SDPA ms,
# vidattn ms, speedup, attention share, kernel/fallback call census, output rel-L2. Frame counts are cut below the
# pipelines' defaults (stated per family in each report.json / report.md and below) so the table fits ~5 minutes
# on an H200; pass FULL=1 for the default sizes (about 15 minutes).
#   scripts/gpu_family_table.sh [OUT_DIR]          (default bench/results/family_table_<date>)
# The table at every pipeline's DEFAULT size (no frames cut) for every routed family, in two device calls:
#   python3 scripts/family_table.py --group 1|2 --out-dir DIR --budget-s 490     (scripts/family_table.py --plan)
# Then the routing check of every other routed family (tiny models in bf16: the kernel runs, output near stock):
#   python3 -m pytest -q -m gpu tests/test_processors_families.py
set -u
OUT=${1:-bench/results/family_table_$(date -u +%Y%m%d)}
mkdir -p "$OUT"
# family:preset:frames (frames empty = the preset's default)
if [ "${FULL:-0}" = 1 ]; then
  RUNS="ltx:default: ltx2:default: wan:default: cogvideox:default: skyreels_v2:default: hunyuan_video15:default:
        wan14b:default: mochi:default: allegro:default: hunyuan_video:default:"
else
  RUNS="ltx:default: ltx2:short: wan:default:41 cogvideox:default:25 skyreels_v2:default:49 hunyuan_video15:default:61
        mochi:default:85 hunyuan_video:540p:65"
fi
status=0
for run in $RUNS; do
  IFS=: read -r fam preset frames <<<"$run"
  args=(--family "$fam" --preset "$preset" --forward-only --iters 2 --warmup 1 --out-dir "$OUT/$fam")
  [ -n "$frames" ] && args+=(--frames "$frames")
  echo "=== $fam ($preset${frames:+, $frames frames})"
  timeout 240 python3 scripts/e2e_report.py "${args[@]}" 2>&1 | grep -E "^\[e2e\] (built|speedup|both|\[(sdpa|vidattn)\] [0-9]|WARNING|error)" \
    || status=1
done
python3 - "$OUT" <<'PY'
import json, sys
from pathlib import Path
rows = []
for p in sorted(Path(sys.argv[1]).glob("*/report.json")):
    r = json.loads(p.read_text())
    res, calls = r.get("results", {}), r.get("attention_calls", {}).get("vidattn", {})
    med = lambda k: (res.get(k, {}).get("forward_stats_ms") or {}).get("median")
    share = (r.get("profiles", {}).get("sdpa") or {}).get("attention_share")
    rows.append((r.get("model_family"), r.get("frames"), r.get("tokens"), med("sdpa"), med("vidattn"),
                 (r.get("speedup") or {}).get("per_forward_median"), share, calls.get("kernel"),
                 calls.get("fallback"), (r.get("fidelity") or {}).get("output_rel_l2")))
print("| family | frames | tokens | SDPA ms | vidattn ms | speedup | attention share | kernel / fallback calls | rel-L2 |")
print("|---|---|---|---|---|---|---|---|---|")
f = lambda x, n=1: "—" if x is None else (f"{x:.{n}f}" if isinstance(x, float) else str(x))
for fam, fr, tok, a, b, sp, sh, k, fb, l2 in rows:
    print(f"| {fam} | {fr} | {tok} | {f(a)} | {f(b)} | {f(sp, 3)} | {f(sh, 2)} | {k} / {fb} | "
          f"{'—' if l2 is None else f'{l2:.2e}'} |")
PY
exit $status
