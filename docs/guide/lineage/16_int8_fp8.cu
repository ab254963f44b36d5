// Step 16: step 15 + INT8 Q·Kᵀ and e4m3 P·V after a quantizing pre-pass, because the 8-bit tensor cores do twice
// the bf16 rate: S = Q K'ᵀ by wgmma .s32.s8.s8 (exact integer sums), P·V by wgmma .f32.e4m3.e4m3, both from
// operands a pre-pass writes: Q in INT8 with a scale per row, K' = K - mean(K) in INT8 with a scale per 128-key block
// (subtracting the keys' mean shifts every score of a row by the same amount, so the softmax does not change, and the
// INT8 range is not spent on a channel offset all keys share), V transposed (8-bit wgmma reads B K-major only) in e4m3
// with a scale per channel. Not exact: about 4e-2 relative L2 against fp32 (the e4m3 rounding of P and V), against
// step 15's 2e-3; docs/guide/8bit_path.md is the production kernel's page (vidattn.attention(precision="8bit")).
// lineage-check: rel-L2 < 6e-2
//
// What to look at:
//   - quant_stats and quantize: the pre-pass, two small kernels on the caller's stream into a stream-ordered
//     workspace (cudaMallocAsync / cudaFreeAsync), ahead of the attention kernel; part of every timing.
//   - issue_qk: four k32 INT8 wgmmas along the head dim (128 bytes of a row, one swizzle atom); kBlockN 128.
//   - softmax_8bit: the exact online softmax (step 13's fixed reference and its redo pass are gone: a reference
//     that is not the running max could push P past e4m3's 448), on the integer scores times one scale per row
//     (q's scale x the block's k scale x scale x log2(e)), with p = 2^(s - m + 8) <= 256 so that P keeps e4m3's
//     full precision near the row's largest keys.
//   - pack_p8: P in e4m3 straight from the accumulator, four keys a register: the pre-pass stores the keys of V
//     permuted within every 16 so that the keys a thread holds in S are the k a thread supplies in wgmma's A.
//   - issue_pv / merge: P V into a fresh fp32 tile per key block, merged as O = O alpha + O_tile (the e4m3 wgmma
//     adds with about 22 bits: a drift over hundreds of blocks; the merge is also the online softmax's rescale).
//   - store_o: O / l times V's per-channel scale.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>
#include <cuda_bf16.h>

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "lineage.h"

namespace {

// ---- tile sizes and register budgets -----------------------------------------------------------------------------
constexpr int kHeadDim = 128;    // bytes of an INT8 or e4m3 row too: one 128-byte swizzle atom, one TMA box row
constexpr int kConsumerWGs = 2;  // two consumer warpgroups share each K/V tile: it is read once for 128 query rows
constexpr int kRowsPerWG = 64;   // wgmma's M
constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
constexpr int kBlockN = 128;     // S 64 + O_tile 64 + O 64 + P 16 registers a thread; 176 is no multiple of k32
// As many K+V stages as shared memory holds next to Q, up to 6 (Q 16 KB + 6 x 32 KB).
constexpr int kSmemBudget = 227 * 1024;  // per-block opt-in maximum on sm_90
constexpr int kQBytes = kBlockM * kHeadDim;
constexpr int kStageBytes = 2 * kBlockN * kHeadDim;
constexpr int kStagesFit = (kSmemBudget - 2048 - kQBytes) / kStageBytes;  // 2 KB: barriers and alignment
constexpr int kStages = kStagesFit > 6 ? 6 : kStagesFit;
static_assert(kStages >= 2, "tile too large: fewer than 2 K/V stages fit in shared memory");
constexpr int kThreads = 128 * (1 + kConsumerWGs);
// The producer issues TMA from one thread and needs almost nothing; the consumers hold S, O_tile, O and P.
constexpr uint32_t kProducerRegs = 24;
constexpr uint32_t kConsumerRegs = 240;
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= 65536, "register file overcommitted");
constexpr int kSeqMultiple = 1408;  // the lineage contract: lcm(128, 176)
static_assert(kSeqMultiple % kBlockM == 0 && kSeqMultiple % kBlockN == 0, "tiles must divide the sequence");
constexpr float kPOffset = 8.f;     // p = 2^(s - m + 8): the row's largest p is 256, under e4m3's 448
constexpr float kQMax = 127.f;      // INT8 codes in [-127, 127]
constexpr float kVMax = 448.f;      // e4m3's largest finite value

// alignas(1024): the 128-byte swizzle repeats every 8 rows x 128 B; TMA and the descriptors assume aligned atoms.
struct SharedStorage {
  alignas(1024) int8_t q[kBlockM * kHeadDim];             // 16 KB: [128 rows][128 bytes], INT8
  alignas(1024) int8_t k[kStages][kBlockN * kHeadDim];    // per stage: [128 keys][128 bytes], INT8
  alignas(1024) uint8_t vt[kStages][kHeadDim * kBlockN];  // per stage: [128 channels][128 keys, permuted], e4m3
  uint64_t q_full;
  uint64_t q_empty;  // both consumers have issued their last S = Q K^T of the tile: Q may be replaced
  uint64_t k_full[kStages];
  uint64_t k_empty[kStages];
  uint64_t v_full[kStages];
  uint64_t v_empty[kStages];
};
static_assert(sizeof(SharedStorage) + 1024 <= 227 * 1024, "shared memory: over the 227 KB a block may use");

struct Params {
  CUtensorMap tm_q, tm_k, tm_vt;  // over the pre-pass's workspace: Q, K' as (D, S, H, B), V^T as (S, D, H, B) bytes
  uint16_t* o;                    // (B, S, H, D) bf16, written with plain stores
  const float* q_scale;           // [B, H, S]: each Q row's scale, times scale * log2(e)
  const float* k_scale;           // [B, H, S / 128]: each key block's scale
  const float* v_scale;           // [B, H, D]: each channel's scale
  int seqlen, heads;
  int num_m_blocks;               // seqlen / kBlockM
  int num_tiles;                  // num_m_blocks * heads * batch: the persistent CTAs' work list
};

