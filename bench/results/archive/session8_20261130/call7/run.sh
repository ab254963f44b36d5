#!/usr/bin/env bash
# Eighth session, device call 7 (as run): the short-key threshold at 4096 keys against the shipped 2048.
# head = the shipped library (b65851b); thr4096 = the same tree with -DVIDATTN_D128_SHORT_KV_MAX=4096 (seed 4K then
# runs the N=128 build; seed 8K, 8192 keys, runs N=176 in both and is the guard).
cd "$(dirname "$0")/../../../.." || exit 2
VARIANTS="head|| thr4096||" AB_TIME_ARGS="--rounds 11 --shapes seed4k,seed8k" T_SMOKE=60 bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
