#!/usr/bin/env bash
# Fifteenth session, device call 3: the shipped build with the unrounded row sum now the default (ship15: the tree
# at 9828a93, machine code byte-identical to calls 1-2's unr). The whole GPU suite on it, with the new late-sink
# test; the lineage in one run (15 steps, builds carried in .build/lineage; step 15 = the unrounded row sum); a full
# bench_kernel.py run (Williams, 8 rounds) on whatever card this lease is.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl 2>/dev/null; export PYTHONPATH=/tmp/site
export VIDATTN_GIT_COMMIT=${COMMIT:?}
B=.build/ship15
ROOT=$OUT
export VIDATTN_LIBRARY=$PWD/$B/lib_ship15.so \
  VIDATTN_LIBRARY_FLAGS="$(cat $B/ship15.variant) (ship15: csrc/ of $(cut -c1-7 $B/ship15.commit), the unrounded row sum by default)"
nvidia-smi --query-gpu=uuid,temperature.gpu,power.draw,clocks.sm --format=csv,noheader
OUT=$ROOT OUT_FILE_LIMIT=1000 BUDGET_S=170 PYTEST_FLAGS="-q -rfEs" bash scripts/device_run.sh gpu-tests \
  > $ROOT/gpu_tests.log 2>&1
echo "gpu-tests rc=$?"; grep -E "^FAILED|passed|failed" $ROOT/gpu_tests.log | tail -8
timeout 200 python3 scripts/bench_lineage.py --out $ROOT/ > $ROOT/lineage.log 2>&1
echo "lineage rc=$?"; tail -22 $ROOT/lineage.log | cut -c1-150
mkdir -p $ROOT/bench1
OUT=$ROOT/bench1 OUT_FILE_LIMIT=1000 BUDGET_S=230 \
  BENCH_ARGS="--rounds 8 --order williams --out $ROOT/kernel_2026-12-01_${COMMIT:0:7}_williams.json" \
  bash scripts/device_run.sh bench > $ROOT/bench1.log 2>&1
echo "bench rc=$?"; grep -A16 "bench table" $ROOT/bench1.log | cut -d'|' -f2,7,9,11 | head -16
rm -rf $ROOT/bench1
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
