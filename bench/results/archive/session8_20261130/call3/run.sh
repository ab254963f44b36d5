#!/usr/bin/env bash
# Eighth session, device call 3: narrower short-key D=128 builds, for more K/V bytes in flight on short keys.
# final = the shipped library (N=128 short build: 2 K/V stages of 64 KB, 2 Q buffers, 2 O boxes); n96o1 = N=96 with
# one O box (3 stages of 48 KB); n64 = N=64 (4 stages of 32 KB, 2 Q buffers, 2 O boxes). A/B on the two anchor
# shapes that run the short build, then each library's short build against N=176 over key counts.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
VARIANTS="final|| n96o1|| n64||" AB_TIME_ARGS="--rounds 9 --shapes wan_cross,fa1k_d128" T_SMOKE=60 \
  bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1; echo "ab rc=$?"
for spec in final:128 n96o1:96 n64:64; do
  n=${spec%%:*}; w=${spec##*:}
  VIDATTN_LIBRARY=.build/ab/lib_$n.so timeout 120 python3 scripts/block_n_sweep.py --builds $w,176 --rounds 5 \
    --keys 256,512,1024,1536,2048,3072,4096 > $OUT/sweep_$n.log 2>&1; echo "sweep $n rc=$?"
done
tail -5 $OUT/ab.log; for n in final n96o1 n64; do echo "== sweep $n"; cat $OUT/sweep_$n.log | tail -9; done
