#!/usr/bin/env bash
# Twelfth session, device call 4: the shipped machine code (def: built from 81002d1's csrc/, unchanged at e0743ec)
# in two full bench_kernel.py runs of 8 rounds back to back, the new Williams round order first, then the earlier
# rotated order (where vidattn always ran right after FlashAttention-2, cuDNN right after SDPA's default); then the
# Wan e2e report on the same library.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?} \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/def.variant) (def: csrc/ of $(cut -c1-7 .build/ab/def.commit), unchanged at ${COMMIT:0:7})"
ROOT=$OUT
for order in williams rotated; do
  mkdir -p $ROOT/$order
  OUT=$ROOT/$order OUT_FILE_LIMIT=1000 BUDGET_S=220 \
    BENCH_ARGS="--rounds 8 --order $order --out $ROOT/$order/kernel_2026-12-01_${COMMIT:0:7}_$order.json" \
    bash scripts/device_run.sh bench > $ROOT/$order/run.log 2>&1
  echo "$order rc=$?"
  grep -A16 "bench table" $ROOT/$order/run.log | cut -d'|' -f2,7,9,11 | head -16
done
mkdir -p $ROOT/e2e
OUT=$ROOT/e2e OUT_FILE_LIMIT=1000 BUDGET_S=120 bash scripts/device_run.sh e2e > $ROOT/e2e/run.log 2>&1
echo "e2e rc=$?"; tail -6 $ROOT/e2e/run.log
OUT=$ROOT
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f williams rotated e2e)