// ---- PTX wrappers ------------------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// mbarrier (PTX ISA 9.7.13.15)
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
__device__ __forceinline__ void mbarrier_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}
__device__ __forceinline__ void mbarrier_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred done;\n"
      "LINEAGE_WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n"
      "@!done bra LINEAGE_WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

// TMA tile load, global -> shared, completion counted in bytes on `bar` (9.7.9.25.5.1)
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1,
                                            int c2, int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}
__device__ __forceinline__ void prefetch_tensormap(const CUtensorMap* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

// Named barriers (9.7.13.1): sync a subset of warps; id 0 is __syncthreads'.
__device__ __forceinline__ void named_barrier_sync(uint32_t id, uint32_t threads) {
  asm volatile("bar.sync %0, %1;" ::"r"(id), "r"(threads) : "memory");
}
__device__ __forceinline__ void named_barrier_arrive(uint32_t id, uint32_t threads) {
  asm volatile("bar.arrive %0, %1;" ::"r"(id), "r"(threads) : "memory");
}

// %laneid and %tid.x (special registers, 10.1 and 10.3), read with asm volatile so that values derived from them
// are computed where they are used instead of held in registers across the tile loop.
__device__ __forceinline__ int lane_id() {
  int l;
  asm volatile("mov.u32 %0, %%laneid;" : "=r"(l));
  return l;
}
__device__ __forceinline__ int thread_x() {
  int t;
  asm volatile("mov.u32 %0, %%tid.x;" : "=r"(t));
  return t;
}

// setmaxnreg (9.7.17.1): hand registers from the producer warpgroup to the consumers.
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_inc() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(kRegs));
}
template <uint32_t kRegs>
__device__ __forceinline__ void setmaxnreg_dec() {
  static_assert(kRegs % 8 == 0 && kRegs >= 24 && kRegs <= 256, "setmaxnreg: multiple of 8 in [24, 256]");
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(kRegs));
}

// wgmma ordering (9.7.15.5.3-5)
__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int kPending>
__device__ __forceinline__ void wgmma_wait() {
  static_assert(kPending >= 0 && kPending <= 7, "wgmma.wait_group takes an immediate in [0, 7]");
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(kPending) : "memory");
}
// Keeps the compiler from moving accumulator reads/writes across an in-flight wgmma.
template <int N>
__device__ __forceinline__ void fence_regs(float (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+f"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_regs(int32_t (&r)[N]) {
#pragma unroll
  for (int i = 0; i < N; ++i) asm volatile("" : "+r"(r[i])::"memory");
}
template <int N>
__device__ __forceinline__ void fence_frag(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][r])::"memory");
  }
}

// Shared-memory matrix descriptor (9.7.15.5.1.2.2), 128-byte swizzle; addresses and offsets in bytes.
__device__ __forceinline__ uint64_t make_smem_desc_sw128(uint32_t addr, uint32_t lbo, uint32_t sbo) {
  uint64_t desc = 0;
  desc |= static_cast<uint64_t>((addr & 0x3FFFF) >> 4);
  desc |= static_cast<uint64_t>((lbo >> 4) & 0x3FFF) << 16;
  desc |= static_cast<uint64_t>((sbo >> 4) & 0x3FFF) << 32;
  desc |= 1ull << 62;  // swizzle mode 1 = 128B
  return desc;
}

// wgmma.mma_async (9.7.15.5.2) with 8-bit operands: k = 32 per instruction, both operands K-major (the only layout
// 8-bit wgmma reads); operand lists written out (inline asm takes no arrays).
// D(64x128, s32) (+)= A(64x32, s8, smem) * B(32x128, s8, smem): exact integer accumulation.
__device__ __forceinline__ void wgmma_m64n128k32_s8_ss(int32_t (&d)[64], uint64_t desc_a, uint64_t desc_b,
                                                       int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %66, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.s32.s8.s8 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, %64, %65, p;\n}\n"
      : "+r"(d[0]), "+r"(d[1]), "+r"(d[2]), "+r"(d[3]), "+r"(d[4]), "+r"(d[5]), "+r"(d[6]), "+r"(d[7]),
        "+r"(d[8]), "+r"(d[9]), "+r"(d[10]), "+r"(d[11]), "+r"(d[12]), "+r"(d[13]), "+r"(d[14]), "+r"(d[15]),
        "+r"(d[16]), "+r"(d[17]), "+r"(d[18]), "+r"(d[19]), "+r"(d[20]), "+r"(d[21]), "+r"(d[22]), "+r"(d[23]),
        "+r"(d[24]), "+r"(d[25]), "+r"(d[26]), "+r"(d[27]), "+r"(d[28]), "+r"(d[29]), "+r"(d[30]), "+r"(d[31]),
        "+r"(d[32]), "+r"(d[33]), "+r"(d[34]), "+r"(d[35]), "+r"(d[36]), "+r"(d[37]), "+r"(d[38]), "+r"(d[39]),
        "+r"(d[40]), "+r"(d[41]), "+r"(d[42]), "+r"(d[43]), "+r"(d[44]), "+r"(d[45]), "+r"(d[46]), "+r"(d[47]),
        "+r"(d[48]), "+r"(d[49]), "+r"(d[50]), "+r"(d[51]), "+r"(d[52]), "+r"(d[53]), "+r"(d[54]), "+r"(d[55]),
        "+r"(d[56]), "+r"(d[57]), "+r"(d[58]), "+r"(d[59]), "+r"(d[60]), "+r"(d[61]), "+r"(d[62]), "+r"(d[63])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D(64x128, f32) (+)= A(64x32, e4m3, registers: 4 x b32 per thread) * B(32x128, e4m3, smem).
