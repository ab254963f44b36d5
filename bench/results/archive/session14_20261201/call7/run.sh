#!/usr/bin/env bash
# Fourteenth session, device call 7: VIDATTN_ROW_SUM_UNROUNDED=1 (unr: the fixed-reference path sums p in fp32 as
# exponentiated, one FADD per score and no integer op) against def and an A/A copy (defa), 9 rounds, the shapes of
# call 6 (where dropping the sums whole bought 2.5-6%); its error tail beside def and the exact build (200 draws of
# the 777 x 777 cases); then the kernel's GPU tests on it, as far as the time allows.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_GIT_COMMIT=${COMMIT:?}
B=.build/ab
timeout 150 python3 scripts/kernel_ab_time.py def=$B/lib_def.so defa=$B/lib_defa.so unr=$B/lib_unr.so \
  --rounds 9 --shapes "wan13b,wan14b,seed8k,seed16k,ltx,wan_cross" --json $OUT/ab_times.json > $OUT/ab_time.log 2>&1
echo "ab rc=$?"; grep -A8 "ratio table" $OUT/ab_time.log; grep -i "smoke\|fail" $OUT/ab_time.log | head -5
timeout 60 python3 scripts/accuracy_tail.py def=$B/lib_def.so unr=$B/lib_unr.so online=$B/lib_onl.so --seeds 200 \
  --shapes 777_d128,777_d64 --json $OUT/accuracy_tail.json > $OUT/accuracy_tail.log 2>&1
echo "accuracy_tail rc=$?"; cat $OUT/accuracy_tail.log
VIDATTN_LIBRARY=$PWD/$B/lib_unr.so timeout 100 python3 -m pytest -q -rfE -p no:cacheprovider tests/test_kernel_gpu.py \
  > $OUT/kernel_tests_unr.log 2>&1
echo "kernel tests (unr) rc=$?"; grep -E "^FAILED|passed|failed" $OUT/kernel_tests_unr.log | tail -6
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
