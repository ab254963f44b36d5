// The 8-bit attention kernel (precision="8bit"), sm_90a: S = Q K'^T with INT8 wgmma (.s32.s8.s8, exact integer
// accumulation), an exact online softmax in base 2 with a static offset, P = 2^(s - m + 8) in [0, 256] packed to e4m3
// in registers, and O_tile = P V with e4m3 wgmma (.f32.e4m3.e4m3) against V^T. Operands come from the pre-pass
// (q8_quant.cuh): Q and K' in INT8 with per-row / per-(128-key block, key group) scales, V^T in e4m3 with per-channel
// scales, keys permuted so P needs no shuffles.
// Structure as the bf16 kernel (flash_fwd.cuh): warpgroup 0 streams with TMA (one thread) into an mbarrier-guarded
// ring of K/V stages; two consumer warpgroups of 64 query rows each take turns on the tensor cores (ping-pong), and
// inside each the S of key block j is issued together with the P V of block j-1 so the softmax of S_j overlaps it.
// Two-level accumulation: every block's P V goes into a fresh fp32 accumulator (the e4m3 wgmma adds with about 22
// bits, a drift over hundreds of blocks) that is merged as O = O * alpha + O_tile, one FFMA per element, which also
// is the rescale of the online softmax. One CTA per 128-row tile (not persistent). Pure CUDA + PTX: no torch.
#pragma once
#include <cstdint>
#include <cuda.h>

#include "ptx.cuh"
#include "q8_quant.cuh"
#include "row_sum.cuh"
#include "wgmma8_ops.cuh"

namespace vidattn::sm90 {

// kWGs consumer warpgroups of 64 rows. D=64 has a build with three (192-row tiles at 160 registers; capi_8bit.cuh
// picks): there the tensor cores need half the time per score of D=128 and the softmax is the bottleneck, so a third
// warpgroup gives the schedulers more warps to hide its latencies with, as in the bf16 kernel (three at D=64
// measured 1.1x there).
template <int kD, int kWGs = 2>
struct Q8Traits {
  static constexpr int kConsumerWGs = kWGs;
  static constexpr int kBlockM = 64 * kConsumerWGs;
  static constexpr int kBlockN = kQ8BlockN;
  static constexpr int kThreads = 128 * (kConsumerWGs + 1);
  static constexpr int kRowBytes = kD;           // Q8 / K8 rows: one byte per channel
  static constexpr int kSwizzle = kD == 128 ? 128 : 64;
  // Three warpgroups at D=128 (the sequential schedule) drift apart by more than two: one stage more there (fits).
  static constexpr int kStages = kD == 128 ? (kConsumerWGs == 3 ? 5 : 4) : 6;
  static constexpr int kQBytes = kBlockM * kD;
  static constexpr int kKBytes = kBlockN * kD;
  static constexpr int kVBytes = kD * kBlockN;   // V^T: D rows of 128 keys (what TMA loads)
  static constexpr int kVRows = kD + 8;          // and 8 rows of ones: P V's row-sum columns (kSumMma)
  static constexpr int kOChunks = kD / 64;       // O leaves in 16-row x 64-column boxes
  static constexpr uint32_t kProducerRegs = 24;
  static constexpr uint32_t kConsumerRegs = kConsumerWGs == 3 ? 160 : 240;
  // setmaxnreg moves registers only within what the CTA got at launch: kThreads x (65536 / kThreads rounded down to
  // the allocation's 8), not the whole file. Four consumer warpgroups (v16, dev/experiments/q8_v16_four_warpgroups
  // .patch) at 120 each passed the file-sized check and hung in setmaxnreg.inc (call O1 of the tenth sitting).
  static constexpr uint32_t kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= kLaunchRegs * kThreads,
                "setmaxnreg.inc would wait forever: the CTA's registers are those of its launch");
};

template <int kD, int kWGs>
struct Q8Shared {
  using T = Q8Traits<kD, kWGs>;
  alignas(1024) int8_t q[T::kQBytes];
  alignas(1024) int8_t k[T::kStages][T::kKBytes];
  alignas(1024) uint8_t v[T::kStages][T::kVRows * T::kBlockN];
  alignas(1024) uint16_t o_scratch[T::kConsumerWGs * 4][16 * 64];  // one 16 x 64 box per consumer warp
  uint64_t q_full;
  uint64_t k_full[T::kStages];
  uint64_t k_empty[T::kStages];
  uint64_t v_full[T::kStages];
  uint64_t v_empty[T::kStages];
};

struct Q8FwdParams {
  CUtensorMap tm_q;   // Q8 as (D, B*H*Sq_pad) bytes, box (D, 128)
  CUtensorMap tm_k;   // K8 as (D, B*Hkv*Skv_pad) bytes, box (D, 128) (Hkv: key/value heads)
  CUtensorMap tm_v;   // V^T as (Skv_pad, B*Hkv*D) bytes, box (128, D)
  CUtensorMap tm_o;   // O as the bf16 kernel's: (D, Sq, H, B) 16-bit, box (64, 16)
  const float* q_scale;
  const float* k_scale;
  const float* v_scale;
  const float* lse_corr;
  float* lse;         // (B, H, Sq) or nullptr
  const int* kv_lens;
  int seqlen_q, seqlen_kv, heads, sq_pad, skv_pad;
  int kv_heads, kv_group;  // key/value heads (= heads without GQA) and heads / kv_heads: q8_kv_row
  // Prep mode 2 (q8_quantize_q_tile): q_in is the caller's 16-bit Q (kFp16 as O), quantized by the CTA itself into
  // s.q instead of loaded as INT8 by TMA; nullptr: tm_q. The row scales go where the consumers read them (q_scale's
  // memory), with LSE also each row's scale * q . mean(K) (from k_sum, the statistics pass's channel sums).
  const void* q_in;
  int64_t q_in_stride[3];  // (batch, seq, head), elements
  float* q_scale_out;      // = q_scale
  float* lse_corr_out;     // = lse_corr
  const float* k_sum;
  float scale;             // softmax scale
  // The tail launch (capi_8bit.cuh, q8_plan_tail): num_m_blocks > 0 makes the grid one-dimensional, CTA i taking
  // tile tile_base + i (tile order as flash_fwd.cuh's decode_tile: Q block fastest, then head, then batch; the
  // combine kernel reads the same order); 0, the (Q block, head, batch) grid. In the split build (kSplit) CTA i takes
  // key range i % kv_splits of tile tile_base + i / kv_splits and leaves its unnormalised O (times V's channel
  // scales) and row statistics in ws_o / ws_ml for combine_kernel (combine.cuh), as the bf16 tail launch does.
  int num_m_blocks, tile_base, kv_splits;
  float* ws_o;   // [item][kBlockM][kD]
  float* ws_ml;  // [item][kBlockM][2]: row max in log2 units (LSE's base), row sum
};

// ---- PTX this kernel adds to ptx.cuh (same conventions) ---------------------------------------------------------
namespace q8ptx {
// 2-D tile load global -> shared (cp.async.bulk.tensor, PTX ISA 9.7.9.25.5.1), completion counted on `bar`.
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%3, %4}], [%2];" ::
          "r"(ptx::smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(ptx::smem_addr(bar)), "r"(c0), "r"(c1)
      : "memory");
}
// Shared-memory matrix descriptor (9.7.15.5.1.2.2) for K-major tiles with a 128-byte (mode 1) or 64-byte (mode 2)
// swizzle: 8-row core groups `sbo` bytes apart; the k32 step advances the start address by 32 bytes in the row.
template <int kSwizzle>
__device__ __forceinline__ uint64_t smem_desc(uint32_t addr) {
  constexpr uint64_t mode = kSwizzle == 128 ? 1 : 2;
  constexpr uint32_t sbo = 8 * kSwizzle;
  uint64_t d = 0;
  d |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  d |= static_cast<uint64_t>(1) << 16;  // LBO (unused for swizzled K-major)
  d |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  d |= mode << 62;
  return d;
}
// smem_desc's two words put together without arithmetic (mov.b64 of a vector, PTX ISA 9.7.9.10): kDescInc (v10)
// builds a block's descriptors as one base low word plus 2 per k32 step (32 bytes >> 4; the 18-bit address field
// cannot carry out: shared memory ends below 2^18 bytes) and this constant high word, instead of smem_desc's mask,
// shift and OR per wgmma (ptxas rematerialized them: ~7 instructions per descriptor, ~76 per block).
__device__ __forceinline__ uint64_t desc_pack(uint32_t lo, uint32_t hi) {
  uint64_t d;
  asm("mov.b64 %0, {%1, %2};" : "=l"(d) : "r"(lo), "r"(hi));
  return d;
}
template <int kSwizzle>
__device__ __forceinline__ uint32_t smem_desc_lo(uint32_t addr) {
  return ((addr & 0x3FFFF) >> 4) | (1u << 16);
}
template <int kSwizzle>
constexpr uint32_t smem_desc_hi() {
  return ((8u * kSwizzle) >> 4 & 0x3FFF) | (kSwizzle == 128 ? 1u : 2u) << 30;
}
// ex2.approx.f16x2 (9.7.4.x): two exponentials of packed halves per instruction (kExp16).
__device__ __forceinline__ uint32_t ex2_f16x2(uint32_t x) {
  uint32_t y;
  asm("ex2.approx.f16x2 %0, %1;" : "=r"(y) : "r"(x));
  return y;
}
// Two f16x2 to four e4m3 bytes (cvt.rn.satfinite.e4m3x2.f16x2, 9.7.9.21), a's halves in the low two bytes.
__device__ __forceinline__ uint32_t e4m3x4_from_f16x2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f16x2 lo, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f16x2 hi, %2;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ uint32_t hadd2(uint32_t a, uint32_t b) {
  uint32_t r;
  asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
  return r;
}
__device__ __forceinline__ float2 f16x2_to_float2(uint32_t x) {
  float2 r;
  asm("{\n.reg .b16 lo, hi;\nmov.b32 {lo, hi}, %2;\ncvt.f32.f16 %0, lo;\ncvt.f32.f16 %1, hi;\n}\n"
      : "=f"(r.x), "=f"(r.y)
      : "r"(x));
  return r;
}
// A shared-memory word that no compiler may move or drop (for a dependency on a preceding barrier).
__device__ __forceinline__ uint32_t ld_shared_volatile(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.volatile.shared.u32 %0, [%1];" : "=r"(v) : "r"(addr) : "memory");
  return v;
}
__device__ __forceinline__ int tid_x_volatile() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}
// A read-only global load the compiler may not hoist out of a loop (asm volatile): for values cheaper to load again
// than to keep in a register.
__device__ __forceinline__ float ld_nc(const float* ptr) {
  float v;
  asm volatile("ld.global.nc.f32 %0, [%1];" : "=f"(v) : "l"(ptr));
  return v;
}
// Whether any of the `count` threads on named barrier `id` has `pred` set (bar.red.or.pred, PTX ISA 9.7.13.1): the
// lazy reference's warpgroup-uniform redo decision (kLazy), in one instruction that also synchronizes the warpgroup.
__device__ __forceinline__ bool bar_red_or(uint32_t id, uint32_t count, bool pred) {
  uint32_t r;
  asm volatile(
      "{\n.reg .pred p, q;\nsetp.ne.u32 p, %1, 0;\nbar.red.or.pred q, %2, %3, p;\nselp.u32 %0, 1, 0, q;\n}\n"
      : "=r"(r)
      : "r"(static_cast<uint32_t>(pred)), "r"(id), "r"(count)
      : "memory");
  return r != 0;
}
// One lane of the (converged) warp elected (elect.sync, PTX ISA 9.7.13.11), as a predicate only: kLazy's k_empty /
// v_empty arrives, where `lane == 0` kept across the loop cost a register (a spill at 160).
__device__ __forceinline__ bool elect_one() {
  uint32_t r;
  asm volatile("{\n.reg .pred p;\nelect.sync _|p, 0xffffffff;\nselp.u32 %0, 1, 0, p;\n}\n" : "=r"(r));
  return r != 0;
}
__device__ __forceinline__ float i2f(int32_t x) {
  float y;
  asm("cvt.rn.f32.s32 %0, %1;" : "=f"(y) : "r"(x));
  return y;
}
}  // namespace q8ptx

