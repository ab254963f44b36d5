#!/usr/bin/env bash
# Fourteenth session, device call 6: the price of the fixed-reference path's rounded row sums at the power limit
# (NOTES lead 1, energy per FLOP). diag_nosum = the tree with -DVIDATTN_DIAG_SOFTMAX=3 (no row sum after a tile's
# first key block: per score one integer op and one FADD fewer; wrong output, timing only), against def and an A/A
# copy of def (defa), 9 rounds in a Williams order, interleaved with cuDNN. If dropping them whole buys under ~1% on
# the power-limited long shapes, a cheaper row sum cannot buy more.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
export VIDATTN_GIT_COMMIT=${COMMIT:?}
B=.build/ab
timeout 300 python3 scripts/kernel_ab_time.py def=$B/lib_def.so defa=$B/lib_defa.so diag_nosum=$B/lib_diag_nosum.so \
  --checked --rounds 9 --shapes "wan13b,wan14b,seed8k,seed16k,ltx,wan_cross" --json $OUT/ab_times.json > $OUT/ab_time.log 2>&1
echo "ab rc=$?"; tail -30 $OUT/ab_time.log
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -rf $f)
