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
#include "special_regs.cuh"

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
  uint32_t head_magic;                       // kLean: ceil(2^32 / head_dim), the head of channel c in one multiply
};

// Vectors one thread holds between the reduction and the stores (the row stays in registers: x is read once).
constexpr int kMaxVecsPerThread = 4;
constexpr int kMaxThreads = 512;
constexpr int kMaxHeadDim = 4096;

// The schedules (NormRopeSchedule; vidattn_norm_rope_set_schedule picks one for an A/B, bf16 x with fp32 tables):
//   kOneRow   one CTA per (batch, position) row: x loaded, the reduction, then the weights (the same for every row:
//             L1 hits) and the row's tables from global memory, the rotation, the stores. Measured in call O of the
//             eighth sitting (bench/results/h200_2026-12-03_eighth/call_o2) against two other placements of those
//             loads: before the reduction into shared memory (0.758 ms per Wan 14B tensor) and with the weights held
//             in registers as well (0.852: 62 registers, 3 CTAs per SM instead of 5); this one 0.696 ms.
//   kRows     CTAs looping over rows (as many as fit the GPU), the next row's x loaded before this row's reduction,
//             so a CTA always has a row's loads in flight: kOneRow reaches ~2.2 TB/s, its CTAs idle on the memory
//             system between their load and their stores.
//   kLean     kOneRow's loads, arithmetic and stores (the same instructions and bits) with its index math done once:
//             kOneRow works out the row's (batch, position) by 64-bit division and each vector's (head, offset) by
//             32-bit division both before its loads and before its stores. kLean divides the row once in 32 bits,
//             takes a vector's head by one multiply (head_magic) for its load and its store, and keeps offsets within
//             the row in 32 bits (run only where they fit: capi_rope.cuh lean_offsets_fit). SASS on Wan 14B's rows:
//             a thread issues 463 instructions per row instead of 635 (896 -> 616 in all), registers 40 both. The
//             default since call N1 of the ninth sitting: 0.584 against 0.713 ms per Wan 14B tensor (6/6 passes),
//             1.3B's rows a tie. The same with whole 16-byte stores and table loads (schedule 4, a kernel of its own
//             at 38 registers) measured 0.605: dev/experiments/norm_rope_lean_vec.patch.
//   kLean32   kLean in a kernel of its own bound to 32 registers (4 CTAs of kMaxThreads per SM: 6 of Wan 14B's 320
//             threads, 60 warps, where kLean's 40 registers allow 4 CTAs, 40 warps; Nsight Compute on kLean read issue
//             61% and DRAM 60% busy with 62.5% occupancy: call N4 of the ninth sitting). Its first build spilled 8
//             bytes at 2 vectors a thread and won its A/B anyway (0.557 against 0.573 ms per Wan 14B tensor, call N7
//             of the ninth sitting); with the bases and indices computed again after the block sum
//             (lean_row's kRemat) none spills at 1 or 2 vectors. At most 2 (4 cannot fit 32 registers: wider rows
//             run the default). Measured in call O6 of the eleventh sitting: 0.509 against kLean's 0.567 ms per Wan
//             14B tensor (6/6 passes), a tie on 1.3B's one-vector rows; the default at 2 vectors a thread since
//             (capi_rope.cuh norm_rope_default).
enum NormRopeSchedule : int { kOneRow = 1, kRows = 2, kLean = 3, kLean32 = 4 };

// Sum over the CTA; every thread gets the total. One warp-shuffle tree per warp, then the warps' partials in order.
// `scratch` is used again only after another barrier of the CTA (kRows alternates two).
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

