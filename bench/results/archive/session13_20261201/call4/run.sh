#!/usr/bin/env bash
# Thirteenth session, device call 4: call 3 again with the per-call times taken by CUDA events around each attention call
# (pipelines.measure.attention_call_times): call 3 took them from the profiler's kernel-to-op links, which credited the
# self-attention ops with 1.0-1.8x the attention kernels' time. The GPU test of the report, then the Wan 1.3B and 14B generation
# reports on the shipped library.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?} \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/def.variant) (def: csrc/ of $(cut -c1-7 .build/ab/def.commit), unchanged at ${COMMIT:0:7})"
python3 -m pytest -m gpu -q -p no:cacheprovider -rfEs tests/test_scripts.py -k e2e_report_gpu_small > $OUT/gpu_test.log 2>&1
echo "gpu test rc=$?"; tail -3 $OUT/gpu_test.log
ROOT=$OUT
for preset in 1.3b 14b; do
  mkdir -p $ROOT/e2e_$preset
  OUT=$ROOT/e2e_$preset OUT_FILE_LIMIT=1000 BUDGET_S=240 E2E_ARGS="--preset $preset --no-video --out-dir $ROOT/e2e_$preset" \
    bash scripts/device_run.sh e2e > $ROOT/e2e_$preset/run.log 2>&1
  echo "e2e $preset rc=$?"; grep -E "per call inside|speedup|fidelity" $ROOT/e2e_$preset/run.log | tail -5
done
OUT=$ROOT
(cd $OUT && f=$(find . -type f ! -name results.tgz ! -name '*.mp4' | sed 's|^\./||') && tar czf results.tgz $f && rm -rf e2e_* gpu_test.log)