// 2^x on the FMA pipe (kPoly): MUFU.EX2 runs 16 lanes per clock per SM, as many scores as the 8-bit tensor cores take
// at D=128, so a share of the exponentials goes to the FP32 pipe instead (Cody-Waite split x = n + f, f in [0, 1);
// 2^f by a cubic; n added to the exponent bits). The cubic's relative error is under 1e-4 (fitted here for minimax
// relative error with p(0) = 1), far inside e4m3's 2^-4 rounding of P and under bf16's of the output. x is clamped at
// -126 so 2^n stays normal: a masked key (-inf) gives 2^-126 in place of 0, nothing against a row sum >= 1 (and 0
// once rounded to e4m3). Nine instructions: FMNMX, FADD.RM, two FADD, three FFMA, shift and add.
__device__ __forceinline__ float q8_exp2_poly(float x) {
  constexpr float kShifter = 12582912.f;  // 1.5 * 2^23: x + it, rounded down, holds floor(x) in its low mantissa bits
  x = fmaxf(x, -126.f);
  const float t = __fadd_rd(x, kShifter);
  const float f = x - (t - kShifter);
  const float p = fmaf(fmaf(fmaf(0.07714326f, f, 0.22765099f), f, 0.69507056f), f, 1.f);
  return __uint_as_float(__float_as_uint(p) + (__float_as_uint(t) << 23));  // (unsigned: the shift drops high bits)
}

template <int N>
__device__ __forceinline__ void q8_fence_regs(int32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void q8_fence_frag(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][r])::"memory");
  }
}

constexpr int32_t kQ8MagicBits = 0x4B400000;  // the bits of 1.5 * 2^23
constexpr float kQ8Magic = 12582912.f;
__device__ __forceinline__ float q8_magic_float(int32_t x) { return __int_as_float(x + kQ8MagicBits); }

// kCvt 2: the S accumulator starts at the bits of 1.5 * 2^23 (no overflow: |x| < 2^21 beside kQ8MagicBits), so the
// integer sums leave the tensor cores as the floats 1.5 * 2^23 + x. Set before the wgmma fence that precedes S.
template <int kCvt, int N>
__device__ __forceinline__ void q8_bias_sacc(int32_t (&sacc)[N]) {
  if constexpr (kCvt == 2) {
#pragma unroll
    for (int i = 0; i < N; ++i) sacc[i] = kQ8MagicBits;
  }
}

__device__ __forceinline__ float q8_quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float q8_quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// Turns on the tensor cores, round robin over the consumer warpgroups (named barriers 3 + w: "warpgroup w may issue",
// as flash_fwd.cuh's SchedBarrier).
__device__ __forceinline__ void q8_turn_wait(int cwg) { ptx::named_barrier_sync(3 + cwg, 256); }
template <int kWGs>
__device__ __forceinline__ void q8_turn_pass(int cwg) {
  ptx::named_barrier_arrive(3 + (cwg + 1 == kWGs ? 0 : cwg + 1), 256);
}
// As q8_turn_pass, with `zero` (always 0) added to the barrier's id: the arrive then waits for what `zero` was
// computed from.
template <int kWGs>
__device__ __forceinline__ void q8_turn_pass_dep(int cwg, uint32_t zero) {
  ptx::named_barrier_arrive(3 + (cwg + 1 == kWGs ? 0 : cwg + 1) + zero, 256);
}

// S = Q K'^T over one 128-key block: D / 32 INT8 wgmmas, both operands K-major in shared memory.
// kBiased: the first wgmma adds to what sacc holds (the bias of kCvt 2, set before the wgmma fence) instead of
// overwriting it.
// kDescInc (v10): 1 K's descriptors by increments (uniform registers), 2 Q's too (per-thread registers to ptxas:
// one more live across the issue, which the lazy reference's build cannot spare).
template <int kD, bool kBiased = false, int kDescInc = 0>
__device__ __forceinline__ void q8_issue_qk(int32_t (&sacc)[kQ8BlockN / 2], uint32_t q_smem, uint32_t k_smem) {
  using T = Q8Traits<kD, 2>;  // (the swizzle depends on kD only)
  [[maybe_unused]] const uint32_t qa = q8ptx::smem_desc_lo<T::kSwizzle>(q_smem);
  [[maybe_unused]] const uint32_t kb = q8ptx::smem_desc_lo<T::kSwizzle>(k_smem);
#pragma unroll
  for (int kk = 0; kk < kD / 32; ++kk) {
    if constexpr (kDescInc > 0) {
      constexpr uint32_t hi = q8ptx::smem_desc_hi<T::kSwizzle>();
      const uint64_t da = kDescInc == 2 ? q8ptx::desc_pack(qa + 2 * kk, hi)
                                        : q8ptx::smem_desc<T::kSwizzle>(q_smem + kk * 32);
      ptx::WgmmaS8<kQ8BlockN>::ss(sacc, da, q8ptx::desc_pack(kb + 2 * kk, hi), kBiased || kk > 0);
    } else {
      const uint64_t da = q8ptx::smem_desc<T::kSwizzle>(q_smem + kk * 32);
      const uint64_t db = q8ptx::smem_desc<T::kSwizzle>(k_smem + kk * 32);
      ptx::WgmmaS8<kQ8BlockN>::ss(sacc, da, db, kBiased || kk > 0);
    }
  }
  ptx::wgmma_commit();
}

// O_tile = P V over one 128-key block: 4 e4m3 wgmmas of 32 keys, P from registers, V^T (rows of 128 keys) K-major.
// The first overwrites O_tile (scale-d 0): a fresh accumulator per block.
// kNpv = D, or D + 8 with the ones rows (kSumMma): then O_tile's last 8 columns are each row's sum of P as rounded.
template <int kNpv, int kDescInc = 0>
__device__ __forceinline__ void q8_issue_pv(float (&ot)[kNpv / 2], const uint32_t (&pa)[kQ8BlockN / 32][4],
                                            uint32_t v_smem) {
  [[maybe_unused]] const uint32_t vb = q8ptx::smem_desc_lo<128>(v_smem);
#pragma unroll
  for (int kk = 0; kk < kQ8BlockN / 32; ++kk) {
    if constexpr (kDescInc > 0) {
      ptx::WgmmaE4m3<kNpv>::rs(ot, pa[kk], q8ptx::desc_pack(vb + 2 * kk, q8ptx::smem_desc_hi<128>()), kk > 0);
    } else {
      const uint64_t db = q8ptx::smem_desc<128>(v_smem + kk * 32);
      ptx::WgmmaE4m3<kNpv>::rs(ot, pa[kk], db, kk > 0);
    }
  }
  ptx::wgmma_commit();
}

constexpr float kQ8POffset = 8.f;  // log2 of P's largest value, 256, under e4m3's 448

// Per thread, the max of each row's integer scores over 4 chains (kMask: keys past kv_len taken as INT32_MIN; a
// select in the max rather than a masked copy, which would keep 64 more registers live beside S).
template <int kN, bool kMask>
__device__ __forceinline__ void q8_int_part_max(const int32_t (&sacc)[kN / 2], int32_t (&part)[2][4], int kv0,
                                                int kv_len, int col_in_group) {
  auto val = [&](int i, int e, int r) {
    const int32_t x = sacc[4 * i + 2 * r + e];
    return kMask && kv0 + 8 * i + col_in_group + e >= kv_len ? INT32_MIN : x;
  };
#pragma unroll
  for (int r = 0; r < 2; ++r) {
#pragma unroll
    for (int ch = 0; ch < 4; ++ch) part[r][ch] = max(val(ch, 0, r), val(ch, 1, r));
#pragma unroll
    for (int i = 4; i < kN / 8; ++i) part[r][i % 4] = max(part[r][i % 4], max(val(i, 0, r), val(i, 1, r)));
  }
}

