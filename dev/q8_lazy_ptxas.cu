// v10's kernels alone (dev/NOTES_8bit.md "v10"): the D=128 schedule-3 default and its variants, bf16 output, for
// ptxas's register / spill report and a cubin to count SASS in (dev/q8_sass_count.py), in ~30 s:
//   nvcc $(python3 scripts/nvcc_flags.py | grep -v -e -shared -e fPIC -e Xcompiler) -I csrc -cubin \
//     dev/q8_lazy_ptxas.cu -o /tmp/q8_lazy.cubin
// (The library's build, capi_8bit.cuh, instantiates the same for bf16 and fp16.)
#include "sm90/q8_fwd.cuh"

namespace vidattn::sm90 {
// <kD, kWGs, kSumMma, kExp16, kFp16, kSeq, kPoly, kTurns, kCvt, kExpTurns, kLazy, kDescInc>
#define Q8_V10(LAZY, DESC)                                                                                       \
  template __global__ void q8_fwd_kernel<128, 3, false, false, false, true, 0, false, 2, true, LAZY, DESC>( \
      const __grid_constant__ Q8FwdParams);
Q8_V10(0, 0)  // the default
Q8_V10(0, 2)  // descriptors by increments (Q and K)
Q8_V10(2, 0)  // the lazy reference, headroom 2
Q8_V10(2, 1)  // both (K and V descriptors only)
Q8_V10(2, 2)  // both (Q, K and V)
}  // namespace vidattn::sm90
