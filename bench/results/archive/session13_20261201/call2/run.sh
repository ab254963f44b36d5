#!/usr/bin/env bash
# Thirteenth session, device call 2: is Wan 1.3B's bench_kernel.py reading a matter of the GPU's temperature? Call 1's
# neighbour probe (cold GPU, idle gaps) read vidattn at 9.06-9.27 ms after every predecessor, where the full runs
# read 9.4-10.1 ms after the first round; cuDNN read the same in both. Here: Wan 1.3B alone in bench_kernel.py on a
# cold GPU, then 40 s of Wan 14B back to back (clock_probe.py, both paths) to heat it, then Wan 1.3B again, then the
# neighbour probe hot; nvidia-smi logs temperature, clock, power and the clock-event reasons all along.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?}
Q=timestamp,temperature.gpu,temperature.memory,power.draw,power.draw.instant,clocks.sm,clocks_event_reasons.active
nvidia-smi --query-gpu=$Q --format=csv > /dev/null 2>&1 || Q=timestamp,temperature.gpu,power.draw,clocks.sm,clocks_throttle_reasons.active
nvidia-smi --query-gpu=$Q --format=csv -lms 100 > $OUT/smi.csv 2>&1 &
SMI=$!
mark() { echo "$(date '+%Y/%m/%d %H:%M:%S.%3N') $1" | tee -a $OUT/marks.txt; }
bench() {  # $1: tag
  mark "bench $1 start"
  python3 scripts/bench_kernel.py --shapes "Wan2.1-1.3B" --rounds 8 --out $OUT/wan13b_$1.json > $OUT/wan13b_$1.log 2>&1
  mark "bench $1 end rc=$?"; grep -A4 "| shape" $OUT/wan13b_$1.log | head -4
}
bench cold
mark "heat start"; python3 scripts/clock_probe.py wan14b_self --seconds 20 --pause 0 > $OUT/heat.log 2>&1; mark "heat end"
tail -3 $OUT/heat.log
bench hot
mark "probe start"
python3 scripts/neighbour_probe.py wan13b_self --reps 3 --json $OUT/neighbour_hot.json > $OUT/neighbour_hot.log 2>&1
mark "probe end"; tail -9 $OUT/neighbour_hot.log
bench hot2
kill $SMI
python3 - $OUT <<'PY'
import json, sys
for tag in ("cold", "hot", "hot2"):
    try:
        r = json.load(open(f"{sys.argv[1]}/wan13b_{tag}.json"))["results"][0]
        v, c = r["ms_rounds"]["vidattn"], r["ms_rounds"]["cudnn"]
        print(tag, "vidattn", [round(x, 2) for x in v], "cudnn", [round(x, 2) for x in c],
              "ratio", round(r["tflops"]["vidattn"] / r["tflops"]["cudnn"], 3))
    except Exception as e:
        print(tag, "no result", e)
PY
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
