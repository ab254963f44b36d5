#!/usr/bin/env bash
# The causal stage of a device session, from the repository root with the library built (~80 s on an H200):
# the causal GPU tests, the dynamic/static crossover sweep (dev/probes/causal_sched_ab.py --sweep crossover) and the
# racecheck probe of mbarrier hand-offs (dev/probes/racecheck_mbarrier.sh). Everything goes under $1; a short table
# is printed last.
#   bash dev/probes/causal_device.sh $OUT/causal
set -u
out=${1:?usage: causal_device.sh OUTDIR}
mkdir -p "$out/racecheck"
t0=$SECONDS
# the probe compiles on the CPU while the GPU runs the tests
"${NVCC:-$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)}" -std=c++17 -lineinfo -arch=sm_90a -I csrc -o "$out/racecheck/racecheck_mbarrier" dev/probes/racecheck_mbarrier.cu \
  > "$out/racecheck/build.log" 2>&1 &
build_pid=$!
timeout 75 python3 -m pytest -v --tb=short -m gpu -p no:cacheprovider -rfE --durations=8 tests/test_causal_gpu.py \
  > "$out/gpu_causal.log" 2>&1
rc_tests=$?
t_tests=$((SECONDS - t0))
timeout 30 python3 dev/probes/causal_sched_ab.py --sweep crossover --rounds 5 --reps 20 --out "$out/crossover.json" \
  > "$out/crossover.log" 2>&1
rc_sweep=$?
t_sweep=$((SECONDS - t0))
wait "$build_pid"
timeout 40 bash dev/probes/racecheck_mbarrier.sh "$out/racecheck" > "$out/racecheck.log" 2>&1
rc_race=$?
echo
echo "== causal stage ($((SECONDS - t0)) s: tests to ${t_tests} s, sweep to ${t_sweep} s)"
echo "tests rc=$rc_tests: $(grep -cE ' PASSED' "$out/gpu_causal.log") passed; $(tail -1 "$out/gpu_causal.log")"
grep -E "^(FAILED|ERROR)" "$out/gpu_causal.log" | head -8
echo "sweep rc=$rc_sweep:"
grep -E "^[0-9]+x|^  D |^  [0-9]+ |crossover|library" "$out/crossover.log" | cut -c1-150
echo "racecheck rc=$rc_race (variant, consumer warpgroups, program check, racecheck summary):"
cat "$out/racecheck/summary.txt" 2>/dev/null || tail -5 "$out/racecheck.log"
