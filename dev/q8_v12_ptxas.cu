// v12's kernels alone (dev/NOTES_8bit.md "v12"): the D=128 schedule-3 default (v10 mode 1) and its v12 build, bf16
// output, for ptxas's register / spill report and a cubin to count SASS in (dev/q8_sass_count.py), in seconds:
//   nvcc $(python3 scripts/nvcc_flags.py | grep -v -e -shared -e fPIC -e Xcompiler) -I csrc -cubin \
//     dev/q8_v12_ptxas.cu -o /tmp/q8_v12.cubin
//   cuobjdump -sass /tmp/q8_v12.cubin > /tmp/q8_v12.sass && python3 dev/q8_sass_count.py /tmp/q8_v12.sass
// (The library's build, capi_8bit.cuh, instantiates the same for bf16 and fp16.)
#include "sm90/q8_fwd.cuh"

namespace vidattn::sm90 {
// <kD, kWGs, kSumMma, kExp16, kFp16, kSeq, kPoly, kTurns, kCvt, kExpTurns, kLazy, kDescInc, kV12>
#define Q8_V12(V12)                                                                                              \
  template __global__ void q8_fwd_kernel<128, 3, false, false, false, true, 0, false, 2, true, 0, 2, V12>( \
      const __grid_constant__ Q8FwdParams);
Q8_V12(0)  // the default (v10 mode 1)
Q8_V12(1)  // v12: uniform warpgroup index, row max in 3-input chains and by FADD, row sums from the first groups, K-scale pointer
}  // namespace vidattn::sm90
