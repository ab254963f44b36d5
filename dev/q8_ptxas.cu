// The 8-bit path alone, for its register and spill report without the exact kernels' ~15-minute build:
//   nvcc $(python3 scripts/nvcc_flags.py) -I csrc dev/q8_ptxas.cu -o /tmp/q8_ptxas.so 2>&1 | grep -A2 q8_fwd_kernel
// capi_8bit.cuh is included at the end of capi.cu and takes these five helpers (and combine.cuh) from it; here they
// are stand-ins of the same shape (the library never contains this file).
#include <cuda_runtime.h>

#include <string>

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
}  // namespace

#include "sm90/combine.cuh"  // the tail launch's merge (capi.cu includes it first)

#include "capi_8bit.cuh"
