// One causal kernel per compile, for ptxas's register / spill report (dev/NOTES.md, "The causal producer's
// coordinates read before the stage's wait": the causal builds after that change, and the wider causal builds tried
// for issue 26's D=256 causal row, which spill). KSEL picks the kernel:
//   1 D=256 N=80, O through Q (kOInQ), 2 D=256 N=80 O-in-V, 3 D=256 N=80 O-in-V read-late,
//   4 D=192 N=112, O through Q, 5 D=192 N=112 O-in-V, 6 the shipped D=256 causal build (N=64), 7 D=192's (N=96),
//   8 D=128's, 9 D=64's
//   nvcc $(python3 scripts/nvcc_flags.py | grep -v -e -shared -e fPIC -e Xcompiler -e lineinfo) -I csrc -cubin \
//     -DKSEL=1 dev/causal_wide_ptxas.cu -o /tmp/c1.cubin
#include "sm90/flash_fwd.cuh"

#ifndef KSEL
#define KSEL 1
#endif

namespace vidattn::sm90 {
#if KSEL == 1
template __global__ void flash_fwd_kernel<256, 2, 80, false, false, true>(const __grid_constant__ FwdParams);
#elif KSEL == 2
template __global__ void flash_fwd_kernel<256, 2, 80 + kOInVBuild, false, false, true>(
    const __grid_constant__ FwdParams);
#elif KSEL == 3
template __global__ void flash_fwd_kernel<256, 2, 80 + kOInVBuild + kOReadLateBuild, false, false, true>(
    const __grid_constant__ FwdParams);
#elif KSEL == 4
template __global__ void flash_fwd_kernel<192, 2, 112, false, false, true>(const __grid_constant__ FwdParams);
#elif KSEL == 5
template __global__ void flash_fwd_kernel<192, 2, 112 + kOInVBuild, false, false, true>(
    const __grid_constant__ FwdParams);
#elif KSEL == 6
template __global__ void flash_fwd_kernel<256, 2, 64, false, false, true>(const __grid_constant__ FwdParams);
#elif KSEL == 7
template __global__ void flash_fwd_kernel<192, 2, 96, false, false, true>(const __grid_constant__ FwdParams);
#elif KSEL == 8
template __global__ void flash_fwd_kernel<128, 2, 128, false, false, true>(const __grid_constant__ FwdParams);
#elif KSEL == 9
template __global__ void flash_fwd_kernel<64, 3, 128, false, false, true>(const __grid_constant__ FwdParams);
#endif
}  // namespace vidattn::sm90
