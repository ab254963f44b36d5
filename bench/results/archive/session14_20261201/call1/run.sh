#!/usr/bin/env bash
# Fourteenth session, device call 1: validate what the thirteenth changed after its device time ran out (the eager
# fast path's guard, 5b5e40d; pipelines.measure.device_kernels leaving profiler-range mirrors out): the whole GPU
# suite and one Wan 1.3B e2e report (attention share ~49% expected); then the reduced forward's host gap (NOTES
# lead 1) by path: sdpa, vidattn, vidattn without the library call, vidattn with SDPA in the library's place, sdpa
# again; and the collector off.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?}
ROOT=$OUT
mkdir -p $ROOT/e2e
FO="scripts/forward_overhead.py --preset 1.3b --height 240 --width 416 --frames 21"
python3 $FO --paths sdpa,vidattn,vidattn-nolaunch,vidattn-sdpa,sdpa > $ROOT/forward_paths.log 2>&1
echo "forward paths rc=$?"; grep "^## " $ROOT/forward_paths.log | cut -c1-160
python3 $FO --paths sdpa,vidattn --no-gc > $ROOT/forward_nogc.log 2>&1
echo "forward no-gc rc=$?"; grep "^## " $ROOT/forward_nogc.log | cut -c1-160
OUT=$ROOT OUT_FILE_LIMIT=1000 BUDGET_S=200 bash scripts/device_run.sh gpu-tests > $ROOT/gpu_tests.log 2>&1
echo "gpu-tests rc=$?"; grep -E "passed|failed" $ROOT/gpu_tests.log | tail -3
OUT=$ROOT/e2e OUT_FILE_LIMIT=1000 BUDGET_S=120 E2E_ARGS="--preset 1.3b --no-video --out-dir $ROOT/e2e" \
  bash scripts/device_run.sh e2e > $ROOT/e2e/run.log 2>&1
echo "e2e rc=$?"; grep -iE "attention share|per call inside|speedup|fidelity" $ROOT/e2e/run.log | tail -6
(cd $ROOT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f e2e)
