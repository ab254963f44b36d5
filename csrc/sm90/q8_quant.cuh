// The 8-bit path's pre-pass (precision="8bit"): reads 16-bit Q, K, V with the caller's strides and writes the
// operands of q8_fwd.cuh into one workspace (Q8Workspace). Three launches after one memset (capi_8bit.cuh, q8_launch),
// or two (the default without LSE: 1 and 2 in one grid, q8_stats_q_kernel; or prep mode 2: 1 and 3 only, Q then
// quantized inside the attention kernel, q8_fwd.cuh's q8_quantize_q_tile, by the same row code q8_q_row_codes):
//   1. q8_kv_stats_kernel: per (batch, key/value head, channel) the sum of K and the max |V| over the valid keys
//      (atomics into zeroed fp32 / bit-pattern slots).
//   2. q8_q_kernel: Q to INT8 with one scale per query row (the kernel's accumulator rows r, r+8 each get their own
//      multiplier, so a per-row scale costs nothing there); the scale carries softmax scale * log2(e). With LSE asked,
//      also scale * q . mean(K) per row: the smoothing shifts every score of a row by it (see below).
//   3. q8_kv_kernel: per 128-key block, K' = K - mean(K) to INT8 with four scales per block (key % 8 / 2: the four
//      key groups one thread of the accumulator fragment holds, so each thread dequantizes with one multiplier),
//      and V to e4m3 with per-channel scales (max over the valid keys / 448), written transposed ([B, H, D, Skv_pad]:
//      8-bit wgmma reads its B operand K-major, keys contiguous) with the keys of every 16-key group permuted so that
//      the S accumulator fragment packs straight into P's register A fragment (kVPerm).
// Grouped-query attention (kv_heads < heads): the K/V parts (1 and 3) are per key/value head, once per group; query
// head h reads key/value head h / kv_group (q8_kv_row), as the exact kernel does.
// Smoothing is exact for the softmax: q . (k - mean) = q . k - q . mean shifts every score of a row by one constant,
// which the softmax divides out; it removes the channel offsets shared by all keys that would otherwise take the INT8
// range. Keys past kv_len (and the padding up to a multiple of 128) are written as zeros. Pure CUDA, no torch.
#pragma once
#include <cstdint>
#include <cuda.h>
#include <cuda_bf16.h>
#include <cuda_fp16.h>

namespace vidattn::sm90 {

constexpr int kQ8BlockN = 128;    // keys per K scale block and per kernel key block (q8_fwd.cuh)
constexpr int kQ8BlockMPad = 384; // Q8 is padded to a multiple of every kernel tile height (128 and 192 rows)
constexpr int kQ8KGroups = 4;     // K scales per key block (key % 8 / 2)
constexpr float kQ8IntMax = 127.f;
constexpr float kQ8E4m3Max = 448.f;

// Where each part of the workspace lies (capi_8bit.cuh, q8_layout, computes it; the kernels only read pointers).
struct Q8Workspace {
  int8_t* q8;          // [B, H, Sq_pad, D]
  float* q_scale;      // [B, H, Sq_pad]: row scale * softmax scale * log2(e)
  int8_t* k8;          // [B, Hkv, Skv_pad, D], smoothed (Hkv: key/value heads)
  float* k_scale;      // [B, Hkv, Skv_pad / 128, 4]
  uint8_t* vt8;        // [B, Hkv, D, Skv_pad] e4m3, keys permuted in 16-key groups (kVPerm)
  float* v_scale;      // [B, Hkv, D]
  float* k_sum;        // [B, Hkv, D] (zeroed before the stats launch)
  uint32_t* v_amax;    // [B, Hkv, D] fp32 bit patterns of max |v| (zeroed; non-negative floats order as integers)
  float* lse_corr;     // [B, H, Sq]: softmax scale * q . mean(K), natural-log units
};

struct Q8PrepParams {
  const void* q;
  const void* k;
  const void* v;
  int64_t q_stride[3], k_stride[3], v_stride[3];  // (batch, seq, head), elements
  const int* kv_lens;
  int batch, heads, seqlen_q, seqlen_kv, sq_pad, skv_pad;
  int kv_heads, kv_group;  // key/value heads (= heads without GQA) and heads / kv_heads
  float scale;       // softmax scale
  int want_lse;      // write lse_corr
  Q8Workspace ws;
};

// The (batch, key/value head) index of K/V's workspace parts that query head h of batch b reads: grouped-query
// attention maps query head h to key/value head h / kv_group (kv_group = heads / kv_heads; 1 without GQA).
__device__ __forceinline__ int q8_kv_row(int b, int h, int kv_heads, int kv_group) {
  return b * kv_heads + h / kv_group;
}

__device__ __forceinline__ int q8_kv_len(const int* kv_lens, int seqlen_kv, int batch) {
  return kv_lens != nullptr ? max(0, min(seqlen_kv, kv_lens[batch])) : seqlen_kv;
}

// Eight 16-bit values (one 16-byte load) to fp32.
template <bool kFp16>
__device__ __forceinline__ void q8_unpack8(const uint4& u, float (&f)[8]) {
  const uint32_t w[4] = {u.x, u.y, u.z, u.w};
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    if constexpr (kFp16) {
      const __half2 h = *reinterpret_cast<const __half2*>(&w[i]);
      const float2 x = __half22float2(h);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    } else {
      const __nv_bfloat162 h = *reinterpret_cast<const __nv_bfloat162*>(&w[i]);
      const float2 x = __bfloat1622float2(h);
      f[2 * i] = x.x;
      f[2 * i + 1] = x.y;
    }
  }
}