// This thread's vectors of one row (thread t: vectors t, t + blockDim.x, ...; a vector's 8 channels lie in one head,
// head_dim being a multiple of 8, so its RoPE pairs are its own).
template <typename T, int kVecs>
__device__ __forceinline__ void load_row(rope::Vec8<T> (&v)[kVecs], const NormRopeParams& p, int64_t row) {
  const int64_t b = row / p.seqlen, s = row % p.seqlen;
  const T* xr = static_cast<const T*>(p.x) + b * p.x_stride[0] + s * p.x_stride[1];
  const int hd = int(p.head_dim);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int vec = threadIdx.x + i * blockDim.x;
    if (vec < p.vecs) {
      const int c = vec * 8, h = c / hd, d = c - h * hd;
      v[i].raw = *reinterpret_cast<const uint4*>(xr + h * p.x_stride[2] + d);
    }
  }
}

template <typename T, int kVecs>
__device__ __forceinline__ float sum_squares(const rope::Vec8<T> (&v)[kVecs], const NormRopeParams& p) {
  float ss = 0.f;
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    if (threadIdx.x + i * blockDim.x < p.vecs) {
#pragma unroll
      for (int e = 0; e < 8; ++e) ss = fmaf(v[i].get(e), v[i].get(e), ss);
    }
  }
  return ss;
}

// 1/rms of a row from its sum of squares.
__device__ __forceinline__ float row_rstd(float total, const NormRopeParams& p) {
  return rsqrtf(__fadd_rn(__fdiv_rn(total, float(p.vecs) * 8.f), p.eps));
}

// One vector normalized, weighted and rotated: w its weights, cs and sn its channels' table entries.
template <typename T, bool kRoundMid>
__device__ __forceinline__ rope::Vec8<T> norm_rotate8(const rope::Vec8<T>& v, const rope::Vec8<T>& w,
                                                       const float (&cs)[8], const float (&sn)[8], float rstd) {
  rope::Vec8<T> r;
#pragma unroll
  for (int e = 0; e < 8; e += 2) {
    // y rounded to T first: the stock code's norm writes it in x's dtype and the RoPE reads it back.
    const float y0 = rope::round_to<T>(__fmul_rn(w.get(e), __fmul_rn(rstd, v.get(e))));
    const float y1 = rope::round_to<T>(__fmul_rn(w.get(e + 1), __fmul_rn(rstd, v.get(e + 1))));
    float first, second;
    rope::rotate<T, kRoundMid>(y0, y1, cs[e], sn[e + 1], cs[e], sn[e + 1], first, second);
    r.set(e, first);
    r.set(e + 1, second);
  }
  return r;
}

// Normalize, weight, rotate and store this thread's vectors of `row`, given the row's sum of squares.
template <typename T, typename C, bool kRoundMid, int kVecs>
__device__ __forceinline__ void finish_row(const rope::Vec8<T> (&v)[kVecs], float total, const NormRopeParams& p,
                                           int64_t row) {
  const int64_t b = row / p.seqlen, s = row % p.seqlen;
  T* orow = static_cast<T*>(p.out) + b * p.out_stride[0] + s * p.out_stride[1];
  const T* wr = static_cast<const T*>(p.weight);
  const C* cos_row = static_cast<const C*>(p.cos) + b * p.cos_stride[0] + s * p.cos_stride[1];
  const C* sin_row = static_cast<const C*>(p.sin) + b * p.sin_stride[0] + s * p.sin_stride[1];
  const int hd = int(p.head_dim);
  const float rstd = row_rstd(total, p);
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const int vec = threadIdx.x + i * blockDim.x;
    if (vec < p.vecs) {
      const int c = vec * 8, h = c / hd, d = c - h * hd;
      rope::Vec8<T> w;
      w.raw = __ldg(reinterpret_cast<const uint4*>(wr + c));
      float cs[8], sn[8];
      rope::load_table8(cos_row + d, cs);
      rope::load_table8(sin_row + d, sn);
      *reinterpret_cast<uint4*>(orow + h * p.out_stride[2] + d) = norm_rotate8<T, kRoundMid>(v[i], w, cs, sn, rstd).raw;
    }
  }
}

