#!/usr/bin/env bash
# Nsight Compute on the kernel for a few anchor shapes (on the H200; ncu reads the counters there with
# --clock-control none, and METHOD.md says to leave the clocks alone). One .ncu-rep per shape plus a text summary
# of the numbers that say where a tile's time goes: tensor-pipe activity, issue stalls of the consumer warps, L2
# and DRAM throughput, shared-memory bank conflicts.
#
#   SHAPES="wan_cross wan13b_self" bash dev/probes/ncu_profile.sh        # $OUT/ncu_<shape>.ncu-rep, ncu_summary.txt,
#                                                                     # ncu_<shape>_src.csv.gz (per-instruction stalls)
#   NCU_KERNEL_REGEX='flash_fwd_kernel.*Lb1EEEvNS0_9FwdParamsE' ...    # the tail launch's kernel instead (mangled)
#   NCU_KERNEL_REGEX=q8_fwd_kernel ONCE_ARGS="--precision 8bit" SHAPES=wan13b_self ...   # the 8-bit kernel
#   SHAPES=custom ONCE_ARGS="--dims 16 8 1024 1024 256" ...           # a shape the anchors table lacks
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/../.." || exit 2
OUT=${OUT:-$PWD/out}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[[ -n $NCU ]] || { echo "ncu not found"; exit 3; }
summary=$OUT/ncu_summary.txt
: >"$summary"
for shape in ${SHAPES:-wan_cross wan13b_self}; do
    echo "== $shape" | tee -a "$summary"
    # The main launch only: a shape whose last round runs as the tail launch also launches flash_fwd_kernel<..., true>
    # (the key ranges); matching the mangled name's last template argument (kSplit = false) skips those.
    timeout "${T_SHAPE:-240}" "$NCU" --clock-control none --kernel-name-base mangled \
        -k "regex:${NCU_KERNEL_REGEX:-flash_fwd_kernel.*Lb0EEEvNS0_9FwdParamsE}" --launch-skip 3 --launch-count 1 \
        --set full -f -o "$OUT/ncu_$shape" python3 dev/probes/kernel_once.py "$shape" ${ONCE_ARGS:-} >"$OUT/ncu_$shape.log" 2>&1
    rc=$?
    if ((rc != 0)); then echo "ncu rc=$rc; tail of its log:" | tee -a "$summary"; tail -5 "$OUT/ncu_$shape.log" | tee -a "$summary"; continue; fi
    "$NCU" --import "$OUT/ncu_$shape.ncu-rep" --page details --print-units base 2>/dev/null |
        grep -E "Duration|SM Busy|Tensor|Issue Slots Busy|Warp Cycles Per Issued|Stall|L2 Cache Throughput|DRAM Throughput|Bank Conflicts|Registers Per|Achieved Occupancy|Memory Throughput" |
        head -60 | tee -a "$summary"
    "$NCU" --import "$OUT/ncu_$shape.ncu-rep" --page raw --print-units base 2>/dev/null |
        grep -E "smsp__average_warp_latency_issue_stalled|smsp__pcsamp_warps_issue_stalled_[a-z_]+ |sm__pipe_tensor_op_hmma_cycles_active.avg.pct|lts__t_bytes.sum.per_second" |
        sort -k3 -g -r | head -30 | tee -a "$summary"
    # Per-pipe utilization (which pipe is the pace: tensor, FMA, ALU, XU/MUFU) and the issue-slot use.
    "$NCU" --import "$OUT/ncu_$shape.ncu-rep" --page raw --print-units base 2>/dev/null |
        grep -E "sm__(inst_executed_pipe|pipe)_[a-z0-9_]+\.avg\.pct_of_peak_sustained_active |sm__instruction_throughput.avg.pct|smsp__issue_active.avg.pct" |
        sort -k3 -g -r | head -40 | tee -a "$summary"
    # Per-instruction stall samples (dev/probes/ncu_stalls.py reads it), small enough to come back from the device.
    "$NCU" --import "$OUT/ncu_$shape.ncu-rep" --page source --csv --print-source sass 2>/dev/null |
        gzip >"$OUT/ncu_${shape}_src.csv.gz"
    python3 dev/probes/ncu_stalls.py "$OUT/ncu_${shape}_src.csv.gz" --top 25 2>&1 | tee -a "$summary"
done
echo "summary: $summary"