template <bool kFp16>
__device__ __forceinline__ float q8_to_float(uint16_t x) {
  if constexpr (kFp16) return __half2float(__ushort_as_half(x));
  else return __bfloat162float(__ushort_as_bfloat16(x));
}

// A max that returns NaN when either input is NaN (max.NaN.f32, PTX ISA "Floating Point Instructions: max", sm_80
// and up). The absolute maxima below decide the scales: fmaxf drops NaN, so a NaN in q or k would be quantized to
// code 0 and its row come out finite where exact attention gives NaN.
__device__ __forceinline__ float q8_nanmax(float a, float b) {
  float r;
  asm("max.NaN.f32 %0, %1, %2;" : "=f"(r) : "f"(a), "f"(b));
  return r;
}

// The dequantization scale of an absolute maximum: 1 for an all-zero group (its codes are 0; a zero scale would make
// -inf * 0 = NaN of masked keys), NaN for a group holding a NaN, so that the NaN reaches the output as in SDPA.
__device__ __forceinline__ bool q8_scaled(float amax) { return amax > 0.f || amax != amax; }

// Round to nearest and saturate to [-127, 127] (cvt.rni.sat.s8.f32 would clip at -128; the range is symmetric).
__device__ __forceinline__ int q8_round(float x) { return max(-127, min(127, __float2int_rn(x))); }

// Four fp32 to four e4m3 bytes, a in the lowest (cvt.rn.satfinite.e4m3x2.f32, PTX ISA 9.7.9.21: the first source
// goes to the upper byte).
__device__ __forceinline__ uint32_t q8_e4m3x4(float a, float b, float c, float d) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(a), "f"(b), "f"(c), "f"(d));
  return r;
}

// Position of key k (0..15) of a 16-key group in Vt. P's accumulator fragment gives thread t (lane % 4) the keys
// 2t, 2t+1, 8+2t, 9+2t of every 16 (wgmma D fragment: columns 8i + 2t + {0, 1}); the e4m3 A fragment of a k32 step
// wants row bytes k = 4t .. 4t+3 and 16 + 4t .. 16 + 4t+3 in one register each (PTX ISA 9.7.15.5.1.1, A in
// registers, 8-bit types). So key 2t + e + 8h sits at position 4t + 2h + e.
__device__ __forceinline__ int q8_vperm_pos(int k) { return 4 * ((k & 7) >> 1) + (k & 1) + 2 * (k >> 3); }

// ---- 1. K sums and max |V| over the valid keys ------------------------------------------------------------------
constexpr int kQ8StatThreads = 256;
constexpr int kQ8StatKeys = 512;  // keys per block
#ifndef VIDATTN_Q8_STAT_UNROLL
#define VIDATTN_Q8_STAT_UNROLL 1
#endif
constexpr int kQ8StatUnroll = VIDATTN_Q8_STAT_UNROLL;  // keys a thread loads before it adds (1: the default)

// One block's work: keys [blk * kQ8StatKeys, +kQ8StatKeys) of (batch, key/value head) bh.
template <int kD, bool kFp16>
__device__ __forceinline__ void q8_kv_stats_block(const Q8PrepParams& p, int blk, int bh) {
  constexpr int kVec = kD / 8, kLanes = kQ8StatThreads / kVec;
  __shared__ float red_sum[kLanes][kD + 1];
  __shared__ float red_max[kLanes][kD + 1];
  const int b = bh / p.kv_heads, h = bh % p.kv_heads;
  const int kv_len = q8_kv_len(p.kv_lens, p.seqlen_kv, b);
  const int vec = threadIdx.x % kVec, lane = threadIdx.x / kVec;
  const int s0 = blk * kQ8StatKeys, s1 = min(s0 + kQ8StatKeys, kv_len);
  float sum[8], amax[8];
#pragma unroll
  for (int i = 0; i < 8; ++i) sum[i] = amax[i] = 0.f;
  const uint16_t* kp = static_cast<const uint16_t*>(p.k) + b * p.k_stride[0] + h * p.k_stride[2] + vec * 8;
  const uint16_t* vp = static_cast<const uint16_t*>(p.v) + b * p.v_stride[0] + h * p.v_stride[2] + vec * 8;
  // kQ8StatUnroll keys a thread, all their loads issued before the first use, the sums in the same key order (the
  // same bits). Four measured 0.7-1.7% less kernel time and no per-call gain (dev/NOTES_8bit.md "The pre-pass against
  // the copy rate", call P39): the default stays one key at a time, 4 an A/B setting.
  for (int s = s0 + lane; s < s1; s += kLanes * kQ8StatUnroll) {
    uint4 ku[kQ8StatUnroll], vu[kQ8StatUnroll];
#pragma unroll
    for (int u = 0; u < kQ8StatUnroll; ++u) {
      const int su = s + u * kLanes;
      ku[u] = vu[u] = make_uint4(0, 0, 0, 0);
      if (su < s1) {
        ku[u] = *reinterpret_cast<const uint4*>(kp + su * p.k_stride[1]);
        vu[u] = *reinterpret_cast<const uint4*>(vp + su * p.v_stride[1]);
      }
    }
#pragma unroll
    for (int u = 0; u < kQ8StatUnroll; ++u) {
      if (s + u * kLanes >= s1) break;
      float kf[8], vf[8];
      q8_unpack8<kFp16>(ku[u], kf);
      q8_unpack8<kFp16>(vu[u], vf);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        sum[i] += kf[i];
        amax[i] = q8_nanmax(amax[i], fabsf(vf[i]));
      }
    }
  }
