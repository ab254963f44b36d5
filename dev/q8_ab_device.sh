#!/bin/bash
# One device call for the 8-bit kernel's A/B, run from a snapshot folder of one commit (csrc/, vidattn/, dev/,
# tests/, scripts/nvcc_flags.py; other work in progress in the checkout cannot break it) that may hold that commit's
# library prebuilt as libvidattn_q8ab.so (built where the build machine has nvcc; built here if it does not load).
#   cd SNAPSHOT && OUT=... bash dev/q8_ab_device.sh [TOTAL_SECONDS]
# Steps: the library; a smoke case per schedule under a timeout (a barrier hang must not eat the call); then
# dev/q8_check.py --ab --skip-default (each variant, the default first, on the odd-length, fp16, strided, kv_lens,
# long-row, key-offset, late-sink and V = ones cases, then the five shapes timed: cuDNN, exact, 8-bit default, every
# variant in two alternating passes with kernel-only figures); the schedule GPU tests if time is left; the table last.
set -o pipefail
OUT=${OUT:-/tmp}
export PYTHONUNBUFFERED=1 VIDATTN_CACHE_DIR=/tmp/vidattn_cache Q8_BEST_ENV=$OUT/q8_best.env OUT
TOTAL=${1:-320}
t0=$(date +%s)
left() { echo $(( TOTAL - ($(date +%s) - t0) )); }
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit,temperature.gpu \
  --format=csv | tee $OUT/gpu.txt
echo "commit $(cat COMMIT 2>/dev/null)" | tee -a $OUT/gpu.txt
LIB=$PWD/libvidattn_q8ab.so
if ! python3 -c "import ctypes, sys; ctypes.CDLL(sys.argv[1]).vidattn_q8_set_sequential" "$LIB" 2>$OUT/load.log; then
  echo "carried library missing or not loadable ($(tail -1 $OUT/load.log)); building here"
  mapfile -t flags < <(python3 scripts/nvcc_flags.py)
  timeout 200 nvcc "${flags[@]}" -I csrc csrc/capi.cu -o /tmp/q8ab.so > $OUT/build.log 2>&1 \
    || { echo "build failed"; grep -m5 error $OUT/build.log; exit 1; }
  LIB=/tmp/q8ab.so
fi
export VIDATTN_LIBRARY=$LIB
echo "library $LIB, $(left) s left"
# A smoke failure of the default ends the call; one of a variant's leaves that variant out of the A/B (Q8_EXCLUDE:
# a crash would take the whole A/B process with it).
export Q8_EXCLUDE=""
# (VIDATTN_Q8_SEQ=1 is D=64's default and D=128's alternative, its default being schedule 3; schedule 2 is no longer
# built.)
for spec in ":" "VIDATTN_Q8_SEQ=1:seq=1"; do
  env_=${spec%%:*}; key=${spec#*:}
  echo "smoke [$env_]" | tee -a $OUT/smoke.log
  env $env_ timeout 45 python3 dev/q8_check.py --smoke > $OUT/smoke_one.log 2>&1
  rc=$?
  cat $OUT/smoke_one.log >> $OUT/smoke.log
  grep -a "V=ones\|\"ok\": false\|Error" $OUT/smoke_one.log | cut -c1-160
  if [ $rc -ne 0 ] || grep -q '"ok": false' $OUT/smoke_one.log; then
    [ -z "$key" ] && { echo "smoke of the default failed (rc $rc)"; exit 1; }
    echo "smoke [$env_] failed (rc $rc): leaving out $key"; Q8_EXCLUDE="$Q8_EXCLUDE,$key"
  fi
done
t_check=$(( $(left) - 45 ))
echo "q8_check --ab with ${t_check} s"
timeout $t_check python3 dev/q8_check.py --ab --skip-default > $OUT/q8_check.log 2>&1
echo "q8_check rc=$?"
if [ "$(left)" -gt 35 ]; then
  timeout $(( $(left) - 8 )) python3 -m pytest -q -p no:cacheprovider tests/test_8bit_gpu.py \
    -k "schedules or refuses" > $OUT/pytest.log 2>&1
  echo "pytest rc=$? $(tail -1 $OUT/pytest.log)"
fi
echo "== failed cases"
grep -a "FAIL\|Traceback\|Error" $OUT/q8_check.log | head -12
grep -a "variant .* ran" $OUT/q8_check.log
sed -n '/== TFLOPS/,$p' $OUT/q8_check.log
echo "done in $(( $(date +%s) - t0 )) s"