__device__ __forceinline__ void wgmma_m64n128k32_e4m3_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b,
                                                         int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k32.f32.e4m3.e4m3 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(desc_b), "r"(scale_d));
}

// ex2.approx: one MUFU op per score.
__device__ __forceinline__ float exp2_approx(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
// cvt.rn.bf16x2.f32: two fp32 -> one packed register, `lo` in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  uint32_t r;
  asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
  return r;
}
// Four fp32 -> four e4m3 bytes, `a` in the lowest (cvt.rn.satfinite.e4m3x2.f32, 9.7.9.21: the first source goes to
// the upper byte of each pair).
__device__ __forceinline__ uint32_t pack_e4m3x4(float a, float b, float c, float d) {
  uint32_t r;
  asm("{\n.reg .b16 lo, hi;\n"
      "cvt.rn.satfinite.e4m3x2.f32 lo, %2, %1;\n"
      "cvt.rn.satfinite.e4m3x2.f32 hi, %4, %3;\n"
      "mov.b32 %0, {lo, hi};\n}\n"
      : "=r"(r)
      : "f"(a), "f"(b), "f"(c), "f"(d));
  return r;
}

// The 4 threads of a quad hold the same two rows of a wgmma accumulator.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}
__device__ __forceinline__ float warp_max(float x) {
#pragma unroll
  for (int m = 16; m > 0; m >>= 1) x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, m));
  return x;
}

// ---- the pre-pass ------------------------------------------------------------------------------------------------
// Workspace, per (batch, head): Q and K' INT8 rows [S][D]; V^T e4m3 [D][S]; the scales; K's channel sums and V's
// channel maxima (zeroed by the host before quant_stats adds into them).
struct Prep {
  const __nv_bfloat16 *q, *k, *v;  // the caller's (B, S, H, D)
  int8_t *q8, *k8;                 // [B, H, S, D]
  uint8_t* vt8;                    // [B, H, D, S], keys permuted within every 16 (vt_position)
  float *q_scale, *k_scale, *v_scale;
  float *k_sum, *v_amax;           // [B, H, D]
  int seqlen, heads;
  float scale_log2;
};

// Where key k of a 16-key group goes in V^T's row: the S accumulator gives thread t (lane % 4) the keys 2t, 2t+1,
// 8+2t, 9+2t of each 16 in one row, and e4m3 wgmma's A fragment takes from it k = 4t..4t+3 (PTX ISA 9.7.15.5.1.1,
// the m64nNk32 A layout). With key 8h + 2t + s stored at k = 4t + 2h + s, the four keys a thread holds are the four
// k it supplies: P packs in place, no shuffles; the sum over k does not care about the order as long as V follows.
__device__ __forceinline__ int vt_position(int key) {
  return 4 * ((key >> 1) & 3) + 2 * ((key >> 3) & 1) + (key & 1);
}

// One CTA per (128-key block, head, batch), one thread per channel: the block's K sum and V |max| per channel, added
// into the per-(batch, head) totals.
__global__ void __launch_bounds__(128) quant_stats(const Prep p) {
  const int d = threadIdx.x, s0 = blockIdx.x * kBlockN, h = blockIdx.y, b = blockIdx.z;
  const int64_t row = static_cast<int64_t>(p.heads) * kHeadDim;
  const int64_t base = (static_cast<int64_t>(b) * p.seqlen + s0) * row + static_cast<int64_t>(h) * kHeadDim + d;
  float sum = 0.f, vmax = 0.f;
#pragma unroll 8
  for (int r = 0; r < kBlockN; ++r) {
    sum += __bfloat162float(p.k[base + r * row]);
    vmax = fmaxf(vmax, fabsf(__bfloat162float(p.v[base + r * row])));
  }
  const int64_t c = (static_cast<int64_t>(b) * p.heads + h) * kHeadDim + d;
  atomicAdd(p.k_sum + c, sum);
  atomicMax(reinterpret_cast<unsigned int*>(p.v_amax) + c, __float_as_uint(vmax));  // >= 0: ordered as integers
}

// One CTA per (128-row block, head, batch), four warps of 32 rows; lane l holds channels 4l..4l+3 of a row.
__global__ void __launch_bounds__(128) quantize(const Prep p) {
  __shared__ uint8_t vt[kHeadDim][kBlockN + 4];  // this block's V^T, rows padded against bank conflicts
  __shared__ float warp_amax[4];
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  const int s0 = blockIdx.x * kBlockN, h = blockIdx.y, b = blockIdx.z;
  const int64_t row = static_cast<int64_t>(p.heads) * kHeadDim;
  const int64_t in0 = (static_cast<int64_t>(b) * p.seqlen + s0) * row + static_cast<int64_t>(h) * kHeadDim + 4 * lane;
  const int64_t bh = static_cast<int64_t>(b) * p.heads + h;
  const int64_t out0 = (bh * p.seqlen + s0) * kHeadDim + 4 * lane;  // [B, H, S, D]
  auto load4 = [](const __nv_bfloat16* src, float (&x)[4]) {
    const uint2 raw = *reinterpret_cast<const uint2*>(src);
    const float2 lo = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.x));
    const float2 hi = __bfloat1622float2(*reinterpret_cast<const __nv_bfloat162*>(&raw.y));
    x[0] = lo.x; x[1] = lo.y; x[2] = hi.x; x[3] = hi.y;
  };
  auto store4_i8 = [](int8_t* dst, const float (&x)[4], float inv) {
    uint32_t w = 0;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int c = max(-127, min(127, __float2int_rn(x[i] * inv)));
      w |= (static_cast<uint32_t>(c) & 0xff) << (8 * i);
    }
    *reinterpret_cast<uint32_t*>(dst) = w;
  };

  // Q: a scale per row (its |max| / 127), the softmax's scale * log2(e) folded into it.