// As q8_int_part_max in three chains of 11, 11 and 10 values per row (v12): each step of a chain takes two values
// (VIMNMX3), so the 32 values of a row need 16 instructions with the chains' join instead of 18 (four chains of 8
// each start with a two-input max and need two joins). The max is the same whatever the order.
template <int kN, bool kMask>
__device__ __forceinline__ void q8_int_part_max3(const int32_t (&sacc)[kN / 2], int32_t (&part)[2][4], int kv0,
                                                 int kv_len, int col_in_group) {
  static_assert(kN == 128, "chains for the 32 values per row of a 128-key block");
  auto val = [&](int k, int r) {  // value k of row r (k = 2 i + e: accumulator entry 4 i + 2 r + e)
    const int i = k / 2, e = k % 2;
    const int32_t x = sacc[4 * i + 2 * r + e];
    return kMask && kv0 + 8 * i + col_in_group + e >= kv_len ? INT32_MIN : x;
  };
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    int32_t m0 = val(0, r), m1 = val(11, r), m2 = val(22, r);
#pragma unroll
    for (int k = 1; k < 11; k += 2) {
      m0 = max(m0, max(val(k, r), val(k + 1, r)));
      m1 = max(m1, max(val(11 + k, r), val(12 + k, r)));
    }
#pragma unroll
    for (int k = 23; k < 31; k += 2) m2 = max(m2, max(val(k, r), val(k + 1, r)));
    part[r][0] = m0;
    part[r][1] = m1;
    part[r][2] = max(m2, val(31, r));
  }
}

// The keys of a block's tail past kv_len: -inf, so their p is exactly 0 (this thread holds keys kv0 + 8 i +
// col_in_group + {0, 1} of both its rows).
template <int kN>
__device__ __forceinline__ void q8_mask_tail(float (&pf)[kN / 2], int kv0, int kv_len, int col_in_group) {
  const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (kv0 + 8 * i + col_in_group + e >= kv_len) {
        pf[4 * i + e] = kNegInf;
        pf[4 * i + 2 + e] = kNegInf;
      }
    }
  }
}

// q8_softmax's first half for kCvt 1 and 2: the row max over the integer scores (IMNMX straight on the accumulator),
// one I2F per row and thread (the scale c differs between the quad's key groups, so the quad's max is taken after
// it), and the scores as floats 1.5 * 2^23 + x in place (masked: -inf), with neg the exponent's addend that undoes
// the bias.
// kSteady (v12): the row max in three-input chains (q8_int_part_max3); and on a block without masked keys (not the tail) and with kCvt 2, the row's max accumulator is the
// float 1.5 * 2^23 + x as it stands (x = im - bias, |x| < 2^21), and subtracting 1.5 * 2^23 gives x exactly (both in
// one binade: Sterbenz), as the I2F of im - bias does: the same mx bit for bit, in an FADD instead of the INT32_MIN
// test, the integer subtraction and the I2F (three instructions and the conversion's latency off S -> exponentials).
template <int kN, int kCvt, int kHead = 0, bool kSteady = false>
__device__ __forceinline__ void q8_softmax_max_int(const int32_t (&sacc)[kN / 2], float (&pf)[kN / 2],
                                                   const float (&c)[2], float (&row_max)[2], float (&alpha)[2],
                                                   float (&neg)[2], int kv0, int kv_len, int col_in_group) {
  const float kNegInf = -__int_as_float(0x7f800000);
  constexpr int32_t kBias = kCvt == 2 ? kQ8MagicBits : 0;  // what the accumulator already holds
  const bool tail = kv0 + kN > kv_len;
  int32_t part[2][4];
  if constexpr (kSteady) {  // (three chains: part[r][3] unused)
    if (tail) q8_int_part_max3<kN, true>(sacc, part, kv0, kv_len, col_in_group);
    else q8_int_part_max3<kN, false>(sacc, part, kv0, kv_len, col_in_group);
  } else {
    if (tail) q8_int_part_max<kN, true>(sacc, part, kv0, kv_len, col_in_group);
    else q8_int_part_max<kN, false>(sacc, part, kv0, kv_len, col_in_group);
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int32_t im = kSteady ? max(max(part[r][0], part[r][1]), part[r][2])
                               : max(max(part[r][0], part[r][1]), max(part[r][2], part[r][3]));
    // A thread whose keys are all masked has INT32_MIN here: its -inf loses the quad's max to the block's key 0.
    float mx;
    if (kSteady && kCvt == 2 && !tail) mx = (__int_as_float(im) - kQ8Magic) * c[r];
    else mx = im == INT32_MIN ? kNegInf : q8ptx::i2f(im - kBias) * c[r];
    // kHead (kLazy): the reference set kHead above the block's max, so later blocks may climb that far (plus
    // e4m3's margin) before their p saturates and the block is redone.
    mx = q8_quad_max(mx);
    if constexpr (kHead != 0) mx += static_cast<float>(kHead);  // (not for 0: x + 0 is not x for -0, kept exact)
    mx = fmaxf(mx, row_max[r]);
    alpha[r] = ptx::exp2_approx(row_max[r] - mx);
    // The exponent is (1.5 * 2^23 + x) c + neg = x c - mx + 8: the bias's product folded in here, once per row.
    neg[r] = fmaf(-kQ8Magic, c[r], kQ8POffset - mx);
    row_max[r] = mx;
  }
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) pf[i] = kCvt == 2 ? __int_as_float(sacc[i]) : q8_magic_float(sacc[i]);
  if (tail) q8_mask_tail<kN>(pf, kv0, kv_len, col_in_group);
}

// The softmax of one block: dequantize (I2F, then the per-row x per-group multiplier c folded into the exponent's
// FFMA), row max (exact: the current block's own max is in it, so p <= 2^8), p = 2^(s c - m + 8), and with kSum the
// row sums of the unrounded p in fp32 (else the tensor cores sum P as rounded: kSumMma). alpha = 2^(m_old - m_new) is
// what O must be scaled by.
// kExp16: the exponent computed in fp32, rounded to f16 (|x| < 32 where p matters: error < 2^-6, far inside e4m3's
// 2^-4), two exponentials per MUFU instruction into ph (packed halves, P's next stop before e4m3); the row sums then
// come from the tensor cores (kSumMma). MUFU is the softmax's scarce unit: 16 per clock per SM, as many scores as
// the 8-bit tensor cores take at D=128 and half of them at D=64. kExp16 with kSum (mode 3): the row sums of the
// f16 p by HADD2 in the softmax instead (no ones columns, no extra accumulator registers).
// kPoly (with fp32 exponentials): that many of each thread's kN / 8 groups of four exponentials per block by
// q8_exp2_poly instead of MUFU, spread evenly through the block so both pipes run side by side.
//
// kCvt: how the INT8 scores become floats. 0: one I2F per score (cvt.rn.f32.s32, I2FP in the SASS: it was thought to
// share MUFU's quarter rate, but removing it bought +3-7% kernel only, not the +12-20% that predicted; dev/NOTES_8bit.md v6/v7).
// 1: the row max in the integer domain (IMNMX), one I2F per row, and each score as the float
// 1.5 * 2^23 + x, built by one integer add of the bits (q8_magic_float): exact for |x| < 2^22, and |x| <= D * 127^2
// < 2^21 at D <= 128. The -1.5 * 2^23 * c this leaves in every exponent is folded into the FFMA's addend, which
// already carries -max + 8 (its rounding: under one integer unit of the score, i.e. under 0.75 c, against the INT8
// rounding of a single q k term of up to 63.5 units). 2: as 1, with the bias added by the tensor cores instead: the
// S accumulator starts at the bits of 1.5 * 2^23 (q8_issue_qk<kD, true>), so the scores leave the wgmma as floats.
// Split in two so a schedule can put a turn between them (q8_consumer_seq's kExpTurns): q8_softmax_max (scores to
// floats, row max, alpha, the exponent's addend neg) and q8_softmax_exp (the exponentials and row sums: the MUFU work).
template <int kN, int kCvt = 0, int kHead = 0, bool kSteady = false>
__device__ __forceinline__ void q8_softmax_max(const int32_t (&sacc)[kN / 2], float (&pf)[kN / 2],
                                               const float (&c)[2], float (&row_max)[2], float (&alpha)[2],
                                               float (&neg)[2], int kv0, int kv_len, int col_in_group) {
  static_assert(kCvt >= 0 && kCvt <= 2, "kCvt: 0 I2F, 1 magic add, 2 biased accumulator");
  static_assert(kHead == 0 || kCvt > 0, "the headroom is built with the integer row max only");
  if constexpr (kCvt > 0) {
    q8_softmax_max_int<kN, kCvt, kHead, kSteady>(sacc, pf, c, row_max, alpha, neg, kv0, kv_len, col_in_group);
  } else {
#pragma unroll
  for (int i = 0; i < kN / 2; ++i) pf[i] = q8ptx::i2f(sacc[i]);
  if (kv0 + kN > kv_len) q8_mask_tail<kN>(pf, kv0, kv_len, col_in_group);
  constexpr int kChains = 4;
  float part[2][kChains];
#pragma unroll
  for (int ch = 0; ch < kChains; ++ch) {
    part[0][ch] = fmaxf(pf[4 * ch], pf[4 * ch + 1]);
    part[1][ch] = fmaxf(pf[4 * ch + 2], pf[4 * ch + 3]);
  }
#pragma unroll
  for (int i = kChains; i < kN / 8; ++i) {
    part[0][i % kChains] = fmaxf(part[0][i % kChains], fmaxf(pf[4 * i], pf[4 * i + 1]));
    part[1][i % kChains] = fmaxf(part[1][i % kChains], fmaxf(pf[4 * i + 2], pf[4 * i + 3]));
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    // c > 0 always (the pre-pass never writes a zero scale), so max(x) * c = max(x * c) and -inf stays -inf.
    float mx = fmaxf(fmaxf(part[r][0], part[r][1]), fmaxf(part[r][2], part[r][3])) * c[r];
    mx = fmaxf(q8_quad_max(mx), row_max[r]);
    // Key 0 of the first block is valid, so mx is finite; there alpha = 2^-inf = 0 multiplies the still-zero sum.
    alpha[r] = ptx::exp2_approx(row_max[r] - mx);
    neg[r] = kQ8POffset - mx;
    row_max[r] = mx;
  }
  }
}

