// The 8-bit path alone, for its register and spill report without the exact kernels' ~15-minute build:
//   nvcc $(python3 scripts/nvcc_flags.py) -I csrc dev/q8_ptxas.cu -o /tmp/q8_ptxas.so 2>&1 | grep -A2 q8_fwd_kernel
// capi_8bit.cuh is included at the end of capi.cu and takes these six helpers (and combine.cuh) from it; here they
// are stand-ins of the same shape (the library never contains this file).
#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#include "capi.h"
#include "sm90/combine.cuh"  // the tail launch's merge (capi.cu includes it first)

namespace {
std::string g_q8_only_error;
int fail(const std::string& msg) {
  g_q8_only_error = msg;
  return 1;
}
int check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail(std::string(what) + ": " + cudaGetErrorString(e));
}
template <typename Kernel>
int allow_smem(Kernel kernel, size_t smem) {
  return cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem)) ==
                 cudaSuccess
             ? 0
             : fail("cudaFuncSetAttribute");
}
bool make_context_current() { return cudaSetDevice(0) == cudaSuccess; }
int sm_count() { return 132; }
// capi.cu's fills in the merge's parameters from these; the stand-in only instantiates the kernel the library would.
template <int kHeadDim, bool kFp16>
int launch_combine(const VidattnFwdArgs&, const float*, const float*, int, int, int, int, int, int, int64_t, int,
                   cudaStream_t stream, const char* what) {
  vidattn::sm90::combine_kernel<kHeadDim, kFp16><<<1, vidattn::sm90::kCombineThreads, 0, stream>>>(
      vidattn::sm90::CombineParams{});
  return check_launch(what);
}
}  // namespace

#include "capi_8bit.cuh"