#pragma unroll
  for (int i = 0; i < 8; ++i) {
    red_sum[lane][vec * 8 + i] = sum[i];
    red_max[lane][vec * 8 + i] = amax[i];
  }
  __syncthreads();
  if (threadIdx.x < kD && s0 < s1) {
    float s = 0.f, m = 0.f;
    for (int l = 0; l < kLanes; ++l) {
      s += red_sum[l][threadIdx.x];
      m = q8_nanmax(m, red_max[l][threadIdx.x]);
    }
    atomicAdd(&p.ws.k_sum[bh * kD + threadIdx.x], s);
    // NaN compares as a huge pattern here and then poisons the scales, so it still shows in the output.
    atomicMax(&p.ws.v_amax[bh * kD + threadIdx.x], __float_as_uint(m));
  }
}

template <int kD, bool kFp16>
__global__ void __launch_bounds__(kQ8StatThreads) q8_kv_stats_kernel(const Q8PrepParams p) {
  q8_kv_stats_block<kD, kFp16>(p, blockIdx.x, blockIdx.y);
}

// ---- 2. Q to INT8, one scale per row ----------------------------------------------------------------------------
// One row's share (8 channels per lane, kLanesPerRow adjacent lanes per row) of Q's quantization: the codes of this
// lane's 8 channels, and the row's absolute max (every lane of the warp must call it: it shuffles). q8_q_block and
// the attention kernel's in-kernel path (prep mode 2, q8_fwd.cuh's q8_quantize_q_tile) both call it, so the two give
// the same codes and scales.
template <int kLanesPerRow>
__device__ __forceinline__ float q8_q_row_codes(const float (&x)[8], uint2& codes) {
  float m = 0.f;
#pragma unroll
  for (int e = 0; e < 8; ++e) m = q8_nanmax(m, fabsf(x[e]));
#pragma unroll
  for (int o = kLanesPerRow / 2; o > 0; o >>= 1) m = q8_nanmax(m, __shfl_xor_sync(0xffffffff, m, o));
  // An all-zero row keeps scale 1 (its codes are 0): a zero scale would make -inf * 0 = NaN of masked keys.
  const float inv = m > 0.f ? kQ8IntMax / m : 1.f;
  uint32_t w[2] = {0, 0};
#pragma unroll
  for (int e = 0; e < 8; ++e) w[e / 4] |= (static_cast<uint32_t>(q8_round(x[e] * inv)) & 0xff) << (8 * (e % 4));
  codes = make_uint2(w[0], w[1]);
  return m;
}

// The row's dequantization multiplier from its absolute max: row scale * softmax scale * log2(e).
__device__ __forceinline__ float q8_q_row_scale(float amax, float scale) {
  return (q8_scaled(amax) ? amax / kQ8IntMax : 1.f) * scale * 1.4426950408889634f;
}

// q . sum(K) over the row (this lane's 8 channels from `k_sum`, the channel sums at this lane's offset; nullptr for a
// lane without a row): the LSE term's dot product. Every lane of the warp must call it.
template <int kLanesPerRow>
__device__ __forceinline__ float q8_q_row_ksum_dot(const float (&x)[8], const float* k_sum) {
  float dot = 0.f;
  if (k_sum != nullptr) {
#pragma unroll
    for (int e = 0; e < 8; ++e) dot += x[e] * k_sum[e];
  }
#pragma unroll
  for (int o = kLanesPerRow / 2; o > 0; o >>= 1) dot += __shfl_xor_sync(0xffffffff, dot, o);
  return dot;
}

