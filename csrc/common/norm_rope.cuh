// RMSNorm over a token's whole (heads x head_dim) row, then diffusers' Wan RoPE, in one pass: Wan's attention
// normalizes q and k with `torch.nn.RMSNorm(heads * head_dim)` and then rotates them per head. Two passes
// (the norm: read x, write x; the RoPE: read x, write x) become one (read x, write out): on Wan 2.1 14B at 720p that is
// 2 x 774 MB less traffic per tensor and layer. Plain elementwise CUDA plus one block reduction; no torch.
//
// Arithmetic, per row of N = heads * head_dim elements (fp32 throughout, as torch's CUDA rms_norm: its accumulate
// type for bf16/fp16 is float):
//   rstd = rsqrt(sum(x^2) / N + eps)           the sum in this kernel's order (a tree over the CTA), not torch's
//   y    = round_T(w * (rstd * x))              w (x's dtype) widened exactly; one rounding to x's dtype
//   out  = rope.cuh's Wan formula on y's pairs  the same operands and roundings as vidattn.rope, bit for bit given y
// The only step that is not bit for bit the stock code is rstd: another summation order can move its last bit, which
// flips y's rounding on a few elements by one unit in the last place (tests/test_norm_rope_gpu.py bounds it).
#pragma once
#include <stdint.h>

#include "rope.cuh"

namespace vidattn {
namespace norm_rope {

struct NormRopeParams {
  const void* x;
  void* out;
  const void* weight;                        // (heads * head_dim,) in x's dtype, contiguous
  const void* cos;
  const void* sin;
  int64_t batch, seqlen, heads, head_dim;
  int64_t x_stride[3], out_stride[3];        // (batch, seq, head), elements; head_dim contiguous
  int64_t cos_stride[2], sin_stride[2];      // (batch, seq), elements; head_dim contiguous
  float eps;
  int vecs;                                  // 16-byte vectors per row: heads * head_dim / 8
};

// Vectors one thread holds between the reduction and the stores (the row stays in registers: x is read once).
constexpr int kMaxVecsPerThread = 4;
constexpr int kMaxThreads = 512;
// The row's cos/sin entries are staged in shared memory as fp32 (a head dim up to this).
constexpr int kMaxHeadDim = 512;

// Sum over the CTA; every thread gets the total. One warp-shuffle tree per warp, then the warps' partials in order.
// Its barrier also publishes the tables staged before it.
__device__ __forceinline__ float block_sum(float v, float* scratch) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, warps = (blockDim.x + 31) >> 5;
  if (lane == 0) scratch[warp] = v;
  __syncthreads();
  float total = 0.f;
  for (int w = 0; w < warps; ++w) total += scratch[w];
  return total;
}

// One CTA per (batch, position) row; thread t holds vectors t, t + blockDim.x, ... (at most kVecs: 1, 2 or 4, so
// that the registers held are the row's share and no more: Wan 14B's 640 vectors run 2 per thread, 1.3B's 192 one).
// A vector's 8 channels lie in one head (head_dim is a multiple of 8), so its RoPE pairs are its own.
// When the loads are issued (kVariant; 0 is the library's, 1 and 2 are built for the A/B, bf16 with fp32 tables):
//   0  x and the row's tables (into shared memory, as fp32) before the reduction, the weights after it (the same
//      10 KB for every row: L1 hits), so nothing after the reduction waits on global memory but those;
//   1  the weights before the reduction too, held in registers (62 instead of 40 at 2 vectors per thread: 3 CTAs per
//      SM instead of 5);
//   2  the weights and tables after the reduction, from global memory (the first build: 1.85 TB/s on Wan 14B's rows,
//      bench/results/h200_2026-12-03_eighth/call_o).
template <typename T, typename C, bool kRoundMid, int kVecs, int kVariant = 0>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_rope_kernel(const NormRopeParams p) {
  static_assert(kVecs >= 1 && kVecs <= kMaxVecsPerThread, "vectors per thread");
  static_assert(kVariant >= 0 && kVariant <= 2, "load placement");
  __shared__ float scratch[kMaxThreads / 32];
  __shared__ float tab_cos[kVariant == 2 ? 1 : kMaxHeadDim], tab_sin[kVariant == 2 ? 1 : kMaxHeadDim];
  const int64_t row = blockIdx.x;
  const int64_t b = row / p.seqlen, s = row % p.seqlen;
  const T* xr = static_cast<const T*>(p.x) + b * p.x_stride[0] + s * p.x_stride[1];
  T* orow = static_cast<T*>(p.out) + b * p.out_stride[0] + s * p.out_stride[1];
  const T* wr = static_cast<const T*>(p.weight);
  const C* cos_row = static_cast<const C*>(p.cos) + b * p.cos_stride[0] + s * p.cos_stride[1];
  const C* sin_row = static_cast<const C*>(p.sin) + b * p.sin_stride[0] + s * p.sin_stride[1];
  const int hd = int(p.head_dim);

  rope::Vec8<T> v[kVecs], w[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int vec = threadIdx.x + i * blockDim.x;
    if (vec < p.vecs) {
      const int c = vec * 8, h = c / hd, d = c - h * hd;
      v[i].raw = *reinterpret_cast<const uint4*>(xr + h * p.x_stride[2] + d);
      if constexpr (kVariant == 1) w[i].raw = __ldg(reinterpret_cast<const uint4*>(wr + c));
    }
  }
  if constexpr (kVariant != 2) {
    for (int i = threadIdx.x; i < hd; i += blockDim.x) {
      tab_cos[i] = rope::Io<C>::to_float(__ldg(cos_row + i));
      tab_sin[i] = rope::Io<C>::to_float(__ldg(sin_row + i));
    }
  }
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (threadIdx.x + i * blockDim.x < p.vecs) {
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = fmaf(v[i].get(e), v[i].get(e), ss);
    }
  }
  const float total = block_sum(ss, scratch);
  const float rstd = rsqrtf(__fadd_rn(__fdiv_rn(total, float(p.vecs) * 8.f), p.eps));

#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int vec = threadIdx.x + i * blockDim.x;
    if (vec < p.vecs) {
      const int c = vec * 8, h = c / hd, d = c - h * hd;
      if constexpr (kVariant != 1) w[i].raw = __ldg(reinterpret_cast<const uint4*>(wr + c));
      float cs[8], sn[8];
      if constexpr (kVariant == 2) {
        rope::load_table8(cos_row + d, cs);
        rope::load_table8(sin_row + d, sn);
      } else {
#pragma unroll
        for (int e = 0; e < 8; e += 2) cs[e] = tab_cos[d + e], sn[e + 1] = tab_sin[d + e + 1];
      }
      rope::Vec8<T> r;
#pragma unroll
      for (int e = 0; e < 8; e += 2) {
        // y rounded to T first: the stock code's norm writes it in x's dtype and the RoPE reads it back.
        const float y0 = rope::round_to<T>(__fmul_rn(w[i].get(e), __fmul_rn(rstd, v[i].get(e))));
        const float y1 = rope::round_to<T>(__fmul_rn(w[i].get(e + 1), __fmul_rn(rstd, v[i].get(e + 1))));
        float first, second;
        rope::rotate<T, kRoundMid>(y0, y1, cs[e], sn[e + 1], cs[e], sn[e + 1], first, second);
        r.set(e, first);
        r.set(e + 1, second);
      }
      *reinterpret_cast<uint4*>(orow + h * p.out_stride[2] + d) = r.raw;
    }
  }
}

}  // namespace norm_rope
}  // namespace vidattn