#pragma unroll 8
  for (int r = warp * 32; r < warp * 32 + 32; ++r) {
    float x[4];
    load4(p.q + in0 + r * row, x);
    const float amax = warp_max(fmaxf(fmaxf(fabsf(x[0]), fabsf(x[1])), fmaxf(fabsf(x[2]), fabsf(x[3]))));
    const float scale = amax > 0.f ? amax / kQMax : 1.f;
    store4_i8(p.q8 + out0 + static_cast<int64_t>(r) * kHeadDim, x, 1.f / scale);
    if (lane == 0) p.q_scale[bh * p.seqlen + s0 + r] = scale * p.scale_log2;
  }

  // K' = K - mean over all keys, one scale for the block (its |max| / 127): a first pass for the max, a second
  // (from L2) to quantize.
  float mean[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) mean[i] = p.k_sum[bh * kHeadDim + 4 * lane + i] / static_cast<float>(p.seqlen);
  float amax = 0.f;
#pragma unroll 8
  for (int r = warp * 32; r < warp * 32 + 32; ++r) {
    float x[4];
    load4(p.k + in0 + r * row, x);
#pragma unroll
    for (int i = 0; i < 4; ++i) amax = fmaxf(amax, fabsf(x[i] - mean[i]));
  }
  amax = warp_max(amax);
  if (lane == 0) warp_amax[warp] = amax;
  __syncthreads();
  amax = fmaxf(fmaxf(warp_amax[0], warp_amax[1]), fmaxf(warp_amax[2], warp_amax[3]));
  const float k_scale = amax > 0.f ? amax / kQMax : 1.f;
#pragma unroll 8
  for (int r = warp * 32; r < warp * 32 + 32; ++r) {
    float x[4];
    load4(p.k + in0 + r * row, x);
#pragma unroll
    for (int i = 0; i < 4; ++i) x[i] -= mean[i];
    store4_i8(p.k8 + out0 + static_cast<int64_t>(r) * kHeadDim, x, 1.f / k_scale);
  }
  if (threadIdx.x == 0) p.k_scale[bh * (p.seqlen / kBlockN) + blockIdx.x] = k_scale;

  // V^T in e4m3: a scale per channel (its |max| over all keys / 448), keys permuted within every 16; transposed
  // through shared memory so that both the loads (rows of V) and the stores (rows of V^T) are coalesced.
  float inv_v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float vmax = p.v_amax[bh * kHeadDim + 4 * lane + i];
    const float scale = vmax > 0.f ? vmax / kVMax : 1.f;
    inv_v[i] = 1.f / scale;
    if (blockIdx.x == 0 && warp == 0) p.v_scale[bh * kHeadDim + 4 * lane + i] = scale;
  }
#pragma unroll 8
  for (int r = warp * 32; r < warp * 32 + 32; ++r) {
    float x[4];
    load4(p.v + in0 + r * row, x);
    const uint32_t w = pack_e4m3x4(x[0] * inv_v[0], x[1] * inv_v[1], x[2] * inv_v[2], x[3] * inv_v[3]);
    const int pos = (r & ~15) + vt_position(r & 15);
#pragma unroll
    for (int i = 0; i < 4; ++i) vt[4 * lane + i][pos] = static_cast<uint8_t>(w >> (8 * i));
  }
  __syncthreads();
#pragma unroll 8
  for (int c = warp * 32; c < warp * 32 + 32; ++c) {  // channel c's 128 bytes: a word per lane
    *reinterpret_cast<uint32_t*>(p.vt8 + (bh * kHeadDim + c) * p.seqlen + s0 + 4 * lane) =
        *reinterpret_cast<const uint32_t*>(&vt[c][4 * lane]);
  }
}

// ---- persistent tile order: m_block fastest, then head, then batch ------------------------------------------------
// The ~132 tiles in flight at once are neighbouring Q blocks of one head, so that head's K/V (16 MB at Wan 480p) is
// fetched from HBM once and then served by L2.
struct TileCoord {
  int m_block, head, batch;
};
__device__ __forceinline__ TileCoord tile_coord(const Params& p, int tile) {
  const int hb = tile / p.num_m_blocks;
  return {tile - hb * p.num_m_blocks, hb % p.heads, hb / p.heads};
}

// ---- producer: one thread streams, tile after tile, Q (into the buffer the consumers released after their last
// S = Q K^T of the previous tile) and the K/V^T ring. Every tile restarts the ring at stage 0, so stage indices derive
// from the loop counter alone; the phase of each stage is carried across tiles as one bit per stage. ------------
__device__ __forceinline__ void producer(const Params& p, SharedStorage& s) {
  constexpr uint32_t kQBytes = kBlockM * kHeadDim;
  constexpr uint32_t kKVBytes = kBlockN * kHeadDim;
  const int n_blocks = p.seqlen / kBlockN;
  uint32_t empty_phase = 0;  // bit s: parity of stage s's next "empty" phase to wait for, xor 1
  int local = 0;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, ++local) {
    const TileCoord tc = tile_coord(p, tile);
    mbarrier_wait(&s.q_empty, (local & 1) ^ 1);
    mbarrier_arrive_expect_tx(&s.q_full, kQBytes);
    tma_load_4d(s.q, &p.tm_q, &s.q_full, 0, tc.m_block * kBlockM, tc.head, tc.batch);
    for (int j = 0; j < n_blocks; ++j) {
      const int stage = j % kStages;
      const uint32_t phase = (empty_phase >> stage) & 1;
      empty_phase ^= 1u << stage;
      // K before V: the consumers need K first (S = Q K^T), V only after their softmax.
      mbarrier_wait(&s.k_empty[stage], phase ^ 1);
      mbarrier_arrive_expect_tx(&s.k_full[stage], kKVBytes);
      tma_load_4d(s.k[stage], &p.tm_k, &s.k_full[stage], 0, j * kBlockN, tc.head, tc.batch);
      mbarrier_wait(&s.v_empty[stage], phase ^ 1);
      mbarrier_arrive_expect_tx(&s.v_full[stage], kKVBytes);
      tma_load_4d(s.vt[stage], &p.tm_vt, &s.v_full[stage], j * kBlockN, 0, tc.head, tc.batch);
    }
  }
}

