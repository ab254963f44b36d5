// Special registers read through a volatile asm (PTX ISA 9.0, "Special Registers": %ctaid, %nctaid). blockIdx.x and
// gridDim.x are read once and may be kept live by ptxas across a loop or a barrier, which spills in kernels held to
// few registers; a volatile read cannot be merged with an earlier one, so each call reads the register afresh where
// it is used. Shared by the attention kernels (sm90/flash_fwd.cuh: the causal producer's CTA index and count) and the
// fused norm + RoPE (common/norm_rope.cuh: kLean32's rows). Pure CUDA: no torch.
#pragma once
#include <stdint.h>

namespace vidattn {
namespace sreg {

__device__ __forceinline__ uint32_t ctaid_x() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%ctaid.x;" : "=r"(v));
  return v;
}

__device__ __forceinline__ uint32_t nctaid_x() {
  uint32_t v;
  asm volatile("mov.u32 %0, %%nctaid.x;" : "=r"(v));
  return v;
}

}  // namespace sreg
}  // namespace vidattn