// A row is kD / 8 lanes of 16 bytes; a warp takes 32 / (kD / 8) rows per step and kQ8QSteps steps, every load issued
// before the first use (v1, one warp per row with 8-byte loads, read Q at about 1.6 TB/s).
constexpr int kQ8QThreads = 256;
constexpr int kQ8QSteps = 4;
#ifndef VIDATTN_Q8_Q_ONE_DIV
#define VIDATTN_Q8_Q_ONE_DIV 1  // a Q block's (batch, head) by one division a thread (0: one a step, the build before)
#endif

template <int kD>
constexpr int q8_q_rows_per_block() {
  return (kQ8QThreads / 32) * (32 / (kD / 8)) * kQ8QSteps;
}

template <int kD, bool kFp16>
__device__ __forceinline__ void q8_q_block(const Q8PrepParams& p, int blk) {
  constexpr int kLanesPerRow = kD / 8, kRowsPerStep = 32 / kLanesPerRow;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int sub = lane / kLanesPerRow, vec = lane % kLanesPerRow;
  const int64_t rows = static_cast<int64_t>(p.batch) * p.heads * p.sq_pad;
#if VIDATTN_Q8_Q_ONE_DIV
  // A block's rows lie in one (batch, head): sq_pad is a multiple of kQ8BlockMPad, which the block's row count divides.
  // One 64-bit division a thread instead of one a step (a 64-bit division is a ~70-instruction routine; the steps'
  // four were most of a Q thread's integer work).
  static_assert(kQ8BlockMPad % q8_q_rows_per_block<kD>() == 0, "a Q block must not straddle two (batch, head)s");
  const int64_t blk_row0 = static_cast<int64_t>(blk) * q8_q_rows_per_block<kD>();
  const int bh0 = static_cast<int>(blk_row0 / p.sq_pad);
  const int row0_in =
      static_cast<int>(blk_row0 - static_cast<int64_t>(bh0) * p.sq_pad) + warp * (kRowsPerStep * kQ8QSteps);
  // (Used with LSE only; a block past the last row has bh0 = B * H, whose row no lane reads.)
  const int kv_row0 = p.want_lse ? q8_kv_row(bh0 / p.heads, bh0 % p.heads, p.kv_heads, p.kv_group) : 0;
#endif
  const int64_t row0 = static_cast<int64_t>(blk) * q8_q_rows_per_block<kD>() +
                       warp * (kRowsPerStep * kQ8QSteps);
  uint4 u[kQ8QSteps];
  int64_t grow[kQ8QSteps];
  int bh[kQ8QSteps], row[kQ8QSteps];
#pragma unroll
  for (int st = 0; st < kQ8QSteps; ++st) {
    grow[st] = row0 + st * kRowsPerStep + sub;
#if VIDATTN_Q8_Q_ONE_DIV
    bh[st] = bh0;
    row[st] = row0_in + st * kRowsPerStep + sub;
#else
    bh[st] = static_cast<int>(grow[st] / p.sq_pad);
    row[st] = static_cast<int>(grow[st] - static_cast<int64_t>(bh[st]) * p.sq_pad);
#endif
    u[st] = make_uint4(0, 0, 0, 0);
    if (grow[st] < rows && row[st] < p.seqlen_q) {
      const int b = bh[st] / p.heads, h = bh[st] % p.heads;
      u[st] = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(p.q) + b * p.q_stride[0] +
                                              row[st] * p.q_stride[1] + h * p.q_stride[2] + vec * 8);
    }
  }
#pragma unroll
  for (int st = 0; st < kQ8QSteps; ++st) {
    float x[8];
    q8_unpack8<kFp16>(u[st], x);
    uint2 codes;
    const float m = q8_q_row_codes<kLanesPerRow>(x, codes);
    const bool in = grow[st] < rows;
    if (in) *reinterpret_cast<uint2*>(p.ws.q8 + grow[st] * kD + vec * 8) = codes;
    if (in && vec == 0) p.ws.q_scale[grow[st]] = q8_q_row_scale(m, p.scale);
    if (p.want_lse) {  // uniform over the warp: every lane joins the shuffles
      const int kv_len = in ? q8_kv_len(p.kv_lens, p.seqlen_kv, bh[st] / p.heads) : 0;
      const float inv_n = kv_len > 0 ? 1.f / static_cast<float>(kv_len) : 0.f;
#if VIDATTN_Q8_Q_ONE_DIV
      const int kv_row = kv_row0;
#else
      const int kv_row = q8_kv_row(bh[st] / p.heads, bh[st] % p.heads, p.kv_heads, p.kv_group);
#endif
      const float dot = q8_q_row_ksum_dot<kLanesPerRow>(x, in ? p.ws.k_sum + kv_row * kD + vec * 8 : nullptr);
      if (in && vec == 0 && row[st] < p.seqlen_q)
        p.ws.lse_corr[static_cast<int64_t>(bh[st]) * p.seqlen_q + row[st]] = dot * inv_n * p.scale;
    }
  }
}

template <int kD, bool kFp16>
__global__ void __launch_bounds__(kQ8QThreads) q8_q_kernel(const Q8PrepParams p) {
  q8_q_block<kD, kFp16>(p, blockIdx.x);
}