// ---- consumer building blocks: each one step of the algorithm, all on one thread's fragments ---------------------

// The exact online softmax in base 2 on the integer scores: s = S_int * c (c per row: q's scale x this block's k
// scale, with scale * log2(e) already in q's), p = 2^(s - m + 8). c > 0, so the row max is taken on the integers
// (one IMNMX per score) and scaled once; each score then costs a conversion, one FFMA and the exponential. P's
// values go back into sacc's registers as float bits, which keeps S's 64 the only ones it needs. Returns
// alpha = 2^(m_old - m_new) for the merge of the tile before.
__device__ __forceinline__ void softmax_8bit(int32_t (&sacc)[kBlockN / 2], const float (&c)[2], float (&row_max)[2],
                                             float (&row_sum)[2], float (&alpha)[2]) {
  int32_t imx[2] = {INT_MIN, INT_MIN};
#pragma unroll
  for (int i = 0; i < kBlockN / 8; ++i) {
    imx[0] = max(imx[0], max(sacc[4 * i + 0], sacc[4 * i + 1]));
    imx[1] = max(imx[1], max(sacc[4 * i + 2], sacc[4 * i + 3]));
  }
  float neg_m[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float mx = fmaxf(row_max[r], quad_max(static_cast<float>(imx[r]) * c[r]));
    alpha[r] = exp2_approx(row_max[r] - mx);  // first block: 2^-inf = 0 times a zero O and sum
    neg_m[r] = kPOffset - mx;
    row_max[r] = mx;
  }
  float tile_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kBlockN / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const float pv = exp2_approx(fmaf(static_cast<float>(sacc[4 * i + e]), c[e / 2], neg_m[e / 2]));
      sacc[4 * i + e] = __float_as_int(pv);
      tile_sum[e / 2] += pv;
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * alpha[r] + tile_sum[r];
}

// P to e4m3 A fragments of the k32 steps: for keys 32kk..32kk+31 this thread holds, per row, 2t, 2t+1, 8+2t, 9+2t
// (column groups 4kk and 4kk+1) and the same 16 keys on (groups 4kk+2, 4kk+3); with V^T's keys permuted
// (vt_position) those are exactly the k = 4t..4t+3 and 16+4t.. its A registers carry. Row r: registers 0 and 2;
// row r+8: 1 and 3.
__device__ __forceinline__ void pack_p8(const int32_t (&sacc)[kBlockN / 2], uint32_t (&pa)[kBlockN / 32][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk) {
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int g = 4 * kk + 2 * half;  // the first of the two column groups of this 16
#pragma unroll
      for (int r = 0; r < 2; ++r) {
        pa[kk][2 * half + r] =
            pack_e4m3x4(__int_as_float(sacc[4 * g + 2 * r]), __int_as_float(sacc[4 * g + 2 * r + 1]),
                        __int_as_float(sacc[4 * g + 4 + 2 * r]), __int_as_float(sacc[4 * g + 4 + 2 * r + 1]));
      }
    }
  }
}

// O = O alpha + O_tile: the promotion of a key block's P V into the fp32 O, and the online softmax's rescale.
__device__ __forceinline__ void merge(float (&o)[kHeadDim / 2], const float (&ot)[kHeadDim / 2],
                                      const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < kHeadDim / 8; ++i) {
    o[4 * i + 0] = fmaf(o[4 * i + 0], alpha[0], ot[4 * i + 0]);
    o[4 * i + 1] = fmaf(o[4 * i + 1], alpha[0], ot[4 * i + 1]);
    o[4 * i + 2] = fmaf(o[4 * i + 2], alpha[1], ot[4 * i + 2]);
    o[4 * i + 3] = fmaf(o[4 * i + 3], alpha[1], ot[4 * i + 3]);
  }
}

// S = Q K'^T: 4 INT8 wgmmas of k=32 along the head dim, each 32 bytes further along the 128-byte swizzled rows of
// Q (A) and K' (B); SBO = 1024 B between 8-row core groups. Committed as one group.
__device__ __forceinline__ void issue_qk(int32_t (&sacc)[kBlockN / 2], uint32_t q_smem, uint32_t k_smem) {
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 32; ++kk) {
    const uint64_t da = make_smem_desc_sw128(q_smem + kk * 32, 16, 1024);
    const uint64_t db = make_smem_desc_sw128(k_smem + kk * 32, 16, 1024);
    wgmma_m64n128k32_s8_ss(sacc, da, db, kk > 0);
  }
  wgmma_commit();
}

// O_tile = P V: 4 e4m3 wgmmas of k=32 keys, A = P from registers, B = V^T (rows of 128 keys, K-major) 32 bytes
// further each; the first overwrites O_tile (scale-d 0): a fresh accumulator per key block. Committed as one group.
__device__ __forceinline__ void issue_pv(float (&ot)[kHeadDim / 2], const uint32_t (&pa)[kBlockN / 32][4],
                                         uint32_t vt_smem) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 32; ++kk) {
    const uint64_t db = make_smem_desc_sw128(vt_smem + kk * 32, 16, 1024);
    wgmma_m64n128k32_e4m3_rs(ot, pa[kk], db, kk > 0);
  }
  wgmma_commit();
}

