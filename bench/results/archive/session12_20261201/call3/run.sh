#!/usr/bin/env bash
# Twelfth session, device call 3: is the long shapes' energy partly HBM re-reads? (1) Nsight Compute DRAM and L2
# counters of one launch each of def, h2 and cuDNN on Wan 1.3B and Wan 14B; (2) A/B def against l2_hints.patch
# (h1: Q loads evict_first; h2: also K/V evict_last) on the six long D=128 shapes, 9 rounds.
set -uo pipefail
cd "$(dirname "$0")/../../../.."
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl && export PYTHONPATH=/tmp/site
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm,power.limit --format=csv | tee $OUT/smi_start.txt
NCU=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,lts__t_bytes.sum,sm__cycles_elapsed.avg.per_second
for shape in wan13b_self wan14b_self; do
  for who in def h2 cudnn; do
    if [[ $who == cudnn ]]; then lib=def; args="--backend cudnn"; rx="regex:sdpa|fprop|cudnn|fmha|attn"; else lib=$who; args=""; rx="regex:flash_fwd_kernel.*Lb0EEEvNS0_9FwdParamsE"; fi
    echo "== $shape $who"
    VIDATTN_LIBRARY=$PWD/.build/ab/lib_$lib.so timeout 120 $NCU --clock-control none --kernel-name-base mangled -k "$rx" \
      --launch-skip 2 --launch-count 1 --metrics $M --csv python3 scripts/kernel_once.py $shape $args 2>&1 \
      | grep -E '^"' | awk -F'","' '{print substr($5,1,50), $(NF-2), $(NF-1), $NF}' | tr -d '"'
  done
done 2>&1 | tee $OUT/ncu_dram.txt
VARIANTS="def|| h1|| h2||" T_SMOKE=45 T_TIME=200 \
  AB_TIME_ARGS="--rounds 9 --shapes seed4k,seed8k,seed16k,wan13b,wan14b,hunyuan" bash scripts/kernel_ab.sh > $OUT/ab.log 2>&1
echo "ab rc=$?"
nvidia-smi --query-gpu=name,temperature.gpu,power.draw,clocks.sm --format=csv | tee $OUT/smi_end.txt
grep -E "ratio table" -A8 $OUT/ab.log; grep -A4 "== summary" $OUT/ab.log | tail -4
(cd $OUT && f=$(find . -type f ! -name results.tgz | sed 's|^\./||') && tar czf results.tgz $f && rm -f $f)