// ---- 1 + 2 in one launch (without LSE: Q's rows then need nothing from the statistics) -------------------------
// The first `stat_blocks` blocks (key block x (batch, key/value head), key blocks fastest) take the statistics, the
// rest Q's rows: one launch less, and the two halves' tails overlap instead of running one after the other.
static_assert(kQ8StatThreads == kQ8QThreads, "the fused pre-pass launches one block size");

template <int kD, bool kFp16>
__global__ void __launch_bounds__(kQ8QThreads) q8_stats_q_kernel(const Q8PrepParams p, int stat_key_blocks,
                                                                 int stat_blocks) {
  const int blk = static_cast<int>(blockIdx.x);
  if (blk < stat_blocks) q8_kv_stats_block<kD, kFp16>(p, blk % stat_key_blocks, blk / stat_key_blocks);
  else q8_q_block<kD, kFp16>(p, blk - stat_blocks);
}

// ---- 3. K' to INT8 (four scales per 128 keys) and V^T to e4m3 (per-channel scales), one block per 128 keys ------
constexpr int kQ8KvThreads = kQ8BlockN;  // thread = key of the block
#ifndef VIDATTN_Q8_KV_K_SMEM
// The per-key pass's K' codes leave through a shared tile in whole lines (0: 16-byte pieces, the build before).
#define VIDATTN_Q8_KV_K_SMEM 1
#endif

template <int kD, bool kFp16>
__global__ void __launch_bounds__(kQ8KvThreads) q8_kv_kernel(const Q8PrepParams p) {
  __shared__ float mean[kD];
  __shared__ float vinv[kD];
  __shared__ float gmax[kQ8KvThreads / 32][kQ8KGroups];
  __shared__ __align__(16) uint8_t vt[kD][kQ8BlockN];
#if VIDATTN_Q8_KV_K_SMEM
  // K' codes leave through a tile too, in whole lines (kv2's lesson, call P39: stored from registers, a warp
  // instruction wrote 32 keys' 16-byte pieces, each half a 32-byte sector). Chunk c of key k's row sits at
  // c ^ ((k / (8 / kC)) % kC): the 8 keys of a quarter warp, and the 8 chunks a quarter warp reads back, fall in 8
  // distinct bank groups.
  constexpr int kC = kD / 16;
  __shared__ uint4 ktile[kQ8BlockN][kC];
#endif
  const int bh = blockIdx.y, b = bh / p.kv_heads, h = bh % p.kv_heads;  // (batch, key/value head)
  const int kv_len = q8_kv_len(p.kv_lens, p.seqlen_kv, b);
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int key = blockIdx.x * kQ8BlockN + tid;
  const bool valid = key < kv_len;
  const float inv_n = kv_len > 0 ? 1.f / static_cast<float>(kv_len) : 0.f;
  for (int c = tid; c < kD; c += kQ8KvThreads) {
    mean[c] = p.ws.k_sum[bh * kD + c] * inv_n;
    const float a = __uint_as_float(p.ws.v_amax[bh * kD + c]);
    vinv[c] = a > 0.f ? kQ8E4m3Max / a : 1.f;
    if (blockIdx.x == 0) p.ws.v_scale[bh * kD + c] = a > 0.f ? a / kQ8E4m3Max : 1.f;
  }
  __syncthreads();
  const uint16_t* kp = static_cast<const uint16_t*>(p.k) + b * p.k_stride[0] + h * p.k_stride[2] +
                       static_cast<int64_t>(valid ? key : 0) * p.k_stride[1];
  const uint16_t* vp = static_cast<const uint16_t*>(p.v) + b * p.v_stride[0] + h * p.v_stride[2] +
                       static_cast<int64_t>(valid ? key : 0) * p.v_stride[1];
  // The key's K and V rows in registers, every 16-byte load issued at once (v1 read them in two dependent passes).
  uint4 kr[kD / 8], vr[kD / 8];
#pragma unroll
  for (int c8 = 0; c8 < kD / 8; ++c8) {
    kr[c8] = valid ? *reinterpret_cast<const uint4*>(kp + c8 * 8) : make_uint4(0, 0, 0, 0);
    vr[c8] = valid ? *reinterpret_cast<const uint4*>(vp + c8 * 8) : make_uint4(0, 0, 0, 0);
  }
  // max |k - mean| of this key, then over its group (keys of equal key % 8 / 2: lanes differing in bits 0, 3 and 4,
  // then the four warps).
  float m = 0.f;
  if (valid) {
#pragma unroll
    for (int c8 = 0; c8 < kD / 8; ++c8) {
      float f[8];
      q8_unpack8<kFp16>(kr[c8], f);
#pragma unroll
      for (int i = 0; i < 8; ++i) m = q8_nanmax(m, fabsf(f[i] - mean[c8 * 8 + i]));
    }
  }
  m = q8_nanmax(m, __shfl_xor_sync(0xffffffff, m, 1));
  m = q8_nanmax(m, __shfl_xor_sync(0xffffffff, m, 8));
  m = q8_nanmax(m, __shfl_xor_sync(0xffffffff, m, 16));
  if (lane < 8 && (lane & 1) == 0) gmax[warp][lane >> 1] = m;
  __syncthreads();
  const int g = (tid & 7) >> 1;
  float gm = 0.f;
#pragma unroll
  for (int w = 0; w < kQ8KvThreads / 32; ++w) gm = q8_nanmax(gm, gmax[w][g]);
  const float kinv = gm > 0.f ? kQ8IntMax / gm : 1.f;
  const int64_t nkb = p.skv_pad / kQ8BlockN;
  if (tid < kQ8KGroups) {
    float gt = 0.f;
#pragma unroll
    for (int w = 0; w < kQ8KvThreads / 32; ++w) gt = q8_nanmax(gt, gmax[w][tid]);
    p.ws.k_scale[(bh * nkb + blockIdx.x) * kQ8KGroups + tid] = q8_scaled(gt) ? gt / kQ8IntMax : 1.f;
  }
  // K' codes, 16 bytes per store; V to e4m3 into the transposed shared tile (lanes write one row's consecutive
  // positions: no bank conflicts).
#if !VIDATTN_Q8_KV_K_SMEM
  int8_t* kd = p.ws.k8 + (static_cast<int64_t>(bh) * p.skv_pad + blockIdx.x * kQ8BlockN + tid) * kD;
#endif
  const int pos = (tid & ~15) + q8_vperm_pos(tid & 15);
#pragma unroll
  for (int c16 = 0; c16 < kD / 16; ++c16) {
    float f[16], v[16];
    q8_unpack8<kFp16>(kr[2 * c16], *reinterpret_cast<float(*)[8]>(f));
    q8_unpack8<kFp16>(kr[2 * c16 + 1], *reinterpret_cast<float(*)[8]>(f + 8));
    q8_unpack8<kFp16>(vr[2 * c16], *reinterpret_cast<float(*)[8]>(v));
    q8_unpack8<kFp16>(vr[2 * c16 + 1], *reinterpret_cast<float(*)[8]>(v + 8));
    uint32_t w[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      w[j] = 0;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int c = c16 * 16 + 4 * j + e;
        const float x = valid ? (f[4 * j + e] - mean[c]) * kinv : 0.f;
        w[j] |= (static_cast<uint32_t>(q8_round(x)) & 0xff) << (8 * e);
      }
      const int c = c16 * 16 + 4 * j;
      const uint32_t e4 = q8_e4m3x4(v[4 * j] * vinv[c], v[4 * j + 1] * vinv[c + 1], v[4 * j + 2] * vinv[c + 2],
                                    v[4 * j + 3] * vinv[c + 3]);
#pragma unroll
      for (int e = 0; e < 4; ++e) vt[c + e][pos] = static_cast<uint8_t>(e4 >> (8 * e));
    }
#if VIDATTN_Q8_KV_K_SMEM
    ktile[tid][c16 ^ ((tid / (8 / kC)) % kC)] = make_uint4(w[0], w[1], w[2], w[3]);
#else
    *reinterpret_cast<uint4*>(kd + c16 * 16) = make_uint4(w[0], w[1], w[2], w[3]);
#endif
  }
  __syncthreads();