// kLean's row (one per CTA): kOneRow's accesses in kOneRow's order and its arithmetic (load_row, sum_squares,
// block_sum, finish_row's), the index math done once. Channel c's head is umulhi(c, head_magic): with
// head_magic = ceil(2^32 / D) = (2^32 + e) / D, 0 <= e < D, c * head_magic / 2^32 = c / D + c * e / (D * 2^32), and
// the second term stays under 1 / D (so the floor is c / D's) while c * e < 2^32: c < 16384 and D <= 4096 give 2^26.
// A power-of-two D makes it a shift (head_magic = 2^32 / D); a shift and mask in its place measured 2 SASS
// instructions fewer per thread on Wan's rows, at the price of a second path for the other head dims.
static_assert(int64_t(kMaxThreads) * kMaxVecsPerThread * 8 * kMaxHeadDim <= (int64_t(1) << 32), "head_magic's bound");
// kRemat (kLean32's kernel only): the output and table bases and each vector's head and dim are computed again after
// the block sum instead of kept across it, the same values: at 32 registers, keeping them spilled 8 bytes.
template <typename T, typename C, bool kRoundMid, int kVecs, bool kRemat = false>
__device__ __forceinline__ void lean_row(const NormRopeParams& p, float* scratch) {
  // rows < 2^31 (the C entry), so the row's (batch, position) divide in 32 bits; its base offsets stay 64-bit (a
  // fused-qkv chunk of batch 2 spans over 2^31 elements).
  const uint32_t row = blockIdx.x, seqlen = uint32_t(p.seqlen), b = row / seqlen, s = row - b * seqlen;
  const T* xr = static_cast<const T*>(p.x) + (int64_t(b) * p.x_stride[0] + int64_t(s) * p.x_stride[1]);
  T* orow = static_cast<T*>(p.out) + (int64_t(b) * p.out_stride[0] + int64_t(s) * p.out_stride[1]);
  const C* cos_row = static_cast<const C*>(p.cos) + (int64_t(b) * p.cos_stride[0] + int64_t(s) * p.cos_stride[1]);
  const C* sin_row = static_cast<const C*>(p.sin) + (int64_t(b) * p.sin_stride[0] + int64_t(s) * p.sin_stride[1]);
  const T* wr = static_cast<const T*>(p.weight);
  // Offsets within the row in 32 bits: the host checked (heads - 1) * head stride + D fits (lean_offsets_fit).
  const uint32_t hd = uint32_t(p.head_dim), xs = uint32_t(p.x_stride[2]), os = uint32_t(p.out_stride[2]);
  rope::Vec8<T> v[kVecs];
  uint32_t head[kVecs], dim[kVecs];
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const uint32_t vec = threadIdx.x + i * blockDim.x;
    if (vec < uint32_t(p.vecs)) {
      const uint32_t c = vec * 8;
      head[i] = __umulhi(c, p.head_magic);
      dim[i] = c - head[i] * hd;
      v[i].raw = *reinterpret_cast<const uint4*>(xr + (head[i] * xs + dim[i]));
    }
  }
  const float rstd = row_rstd(block_sum(sum_squares<T, kVecs>(v, p), scratch), p);
  if constexpr (kRemat) {
    // (blockIdx.x read afresh through a volatile register read: ptxas would otherwise keep b and s, or the bases.)
    const uint32_t row2 = sreg::ctaid_x(), b2 = row2 / seqlen, s2 = row2 - b2 * seqlen;
    orow = static_cast<T*>(p.out) + (int64_t(b2) * p.out_stride[0] + int64_t(s2) * p.out_stride[1]);
    cos_row = static_cast<const C*>(p.cos) + (int64_t(b2) * p.cos_stride[0] + int64_t(s2) * p.cos_stride[1]);
    sin_row = static_cast<const C*>(p.sin) + (int64_t(b2) * p.sin_stride[0] + int64_t(s2) * p.sin_stride[1]);
#pragma unroll
    for (int i = 0; i < kVecs; ++i) {
      const uint32_t c = (threadIdx.x + i * blockDim.x) * 8;
      head[i] = __umulhi(c, p.head_magic);
      dim[i] = c - head[i] * hd;
    }
  }
