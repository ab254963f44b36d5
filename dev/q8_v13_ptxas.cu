// v13's kernels alone (dev/NOTES_8bit.md "v13"): the D=128 schedule-3 build with v12 mode 1 and its v13 builds (row
// sums by the tensor cores, off P V's register peak; mode 2 also the alphas by a vote), bf16 and fp16 output, for
// ptxas's register / spill report and a cubin to count SASS in (dev/q8_sass_count.py), in seconds:
//   nvcc $(python3 scripts/nvcc_flags.py | grep -v -e -shared -e fPIC -e Xcompiler) -I csrc -cubin -Xptxas -v \
//     dev/q8_v13_ptxas.cu -o /tmp/q8_v13.cubin
//   cuobjdump -sass /tmp/q8_v13.cubin > /tmp/q8_v13.sass && python3 dev/q8_sass_count.py /tmp/q8_v13.sass
// (The library's build, capi_8bit.cuh, instantiates the same for bf16 and fp16.)
#include "sm90/q8_fwd.cuh"

namespace vidattn::sm90 {
// <kD, kWGs, kSumMma, kExp16, kFp16, kSeq, kPoly, kTurns, kCvt, kExpTurns, kLazy, kDescInc, kV12, kV13>
#define Q8_V13(FP16, V13)                                                                                          \
  template __global__ void q8_fwd_kernel<128, 3, false, false, FP16, true, 0, false, 2, true, 0, 2, 1, V13>( \
      const __grid_constant__ Q8FwdParams);
Q8_V13(false, 0)  // v12 mode 1 (the reference)
Q8_V13(false, 1)  // v13: P_j x ones in S_{j+1}'s group, no fp32 row-sum chains
Q8_V13(true, 1)   // and its fp16-output build (the library's other one), for the spill report
Q8_V13(false, 2)  // v13 mode 2: + the alphas' MUFU only where a row's max moved (a warp vote)
Q8_V13(true, 2)
}  // namespace vidattn::sm90
