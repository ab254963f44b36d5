#!/usr/bin/env bash
# The causal stage of a device session, from the repository root with the library built. Everything goes under $1; a
# short table is printed last.
#   bash dev/probes/causal_device.sh $OUT/causal          full (~65 s on an H200): the causal GPU tests, the
#       dynamic/static crossover sweep (dev/probes/causal_sched_ab.py --sweep crossover) and the racecheck probe of
#       mbarrier hand-offs (dev/probes/racecheck_mbarrier.sh)
#   bash dev/probes/causal_device.sh $OUT/causal routing  (~30 s, at most 47): the GPU tests of the schedule and its
#       routing (the per-build thresholds, dynamic = static bit for bit, every tile once, any workspace contents),
#       then the crossover sweep, 7 rounds
#   bash dev/probes/causal_device.sh $OUT/causal grouping  (~55 s, at most 78): the GPU tests of the short head group
#       first (vidattn_sm90_set_causal_grouping: same bits as the static order, odd lengths, kv_lens, GQA, D=64/96,
#       the redo pass) and of the static-imbalance rule, then the grouping A/B (causal_sched_ab.py --sweep grouping: static, dynamic, short_first and
#       auto, back to back, 7 rounds, D=64/128 at 1K-8K and 32K plus shapes with a remainder); its table last
#   bash dev/probes/causal_device.sh $OUT/causal confirm  (at most 70 s): the GPU tests that touch the shipped
#       defaults (grouping 1, the per-build thresholds, the static-imbalance rule off: that the loaded library has
#       them, and the routing and bits under them), then the library's defaults against static back to back
#       (causal_sched_ab.py --sweep confirm, 7 rounds: D=128 4K, 6K, 8K, D=64 2K, 6K); its table last
set -u
out=${1:?usage: causal_device.sh OUTDIR [full|routing|grouping|confirm]}
mode=${2:-full}
case "$mode" in
  full|routing|grouping|confirm) ;;
  *) echo "causal_device.sh: mode full, routing, grouping or confirm, not $mode"; exit 2 ;;
esac
mkdir -p "$out"
t0=$SECONDS
if [ "$mode" = full ]; then
  mkdir -p "$out/racecheck"
  # the probe compiles on the CPU while the GPU runs the tests
  "${NVCC:-$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)}" -std=c++17 -lineinfo -arch=sm_90a -I csrc -o "$out/racecheck/racecheck_mbarrier" dev/probes/racecheck_mbarrier.cu \
    > "$out/racecheck/build.log" 2>&1 &
  build_pid=$!
  tests_s=75; durations=8; select=(); sweep_s=30; rounds=5
elif [ "$mode" = routing ]; then
  tests_s=26; durations=5; sweep_s=20; rounds=7
  select=(-k "short_problems or min_sq or one_threshold or every_tile_once or any_workspace or many_launches")
elif [ "$mode" = grouping ]; then
  tests_s=36; durations=5; sweep_s=40; rounds=7
  select=(-k "grouping or short_group_first or static_imbalance")
else
  tests_s=32; durations=5; sweep_s=34; rounds=7
  select=(-k "default_routing or grouping_setter or min_sq or one_threshold or short_problems or static_imbalance")
fi
sweep=crossover
[ "$mode" = grouping ] && sweep=grouping
[ "$mode" = confirm ] && sweep=confirm
timeout "$tests_s" python3 -m pytest -v --tb=short -m gpu -p no:cacheprovider -rfE --durations="$durations" \
  tests/test_causal_gpu.py ${select[@]+"${select[@]}"} > "$out/gpu_causal.log" 2>&1
rc_tests=$?
t_tests=$((SECONDS - t0))
timeout "$sweep_s" python3 dev/probes/causal_sched_ab.py --sweep "$sweep" --rounds "$rounds" \
  --out "$out/$sweep.json" > "$out/$sweep.log" 2>&1
rc_sweep=$?
t_sweep=$((SECONDS - t0))
if [ "$mode" = full ]; then
  wait "$build_pid"
  timeout 40 bash dev/probes/racecheck_mbarrier.sh "$out/racecheck" > "$out/racecheck.log" 2>&1
  rc_race=$?
fi
echo
echo "== causal stage, $mode ($((SECONDS - t0)) s: tests to ${t_tests} s, sweep to ${t_sweep} s)"
echo "tests rc=$rc_tests: $(grep -cE ' PASSED' "$out/gpu_causal.log") passed; $(tail -1 "$out/gpu_causal.log")"
grep -E "^(FAILED|ERROR)" "$out/gpu_causal.log" | head -8
echo "sweep rc=$rc_sweep:"
if [ "$mode" = grouping ]; then
  # the per-length summary and verdicts, then the per-shape table (written as the rows land: a timeout keeps them)
  grep -E "^  D |^  [0-9]+ | / static by length|crossover|library|rule|HOST-BOUND|NOT-RUN|Error|error" "$out/$sweep.log" |
    cut -c1-150
  echo "per shape (TFLOPS; ratios are medians of per-round ratios; sim = makespan / mean):"
  tail -n 20 "$out/${sweep}_table.txt" 2>/dev/null | grep -E "^shape|D(64|128) \|"
elif [ "$mode" = confirm ]; then
  grep -E "^library|Error|error" "$out/$sweep.log" | cut -c1-150
  # the per-shape lines and the verdict (written as the rows land: a timeout keeps them)
  cat "$out/${sweep}_table.txt" 2>/dev/null || tail -5 "$out/$sweep.log"
else
  grep -E "^[0-9]+x|^  D |^  [0-9]+ |crossover|library" "$out/$sweep.log" | cut -c1-150
fi
if [ "$mode" = full ]; then
  echo "racecheck rc=$rc_race (variant, consumer warpgroups, program check, racecheck summary):"
  cat "$out/racecheck/summary.txt" 2>/dev/null || tail -5 "$out/racecheck.log"
fi
