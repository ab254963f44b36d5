#!/usr/bin/env bash
# Eleventh session, device call 2: A/B (kernel_ab.sh: smoke per build, then all timed interleaved with cuDNN, 7
# rounds) of def (the shipped machine code: this tree's defaults, SASS identical to e1be025's), qr (Q held in
# registers for S = Q K^T in the N=128 D=128 build: -DVIDATTN_Q_IN_REGS=1), s128 (every D=128 shape on the N=128 build:
# -DVIDATTN_D128_SHORT_KV_MAX=100000000) and qr128 (both).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv > $OUT/smi_start.txt
VARIANTS="def|| qr||-DVIDATTN_Q_IN_REGS=1 s128||-DVIDATTN_D128_SHORT_KV_MAX=100000000 qr128||-DVIDATTN_Q_IN_REGS=1,-DVIDATTN_D128_SHORT_KV_MAX=100000000" \
  AB_TIME_ARGS="--rounds 7" T_TIME=420 bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
echo "ab rc=$?"
tail -30 $OUT/ab.log
