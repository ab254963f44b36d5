#!/usr/bin/env bash
# Ninth session, device call 6: the shipped build (hyb = dd4b3a2's tree with its defaults: the deferred O store
# everywhere, O normalised under S_0 too where Q has two buffers). Each of its 20 kernels is byte-identical to the
# same kernel of fin (94a8692, N=176 builds) or of dnorm (3477887 + -DVIDATTN_DEFER_O_NORMALISE=1, the others), both
# validated in calls 4 and 5 (722 GPU tests each). Here: memcheck + racecheck, bench_kernel.py --rounds 7, Wan e2e,
# then a second full benchmark run.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_hyb.so VIDATTN_GIT_COMMIT=$(cat .build/ab/hyb.commit)
export VIDATTN_LIBRARY_FLAGS="(tree defaults)"
OUT_FILE_LIMIT=1000 BENCH_ARGS="--rounds 7" BUDGET_S=300 bash scripts/device_run.sh sanitizer bench e2e > /tmp/dr.log 2>&1
echo "device_run rc=$?"
timeout 200 python3 scripts/bench_kernel.py --rounds 7 --no-progress --out $OUT/kernel_run2.json > $OUT/bench_run2.log 2>&1
echo "bench run 2 rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
grep -E "ERROR SUMMARY|RACECHECK SUMMARY" $OUT/device_run.log; grep -E "^(sanitizer|bench|e2e) " $OUT/device_run.log
grep -E "speedup|fidelity" $OUT/e2e.log; grep "^| " $OUT/bench.log | cut -d'|' -f2,11; grep "^| " $OUT/bench_run2.log | cut -d'|' -f2,11
(cd $OUT && tar czf /tmp/results.tgz . && rm -rf ./* && mv /tmp/results.tgz .)