// kSumFirst (v12): the fp32 row-sum chains start at their first group's pair sum instead of 0 + it (ptxas keeps the
// FADD with RZ: 0 + x is not x for x = -0). p >= +0, so the pair sums are never -0 and the sums are bit for bit the
// same: 4 FADD fewer per block.
template <int kN, bool kSum, bool kExp16, int kPoly = 0, bool kSumFirst = false>
__device__ __forceinline__ void q8_softmax_exp(float (&pf)[kN / 2], uint32_t (&ph)[kN / 4], const float (&c)[2],
                                               const float (&neg)[2], float (&row_sum)[2], const float (&alpha)[2]) {
  static_assert(!(kExp16 && kPoly > 0), "the polynomial share is for fp32 exponentials");
  if constexpr (kExp16) {
    // With kSum (mode 3) the row sums add the packed halves, one HADD2 per two scores, one chain per row (its
    // latency hides between the MUFU ops; a second chain cost the three-warpgroup build a spill): at most 32 values
    // <= 256 per half, so f16's range holds them and its 2^-11 rounding stays far under P's e4m3.
    uint32_t hs[2] = {0u, 0u};
#pragma unroll
    for (int i = 0; i < kN / 8; ++i) {
      ph[2 * i] = q8ptx::ex2_f16x2(
          ptx::pack2<true>(fmaf(pf[4 * i + 0], c[0], neg[0]), fmaf(pf[4 * i + 1], c[0], neg[0])));
      ph[2 * i + 1] = q8ptx::ex2_f16x2(
          ptx::pack2<true>(fmaf(pf[4 * i + 2], c[1], neg[1]), fmaf(pf[4 * i + 3], c[1], neg[1])));
      if constexpr (kSum) {
        hs[0] = q8ptx::hadd2(hs[0], ph[2 * i]);
        hs[1] = q8ptx::hadd2(hs[1], ph[2 * i + 1]);
      }
    }
    if constexpr (kSum) {
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        const float2 a = q8ptx::f16x2_to_float2(hs[r]);
        row_sum[r] = row_sum[r] * alpha[r] + (a.x + a.y);
      }
    }
    return;
  }
  static_assert(kPoly >= 0 && kPoly <= kN / 8 && (kN / 8) % (kPoly > 0 ? kPoly : 1) == 0, "kPoly must divide kN / 8");
  constexpr int kPolyStride = kPoly > 0 ? kN / 8 / kPoly : 1;
  float ts[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) {
    if (kPoly > 0 && i % kPolyStride == kPolyStride - 1) {
      pf[4 * i + 0] = q8_exp2_poly(fmaf(pf[4 * i + 0], c[0], neg[0]));
      pf[4 * i + 1] = q8_exp2_poly(fmaf(pf[4 * i + 1], c[0], neg[0]));
      pf[4 * i + 2] = q8_exp2_poly(fmaf(pf[4 * i + 2], c[1], neg[1]));
      pf[4 * i + 3] = q8_exp2_poly(fmaf(pf[4 * i + 3], c[1], neg[1]));
    } else {
      pf[4 * i + 0] = ptx::exp2_approx(fmaf(pf[4 * i + 0], c[0], neg[0]));
      pf[4 * i + 1] = ptx::exp2_approx(fmaf(pf[4 * i + 1], c[0], neg[0]));
      pf[4 * i + 2] = ptx::exp2_approx(fmaf(pf[4 * i + 2], c[1], neg[1]));
      pf[4 * i + 3] = ptx::exp2_approx(fmaf(pf[4 * i + 3], c[1], neg[1]));
    }
    if constexpr (kSum) {
      if (kSumFirst && i < 2) {
        ts[0][i] = pf[4 * i + 0] + pf[4 * i + 1];
        ts[1][i] = pf[4 * i + 2] + pf[4 * i + 3];
      } else {
        ts[0][i % 2] += pf[4 * i + 0] + pf[4 * i + 1];
        ts[1][i % 2] += pf[4 * i + 2] + pf[4 * i + 3];
      }
    }
  }
  if constexpr (kSum) {
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * alpha[r] + (ts[r][0] + ts[r][1]);
  }
}

template <int kN, bool kSum, bool kExp16, int kPoly = 0, int kCvt = 0>
__device__ __forceinline__ void q8_softmax(const int32_t (&sacc)[kN / 2], float (&pf)[kN / 2],
                                           uint32_t (&ph)[kN / 4], const float (&c)[2],
                                           float (&row_max)[2], float (&row_sum)[2], float (&alpha)[2], int kv0,
                                           int kv_len, int col_in_group) {
  float neg[2];
  q8_softmax_max<kN, kCvt>(sacc, pf, c, row_max, alpha, neg, kv0, kv_len, col_in_group);
  q8_softmax_exp<kN, kSum, kExp16, kPoly>(pf, ph, c, neg, row_sum, alpha);
}

// P to e4m3 A fragments of the k32 steps: register 0 of step kk holds row r's keys 2t, 2t+1, 8+2t, 9+2t of keys
// 32kk .. 32kk+15 (accumulator entries 16kk + {0, 1, 4, 5}), register 1 the same of row r+8 ({2, 3, 6, 7}),
// registers 2, 3 the same 16 keys later; V^T's keys are permuted to match (q8_vperm_pos).
template <int kN>
__device__ __forceinline__ void q8_pack_p(const float (&pf)[kN / 2], uint32_t (&pa)[kN / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 32; ++kk) {
    const int b = 16 * kk;
    pa[kk][0] = q8_e4m3x4(pf[b + 0], pf[b + 1], pf[b + 4], pf[b + 5]);
    pa[kk][1] = q8_e4m3x4(pf[b + 2], pf[b + 3], pf[b + 6], pf[b + 7]);
    pa[kk][2] = q8_e4m3x4(pf[b + 8], pf[b + 9], pf[b + 12], pf[b + 13]);
    pa[kk][3] = q8_e4m3x4(pf[b + 10], pf[b + 11], pf[b + 14], pf[b + 15]);
  }
}

// As q8_pack_p from the packed halves of kExp16 (ph[k] holds accumulator entries 2k, 2k+1).
template <int kN>
__device__ __forceinline__ void q8_pack_p16(const uint32_t (&ph)[kN / 4], uint32_t (&pa)[kN / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 32; ++kk) {
    pa[kk][0] = q8ptx::e4m3x4_from_f16x2(ph[8 * kk + 0], ph[8 * kk + 2]);
    pa[kk][1] = q8ptx::e4m3x4_from_f16x2(ph[8 * kk + 1], ph[8 * kk + 3]);
    pa[kk][2] = q8ptx::e4m3x4_from_f16x2(ph[8 * kk + 4], ph[8 * kk + 6]);
    pa[kk][3] = q8ptx::e4m3x4_from_f16x2(ph[8 * kk + 5], ph[8 * kk + 7]);
  }
}

// O = O * alpha + O_tile: the two-level accumulation's promotion and the online softmax's rescale in one FFMA; with
// the ones columns (kNpv = D + 8) the row sums likewise, from column D (row r) and its pair entry (row r + 8).
template <int kD, int kNpv>
__device__ __forceinline__ void q8_merge(float (&o)[kD / 2], const float (&ot)[kNpv / 2], const float (&alpha)[2],
                                         float (&row_sum)[2]) {
  if constexpr (kNpv > kD) {
    row_sum[0] = fmaf(row_sum[0], alpha[0], ot[kD / 2]);
    row_sum[1] = fmaf(row_sum[1], alpha[1], ot[kD / 2 + 2]);
  }
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) {
    o[4 * i + 0] = fmaf(o[4 * i + 0], alpha[0], ot[4 * i + 0]);
    o[4 * i + 1] = fmaf(o[4 * i + 1], alpha[0], ot[4 * i + 1]);
    o[4 * i + 2] = fmaf(o[4 * i + 2], alpha[1], ot[4 * i + 2]);
    o[4 * i + 3] = fmaf(o[4 * i + 3], alpha[1], ot[4 * i + 3]);
  }
}

// Prep mode 2, in the prologue before the CTA's barrier: the 16-bit Q tile to INT8 in s.q, by every thread of the
// CTA (the consumers cannot start before Q is there, and the producer's K/V ring is already filling: q8_producer_fill
// ran first). Each row is kD / 8 adjacent lanes of 8 channels, quantized by q8_q_row_codes (the pre-pass's code, so
// the codes and scales are those of q8_q_kernel) and stored where TMA with the tile's swizzle would have put them:
// 16-byte chunk c of row r at chunk c ^ (r % 8) (D=128: 128B swizzle, 128-byte rows) or c ^ ((r / 2) % 4) (D=64: 64B
// swizzle, 64-byte rows), i.e. address bits [4, 7) or [4, 6) XOR bits [7, 10) or [7, 9) of the 1024-aligned tile.
// The row scales go to q_scale's memory, where the consumers read them after the CTA's barrier (the sequential
// schedule by ld.global.nc: safe here because the 128-byte lines of a tile's scales, 128 or 192 rows of 4 bytes at a
// 128-byte aligned offset, are written and read by this CTA alone, so no SM can hold a stale copy of one); with LSE
// also the rows' q . mean(K) term (the statistics pass ran before this kernel).
// All loads of a thread are issued before the first use. Rows past Sq are zeros with scale 1, as in the pre-pass.
template <int kD, int kWGs, bool kFp16>
__device__ __forceinline__ void q8_quantize_q_tile(const Q8FwdParams& p, Q8Shared<kD, kWGs>& s, int m_block, int b,
                                                   int h) {
  using T = Q8Traits<kD, kWGs>;
  constexpr int kLanesPerRow = kD / 8, kRowsPerPass = T::kThreads / kLanesPerRow;
  constexpr int kPasses = (T::kBlockM + kRowsPerPass - 1) / kRowsPerPass;
  constexpr uint32_t kSwizzleMask = T::kSwizzle == 128 ? 7 : 3;
  const int vec = threadIdx.x % kLanesPerRow, sub = threadIdx.x / kLanesPerRow;
  const int row0 = m_block * T::kBlockM;
  const uint16_t* qp = static_cast<const uint16_t*>(p.q_in) + b * p.q_in_stride[0] + h * p.q_in_stride[2] + vec * 8;
  uint4 u[kPasses];
#pragma unroll
  for (int ps = 0; ps < kPasses; ++ps) {
    const int r = ps * kRowsPerPass + sub;
    u[ps] = make_uint4(0, 0, 0, 0);
    if (r < T::kBlockM && row0 + r < p.seqlen_q)
      u[ps] = *reinterpret_cast<const uint4*>(qp + static_cast<int64_t>(row0 + r) * p.q_in_stride[1]);
  }
  const int bh = b * p.heads + h, kv_row = q8_kv_row(b, h, p.kv_heads, p.kv_group);
  const int kv_len = q8_kv_len(p.kv_lens, p.seqlen_kv, b);
  const float inv_n = kv_len > 0 ? 1.f / static_cast<float>(kv_len) : 0.f;
#pragma unroll
  for (int ps = 0; ps < kPasses; ++ps) {
    const int r = ps * kRowsPerPass + sub;  // (uniform per row group: the shuffles below stay within a row's lanes)
    float x[8];
    q8_unpack8<kFp16>(u[ps], x);
    uint2 codes;
    const float m = q8_q_row_codes<kLanesPerRow>(x, codes);
    if (r < T::kBlockM) {
      const uint32_t off = static_cast<uint32_t>(r * kD + vec * 8);
      *reinterpret_cast<uint2*>(s.q + (off ^ (((off >> 7) & kSwizzleMask) << 4))) = codes;
      if (vec == 0) p.q_scale_out[static_cast<int64_t>(bh) * p.sq_pad + row0 + r] = q8_q_row_scale(m, p.scale);
    }
    if (p.lse_corr_out != nullptr) {  // uniform over the CTA: every lane joins the shuffles
      const bool in = r < T::kBlockM && row0 + r < p.seqlen_q;
      const float dot = q8_q_row_ksum_dot<kLanesPerRow>(x, in ? p.k_sum + kv_row * kD + vec * 8 : nullptr);
      if (in && vec == 0) p.lse_corr_out[static_cast<int64_t>(bh) * p.seqlen_q + row0 + r] = dot * inv_n * p.scale;
    }
  }
  // Generic-proxy writes that wgmma reads through the async proxy: fenced before the CTA's barrier.
  ptx::fence_proxy_async_smem();
}

