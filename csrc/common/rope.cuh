// Rotary position embedding (RoPE) on (B, S, H, D) bf16/fp16 tensors, bit-exact with diffusers' eager torch code.
// Plain elementwise CUDA (no wgmma, no TMA): any sm_80+ GPU could run it; it ships in the sm_90a library beside the
// attention kernel because that is the library the processors already load.
//
// Why a kernel: diffusers applies RoPE as a chain of eager elementwise ops (unbind, two or four broadcast multiplies,
// an add and a subtract, strided copies into the output): about 8 launches and ~36 bytes of memory traffic per element
// of x, where one pass needs 4 (read bf16, write bf16).
//
// Bit-exactness: each eager op is one kernel, so each product, sum and difference is rounded to fp32 on its own (no
// FMA contraction across ops). The kernel repeats that order with __fmul_rn / __fadd_rn / __fsub_rn: they emit
// mul.rn / add.rn / sub.rn, and PTX never fuses an add or mul carrying an explicit rounding modifier into an fma
// (PTX ISA, "Floating Point Instructions: add, mul": only unmodified ones may be), then rounds to x's dtype
// with round-to-nearest-even, the conversion torch's copy/`.to()` runs on the GPU (c10::BFloat16 and c10::Half use
// __float2bfloat16 / __float2half there, cvt.rn).
//
// The three formulas, for channel pairs (i, j) (RopeMode):
//   kRopeWan    diffusers WanAttnProcessor: x0 = x[2p], x1 = x[2p+1], c = cos[2p], s = sin[2p+1];
//               out[2p] = x0*c - x1*s, out[2p+1] = x0*s + x1*c, in the dtype torch promotes x and the tables to:
//               fp32 tables: fp32 math, rounded once at the end; tables of x's own dtype (a model cast with .to(dtype))
//               round each product and the sum to that dtype (kRoundMid).
//   kRopePairs  diffusers.models.embeddings.apply_rotary_emb(use_real=True, use_real_unbind_dim=-1) and LTX-Video's:
//               out[2p] = x[2p]*cos[2p] - x[2p+1]*sin[2p], out[2p+1] = x[2p+1]*cos[2p+1] + x[2p]*sin[2p+1], always in
//               fp32 (x.float() first), rounded once. (x*c + (-y)*s is bitwise x*c - y*s in IEEE 754.)
//   kRopeHalves apply_rotary_emb(use_real=True, use_real_unbind_dim=-2): pairs (j, j + D/2):
//               out[j] = x[j]*cos[j] - x[j+D/2]*sin[j], out[j+D/2] = x[j+D/2]*cos[j+D/2] + x[j]*sin[j+D/2].
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <stdint.h>

