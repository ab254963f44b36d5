#!/usr/bin/env bash
# Eleventh session, device call 3: A/B (kernel_ab.sh, 7 rounds) of def (the shipped machine code), qr (Q in
# registers in the N=128 D=128 build: -DVIDATTN_Q_IN_REGS_MAX_N=128, call 2's qr), n144qr (the long D=128 build at
# N=144 with Q in registers too: -DVIDATTN_BLOCK_N_D128=144 -DVIDATTN_Q_IN_REGS_MAX_N=144) and qr128 (every D=128
# shape on the N=128 build with Q in registers, call 2's qr128).
set -uo pipefail
cd "$(dirname "$0")/../../../.."
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv > $OUT/smi_start.txt
VARIANTS="def|| qr||-DVIDATTN_Q_IN_REGS=1 n144qr||-DVIDATTN_BLOCK_N_D128=144,-DVIDATTN_Q_IN_REGS_MAX_N=144 qr128||-DVIDATTN_Q_IN_REGS=1,-DVIDATTN_D128_SHORT_KV_MAX=100000000" \
  AB_TIME_ARGS="--rounds 7" T_TIME=420 bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
echo "ab rc=$?"
tail -18 $OUT/ab.log