#if VIDATTN_Q8_KV_K_SMEM
  // The block's K' rows are 128 x kD contiguous bytes of [B, H, Skv_pad, D].
  int8_t* kblk = p.ws.k8 + (static_cast<int64_t>(bh) * p.skv_pad + blockIdx.x * kQ8BlockN) * kD;
#pragma unroll
  for (int r = 0; r < kC; ++r) {
    const int i = tid + r * kQ8KvThreads, row = i / kC, c = i % kC;
    *reinterpret_cast<uint4*>(kblk + 16 * static_cast<int64_t>(i)) = ktile[row][c ^ ((row / (8 / kC)) % kC)];
  }
#endif
  // V^T rows out: channel c's 128 keys are 128 contiguous bytes of [B, H, D, Skv_pad].
  uint8_t* vd = p.ws.vt8 + static_cast<int64_t>(bh) * kD * p.skv_pad + blockIdx.x * kQ8BlockN;
#pragma unroll
  for (int i = tid; i < kD * (kQ8BlockN / 16); i += kQ8KvThreads) {
    const int c = i / (kQ8BlockN / 16), u = i % (kQ8BlockN / 16);
    *reinterpret_cast<uint4*>(vd + static_cast<int64_t>(c) * p.skv_pad + u * 16) =
        *reinterpret_cast<const uint4*>(&vt[c][u * 16]);
  }
}