// Prep mode 2, thread 0 in the prologue: the first kQ8FillStages K/V blocks requested before the CTA quantizes its Q
// tile, so their loads overlap it (a fresh ring's stages are free), and q_full completed (no TMA brings Q; the CTA's
// barrier after q8_quantize_q_tile is what orders s.q before the consumers' reads). One stage only: S_0 needs K_0 and
// Q, and Q's 16-bit loads, issued next, should not queue behind the whole ring (up to 6 x 32 KB); the producer
// requests the rest after the barrier. Returns the blocks requested.
constexpr int kQ8FillStages = 1;

template <int kD, int kWGs>
__device__ __forceinline__ int q8_producer_fill(const Q8FwdParams& p, Q8Shared<kD, kWGs>& s, int kv_bh,
                                                int n_blocks) {
  using T = Q8Traits<kD, kWGs>;
  static_assert(kQ8FillStages <= T::kStages, "the fill takes fresh stages only");
  const int n = n_blocks < kQ8FillStages ? n_blocks : kQ8FillStages;
  for (int j = 0; j < n; ++j) {
    ptx::mbarrier_arrive_expect_tx(&s.k_full[j], T::kKBytes);
    q8ptx::tma_load_2d(s.k[j], &p.tm_k, &s.k_full[j], 0, kv_bh * p.skv_pad + j * T::kBlockN);
    ptx::mbarrier_arrive_expect_tx(&s.v_full[j], T::kVBytes);
    q8ptx::tma_load_2d(s.v[j], &p.tm_v, &s.v_full[j], j * T::kBlockN, kv_bh * kD);
  }
  ptx::mbarrier_arrive(&s.q_full);
  return n;
}

// kSplit: the blocks [blk0, blk0 + n_blocks) of the keys (a tail item's range); stages count from its first. Q's rows
// are (batch, query head) bh's, K/V's its key/value head's, derived here from bh alone: a second value carried into
// the producer (the row, or even b and h for it) made ptxas spill in the three-warpgroup D=128 builds.
template <int kD, int kWGs, bool kSplit = false>
__device__ __forceinline__ void q8_producer(const Q8FwdParams& p, Q8Shared<kD, kWGs>& s, int m_block, int bh,
                                            int n_blocks, int blk0 = 0) {
  using T = Q8Traits<kD, kWGs>;
  const int kv_bh = q8_kv_row(bh / p.heads, bh % p.heads, p.kv_heads, p.kv_group);
  if constexpr (!kSplit) blk0 = 0;
  int j0 = 0;
  if (p.q_in != nullptr) {  // prep mode 2: Q is in s.q already and q8_producer_fill requested the first stages
    j0 = n_blocks < kQ8FillStages ? n_blocks : kQ8FillStages;
  } else {
    ptx::mbarrier_arrive_expect_tx(&s.q_full, T::kQBytes);
    q8ptx::tma_load_2d(s.q, &p.tm_q, &s.q_full, 0, bh * p.sq_pad + m_block * T::kBlockM);
  }
  for (int j = j0; j < n_blocks; ++j) {
    const int stage = j % T::kStages;
    const uint32_t parity = ((j / T::kStages) & 1) ^ 1;  // the first round passes on the fresh barriers
    ptx::mbarrier_wait(&s.k_empty[stage], parity);
    ptx::mbarrier_arrive_expect_tx(&s.k_full[stage], T::kKBytes);
    q8ptx::tma_load_2d(s.k[stage], &p.tm_k, &s.k_full[stage], 0, kv_bh * p.skv_pad + (blk0 + j) * T::kBlockN);
    ptx::mbarrier_wait(&s.v_empty[stage], parity);
    ptx::mbarrier_arrive_expect_tx(&s.v_full[stage], T::kVBytes);
    q8ptx::tma_load_2d(s.v[stage], &p.tm_v, &s.v_full[stage], (blk0 + j) * T::kBlockN, kv_bh * kD);
  }
}

// Epilogue stores, as flash_fwd.cuh's store_o_boxes with one box per warp: stmatrix the 16 x 64 half into the
// 128B-swizzled scratch, one lane stores it with TMA (query rows past Sq are clipped by the tensor map).
template <int kD, bool kFp16>
__device__ __forceinline__ void q8_store_o(const Q8FwdParams& p, int b, int h, int warp_row0, uint16_t* scratch,
                                           const float (&o)[kD / 2], const float (&inv)[2], const float* vsc) {
  const int lane = ptx::lane_id();
  const uint32_t base = ptx::smem_addr(scratch);
  const int m = lane / 8, st_row = lane % 8 + 8 * (m & 1);
  const int t2 = 2 * (lane % 4);
#pragma unroll
  for (int hh = 0; hh < kD / 64; ++hh) {
    if (lane == 0) ptx::bulk_wait_group_read<0>();
    __syncwarp();
#pragma unroll
    for (int cc = 0; cc < 4; ++cc) {
      const int g = 8 * hh + 2 * cc;  // 8-column groups g, g + 1
      uint32_t w[4];
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int grp = g + i / 2, r = i % 2;
        const float s0 = vsc[8 * grp + t2] * inv[r], s1 = vsc[8 * grp + t2 + 1] * inv[r];
        w[i] = ptx::pack2<kFp16>(o[4 * grp + 2 * r] * s0, o[4 * grp + 2 * r + 1] * s1);
      }
      const int chunk = 2 * cc + (m >> 1);
      ptx::stmatrix_x4(base + st_row * 128 + ((chunk ^ (st_row & 7)) << 4), w[0], w[1], w[2], w[3]);
    }
    ptx::fence_proxy_async_smem();
    __syncwarp();
    if (lane == 0) {
      ptx::tma_store_4d(&p.tm_o, scratch, hh * 64, warp_row0, h, b);
      ptx::bulk_commit_group();
    }
  }
}

// Epilogue: row sums over the quad, 1 / sum (0 for a row without keys), per-channel V scales, O out; LSE.
template <int kD, int kWGs, bool kSumMma, bool kFp16>
__device__ __forceinline__ void q8_epilogue(const Q8FwdParams& p, Q8Shared<kD, kWGs>& s, int cwg, int m_block, int b,
                                            int h, const float (&o)[kD / 2], const float (&row_max)[2],
                                            float (&row_sum)[2]) {
  using T = Q8Traits<kD, kWGs>;
  // The thread index read afresh: ptxas otherwise keeps the consumer's row offsets in registers across the whole
  // key loop for this, which cost the three-warpgroup D=128 build a spill.
  const int tid = q8ptx::tid_x_volatile() - 128 * (cwg + 1), lane = tid % 32, warp = tid / 32;
  const int bh = b * p.heads + h;
  const int row_in_tile = cwg * 64 + warp * 16 + lane / 4;
  const float kNegInf = -__int_as_float(0x7f800000);
  float inv[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if constexpr (!kSumMma) row_sum[r] = q8_quad_sum(row_sum[r]);  // (the ones columns hold whole rows)
    inv[r] = row_has_sum(row_sum[r]) ? ptx::rcp_approx(row_sum[r]) : 0.f;
  }
  const int warp_row0 = m_block * T::kBlockM + cwg * 64 + warp * 16;
  q8_store_o<kD, kFp16>(p, b, h, warp_row0, s.o_scratch[cwg * 4 + warp], o, inv,
                        p.v_scale + q8_kv_row(b, h, p.kv_heads, p.kv_group) * kD);
  if (p.lse != nullptr && lane % 4 == 0) {
    constexpr float kLn2 = 0.693147180559945309f;
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = m_block * T::kBlockM + row_in_tile + 8 * r;
      if (row < p.seqlen_q) {
        const int64_t i = static_cast<int64_t>(bh) * p.seqlen_q + row;
        // Scores were taken against the smoothed keys (s - q . mean) and P carried 2^8: both undone here.
        p.lse[i] = row_has_sum(row_sum[r]) ? (row_max[r] + __log2f(row_sum[r]) - kQ8POffset) * kLn2 + p.lse_corr[i]
                                           : kNegInf;
      }
    }
  }
  if (lane == 0) ptx::bulk_wait_group<0>();  // shared memory must outlive the TMA stores' reads
}