// Ping-pong between the two consumer warpgroups: each takes a turn to issue its wgmmas, so one warpgroup's softmax
// runs while the other's GEMMs own the tensor cores. Barrier kBase + w (256 threads) = "warpgroup w may issue".
// The turn passes continuously across tiles (both warpgroups have the same issue points per tile), so the two
// stay half a period apart through tile boundaries instead of re-synchronising at every tile. Id 0 is
// __syncthreads'; 3 and 4 as in step 11.
enum class SchedBarrier : uint32_t { kBase = 3 };
__device__ __forceinline__ void sched_wait(int cwg) {
  named_barrier_sync(static_cast<uint32_t>(SchedBarrier::kBase) + cwg, 256);
}
__device__ __forceinline__ void sched_pass(int cwg) {
  named_barrier_arrive(static_cast<uint32_t>(SchedBarrier::kBase) + (cwg ^ 1), 256);
}

// Epilogue: O / l times V's channel scale, stored straight from the accumulator fragments (4-byte stores; a quad
// covers 16 contiguous bytes of a row).
__device__ __forceinline__ void store_o(const Params& p, const TileCoord& tc, int row0, int col_in_group,
                                        const float (&o)[kHeadDim / 2], const float (&row_sum)[2]) {
  const float* vs = p.v_scale + (static_cast<int64_t>(tc.batch) * p.heads + tc.head) * kHeadDim + col_in_group;
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = 1.f / row_sum[r];
    const int64_t row = row0 + 8 * r;
    uint16_t* dst = p.o + ((static_cast<int64_t>(tc.batch) * p.seqlen + row) * p.heads + tc.head) * kHeadDim +
                    col_in_group;
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i) {
      *reinterpret_cast<uint32_t*>(dst + 8 * i) =
          pack_bf16x2(o[4 * i + 2 * r] * inv * vs[8 * i], o[4 * i + 2 * r + 1] * inv * vs[8 * i + 1]);
    }
  }
}

// ---- consumer: 64 query rows of every tile this CTA walks. S_j = Q K'_j is issued together with
// O_tile = P_{j-1} V_{j-1}, and the softmax of S_j runs on the CUDA cores while that P V is still on the tensor
// cores; O_tile is merged into O once it retires.
__device__ __forceinline__ void consumer(const Params& p, SharedStorage& s, int cwg) {
  const float kNegInf = -__int_as_float(0x7f800000);
  // This warpgroup's 64 rows of Q: rows 64*cwg.. (8 KB in, so still 1024-byte aligned).
  const uint32_t q_smem = smem_addr(s.q) + cwg * kRowsPerWG * kHeadDim;
  const int n_blocks = p.seqlen / kBlockN;

  uint32_t k_phase = 0, v_phase = 0;  // bit s: parity of stage s's next K / V "full" phase (see producer)
  // Warpgroup 0 takes the first turn. Warpgroup 1's last pass then has no matching wait; warpgroup 0 absorbs it
  // with one extra wait after its last tile, so both barriers end balanced whatever the tile count.
  if (cwg == 1) sched_pass(cwg);
  int local = 0;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, ++local) {
    const int lane = lane_id(), warp = (thread_x() / 32) % 4;
    // Accumulator fragment (wgmma m64nN, 32-bit): this thread holds rows r and r+8 of its warp's 16, and for every
    // group i of 8 columns the pair at columns 8i + 2*(lane%4) + {0,1}: acc[4i+0..1] row r, acc[4i+2..3] row r+8.
    const int row_in_wg = warp * 16 + lane / 4;
    const int col_in_group = 2 * (lane % 4);
    const TileCoord tc = tile_coord(p, tile);
    const int64_t bh = static_cast<int64_t>(tc.batch) * p.heads + tc.head;
    const int row0 = tc.m_block * kBlockM + cwg * kRowsPerWG + row_in_wg;
    const float q_scale[2] = {p.q_scale[bh * p.seqlen + row0], p.q_scale[bh * p.seqlen + row0 + 8]};
    const float* k_scale = p.k_scale + bh * n_blocks;

    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float ot[kHeadDim / 2];
    int32_t sacc[kBlockN / 2];
    uint32_t pa[kBlockN / 32][4];
    float row_max[2] = {kNegInf, kNegInf};
    float row_sum[2] = {0.f, 0.f};  // per-thread partial sums; the quad reduction waits for the epilogue
    float alpha[2], alpha_prev[2];  // this block's rescale, and the one O_tile of the block before is merged with

    // Q's buffer goes back to the producer right after this tile's last S = Q K^T.
    mbarrier_wait(&s.q_full, local & 1);
    // Prologue: S_0 alone, then its softmax; P_0 is ready for the first overlapped step.
    {
      constexpr int stage = 0;
      mbarrier_wait(&s.k_full[stage], k_phase & 1);
      k_phase ^= 1u;
      sched_wait(cwg);
      wgmma_fence();
      issue_qk(sacc, q_smem, smem_addr(s.k[stage]));
      sched_pass(cwg);
      wgmma_wait<0>();
      fence_regs(sacc);
      if (lane == 0) {
        mbarrier_arrive(&s.k_empty[stage]);
        if (n_blocks == 1) mbarrier_arrive(&s.q_empty);
      }
      const float c[2] = {q_scale[0] * k_scale[0], q_scale[1] * k_scale[0]};
      softmax_8bit(sacc, c, row_max, row_sum, alpha_prev);
      pack_p8(sacc, pa);
    }

    // Steady state: issue S_j = Q K'_j and O_tile = P_{j-1} V_{j-1} back to back; the softmax of S_j then runs
    // while P V is still on the tensor cores, and O_tile joins O after it retires.
    for (int j = 1; j < n_blocks; ++j) {
      const int stage = j % kStages, prev = (j - 1) % kStages;
      const float ks = k_scale[j];
      mbarrier_wait(&s.k_full[stage], (k_phase >> stage) & 1);
      k_phase ^= 1u << stage;
      sched_wait(cwg);
      wgmma_fence();  // P was packed and O_tile merged by ordinary code
      issue_qk(sacc, q_smem, smem_addr(s.k[stage]));
      // V_{j-1} last: it may land while S_j runs (its stage was released after both warpgroups' P V)
      mbarrier_wait(&s.v_full[prev], (v_phase >> prev) & 1);
      v_phase ^= 1u << prev;
      wgmma_fence();
      issue_pv(ot, pa, smem_addr(s.vt[prev]));
      sched_pass(cwg);
      wgmma_wait<1>();  // S_j done (groups retire in order); P V may still run
      fence_regs(sacc);
      if (lane == 0) {
        mbarrier_arrive(&s.k_empty[stage]);
        if (j == n_blocks - 1) mbarrier_arrive(&s.q_empty);
      }
      const float c[2] = {q_scale[0] * ks, q_scale[1] * ks};
      softmax_8bit(sacc, c, row_max, row_sum, alpha);
      wgmma_wait<0>();  // P_{j-1} V_{j-1} done: O_tile and P's registers are free again
      fence_regs(ot);
      fence_frag(pa);
      if (lane == 0) mbarrier_arrive(&s.v_empty[prev]);
      merge(o, ot, alpha_prev);  // O_tile is in block j-1's max: O catches up by that block's alpha first
      alpha_prev[0] = alpha[0];
      alpha_prev[1] = alpha[1];
      pack_p8(sacc, pa);
    }

    // Drain: the last P V.
    const int last = (n_blocks - 1) % kStages;
    mbarrier_wait(&s.v_full[last], (v_phase >> last) & 1);
    v_phase ^= 1u << last;
    sched_wait(cwg);
    wgmma_fence();
    issue_pv(ot, pa, smem_addr(s.vt[last]));
    sched_pass(cwg);
    wgmma_wait<0>();
    fence_regs(ot);
    fence_frag(pa);
    if (lane == 0) mbarrier_arrive(&s.v_empty[last]);
    merge(o, ot, alpha_prev);

#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = quad_sum(row_sum[r]);
    store_o(p, tc, row0, col_in_group, o, row_sum);
  }
  if (cwg == 0) sched_wait(cwg);
}

