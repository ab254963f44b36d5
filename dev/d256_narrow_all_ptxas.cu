// One kernel per compile, for ptxas's register / spill / serialisation report and for cmp of cubins before and after
// a change (dev/NOTES.md, "The D=256 partial block narrowed by one step"). KSEL picks the kernel:
//   1 the routed D=256 build (O-in-V, read-late), 2 the D=256 O-in-V split (tail) kernel, 3 D=128 N=176 (the
//   default), 4 D=128 N=128, 5 setting 7 (the routed D=256 build with every partial block narrowed: kNarrowAllBuild)
//   nvcc $(python3 scripts/nvcc_flags.py | grep -v -e -shared -e fPIC -e Xcompiler -e lineinfo) -I csrc -cubin \
//     -DKSEL=5 dev/d256_narrow_all_ptxas.cu -o /tmp/k5.cubin
#include "sm90/flash_fwd.cuh"

#ifndef KSEL
#define KSEL 5
#endif

namespace vidattn::sm90 {
#if KSEL == 1
template __global__ void flash_fwd_kernel<256, 2, 80 + kOInVBuild + kOReadLateBuild, false, false>(
    const __grid_constant__ FwdParams);
#elif KSEL == 2
template __global__ void flash_fwd_kernel<256, 2, 80 + kOInVBuild, false, true>(const __grid_constant__ FwdParams);
#elif KSEL == 3
template __global__ void flash_fwd_kernel<128, 2, 176, false, false>(const __grid_constant__ FwdParams);
#elif KSEL == 4
template __global__ void flash_fwd_kernel<128, 2, 128, false, false>(const __grid_constant__ FwdParams);
#elif KSEL == 5
template __global__ void flash_fwd_kernel<256, 2, 80 + kOInVBuild + kOReadLateBuild + kNarrowAllBuild, false, false>(
    const __grid_constant__ FwdParams);
#elif KSEL == 6
template __global__ void flash_fwd_kernel<256, 2, 80 + kOInVBuild + kOReadLateBuild + kPairBuild, false, false>(
    const __grid_constant__ FwdParams);
#endif
}  // namespace vidattn::sm90
