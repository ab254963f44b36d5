#!/usr/bin/env bash
# Eighth session, device call 1: where the long D=128 shapes' time and energy go (Nsight Compute, vidattn and
# cuDNN on the same inputs), the harness gap on Wan 14B, and the O-box A/B on the short-key build.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
export VIDATTN_LIBRARY=$PWD/.build/ab/lib_final.so
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
METRICS="gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,lts__t_bytes.sum,dram__bytes_read.sum,dram__bytes_write.sum,l1tex__data_bank_reads.avg.pct_of_peak_sustained_elapsed,l1tex__data_bank_writes.avg.pct_of_peak_sustained_elapsed,smsp__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum"
for shape in wan13b_self wan14b_self; do
  for be in vidattn cudnn; do
    if [[ $be == vidattn ]]; then re='flash_fwd_kernel.*Lb0EEEvNS0_9FwdParamsE'; else re='.*'; fi
    timeout 150 "$NCU" --clock-control none --kernel-name-base mangled -k "regex:$re" --launch-skip $([[ $be == vidattn ]] && echo 3 || echo 5) --launch-count 1 \
      --metrics "$METRICS" --csv --print-units base python3 scripts/kernel_once.py "$shape" --backend $be \
      > $OUT/ncu_${shape}_${be}.csv 2> $OUT/ncu_${shape}_${be}.err
    echo "ncu $shape $be rc=$?"
  done
done
timeout 120 python3 scripts/clock_probe.py wan14b_self --seconds 3 > $OUT/clock_probe.log 2>&1; echo "clock_probe rc=$?"
timeout 150 python3 scripts/bench_kernel.py --shapes 14B cross --rounds 5 --no-progress --out $OUT/ > $OUT/bench.log 2>&1; echo "bench rc=$?"
timeout 150 python3 scripts/kernel_ab_time.py final=.build/ab/lib_final.so oslot1=.build/ab/lib_oslot1.so \
  --shapes wan_cross,fa1k_d128,wan14b --rounds 7 --json $OUT/ab_times.json > $OUT/ab_time.log 2>&1; echo "ab rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
echo "== ncu"; for f in $OUT/ncu_*.csv; do echo "-- $f"; grep -v "^==" $f | python3 -c '
import csv,sys
r=list(csv.reader(sys.stdin))
if not r: sys.exit()
h=r[0]; i=h.index("Metric Name"); v=h.index("Metric Value"); k=h.index("Kernel Name")
for row in r[1:]:
    print(row[k][:40], row[i], row[v])'; done
echo "== clock"; tail -8 $OUT/clock_probe.log; echo "== bench"; tail -8 $OUT/bench.log; echo "== ab"; tail -6 $OUT/ab_time.log
