#!/usr/bin/env bash
# The integrator's device calls: A = the installed wheel builds and runs the kernel, the shipped kernels' SASS for a
# comparison with the last GPU-validated build, and the whole GPU suite; B = the benchmarks (kernel table with the
# 8-bit path and the new shapes, one forward per family). Logs under $OUT; a short table last.
#   bash dev/device_final.sh A|B
set -uo pipefail
export PYTHONUNBUFFERED=1 VIDATTN_CACHE_DIR=/tmp/vidattn-wheel-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ -d .whl ]; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl \
    && export PYTHONPATH=/tmp/site
fi
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, diffusers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'diffusers', diffusers.__version__)" | tee -a "$OUT/env.txt"
git rev-parse HEAD 2>/dev/null | tee -a "$OUT/env.txt"
declare -A rc
t0=$(date +%s)
case "${1:-A}" in
A)
  timeout 330 bash .ci/gpu_wheel_check.sh > "$OUT/wheel.log" 2>&1; rc[wheel]=$?
  tail -5 "$OUT/wheel.log"
  lib=$(ls -t $VIDATTN_CACHE_DIR/libvidattn_sm90-*.so 2>/dev/null | head -1)
  if [ -n "$lib" ]; then
    cuobjdump --dump-sass "$lib" | gzip -6 > "$OUT/sass_new.txt.gz"; rc[sass]=$?
  fi
  timeout $(( 560 - ($(date +%s) - t0) )) python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/ \
    > "$OUT/gpu_tests.log" 2>&1; rc[gpu_tests]=$?
  grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -3
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -40
  ;;
B)
  python3 -c "import vidattn, time; t=time.time(); vidattn.build(verbose=False); print('build s', round(time.time()-t,1))"
  timeout 200 python3 scripts/bench_kernel.py --shapes "seed 8K" "1.3B self" "cross 32760" CogVideoX-5B LTX-Video \
    Allegro GQA --backends vidattn,cudnn,8bit --rounds 3 --no-progress --out "$OUT/kernel_final.json" \
    > "$OUT/bench.log" 2>&1; rc[bench]=$?
  tail -14 "$OUT/bench.log"
  timeout $(( 560 - ($(date +%s) - t0) )) bash scripts/gpu_family_table.sh "$OUT/family" > "$OUT/family.log" 2>&1
  rc[family]=$?
  tar czf "$OUT/family_reports.tar.gz" -C "$OUT" family 2>/dev/null && rm -rf "$OUT/family"
  tail -16 "$OUT/family.log"
  ;;
C)
  # After the fixes for what A found: those GPU tests again, LTX-2's forward (mask memo), the sanitizer cases, then
  # LTX-2's full generation with whatever time is left.
  python3 -c "import vidattn, time; t=time.time(); vidattn.build(verbose=False); print('build s', round(time.time()-t,1))"
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/test_reliability_gpu.py \
    tests/test_processors_families.py tests/test_processors_allegro.py tests/test_envelope_gpu.py \
    > "$OUT/gpu_tests_c.log" 2>&1; rc[gpu_tests]=$?
  tail -3 "$OUT/gpu_tests_c.log"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests_c.log" | head
  timeout 120 python3 scripts/e2e_report.py --family ltx2 --preset short --frames 41 --forward-only --iters 2 \
    --warmup 1 --out-dir "$OUT/ltx2_forward" > "$OUT/ltx2.log" 2>&1; rc[ltx2_forward]=$?
  grep -E "^\[e2e\] (speedup|\[(sdpa|vidattn)\] [0-9])" "$OUT/ltx2.log"
  PYTORCH_NO_CUDA_MEMORY_CACHING=1 timeout 150 compute-sanitizer --tool memcheck --error-exitcode 1 \
    python3 tests/sanitizer_cases.py > "$OUT/sanitizer.log" 2>&1; rc[memcheck]=$?
  tail -3 "$OUT/sanitizer.log"
  left=$(( 540 - ($(date +%s) - t0) ))
  if [ $left -gt 60 ]; then
    timeout $left python3 scripts/e2e_report.py --family ltx2 --generate --steps 8 --out-dir "$OUT/ltx2_gen" \
      > "$OUT/ltx2_gen.log" 2>&1; rc[ltx2_generate]=$?
    tail -8 "$OUT/ltx2_gen.log"
  fi
  tar czf "$OUT/ltx2_reports.tar.gz" -C "$OUT" ltx2_forward $( [ -d "$OUT/ltx2_gen" ] && echo ltx2_gen ) 2>/dev/null \
    && rm -rf "$OUT/ltx2_forward" "$OUT/ltx2_gen"
  ;;
esac
echo "== summary ($(( $(date +%s) - t0 )) s)"
for k in "${!rc[@]}"; do echo "$k rc=${rc[$k]}"; done
