#!/usr/bin/env bash
# Thirteenth session, device call 8: a second full bench_kernel.py run right after call 7's (same head, same library),
# to see whether call 7's 11 of 11 bars were a draw.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl >/dev/null 2>&1; export PYTHONPATH=/tmp/site
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_def.so VIDATTN_GIT_COMMIT=${COMMIT:?} \
  VIDATTN_LIBRARY_FLAGS="$(cat .build/ab/def.variant) (def: csrc/ of $(cut -c1-7 .build/ab/def.commit), unchanged at ${COMMIT:0:7})"
OUT_FILE_LIMIT=1000 BUDGET_S=200 BENCH_ARGS="--rounds 8 --order williams --out $OUT/kernel_2026-12-01_${COMMIT:0:7}_williams_run2.json" \
  bash scripts/device_run.sh bench > $OUT/run.log 2>&1
echo "bench rc=$?"; grep -A16 "bench table" $OUT/run.log | cut -d'|' -f2,7,9,11 | head -16
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
