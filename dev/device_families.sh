#!/usr/bin/env bash
# The families stage of a device call (H200, the kernel library already built or cached, PYTHONPATH set by the
# caller's wrapper for the carried diffusers): the two KV-cached rows of the cross-model table (Wan-Animate-2,
# SANA-WM refiner: filling pass untimed, then one timed cached forward per path at the default size), then the
# short-generation sweep SDPA against vidattn (scripts/bench_family_generate.py, cheapest first under its budget).
# No video files are written (no ffmpeg there). Logs and JSON under $OUT/families; a short table last.
#   bash dev/device_families.sh [table_budget_s] [sweep_budget_s]      (defaults 110 and 160: ~290 s in all)
# The rest of an earlier sweep: the families its generate_bench.json did not measure (skipped for the budget or
# failed), under the budget, then one merged table of both runs under $OUT/families_rest/merged:
#   bash dev/device_families.sh rest <budget_s> <previous generate_bench.json>     (~budget + 20 s)
set -uo pipefail
export PYTHONUNBUFFERED=1
OUT=${OUT:-/tmp/out}
if [ "${1:-}" = "rest" ]; then
  rb=${2:?budget seconds}; prev=${3:?the earlier generate_bench.json}
  [ -f "$prev" ] || { echo "no such file: $prev"; exit 2; }
  D="$OUT/families_rest"; mkdir -p "$D"; t0=$(date +%s)
  echo "commit ${VIDATTN_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}; resumed from $prev" > "$D/env.txt"
  timeout $(( rb + 40 )) python3 scripts/bench_family_generate.py --resume "$prev" --out-dir "$D/generate" \
    --budget-s "$rb" --no-progress > "$D/generate.log" 2>&1; rc_gen=$?
  echo "generation sweep (rest) rc=$rc_gen ($(( $(date +%s) - t0 )) s)"
  parts=("$prev"); [ -f "$D/generate/generate_bench.json" ] && parts+=("$D/generate/generate_bench.json")
  python3 scripts/bench_family_generate.py --merge "${parts[@]}" --out-dir "$D/merged" 2>&1 | tail -1
  grep -E "^\| |^- " "$D/merged/generate_bench.md" 2>/dev/null | cut -c1-300
  echo "families rest stage: $(( $(date +%s) - t0 )) s"
  exit 0
fi
D="$OUT/families"; mkdir -p "$D"
tb=${1:-110}; sb=${2:-160}
t0=$(date +%s)
echo "commit ${VIDATTN_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" > "$D/env.txt"
python3 -c "import vidattn, time; t=time.time(); vidattn.build(verbose=False); print('library ready in', round(time.time()-t,1), 's')" \
  2>&1 | tee -a "$D/env.txt"
timeout 60 python3 -m pytest -q -m gpu -p no:cacheprovider tests/test_pipelines.py -k sdpa_lse > "$D/gpu_test.log" 2>&1
echo "sdpa_lse GPU test rc=$? ($(tail -1 "$D/gpu_test.log"))"
timeout $(( tb + 30 )) python3 scripts/family_table.py --families sana_wm_refiner,wan_animate2 \
  --out-dir "$D/table" --budget-s "$tb" > "$D/family_table.log" 2>&1; rc_table=$?
echo "family_table rc=$rc_table ($(( $(date +%s) - t0 )) s)"
left=$(( 285 - ($(date +%s) - t0) )); [ "$left" -lt "$sb" ] && sb=$left
if [ "$sb" -gt 20 ]; then
  timeout $(( sb + 40 )) python3 scripts/bench_family_generate.py --out-dir "$D/generate" --budget-s "$sb" \
    > "$D/generate.log" 2>&1; rc_gen=$?
else
  rc_gen=skipped; echo "generation sweep skipped: ${sb} s left" | tee "$D/generate.log"
fi
echo "generation sweep rc=$rc_gen ($(( $(date +%s) - t0 )) s)"
grep -E "^\| (family|sana_wm_refiner|wan_animate2) |^- " "$D/table/table.md" 2>/dev/null | cut -c1-400
grep -E "^\| |^- " "$D/generate/generate_bench.md" 2>/dev/null | cut -c1-300
echo "families stage: $(( $(date +%s) - t0 )) s"