// The tail launch's epilogue (kSplit): this key range's O, unnormalised and times V's channel scales, and per row
// the max in LSE's base-2 units (P's offset taken out; with LSE asked, q . mean(K)'s correction added, so that
// combine_kernel's (m + log2 l) * ln2 is the LSE q8_epilogue writes) and the sum, at the CTA's item in the workspace.
// Rows past Sq are stored too (finite: Q's padding rows are zeros) and never read. No shared memory, no TMA.
template <int kD, int kWGs, bool kSumMma>
__device__ __forceinline__ void q8_store_partial(const Q8FwdParams& p, int cwg, int m_block, int b, int h,
                                                 const float (&o)[kD / 2], const float (&row_max)[2],
                                                 float (&row_sum)[2]) {
  using T = Q8Traits<kD, kWGs>;
  const int tid = q8ptx::tid_x_volatile() - 128 * (cwg + 1), lane = tid % 32, warp = tid / 32;
  const int bh = b * p.heads + h;
  const int t2 = 2 * (lane % 4);
  const float* vsc = p.v_scale + q8_kv_row(b, h, p.kv_heads, p.kv_group) * kD;
  const int row_in_tile = cwg * 64 + warp * 16 + lane / 4;
  const int64_t item_row = static_cast<int64_t>(blockIdx.x) * T::kBlockM + row_in_tile;
  const float kNegInf = -__int_as_float(0x7f800000);
  constexpr float kLog2e = 1.4426950408889634f;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    if constexpr (!kSumMma) row_sum[r] = q8_quad_sum(row_sum[r]);  // (the ones columns hold whole rows)
    const int64_t wr = item_row + 8 * r;
    float* dst = p.ws_o + wr * kD + t2;
#pragma unroll
    for (int grp = 0; grp < kD / 8; ++grp)
      *reinterpret_cast<float2*>(dst + 8 * grp) =
          make_float2(o[4 * grp + 2 * r] * vsc[8 * grp + t2], o[4 * grp + 2 * r + 1] * vsc[8 * grp + t2 + 1]);
    if (lane % 4 == 0) {
      const int row = m_block * T::kBlockM + row_in_tile + 8 * r;
      float m = row_max[r] - kQ8POffset;
      if (p.lse != nullptr && row < p.seqlen_q) m += p.lse_corr[static_cast<int64_t>(bh) * p.seqlen_q + row] * kLog2e;
      p.ws_ml[2 * wr] = row_sum[r] > 0.f ? m : kNegInf;
      p.ws_ml[2 * wr + 1] = row_sum[r];
    }
  }
}

template <int kD, int kWGs, bool kSumMma, bool kExp16, bool kFp16, int kPoly, int kCvt = 0>
__device__ __forceinline__ void q8_consumer(const Q8FwdParams& p, Q8Shared<kD, kWGs>& s, int cwg, int m_block, int b,
                                            int h, int n_blocks, int kv_len) {
  using T = Q8Traits<kD, kWGs>;
  constexpr int kN = T::kBlockN;
  const int tid = threadIdx.x - 128 * (cwg + 1), lane = tid % 32, warp = tid / 32;
  const int col_in_group = 2 * (lane % 4);
  const int bh = b * p.heads + h;
  const int row_in_tile = cwg * 64 + warp * 16 + lane / 4;
  const int64_t qrow = static_cast<int64_t>(bh) * p.sq_pad + m_block * T::kBlockM + row_in_tile;
  const float qs[2] = {p.q_scale[qrow], p.q_scale[qrow + 8]};
  const float* ks = p.k_scale +
                    static_cast<int64_t>(q8_kv_row(b, h, p.kv_heads, p.kv_group)) * (p.skv_pad / kN) * kQ8KGroups +
                    (lane % 4);
  const uint32_t q_smem = ptx::smem_addr(s.q) + cwg * 64 * T::kRowBytes;
  const float kNegInf = -__int_as_float(0x7f800000);

  constexpr int kNpv = kSumMma ? kD + 8 : kD;
  float o[kD / 2], ot[kNpv / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};
  float alpha[2] = {0.f, 0.f}, alpha_prev[2] = {0.f, 0.f};
  int32_t sacc[kN / 2];
  float pf[kN / 2];
  uint32_t ph[kN / 4];  // kExp16: P as packed halves between the softmax and the e4m3 packing
  float k_next = 0.f;  // the next key block's K scale for this thread's key group
  uint32_t pa[kN / 32][4];

  // The last warpgroup passes the first turn, so warpgroup 0 starts; warpgroup 0 absorbs the last pass at the end.
  if (cwg == T::kConsumerWGs - 1) q8_turn_pass<T::kConsumerWGs>(cwg);
  ptx::mbarrier_wait(&s.q_full, 0);
  if (n_blocks > 0) {
    {  // Prologue: S_0 alone, its softmax, P_0 packed.
      ptx::mbarrier_wait(&s.k_full[0], 0);
      float c[2];
      const float k0 = ks[0];
      c[0] = qs[0] * k0;
      c[1] = qs[1] * k0;
      k_next = n_blocks > 1 ? ks[kQ8KGroups] : 0.f;
      q8_turn_wait(cwg);
      q8_bias_sacc<kCvt>(sacc);
      ptx::wgmma_fence();
      q8_issue_qk<kD, kCvt == 2>(sacc, q_smem, ptx::smem_addr(s.k[0]));
      q8_turn_pass<T::kConsumerWGs>(cwg);
      ptx::wgmma_wait<0>();
      q8_fence_regs(sacc);
      if (lane == 0) ptx::mbarrier_arrive(&s.k_empty[0]);
      q8_softmax<kN, !kSumMma, kExp16, kPoly, kCvt>(sacc, pf, ph, c, row_max, row_sum, alpha, 0, kv_len, col_in_group);
      if constexpr (kExp16) q8_pack_p16<kN>(ph, pa);
      else q8_pack_p<kN>(pf, pa);
    }
    for (int j = 1; j < n_blocks; ++j) {
      const int stage = j % T::kStages, prev = (j - 1) % T::kStages;
      const uint32_t k_par = (j / T::kStages) & 1, v_par = ((j - 1) / T::kStages) & 1;
      // Block j's K scale was loaded an iteration ago (its latency off the softmax's path); block j+1's now.
      float c[2];
      c[0] = qs[0] * k_next;
      c[1] = qs[1] * k_next;
      k_next = j + 1 < n_blocks ? ks[(j + 1) * kQ8KGroups] : 0.f;
      ptx::mbarrier_wait(&s.k_full[stage], k_par);
      q8_turn_wait(cwg);
      q8_bias_sacc<kCvt>(sacc);
      ptx::wgmma_fence();
      q8_issue_qk<kD, kCvt == 2>(sacc, q_smem, ptx::smem_addr(s.k[stage]));
      // V_{j-1} may still land while S_j is issued. ptxas puts a wgmma fence after a wait loop anyway (C7519),
      // as here: P's and O_tile's registers are unchanged since the fence above.
      ptx::mbarrier_wait(&s.v_full[prev], v_par);
      ptx::wgmma_fence();
      q8_issue_pv<kNpv>(ot, pa, ptx::smem_addr(s.v[prev]));
      q8_turn_pass<T::kConsumerWGs>(cwg);
      ptx::wgmma_wait<1>();  // S_j done; P_{j-1} V_{j-1} may still run
      q8_fence_regs(sacc);
      if (lane == 0) ptx::mbarrier_arrive(&s.k_empty[stage]);
      alpha_prev[0] = alpha[0];
      alpha_prev[1] = alpha[1];
      q8_softmax<kN, !kSumMma, kExp16, kPoly, kCvt>(sacc, pf, ph, c, row_max, row_sum, alpha, j * kN, kv_len, col_in_group);
      ptx::wgmma_wait<0>();
      ptx::fence_regs(ot);
      q8_fence_frag(pa);
      if (lane == 0) ptx::mbarrier_arrive(&s.v_empty[prev]);
      // O (blocks to j-2, reference m_{j-2}) -> blocks to j-1, reference m_{j-1}
      q8_merge<kD, kNpv>(o, ot, alpha_prev, row_sum);
      if constexpr (kExp16) q8_pack_p16<kN>(ph, pa);
      else q8_pack_p<kN>(pf, pa);
    }
    {  // Drain: the last P V, merged with the last block's alpha.
      const int last = (n_blocks - 1) % T::kStages;
      ptx::mbarrier_wait(&s.v_full[last], ((n_blocks - 1) / T::kStages) & 1);
      q8_turn_wait(cwg);
      ptx::wgmma_fence();
      q8_issue_pv<kNpv>(ot, pa, ptx::smem_addr(s.v[last]));
      q8_turn_pass<T::kConsumerWGs>(cwg);
      ptx::wgmma_wait<0>();
      ptx::fence_regs(ot);
      if (lane == 0) ptx::mbarrier_arrive(&s.v_empty[last]);
      q8_merge<kD, kNpv>(o, ot, alpha, row_sum);
    }
  }
  if (cwg == 0) q8_turn_wait(cwg);
  q8_epilogue<kD, kWGs, kSumMma, kFp16>(p, s, cwg, m_block, b, h, o, row_max, row_sum);
}

// One pass of kLazy's block softmax (q8_consumer_seq): S issued and waited, the row max (exact) or the reference as
// it stands (alpha = 1), the exponentials (with the turn around them when `turn`), P packed; the block's row sums go
// to bsum, apart from row_sum. Returns the OR of P's packed words + 2 per byte (bit 7 of a byte: p rounded to 448).
// Inlined twice: the try, and the rare redo (a loop around one copy cost the three-warpgroup build 36 bytes of spill).
template <int kD, int kWGs, int kCvt, int kLazy, int kDescInc>
__device__ __forceinline__ uint32_t q8_lazy_pass(int32_t (&sacc)[kQ8BlockN / 2], float (&pf)[kQ8BlockN / 2],
                                                 uint32_t (&ph)[kQ8BlockN / 4], uint32_t (&pa)[kQ8BlockN / 32][4],
                                                 const float (&c)[2], float (&row_max)[2], float (&alpha)[2],
                                                 float (&bsum)[2], uint32_t q_smem, uint32_t k_smem, uint32_t q_tile,
                                                 int cwg, uint32_t opaque_zero, int j, int kv_len, int col_in_group,
                                                 bool exact, bool turn) {
  constexpr int kN = kQ8BlockN;
  q8_bias_sacc<kCvt>(sacc);
  ptx::wgmma_fence();
  q8_issue_qk<kD, true, kDescInc>(sacc, q_smem, k_smem);
  ptx::wgmma_wait<0>();
  q8_fence_regs(sacc);
  float neg[2];
  if (exact) {
    q8_softmax_max<kN, kCvt, kLazy>(sacc, pf, c, row_max, alpha, neg, j * kN, kv_len, col_in_group);
  } else {
#pragma unroll
    for (int i = 0; i < kN / 2; ++i) pf[i] = __int_as_float(sacc[i]);
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      alpha[r] = 1.f;
      neg[r] = fmaf(-kQ8Magic, c[r], kQ8POffset - row_max[r]);
    }
  }
  if (turn) {  // as q8_consumer_seq's kExpTurns (kLazy == 0), which explains the dependencies
    q8_turn_wait(cwg);
    const uint32_t word = q8ptx::ld_shared_volatile(q_tile);
    const int32_t dep = static_cast<int32_t>(word & opaque_zero);
    neg[0] = __int_as_float(__float_as_int(neg[0]) + dep);
    neg[1] = __int_as_float(__float_as_int(neg[1]) + dep);
  }
  bsum[0] = bsum[1] = 0.f;
  const float one[2] = {1.f, 1.f};
  q8_softmax_exp<kN, true, false, 0>(pf, ph, c, neg, bsum, one);
  q8_pack_p<kN>(pf, pa);
  uint32_t any = 0;