namespace vidattn {
namespace rope {

enum RopeMode : int { kRopeWan = 0, kRopePairs = 1, kRopeHalves = 2 };

struct RopeParams {
  const void* x;
  void* out;
  const void* cos;
  const void* sin;
  int64_t batch, seqlen, heads, head_dim;
  int64_t x_stride[3], out_stride[3];        // (batch, seq, head), elements; head_dim contiguous
  int64_t cos_stride[2], sin_stride[2];      // (batch, seq), elements; batch stride 0 broadcasts; head_dim contiguous
  int heads_per_cta;                         // heads one CTA's threads loop over
  int head_groups;                           // ceil(heads / heads_per_cta)
};

template <typename T> struct Io;
template <> struct Io<__nv_bfloat16> {
  static __device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
  static __device__ __forceinline__ __nv_bfloat16 from_float(float v) { return __float2bfloat16_rn(v); }
};
template <> struct Io<__half> {
  static __device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
  static __device__ __forceinline__ __half from_float(float v) { return __float2half_rn(v); }
};
template <> struct Io<float> {
  static __device__ __forceinline__ float to_float(float v) { return v; }
};

// v rounded to T and back: torch's arithmetic on two T tensors rounds every op's result to T.
template <typename T>
__device__ __forceinline__ float round_to(float v) { return Io<T>::to_float(Io<T>::from_float(v)); }

// 8 consecutive elements of a bf16/fp16 row: one 16-byte access (the caller guarantees the alignment).
template <typename T>
struct Vec8 {
  static_assert(sizeof(T) == 2, "x is bf16 or fp16");
  uint4 raw;
  __device__ __forceinline__ float get(int i) const {
    const T* e = reinterpret_cast<const T*>(&raw);
    return Io<T>::to_float(e[i]);
  }
  __device__ __forceinline__ void set(int i, float v) { reinterpret_cast<T*>(&raw)[i] = Io<T>::from_float(v); }
};

// 8 consecutive table entries as fp32 (fp32 tables: two 16-byte loads; bf16/fp16: one, widened exactly).
template <typename C>
__device__ __forceinline__ void load_table8(const C* p, float (&v)[8]) {
  if constexpr (sizeof(C) == 4) {
    const float4 a = __ldg(reinterpret_cast<const float4*>(p));
    const float4 b = __ldg(reinterpret_cast<const float4*>(p) + 1);
    v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w; v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
  } else {
    const uint4 r = __ldg(reinterpret_cast<const uint4*>(p));
    const C* e = reinterpret_cast<const C*>(&r);
#pragma unroll
    for (int i = 0; i < 8; ++i) v[i] = Io<C>::to_float(e[i]);
  }
}

// One output pair from its two inputs; kRoundMid: tables of x's dtype under kRopeWan (each op rounded to T).
//   first  = a*ca - b*sa        second = a*sb + b*cb
template <typename T, bool kRoundMid>
__device__ __forceinline__ void rotate(float a, float b, float ca, float sa, float cb, float sb, float& first,
                                       float& second) {
  if constexpr (kRoundMid) {
    first = round_to<T>(__fsub_rn(round_to<T>(__fmul_rn(a, ca)), round_to<T>(__fmul_rn(b, sa))));
    second = round_to<T>(__fadd_rn(round_to<T>(__fmul_rn(a, sb)), round_to<T>(__fmul_rn(b, cb))));
  } else {
    first = __fsub_rn(__fmul_rn(a, ca), __fmul_rn(b, sa));
    second = __fadd_rn(__fmul_rn(a, sb), __fmul_rn(b, cb));
  }
}

// Heads whose loads are issued before any of their stores (memory-level parallelism); halves mode holds two vectors
// per head and four tables: two heads keep it near 64 registers.
template <int kMode> constexpr int kHeadBatch = kMode == 2 ? 2 : 4;
template <int kMode> constexpr int kMaxThreads = kMode == 2 ? 256 : 512;

// CTAs of 256 threads: blockDim.y positions of blockDim.x threads, each thread owning 8 channels (kRopeHalves: 8 in
// the first half and their 8 partners in the second); past 2048 channels one position of up to 512 threads (pair
// modes only: halves mode covers 4096 with 256, and keeps a launch bound of 256, where ptxas gives it 77 registers
// against 90 at 512, or spills when held to 64). Grid: x over (sequence tile) x (head group), the group fastest so
// that the CTAs sharing a tile's cos/sin rows run side by side (the rows then come from L2 for all but the first); y
// over batch. A thread reads its cos/sin entries once and keeps them in registers for every head of its group: the
// tables are read once per (table batch, position, head group) and x once, so traffic is ~4 bytes per element of x.
// In place (out == x, same strides) is safe: every element is read before it is written, by the same thread.
template <typename T, typename C, int kMode, bool kRoundMid>
__global__ void __launch_bounds__(kMaxThreads<kMode>) rope_kernel(const RopeParams p) {
  const int64_t group = blockIdx.x % p.head_groups;
  const int64_t s = int64_t(blockIdx.x / p.head_groups) * blockDim.y + threadIdx.y;
  if (s >= p.seqlen) return;
  const int64_t b = blockIdx.y;
  const int lane = threadIdx.x;
  const int half = int(p.head_dim / 2);
  // Channel offset of this thread's first 8 elements (kRopeHalves: in the first half; the partners sit at +half).
  const int d0 = lane * 8;

  const C* cos_row = static_cast<const C*>(p.cos) + b * p.cos_stride[0] + s * p.cos_stride[1];
  const C* sin_row = static_cast<const C*>(p.sin) + b * p.sin_stride[0] + s * p.sin_stride[1];
  float c0[8], s0[8], c1[8], s1[8];
  load_table8(cos_row + d0, c0);
  load_table8(sin_row + d0, s0);
  if constexpr (kMode == kRopeHalves) {
    load_table8(cos_row + d0 + half, c1);
    load_table8(sin_row + d0 + half, s1);
  }

  const int64_t h_begin = group * p.heads_per_cta;
  const int64_t h_end = min(h_begin + p.heads_per_cta, p.heads);
  const T* xb = static_cast<const T*>(p.x) + b * p.x_stride[0] + s * p.x_stride[1] + d0;
  T* ob = static_cast<T*>(p.out) + b * p.out_stride[0] + s * p.out_stride[1] + d0;
  constexpr int kParts = kMode == kRopeHalves ? 2 : 1;

  for (int64_t h0 = h_begin; h0 < h_end; h0 += kHeadBatch<kMode>) {
    Vec8<T> v[kHeadBatch<kMode>][kParts];
#pragma unroll
    for (int j = 0; j < kHeadBatch<kMode>; ++j) {
      if (h0 + j < h_end) {
        const T* xp = xb + (h0 + j) * p.x_stride[2];
        v[j][0].raw = *reinterpret_cast<const uint4*>(xp);
        if constexpr (kMode == kRopeHalves) v[j][kParts - 1].raw = *reinterpret_cast<const uint4*>(xp + half);
      }
    }
#pragma unroll
    for (int j = 0; j < kHeadBatch<kMode>; ++j) {
      if (h0 + j >= h_end) continue;
      Vec8<T> r[kParts];
      if constexpr (kMode == kRopeHalves) {
#pragma unroll
        for (int i = 0; i < 8; ++i) {
          float lo, hi;
          rotate<T, false>(v[j][0].get(i), v[j][kParts - 1].get(i), c0[i], s0[i], c1[i], s1[i], lo, hi);
          r[0].set(i, lo);
          r[kParts - 1].set(i, hi);
        }
      } else {
#pragma unroll
        for (int i = 0; i < 8; i += 2) {
          float e, o;
          if constexpr (kMode == kRopeWan)  // cos of the even channel and sin of the odd one, for both outputs
            rotate<T, kRoundMid>(v[j][0].get(i), v[j][0].get(i + 1), c0[i], s0[i + 1], c0[i], s0[i + 1], e, o);
          else
            rotate<T, false>(v[j][0].get(i), v[j][0].get(i + 1), c0[i], s0[i], c0[i + 1], s0[i + 1], e, o);
          r[0].set(i, e);
          r[0].set(i + 1, o);
        }
      }
      T* op = ob + (h0 + j) * p.out_stride[2];
      *reinterpret_cast<uint4*>(op) = r[0].raw;
      if constexpr (kMode == kRopeHalves) *reinterpret_cast<uint4*>(op + half) = r[kParts - 1].raw;
    }
  }
}

}  // namespace rope
}  // namespace vidattn
