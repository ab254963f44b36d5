#!/usr/bin/env bash
# Runs compute-sanitizer racecheck on dev/probes/racecheck_mbarrier.cu's hand-off variants (see its header) and prints
# one line per variant: the program's own check and racecheck's hazard summary. Logs go to $1 (default
# ./racecheck_mbarrier). If racecheck flags the mbarrier variants (a, d) and not the barrier ones (b, c), it does not
# follow mbarrier ordering; if it flags none, the kernel's reported hazard is an ordering gap of its own.
#   bash dev/probes/racecheck_mbarrier.sh $OUT/causal/racecheck_mbarrier
set -u
root=$(cd "$(dirname "$0")/../.." && pwd)
out=${1:-racecheck_mbarrier}
mkdir -p "$out"
nvcc=${NVCC:-$(command -v nvcc || ls /usr/local/cuda*/bin/nvcc 2>/dev/null | head -1)}
san=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1)
[ -n "$san" ] || { echo "racecheck_mbarrier: no compute-sanitizer"; exit 1; }
# a binary already there (built while something else used the GPU: dev/probes/causal_device.sh) is used as it is
if [ ! -x "$out/racecheck_mbarrier" ]; then
  "$nvcc" -std=c++17 -lineinfo -arch=sm_90a -I "$root/csrc" -o "$out/racecheck_mbarrier" "$root/dev/probes/racecheck_mbarrier.cu" \
    || { echo "racecheck_mbarrier: build failed"; exit 1; }
fi
"$san" --version | tail -1 > "$out/summary.txt"
for run in "a 3" "a 2" "b 3" "c 3" "d 3"; do
  set -- $run
  log="$out/racecheck_$1_wg$2.log"
  "$san" --tool racecheck --racecheck-report all "$out/racecheck_mbarrier" "$1" "$2" > "$log" 2>&1
  rc=$?
  prog=$(grep -m1 "^variant" "$log" || echo "no output")
  summ=$(grep -m1 "RACECHECK SUMMARY\|ERROR SUMMARY" "$log" || echo "no summary")
  where=$(grep -m1 -A1 "Race reported" "$log" | grep -o "racecheck_mbarrier.cu:[0-9]*" | sed 's/.*://' | tr '\n' ' ')
  printf "%-4s wg%s  rc=%d  %-60s  %s%s\n" "$1" "$2" "$rc" "$prog" "$summ" "${where:+  first pair: lines $where}" \
    | tee -a "$out/summary.txt"
done
rm -f "$out/racecheck_mbarrier"