// ---- 3b. The K/V pass with whole-row loads (kv pass 1, the default at D=128; capi_8bit.cuh VIDATTN_Q8_KV_PASS) ---
// The same outputs as q8_kv_kernel, bit for bit, from another layout of the work. q8_kv_kernel gives each thread one
// key's whole K and V rows (168 registers: 3 blocks of 128 threads per SM, 18.75% occupancy) and each warp load
// instruction 32 rows' 16-byte pieces, half of every 32-byte sector (the other half from L1 on the next instruction):
// Nsight Compute on Wan 14B 720p read 2.69 TB/s for it against 3.36 for the statistics pass beside it (dev/NOTES_8bit.md
// "The pre-pass at Wan 14B 720p"). Here 16 lanes share a row (8 channels each) and a warp instruction reads two whole
// 256-byte rows; a warp takes one 16-key group of kVPerm (8 steps of two keys), so each lane holds the same 8 channels
// of 8 keys: ~64 registers of data, and the V^T transpose happens in registers within the pair of lanes that share
// the channels (sub 0 and 1 hold the group's even and odd keys) instead of through bytes in shared memory.
constexpr int kQ8Kv2Threads = 256;  // 8 warps x 16 keys = one 128-key block
#ifndef VIDATTN_Q8_KV2_SMEM_T
#define VIDATTN_Q8_KV2_SMEM_T 1  // V^T leaves through a shared-memory tile in whole lines (0: 16-byte pieces)
#endif

template <bool kFp16>
__global__ void __launch_bounds__(kQ8Kv2Threads, 2) q8_kv2_kernel(const Q8PrepParams p) {
  constexpr int kD = 128, kSteps = 8;
  __shared__ float gmax[kQ8Kv2Threads / 32][kQ8KGroups];
  const int bh = blockIdx.y, b = bh / p.kv_heads, h = bh % p.kv_heads;  // (batch, key/value head)
  const int kv_len = q8_kv_len(p.kv_lens, p.seqlen_kv, b);
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int sub = lane / 16, c0 = (lane % 16) * 8;
  // Key of step st: key0 + 2 st, index warp * 16 + 2 st + sub in the block, so its group (key % 8 / 2) is st % 4.
  const int key0 = blockIdx.x * kQ8BlockN + warp * 16 + sub;
  const float inv_n = kv_len > 0 ? 1.f / static_cast<float>(kv_len) : 0.f;
  float mean[8], vinv[8];
#pragma unroll
  for (int e = 0; e < 8; ++e) {
    mean[e] = p.ws.k_sum[bh * kD + c0 + e] * inv_n;
    const float a = __uint_as_float(p.ws.v_amax[bh * kD + c0 + e]);
    vinv[e] = a > 0.f ? kQ8E4m3Max / a : 1.f;
    if (blockIdx.x == 0 && warp == 0 && sub == 0) p.ws.v_scale[bh * kD + c0 + e] = a > 0.f ? a / kQ8E4m3Max : 1.f;
  }
  const uint16_t* kp = static_cast<const uint16_t*>(p.k) + b * p.k_stride[0] + h * p.k_stride[2] + c0;
  const uint16_t* vp = static_cast<const uint16_t*>(p.v) + b * p.v_stride[0] + h * p.v_stride[2] + c0;
  uint4 kr[kSteps], vr[kSteps];
#pragma unroll
  for (int st = 0; st < kSteps; ++st) {
    const int key = key0 + 2 * st;
    const bool valid = key < kv_len;
    kr[st] = valid ? *reinterpret_cast<const uint4*>(kp + static_cast<int64_t>(key) * p.k_stride[1])
                   : make_uint4(0, 0, 0, 0);
    vr[st] = valid ? *reinterpret_cast<const uint4*>(vp + static_cast<int64_t>(key) * p.v_stride[1])
                   : make_uint4(0, 0, 0, 0);
  }
  // max |k - mean| per key group: this lane's 8 channels of its keys, then the warp (16 lanes a row, 2 rows), then
  // the 8 warps through shared memory.
  float gm[kQ8KGroups] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
  for (int st = 0; st < kSteps; ++st) {
    if (key0 + 2 * st < kv_len) {
      float f[8];
      q8_unpack8<kFp16>(kr[st], f);
#pragma unroll
      for (int e = 0; e < 8; ++e) gm[st % 4] = q8_nanmax(gm[st % 4], fabsf(f[e] - mean[e]));
    }
  }
#pragma unroll
  for (int g = 0; g < kQ8KGroups; ++g) {
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) gm[g] = q8_nanmax(gm[g], __shfl_xor_sync(0xffffffff, gm[g], o));
  }
  if (lane == 0) {
#pragma unroll
    for (int g = 0; g < kQ8KGroups; ++g) gmax[warp][g] = gm[g];
  }
  __syncthreads();
  float kinv[kQ8KGroups];
  const int64_t nkb = p.skv_pad / kQ8BlockN;
#pragma unroll
  for (int g = 0; g < kQ8KGroups; ++g) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kQ8Kv2Threads / 32; ++w) t = q8_nanmax(t, gmax[w][g]);
    kinv[g] = t > 0.f ? kQ8IntMax / t : 1.f;
    if (threadIdx.x == g) p.ws.k_scale[(bh * nkb + blockIdx.x) * kQ8KGroups + g] = q8_scaled(t) ? t / kQ8IntMax : 1.f;
  }
  // K' codes: 8 bytes a key (a warp store: two whole 128-byte rows). V to e4m3: two words a key, channels c0..c0+3
  // and c0+4..c0+7.
  int8_t* kd = p.ws.k8 + (static_cast<int64_t>(bh) * p.skv_pad + key0) * kD + c0;
  uint32_t ve[kSteps][2];