// ---- the kernel: persistent, one CTA per SM, each walking tiles blockIdx.x, blockIdx.x + gridDim.x, ... ---------
__global__ void __launch_bounds__(kThreads, 1) attn_fwd_kernel(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  // Dynamic shared memory is only 16-byte aligned; the launcher over-allocates 1 KB for this.
  const uint32_t pad = (1024 - (smem_addr(smem_raw) & 1023)) & 1023;
  SharedStorage& s = *reinterpret_cast<SharedStorage*>(smem_raw + pad);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    prefetch_tensormap(&p.tm_q);
    prefetch_tensormap(&p.tm_k);
    prefetch_tensormap(&p.tm_vt);
    mbarrier_init(&s.q_full, 1);
    mbarrier_init(&s.q_empty, 4 * kConsumerWGs);
#pragma unroll
    for (int st = 0; st < kStages; ++st) {
      mbarrier_init(&s.k_full[st], 1);
      mbarrier_init(&s.v_full[st], 1);
      // one arrival per consumer warp: each warp releases a stage after its own wgmma_wait
      mbarrier_init(&s.k_empty[st], 4 * kConsumerWGs);
      mbarrier_init(&s.v_empty[st], 4 * kConsumerWGs);
    }
    fence_barrier_init();
  }
  __syncthreads();

  if (wg == 0) {
    setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) producer(p, s);
  } else {
    setmaxnreg_inc<kConsumerRegs>();
    consumer(p, s, wg - 1);
  }
}

// ---- host ----------------------------------------------------------------------------------------------------------
thread_local std::string g_error;

int fail(const std::string& msg) {
  g_error = msg;
  return 1;
}

// The lineage contract (lineage.h). Anything else is refused rather than computed wrongly.
std::string contract_error(const LineageArgs* a) {
  if (a == nullptr) return "null argument block";
  if (!a->q || !a->k || !a->v || !a->o) return "null q/k/v/o pointer";
  if (a->head_dim != kHeadDim) return "head_dim must be 128";
  if (a->batch < 1 || a->heads < 1) return "batch and heads must be >= 1";
  if (a->seqlen < kSeqMultiple || a->seqlen % kSeqMultiple != 0) return "seqlen must be a positive multiple of 1408";
  if (!(a->scale > 0.f) || !(a->scale < 3.0e38f)) return "scale must be positive and finite";
  for (const void* ptr : {a->q, a->k, static_cast<const void*>(a->v), static_cast<const void*>(a->o)}) {
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v and o must be 16-byte aligned";
  }
  if (static_cast<int64_t>(a->seqlen / kBlockM) * a->heads * a->batch > INT_MAX) {
    return "too many tiles (batch * heads * seqlen / 128 over 2^31 - 1)";
  }
  if (a->heads > 65535 || a->batch > 65535) return "heads and batch must be at most 65535 (the pre-pass's grid)";
  return "";
}

// cuTensorMapEncodeTiled through the runtime's driver entry point, so nothing links against libcuda.
PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  if (fn == nullptr) {
    void* ptr = nullptr;
    cudaDriverEntryPointQueryResult q{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &ptr, 12000, cudaEnableDefault, &q) ==
            cudaSuccess &&
        q == cudaDriverEntryPointSuccess) {
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(ptr);
    }
  }
  return fn;
}