#pragma unroll
  for (int kk = 0; kk < 3 * kN / 128; ++kk)
    any |= (pa[kk][0] + 0x02020202u) | (pa[kk][1] + 0x02020202u) | (pa[kk][2] + 0x02020202u) |
           (pa[kk][3] + 0x02020202u);
  if (turn) q8_turn_pass_dep<kWGs>(cwg, any & opaque_zero);
  if (!exact) {
#pragma unroll
    for (int kk = 3 * kN / 128; kk < kN / 32; ++kk)
      any |= (pa[kk][0] + 0x02020202u) | (pa[kk][1] + 0x02020202u) | (pa[kk][2] + 0x02020202u) |
             (pa[kk][3] + 0x02020202u);
  }
  return any;
}

// The sequential schedule (kSeq): no ping-pong turns and no S_j beside P_{j-1} V_{j-1}. Each warpgroup runs
// S_j -> softmax -> P_j V_j -> merge in order, so at most O and one of S or (O_tile, P) are live: 64 + 64 (+ 16)
// registers at D=128, which lets three consumer warpgroups fit in 160. While one warpgroup runs its softmax, the
// tensor cores take the other two's S and P V: more warps in the softmax's latency than two ping-pong warpgroups give.
// kTurns: the warpgroups issue their S in round-robin turns (the ping-pong's named barriers, S only), which keeps them
// a third of a block apart: without it nothing stops them drifting into step, all three in the softmax at once
// (MUFU shared three ways) and then all three waiting on the tensor cores.
// kExpTurns (schedule 3): the turns are around the exponentials instead (q8_softmax_exp, after the row max), so one
// warpgroup at a time takes MUFU. The profile of the sequential schedule (XU 51% + tensor 49% of the cycles, as if one
// ran only while the other idled) reads as the three warpgroups' MUFU phases overlapping each other and leaving the
// tensor cores idle; with the exponentials in turns, the other two warpgroups' S and P V (512 tensor clocks per block
// and SMSP) run under each warpgroup's 66 MUFU.EX2 (528 clocks): one warpgroup's softmax per slot, a cycle of three
// slots. S issues stay free (no order among them).
// kSplit (the tail launch): the key blocks [j0, j0 + n_blocks); the epilogue stores partials (q8_store_partial).
template <int kD, int kWGs, bool kSumMma, bool kExp16, bool kFp16, int kPoly, bool kTurns = false, int kCvt = 0,
          bool kExpTurns = false, int kLazy = 0, int kDescInc = 0, int kV12 = 0, bool kSplit = false>
__device__ __forceinline__ void q8_consumer_seq(const Q8FwdParams& p, Q8Shared<kD, kWGs>& s, int cwg, int m_block,
                                                int b, int h, int n_blocks, int kv_len, int j0 = 0) {
  static_assert(!kSplit || kLazy == 0, "the tail launch's split build: not on the lazy reference");
  if constexpr (!kSplit) j0 = 0;
  using T = Q8Traits<kD, kWGs>;
  constexpr int kN = T::kBlockN;
  // kV12 1 (dev/NOTES_8bit.md "v12"): the same arithmetic in fewer instructions per block. The warpgroup index
  // broadcast from lane 0 (shfl.sync.idx with a constant lane, PTX ISA "Data Movement and Conversion Instructions:
  // shfl.sync"; __shfl_sync emits it): ptxas then knows the value is warp-uniform and
  // keeps Q's descriptors and the turns' barrier ids in uniform registers (without it: per-thread registers, S2R of
  // the thread index, VIADD and R2UR pairs every block, -14 per block).
  static_assert(kV12 == 0 || (kDescInc == 2 && kLazy == 0 && kExpTurns && kCvt == 2 && !kSumMma && !kExp16),
                "v12 is built on v10 mode 1 of schedule 3 (conversion 2, row-sum mode 0)");
  if constexpr (kV12 > 0) cwg = __shfl_sync(0xffffffffu, cwg, 0);
  const int tid = threadIdx.x - 128 * (cwg + 1), lane = tid % 32, warp = tid / 32;
  const int col_in_group = 2 * (lane % 4);
  const int bh = b * p.heads + h;
  const int row_in_tile = cwg * 64 + warp * 16 + lane / 4;
  const int64_t qrow = static_cast<int64_t>(bh) * p.sq_pad + m_block * T::kBlockM + row_in_tile;
  const float* qsp = p.q_scale + qrow;
  const float* ks = p.k_scale +
                    static_cast<int64_t>(q8_kv_row(b, h, p.kv_heads, p.kv_group)) * (p.skv_pad / kN) * kQ8KGroups +
                    (lane % 4);
  const uint32_t q_smem = ptx::smem_addr(s.q) + cwg * 64 * T::kRowBytes;
  const float kNegInf = -__int_as_float(0x7f800000);

  constexpr int kNpv = kSumMma ? kD + 8 : kD;
  float o[kD / 2], ot[kNpv / 2];
#pragma unroll
  for (int i = 0; i < kD / 2; ++i) o[i] = 0.f;
  float row_max[2] = {kNegInf, kNegInf}, row_sum[2] = {0.f, 0.f};
  float alpha[2] = {0.f, 0.f};
  int32_t sacc[kN / 2];
  float pf[kN / 2];
  uint32_t ph[kN / 4];
  uint32_t pa[kN / 32][4];

  static_assert(!(kTurns && kExpTurns), "turns around S or around the exponentials, not both");
  [[maybe_unused]] const uint32_t opaque_zero = static_cast<uint32_t>(p.heads) >> 31;  // (heads >= 1: always 0)
  constexpr bool kAnyTurns = kTurns || kExpTurns;
  // As q8_consumer: the last warpgroup passes the first turn, warpgroup 0 absorbs the last pass at the end.
  if (kAnyTurns && cwg == T::kConsumerWGs - 1) q8_turn_pass<T::kConsumerWGs>(cwg);
  ptx::mbarrier_wait(&s.q_full, 0);
  static_assert(kLazy == 0 || (kExpTurns && kCvt == 2 && !kSumMma && !kExp16 && kPoly == 0),
                "the lazy reference is built on schedule 3, conversion 2, row-sum mode 0 only");
  if constexpr (kLazy > 0) {
    // kLazy (v10, dev/NOTES_8bit.md): the row max only where it is needed. The reference row_max is set kLazy above
    // a block's exact max (q8_softmax_max's kHead) on block 0, on the tail block (masked keys) and on a redo; every
    // other block takes its exponentials against the reference as it stands (alpha = 1), with no IMNMX pass, no I2F,
    // no quad shuffles and no alpha exponentials: ~88 instructions per warp and block fewer. Whether that was
    // right is read off P as packed: a p >= 432 rounds to e4m3's 448 (0x7E; satfinite also sends larger values and
    // inf there), i.e. the block's max climbed more than kLazy + 0.755 over the block that set the reference; every
    // other byte is < 0x7E, so p was in range and exactly what the exact path would give against the same reference.
    // A byte b <= 0x7E plus 2 sets its bit 7 iff b == 0x7E (no carry leaves a byte), so one IADD per packed register
    // and an OR tree find it; the warpgroup decides together (bar.red.or: the redo re-issues S, a warpgroup
    // instruction) and redoes the block on the exact path (K's stage is released only after the decision). The
    // redo takes no turn: it is rare (the emulation: a few blocks in a row of hundreds), and the ring of turns
    // must see one pass per block.
    for (int j = 0; j < n_blocks; ++j) {
      const int stage = j % T::kStages;
      const uint32_t par = (j / T::kStages) & 1;
      const float k_sc = q8ptx::ld_nc(ks + j * kQ8KGroups);
      const float c[2] = {q8ptx::ld_nc(qsp) * k_sc, q8ptx::ld_nc(qsp + 8) * k_sc};
      ptx::mbarrier_wait(&s.k_full[stage], par);
      const bool exact = j == 0 || (j + 1) * kN > kv_len;  // (uniform)
      float bsum[2];
      const uint32_t any = q8_lazy_pass<kD, kWGs, kCvt, kLazy, kDescInc>(
          sacc, pf, ph, pa, c, row_max, alpha, bsum, q_smem, ptx::smem_addr(s.k[stage]), ptx::smem_addr(s.q), cwg,
          opaque_zero, j, kv_len, col_in_group, exact, true);
      // (Named barriers 8-10: 3-5 are the turns.)
      if (!exact && q8ptx::bar_red_or(8 + static_cast<uint32_t>(cwg), 128, (any & 0x80808080u) != 0)) {
        // The redo: S again from the stage still held, the exact max, no turn (see above).
        // Its addresses and scales taken afresh (a zero the compiler cannot see): kept from the try, ptxas held them
        // in registers across the try's softmax, and spilled.
        const uint32_t z = static_cast<uint32_t>(q8ptx::tid_x_volatile()) >> 31;
        const int jz = j + static_cast<int>(z);
        const float k_sc2 = q8ptx::ld_nc(ks + jz * kQ8KGroups);
        const float c2[2] = {q8ptx::ld_nc(qsp + z) * k_sc2, q8ptx::ld_nc(qsp + z + 8) * k_sc2};
        q8_lazy_pass<kD, kWGs, kCvt, kLazy, kDescInc>(sacc, pf, ph, pa, c2, row_max, alpha, bsum, q_smem + z,
                                            ptx::smem_addr(s.k[jz % T::kStages]), ptx::smem_addr(s.q), cwg,
                                            opaque_zero, jz, kv_len, col_in_group, true, false);
      }
      row_sum[0] = fmaf(row_sum[0], alpha[0], bsum[0]);
      row_sum[1] = fmaf(row_sum[1], alpha[1], bsum[1]);
      // (One elected lane, not lane 0: `lane` kept across the loop was this build's last register of spill.)
      if (q8ptx::elect_one()) ptx::mbarrier_arrive(&s.k_empty[stage]);
      ptx::mbarrier_wait(&s.v_full[stage], par);
      ptx::wgmma_fence();
      q8_issue_pv<kNpv, kDescInc>(ot, pa, ptx::smem_addr(s.v[stage]));
      ptx::wgmma_wait<0>();
      ptx::fence_regs(ot);
      if (q8ptx::elect_one()) ptx::mbarrier_arrive(&s.v_empty[stage]);
      q8_merge<kD, kNpv>(o, ot, alpha, row_sum);
    }
  } else {
  // kV12: K's scale pointer carried across the loop in place of its base (the same registers; one 64-bit add per
  // block instead of the index arithmetic).
  [[maybe_unused]] const float* ksj = ks + j0 * kQ8KGroups;
  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j % T::kStages;
    const uint32_t par = (j / T::kStages) & 1;
    // The row and block scales are loaded each block, ahead of S's wait (their latency hides under it): kept in
    // registers across the loop they were what ptxas spilled at 160 (the loads are volatile so it cannot hoist them).
    float k_sc;
    if constexpr (kV12 > 0) {
      k_sc = q8ptx::ld_nc(ksj);
      ksj += kQ8KGroups;
    } else {
      k_sc = q8ptx::ld_nc(ks + (j0 + j) * kQ8KGroups);
    }
    const float c[2] = {q8ptx::ld_nc(qsp) * k_sc, q8ptx::ld_nc(qsp + 8) * k_sc};
    ptx::mbarrier_wait(&s.k_full[stage], par);
    if constexpr (kTurns) q8_turn_wait(cwg);
    q8_bias_sacc<kCvt>(sacc);
    ptx::wgmma_fence();
    q8_issue_qk<kD, kCvt == 2, kDescInc>(sacc, q_smem, ptx::smem_addr(s.k[stage]));
    if constexpr (kTurns) q8_turn_pass<T::kConsumerWGs>(cwg);
    ptx::wgmma_wait<0>();
    q8_fence_regs(sacc);
    if (lane == 0) ptx::mbarrier_arrive(&s.k_empty[stage]);
    if constexpr (kExpTurns) {
      float neg[2];
      q8_softmax_max<kN, kCvt, 0, (kV12 > 0)>(sacc, pf, c, row_max, alpha, neg, (j0 + j) * kN, kv_len,
                                               col_in_group);
      {
        // ptxas sinks a barrier below register-only work (here: below every MUFU.EX2, in a first build), so the
        // exponents depend on the wait through a shared-memory load it cannot move above it, masked to zero (of the
        // Q tile: written once by TMA before the loop, so the read races with nothing).
        q8_turn_wait(cwg);
        const uint32_t word = q8ptx::ld_shared_volatile(ptx::smem_addr(s.q));
        const int32_t dep = static_cast<int32_t>(word & opaque_zero);
        neg[0] = __int_as_float(__float_as_int(neg[0]) + dep);
        neg[1] = __int_as_float(__float_as_int(neg[1]) + dep);
      }
      q8_softmax_exp<kN, !kSumMma, kExp16, kPoly, (kV12 > 0)>(pf, ph, c, neg, row_sum, alpha);
    } else {
      q8_softmax<kN, !kSumMma, kExp16, kPoly, kCvt>(sacc, pf, ph, c, row_max, row_sum, alpha, (j0 + j) * kN,
                                                    kv_len, col_in_group);
    }
    if constexpr (kExp16) q8_pack_p16<kN>(ph, pa);
    else q8_pack_p<kN>(pf, pa);
    if constexpr (kExpTurns) {
      // The pass must follow the exponentials, but ptxas hoists a barrier above register-only work (a first build
      // passed the turn after 3 of the 64 MUFU.EX2, with or without a compiler fence): so the barrier's id depends
      // on P's packed bytes, ORed together and masked by a zero the compiler cannot see. On the first 3/4 of P
      // only: the last 16 exponentials (128 MUFU clocks) are still queued while the next warpgroup wakes and
      // starts, which covers the hand-over instead of leaving MUFU idle through it.
      uint32_t any = 0;
#pragma unroll
      for (int kk = 0; kk < 3 * kN / 128; ++kk) any |= pa[kk][0] | pa[kk][1] | pa[kk][2] | pa[kk][3];
      q8_turn_pass_dep<T::kConsumerWGs>(cwg, any & opaque_zero);
    }
    ptx::mbarrier_wait(&s.v_full[stage], par);
    ptx::wgmma_fence();
    q8_issue_pv<kNpv, kDescInc>(ot, pa, ptx::smem_addr(s.v[stage]));
    ptx::wgmma_wait<0>();
    ptx::fence_regs(ot);
    if (lane == 0) ptx::mbarrier_arrive(&s.v_empty[stage]);
    q8_merge<kD, kNpv>(o, ot, alpha, row_sum);
  }
  }  // kLazy == 0
  if (kAnyTurns && cwg == 0) q8_turn_wait(cwg);
  if constexpr (kSplit) q8_store_partial<kD, kWGs, kSumMma>(p, cwg, m_block, b, h, o, row_max, row_sum);
  else q8_epilogue<kD, kWGs, kSumMma, kFp16>(p, s, cwg, m_block, b, h, o, row_max, row_sum);
}