#pragma unroll
  for (int i = 0; i < kVecs; ++i) {
    const uint32_t vec = threadIdx.x + i * blockDim.x;
    if (vec < uint32_t(p.vecs)) {
      rope::Vec8<T> w;
      w.raw = __ldg(reinterpret_cast<const uint4*>(wr + vec * 8));
      float cs[8], sn[8];
      rope::load_table8(cos_row + dim[i], cs);
      rope::load_table8(sin_row + dim[i], sn);
      const uint4 r = norm_rotate8<T, kRoundMid>(v[i], w, cs, sn, rstd).raw;
      // Four 4-byte stores: what nvcc makes of kOneRow's 16-byte store (PTX st.global.v2.u16, SASS STG.E; rope.cuh's
      // kernels get STG.E.128), kept so that the A/B against kOneRow measured the index math alone. Whole 16-byte
      // stores and table loads measured slower (0.605 against 0.584 ms: dev/experiments/norm_rope_lean_vec.patch).
      uint32_t* o = reinterpret_cast<uint32_t*>(orow + (head[i] * os + dim[i]));
      o[0] = r.x, o[1] = r.y, o[2] = r.z, o[3] = r.w;
    }
  }
}

// kVecs: the vectors one thread holds per row (1, 2 or 4), so that the registers held are the row's share and no
// more: Wan 14B's 640 vectors run 2 per thread on 320 threads, 1.3B's 192 one each.
template <typename T, typename C, bool kRoundMid, int kVecs, int kSchedule>
__global__ void __launch_bounds__(kMaxThreads) rms_norm_rope_kernel(const NormRopeParams p) {
  static_assert(kVecs >= 1 && kVecs <= kMaxVecsPerThread, "vectors per thread");
  static_assert(kSchedule == kOneRow || kSchedule == kRows || kSchedule == kLean, "schedule");
  __shared__ float scratch[2][kMaxThreads / 32];
  const int64_t rows = p.batch * p.seqlen;
  rope::Vec8<T> v[kVecs];
  if constexpr (kSchedule == kOneRow) {
    load_row<T, kVecs>(v, p, blockIdx.x);
    const float total = block_sum(sum_squares<T, kVecs>(v, p), scratch[0]);
    finish_row<T, C, kRoundMid, kVecs>(v, total, p, blockIdx.x);
  } else if constexpr (kSchedule == kLean) {
    lean_row<T, C, kRoundMid, kVecs>(p, scratch[0]);
  } else {
    int64_t row = blockIdx.x;
    if (row < rows) load_row<T, kVecs>(v, p, row);
    for (int it = 0; row < rows; ++it, row += gridDim.x) {
      rope::Vec8<T> next[kVecs];
      if (row + gridDim.x < rows) load_row<T, kVecs>(next, p, row + gridDim.x);  // in flight over this row's work
      const float total = block_sum(sum_squares<T, kVecs>(v, p), scratch[it & 1]);
      finish_row<T, C, kRoundMid, kVecs>(v, total, p, row);
#pragma unroll
      for (int i = 0; i < kVecs; ++i) v[i] = next[i];
    }
  }
}

// kLean32's kernel: a second launch-bounds argument on the shared kernel would change ptxas's choices for the others
// (it did for kOneRow in the ninth sitting's schedule 4), so the register bound gets a kernel of its own.
template <typename T, typename C, bool kRoundMid, int kVecs>
__global__ void __launch_bounds__(kMaxThreads, 4) rms_norm_rope_lean32_kernel(const NormRopeParams p) {
  static_assert(kVecs >= 1 && kVecs <= kMaxVecsPerThread, "vectors per thread");
  __shared__ float scratch[kMaxThreads / 32];
  lean_row<T, C, kRoundMid, kVecs, true>(p, scratch);
}

}  // namespace norm_rope
}  // namespace vidattn