// A 4-D map over the workspace's bytes, dims (inner first) and the byte strides of dims 1-3; the box is 128 x 128
// (128 bytes a row, the most a 128B-swizzled box row may hold) of one head of one batch.
bool make_tensor_map(CUtensorMap* map, const void* base, const cuuint64_t (&dims)[4], const cuuint64_t (&strides)[3],
                     std::string* err) {
  auto encode = tensor_map_encoder();
  if (encode == nullptr) {
    *err = "cuTensorMapEncodeTiled not available from the driver";
    return false;
  }
  cuuint32_t box[4] = {128, 128, 1, 1};
  cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 4, const_cast<void*>(base), dims, strides, box,
                      elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *err = "cuTensorMapEncodeTiled failed with CUresult " + std::to_string(static_cast<int>(r));
    return false;
  }
  return true;
}

}  // namespace

extern "C" const char* lineage_error(void) { return g_error.c_str(); }

extern "C" int lineage_fwd(const LineageArgs* a, void* stream_ptr) {
  g_error.clear();
  const std::string bad = contract_error(a);
  if (!bad.empty()) return fail(bad);
  const cudaStream_t stream = static_cast<cudaStream_t>(stream_ptr);
  const int64_t B = a->batch, H = a->heads, S = a->seqlen, D = kHeadDim;
  const int64_t elems = B * H * S * D;  // bytes of each 8-bit operand
  const int64_t rows = B * H * S, blocks = B * H * (S / kBlockN), channels = B * H * D;
  // The workspace: stream-ordered (cudaMallocAsync from the device's pool: no synchronization, reused across calls),
  // freed on the stream after the attention kernel.
  const size_t bytes = 3 * elems + 4 * (rows + blocks + 3 * channels);
  void* ws = nullptr;
  cudaError_t e = cudaMallocAsync(&ws, bytes, stream);
  if (e != cudaSuccess) return fail(std::string("cudaMallocAsync: ") + cudaGetErrorString(e));
  Prep prep{};
  prep.q = static_cast<const __nv_bfloat16*>(a->q);
  prep.k = static_cast<const __nv_bfloat16*>(a->k);
  prep.v = static_cast<const __nv_bfloat16*>(a->v);
  prep.q8 = static_cast<int8_t*>(ws);
  prep.k8 = prep.q8 + elems;
  prep.vt8 = reinterpret_cast<uint8_t*>(prep.k8 + elems);
  prep.q_scale = reinterpret_cast<float*>(prep.vt8 + elems);
  prep.k_scale = prep.q_scale + rows;
  prep.v_scale = prep.k_scale + blocks;
  prep.k_sum = prep.v_scale + channels;
  prep.v_amax = prep.k_sum + channels;
  prep.seqlen = a->seqlen;
  prep.heads = a->heads;
  prep.scale_log2 = a->scale * 1.4426950408889634f;  // log2(e)

  Params p{};
  std::string err;
  const cuuint64_t qk_dims[4] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(S), static_cast<cuuint64_t>(H),
                                 static_cast<cuuint64_t>(B)};
  const cuuint64_t qk_strides[3] = {static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(S * D),
                                    static_cast<cuuint64_t>(H * S * D)};
  const cuuint64_t vt_dims[4] = {static_cast<cuuint64_t>(S), static_cast<cuuint64_t>(D), static_cast<cuuint64_t>(H),
                                 static_cast<cuuint64_t>(B)};
  const cuuint64_t vt_strides[3] = {static_cast<cuuint64_t>(S), static_cast<cuuint64_t>(D * S),
                                    static_cast<cuuint64_t>(H * D * S)};
  if (!make_tensor_map(&p.tm_q, prep.q8, qk_dims, qk_strides, &err) ||
      !make_tensor_map(&p.tm_k, prep.k8, qk_dims, qk_strides, &err) ||
      !make_tensor_map(&p.tm_vt, prep.vt8, vt_dims, vt_strides, &err)) {
    cudaFreeAsync(ws, stream);
    return fail(err);
  }
  p.o = static_cast<uint16_t*>(a->o);
  p.q_scale = prep.q_scale;
  p.k_scale = prep.k_scale;
  p.v_scale = prep.v_scale;
  p.seqlen = a->seqlen;
  p.heads = a->heads;
  p.num_m_blocks = a->seqlen / kBlockM;
  p.num_tiles = p.num_m_blocks * a->heads * a->batch;  // fits: checked in contract_error
  const size_t smem = sizeof(SharedStorage) + 1024;  // +1 KB to align the tiles to 1024 B in the kernel
  e = cudaFuncSetAttribute(attn_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  int device = 0, sms = 0;
  if (e == cudaSuccess && (cudaGetDevice(&device) != cudaSuccess ||
                           cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess ||
                           sms < 1)) {
    e = cudaErrorInvalidDevice;
  }
  if (e == cudaSuccess) e = cudaMemsetAsync(prep.k_sum, 0, 2 * channels * sizeof(float), stream);
  if (e == cudaSuccess) {
    const dim3 prep_grid(static_cast<unsigned>(S / kBlockN), static_cast<unsigned>(H), static_cast<unsigned>(B));
    quant_stats<<<prep_grid, 128, 0, stream>>>(prep);
    quantize<<<prep_grid, 128, 0, stream>>>(prep);
    // Persistent: one CTA per SM (shared memory allows no second), each walking the tile list.
    const dim3 grid(static_cast<unsigned>(p.num_tiles < sms ? p.num_tiles : sms));
    attn_fwd_kernel<<<grid, kThreads, smem, stream>>>(p);
    e = cudaGetLastError();
  }
  const cudaError_t freed = cudaFreeAsync(ws, stream);
  if (e != cudaSuccess) return fail(std::string("launch: ") + cudaGetErrorString(e));
  if (freed != cudaSuccess) return fail(std::string("cudaFreeAsync: ") + cudaGetErrorString(freed));
  return 0;
}