#pragma unroll
  for (int st = 0; st < kSteps; ++st) {
    const bool valid = key0 + 2 * st < kv_len;
    float f[8], v[8];
    q8_unpack8<kFp16>(kr[st], f);
    q8_unpack8<kFp16>(vr[st], v);
    uint32_t w[2] = {0, 0};
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      const float x = valid ? (f[e] - mean[e]) * kinv[st % 4] : 0.f;
      w[e / 4] |= (static_cast<uint32_t>(q8_round(x)) & 0xff) << (8 * (e % 4));
    }
    *reinterpret_cast<uint2*>(kd + static_cast<int64_t>(2 * st) * kD) = make_uint2(w[0], w[1]);
    ve[st][0] = q8_e4m3x4(v[0] * vinv[0], v[1] * vinv[1], v[2] * vinv[2], v[3] * vinv[3]);
    ve[st][1] = q8_e4m3x4(v[4] * vinv[4], v[5] * vinv[5], v[6] * vinv[6], v[7] * vinv[7]);
  }
  // V^T: channel c's 16 keys of this warp's group, permuted (q8_vperm_pos: key 2 st + s at byte 4 (st % 4) + s +
  // 2 (st / 4)), are 16 contiguous bytes of [B, H, D, Skv_pad]. The lane pair (sub 0, sub 1) holds them for channels
  // c0..c0+7: sub 0 keeps c0..c0+3 and sub 1 c0+4..c0+7, each sending the other its words of the other half.
  uint32_t mine[kSteps], other[kSteps];
#pragma unroll
  for (int st = 0; st < kSteps; ++st) {  // (selects, not ve[st][sub]: a run-time index puts ve in local memory)
    mine[st] = sub == 0 ? ve[st][0] : ve[st][1];
    other[st] = __shfl_xor_sync(0xffffffff, sub == 0 ? ve[st][1] : ve[st][0], 16);
  }
  // V^T leaves through shared memory (VIDATTN_Q8_KV2_SMEM_T): each warp's 16 keys of every channel go to a
  // [channel][128 keys] tile, then the block stores whole 128-byte lines (a warp instruction four channels' lines).
  // Stored straight (0), a warp instruction wrote 32 channels' 16-byte pieces, each half of a 32-byte sector, the other
  // half from another warp. The tile's 16-byte chunks are XOR-swizzled by (channel / 8) % 8: the eight lanes of a
  // quarter warp write channels 8 apart (the same chunk column), the reads take one channel's eight chunks; both then
  // touch eight distinct bank groups.
#if VIDATTN_Q8_KV2_SMEM_T
  __shared__ uint4 vt_tile[kD][kQ8BlockN / 16];
#else
  uint8_t* vd = p.ws.vt8 + (static_cast<int64_t>(bh) * kD + c0 + 4 * sub) * p.skv_pad + blockIdx.x * kQ8BlockN +
                warp * 16;
#endif
#pragma unroll
  for (int e = 0; e < 4; ++e) {
    // byte e of the even key's word, then byte e of the odd key's: which of mine / other is even is this lane's sub.
    const uint32_t sel = sub == 0 ? (e | (4 + e) << 4) : ((4 + e) | e << 4);
    uint32_t word[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t lo = __byte_perm(mine[j], other[j], sel), hi = __byte_perm(mine[j + 4], other[j + 4], sel);
      word[j] = __byte_perm(lo, hi, 0x5410);
    }
#if VIDATTN_Q8_KV2_SMEM_T
    const int ch = c0 + 4 * sub + e;
    vt_tile[ch][warp ^ ((ch / 8) % 8)] = make_uint4(word[0], word[1], word[2], word[3]);
#else
    *reinterpret_cast<uint4*>(vd + static_cast<int64_t>(e) * p.skv_pad) = make_uint4(word[0], word[1], word[2], word[3]);
#endif
  }
#if VIDATTN_Q8_KV2_SMEM_T
  __syncthreads();
  uint8_t* vblk = p.ws.vt8 + static_cast<int64_t>(bh) * kD * p.skv_pad + blockIdx.x * kQ8BlockN;
#pragma unroll
  for (int r = 0; r < kD * (kQ8BlockN / 16) / kQ8Kv2Threads; ++r) {
    const int i = threadIdx.x + r * kQ8Kv2Threads, ch = i / 8, chunk = i % 8;
    *reinterpret_cast<uint4*>(vblk + static_cast<int64_t>(ch) * p.skv_pad + 16 * chunk) =
        vt_tile[ch][chunk ^ ((ch / 8) % 8)];
  }
#endif
}

}  // namespace vidattn::sm90
