#!/usr/bin/env bash
# The integrator's device calls: A = the reliability suite (dev/device_reliability.sh), every other GPU test and the
# causal bench; B1 / B2 = the cross-model table at each family's default size, group 1 or 2 of
# scripts/family_table.py, within a budget in seconds. Logs under $OUT; a short table last.
#   bash dev/device_final.sh A | B1 [budget_s] | B2 [budget_s] | D [budget_s]
# D = after the fixes: the rebuilt library's GPU tests, a full hour-equivalent soak, the generation GPU tests.
set -uo pipefail
export PYTHONUNBUFFERED=1 VIDATTN_CACHE_DIR=/tmp/vidattn-wheel-cache
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
# shellcheck source=dev/device_env.sh
source dev/device_env.sh
install_wheels .whl
nvidia-smi --query-gpu=name,driver_version,clocks.sm,power.draw,power.limit --format=csv | tee "$OUT/env.txt"
python3 -c "import torch, diffusers; print('torch', torch.__version__, 'cuda', torch.version.cuda, 'cudnn', torch.backends.cudnn.version(), 'diffusers', diffusers.__version__)" | tee -a "$OUT/env.txt"
echo "commit ${VIDATTN_COMMIT:-$(git rev-parse HEAD 2>/dev/null)}" | tee -a "$OUT/env.txt"
declare -A rc
t0=$(date +%s)
case "${1:-A}" in
A)
  # The reliability suite (build, its GPU tests beside the three sanitizers, the soak), then every other GPU test
  # (causal and the newly routed families included), then the causal bench against cuDNN and flash.
  OUT="$OUT/rel" timeout 300 bash dev/device_reliability.sh > "$OUT/reliability.log" 2>&1; rc[reliability]=$?
  tail -9 "$OUT/reliability.log"
  cp "$OUT/rel/reliability_summary.json" "$OUT/" 2>/dev/null
  timeout $(( 500 - ($(date +%s) - t0) )) python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/ \
    --ignore=tests/test_reliability_gpu.py > "$OUT/gpu_tests.log" 2>&1; rc[gpu_tests]=$?
  grep -E "passed|failed|error" "$OUT/gpu_tests.log" | tail -1
  grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests.log" | head -30
  timeout $(( 575 - ($(date +%s) - t0) )) python3 scripts/bench_kernel.py --shapes causal \
    --backends vidattn,cudnn,flash --rounds 2 --no-progress --out "$OUT/kernel_causal.json" > "$OUT/bench_causal.log" 2>&1
  rc[bench_causal]=$?
  tail -7 "$OUT/bench_causal.log"
  tar czf "$OUT/reliability_logs.tar.gz" -C "$OUT" rel 2>/dev/null && rm -rf "$OUT/rel"
  ;;
B1|B2)
  # The cross-model table at each family's default size, one group per call (scripts/family_table.py --plan).
  g=${1#B}; budget=${2:-540}
  python3 -c "import vidattn, time; t=time.time(); vidattn.build(verbose=False); print('build s', round(time.time()-t,1))"
  timeout $(( budget + 30 )) python3 scripts/family_table.py --group "$g" --out-dir "$OUT/family" \
    --budget-s $(( budget - ($(date +%s) - t0) )) > "$OUT/family_g$g.log" 2>&1; rc[family]=$?
  cp "$OUT/family/table.md" "$OUT/table_g$g.md" 2>/dev/null
  tar czf "$OUT/family_g$g.tar.gz" -C "$OUT" family 2>/dev/null && rm -rf "$OUT/family"
  tail -20 "$OUT/family_g$g.log"
  ;;
D)
  # After A-C's fixes: the library rebuilt (8-bit pre-pass NaN maxima, sequential D=128 default), the GPU tests those
  # touch, a full hour-equivalent of the soak, then the generation GPU tests with what is left.
  python3 -c "import vidattn, time; t=time.time(); vidattn.build(verbose=False); print('build s', round(time.time()-t,1))"
  timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/test_8bit_gpu.py tests/test_reliability_gpu.py \
    tests/test_processors_video_more.py > "$OUT/gpu_tests_d.log" 2>&1; rc[gpu_tests]=$?
  tail -1 "$OUT/gpu_tests_d.log"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests_d.log" | head -20
  soak_s=$(( ${2:-440} - ($(date +%s) - t0) - 40 )); [ $soak_s -gt 190 ] && soak_s=190
  timeout $(( soak_s + 60 )) python3 dev/stress/soak.py --max-seconds $soak_s --json "$OUT/soak.json" > "$OUT/soak.log" 2>&1
  rc[soak]=$?; tail -2 "$OUT/soak.log"
  left=$(( ${2:-440} - ($(date +%s) - t0) ))
  if [ $left -gt 30 ]; then
    timeout $left python3 -m pytest -q -m gpu -p no:cacheprovider -rfE tests/test_generate_families.py \
      > "$OUT/gpu_tests_generate.log" 2>&1; rc[generate]=$?
    tail -1 "$OUT/gpu_tests_generate.log"; grep -E "^(FAILED|ERROR)" "$OUT/gpu_tests_generate.log" | head
  fi
  ;;
esac
echo "== summary ($(( $(date +%s) - t0 )) s)"
for k in "${!rc[@]}"; do echo "$k rc=${rc[$k]}"; done