template <int kD, int kWGs, bool kSumMma, bool kExp16, bool kFp16, bool kSeq = false, int kPoly = 0,
          bool kTurns = false, int kCvt = 0, bool kExpTurns = false, int kLazy = 0, int kDescInc = 0, int kV12 = 0,
          bool kSplit = false>
__global__ void __launch_bounds__(Q8Traits<kD, kWGs>::kThreads, 1)
    q8_fwd_kernel(const __grid_constant__ Q8FwdParams p) {
  using T = Q8Traits<kD, kWGs>;
  static_assert(!kSplit || kSeq, "the tail launch's split build: the sequential schedule only");
  extern __shared__ uint8_t smem_raw[];
  const uint32_t pad = (1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023;
  auto& s = *reinterpret_cast<Q8Shared<kD, kWGs>*>(smem_raw + pad);
  int m_block = blockIdx.x, h = blockIdx.y, b = blockIdx.z, range = 0;
  if (p.num_m_blocks > 0) {  // the tail plan's one-dimensional grid (Q8FwdParams)
    int t = blockIdx.x;
    if constexpr (kSplit) {
      range = t % p.kv_splits;
      t /= p.kv_splits;
    }
    t += p.tile_base;
    const int hb = t / p.num_m_blocks;
    m_block = t - hb * p.num_m_blocks;
    h = hb % p.heads;
    b = hb / p.heads;
  }
  const int kv_len = q8_kv_len(p.kv_lens, p.seqlen_kv, b);
  int n_blocks = (kv_len + T::kBlockN - 1) / T::kBlockN;
  int blk0 = 0;
  if constexpr (kSplit) {  // range r of kv_splits: key blocks [r n / s, (r + 1) n / s)
    blk0 = range * n_blocks / p.kv_splits;
    n_blocks = (range + 1) * n_blocks / p.kv_splits - blk0;
  }
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    ptx::prefetch_tensormap(&p.tm_q);
    ptx::prefetch_tensormap(&p.tm_k);
    ptx::prefetch_tensormap(&p.tm_v);
    ptx::mbarrier_init(&s.q_full, 1);
#pragma unroll
    for (int st = 0; st < T::kStages; ++st) {
      ptx::mbarrier_init(&s.k_full[st], 1);
      ptx::mbarrier_init(&s.v_full[st], 1);
      ptx::mbarrier_init(&s.k_empty[st], 4 * T::kConsumerWGs);
      ptx::mbarrier_init(&s.v_empty[st], 4 * T::kConsumerWGs);
    }
    ptx::fence_barrier_init();
  }
  if constexpr (kSumMma) {
    // The ones rows under every V stage (e4m3 1.0 = 0x38; any swizzle leaves a constant tile as it is), written by
    // ordinary stores that wgmma reads through the async proxy: fenced before the barrier.
    for (int i = threadIdx.x; i < T::kStages * 8 * T::kBlockN / 16; i += T::kThreads) {
      const int st = i / (8 * T::kBlockN / 16), u = i % (8 * T::kBlockN / 16);
      *reinterpret_cast<uint4*>(&s.v[st][T::kVBytes + 16 * u]) = make_uint4(0x38383838u, 0x38383838u, 0x38383838u,
                                                                            0x38383838u);
    }
    ptx::fence_proxy_async_smem();
  }
  if (p.q_in != nullptr) {  // prep mode 2 (the producer's part): Q quantized here, the K/V ring filling meanwhile
    if (threadIdx.x == 0) q8_producer_fill<kD, kWGs>(p, s, q8_kv_row(b, h, p.kv_heads, p.kv_group), n_blocks);
    q8_quantize_q_tile<kD, kWGs, kFp16>(p, s, m_block, b, h);
  }
  __syncthreads();
  if (wg == 0) {
    ptx::setmaxnreg_dec<T::kProducerRegs>();
    if (threadIdx.x == 0)
      q8_producer<kD, kWGs, kSplit>(p, s, m_block, b * p.heads + h, n_blocks, blk0);
  } else {
    ptx::setmaxnreg_inc<T::kConsumerRegs>();
    if constexpr (kSeq)
      q8_consumer_seq<kD, kWGs, kSumMma, kExp16, kFp16, kPoly, kTurns, kCvt, kExpTurns, kLazy, kDescInc, kV12,
                      kSplit>(p, s, wg - 1, m_block, b, h, n_blocks, kv_len, blk0);
    else q8_consumer<kD, kWGs, kSumMma, kExp16, kFp16, kPoly, kCvt>(p, s, wg - 1, m_block, b, h, n_blocks, kv_len);
  }
}

}  // namespace vidattn::sm90
