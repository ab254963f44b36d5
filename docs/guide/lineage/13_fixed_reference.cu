// Step 13: step 12 + a softmax against a fixed reference: every key block after a row's first is exponentiated
// against that first block's row max m0 and never rescaled, because the running max was the most expensive part of
// the softmax (a diagnostic build without it ran 6-14% faster than the production kernel at every shape): an FMNMX
// per score, two quad shuffles per row and every exponential waiting for them, then alpha and 64 FMULs on O. Any
// reference gives the same O; a reference below the true max risks only range, so a tile whose row sum leaves
// [1, 2^64] (or is NaN) is marked and run again with step 12's exact online softmax after the CTA's first pass.
// The production kernel took this at commits fa35fb1 and 6eebcfa: Wan 1.3B self-attention 1.15x -> 1.23x cuDNN.
//
// What to look at:
//   - softmax_fixed_ref: the steady loop's whole softmax is one FFMA and one MUFU per score; the first block of
//     each tile still runs online_softmax, which is where m0 comes from.
//   - add_packed_row_sum: the row sums are taken of P after its bf16 rounding, so O = sum p^ v / sum p^ is an exact
//     weighted mean of V's rows (with the running max a row's largest p is exactly 1; against m0 it is not).
//   - the redo: a consumer that finds a row sum out of range sets the tile's bit in redo_bits (shared memory);
//     after the first pass the consumers meet at a named barrier, one thread arrives on redo_ready, and producer
//     and consumers walk the marked tiles in the same order (redo_tiles), the consumers with the exact softmax.
//   - everything else is step 12: persistent CTAs, the per-tile ring restart, continuous ping-pong, O stored
//     straight from registers (a redone tile's stores simply overwrite its first ones, from the same threads).
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <climits>
#include <cstdint>
#include <initializer_list>
#include <string>

#include "lineage.h"

namespace {

// ---- tile sizes and register budgets -----------------------------------------------------------------------------
constexpr int kHeadDim = 128;
constexpr int kConsumerWGs = 2;  // two consumer warpgroups share each K/V tile: it is read once for 128 query rows
constexpr int kRowsPerWG = 64;   // wgmma's M
constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
constexpr int kBlockN = 176;     // S 88 + P 44 + O 64 registers per consumer thread (192 spills)
// As many K+V stages as shared memory holds next to Q, up to 4: 2 at N = 176 (Q 32 KB + 2 x 88 KB = 208 KB).
constexpr int kSmemBudget = 227 * 1024;  // per-block opt-in maximum on sm_90
constexpr int kQBytes = kBlockM * kHeadDim * 2;
constexpr int kStageBytes = 2 * kBlockN * kHeadDim * 2;
constexpr int kStagesFit = (kSmemBudget - 2048 - kQBytes) / kStageBytes;  // 2 KB: barriers and alignment
constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
static_assert(kStages >= 2, "tile too large: fewer than 2 K/V stages fit in shared memory");
constexpr int kThreads = 128 * (1 + kConsumerWGs);
// The producer issues TMA from one thread and needs almost nothing; the consumers hold S, P and O.
constexpr uint32_t kProducerRegs = 24;
constexpr uint32_t kConsumerRegs = 240;
static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= 65536, "register file overcommitted");
// TMA's 128-byte swizzle caps a box row at 128 bytes = 64 bf16, so every 128-column tile is stored as two
// 64-column chunks of [rows][128 bytes].
constexpr int kChunkCols = 64;
constexpr int kChunkBytes = kChunkCols * 2;
constexpr int kChunks = kHeadDim / kChunkCols;
constexpr int kSeqMultiple = 1408;  // the lineage contract: lcm(128, 176)
static_assert(kSeqMultiple % kBlockM == 0 && kSeqMultiple % kBlockN == 0, "tiles must divide the sequence");

// Tiles a CTA can mark for a redo, one bit each: 2048 per CTA (270K tiles on 132 SMs; lineage_fwd refuses more).
constexpr int kRedoWords = 64;
// The largest row sum the fixed reference accepts: l >= 1 (m0's own key gives p = 1) and every p <= l, so with
// l <= 2^64 O stays below 2^64 sum |v|, far from fp32's 2^128.
constexpr float kMaxRowSum = 18446744073709551616.f;  // 2^64

// alignas(1024): the 128-byte swizzle repeats every 8 rows x 128 B; TMA and the descriptors assume aligned atoms.
struct SharedStorage {
  alignas(1024) uint16_t q[kBlockM * kHeadDim];           // 32 KB: 2 chunks of [128 rows][64 cols]
  alignas(1024) uint16_t k[kStages][kBlockN * kHeadDim];  // per stage: 2 chunks of [kBlockN keys][64 cols]
  alignas(1024) uint16_t v[kStages][kBlockN * kHeadDim];
  uint64_t q_full;
  uint64_t q_empty;  // both consumers have issued their last S = Q K^T of the tile: Q may be replaced
  uint64_t k_full[kStages];
  uint64_t k_empty[kStages];
  uint64_t v_full[kStages];
  uint64_t v_empty[kStages];
  uint64_t redo_ready;             // the consumers' redo marks are final (redo_tiles)
  uint32_t redo_bits[kRedoWords];  // bit L: this CTA's L-th tile runs again with the exact softmax
};
static_assert(sizeof(SharedStorage) + 1024 <= 227 * 1024, "shared memory: over the 227 KB a block may use");

struct Params {
  CUtensorMap tm_q, tm_k, tm_v;  // (D, S, H, B) maps, 128B swizzle, boxes of 64 columns
  uint16_t* o;                   // (B, S, H, D) bf16, written with plain stores
  int seqlen, heads;
  int num_m_blocks;              // seqlen / kBlockM
  int num_tiles;                 // num_m_blocks * heads * batch: the persistent CTAs' work list
  float scale_log2;              // softmax scale * log2(e): the kernel works in base 2
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

// wgmma.mma_async (9.7.15.5.2), bf16 in, fp32 accumulate; operand lists written out (inline asm takes no arrays).
// D(64x176) (+)= A(64x16, smem, K-major) * B(16x176, smem, K-major)
__device__ __forceinline__ void wgmma_m64n176k16_ss(float (&d)[88], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %90, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n176k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, "
      "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, "
      "%80, %81, %82, %83, %84, %85, %86, %87"
      "}, %88, %89, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31]),
        "+f"(d[32]), "+f"(d[33]), "+f"(d[34]), "+f"(d[35]), "+f"(d[36]), "+f"(d[37]), "+f"(d[38]), "+f"(d[39]),
        "+f"(d[40]), "+f"(d[41]), "+f"(d[42]), "+f"(d[43]), "+f"(d[44]), "+f"(d[45]), "+f"(d[46]), "+f"(d[47]),
        "+f"(d[48]), "+f"(d[49]), "+f"(d[50]), "+f"(d[51]), "+f"(d[52]), "+f"(d[53]), "+f"(d[54]), "+f"(d[55]),
        "+f"(d[56]), "+f"(d[57]), "+f"(d[58]), "+f"(d[59]), "+f"(d[60]), "+f"(d[61]), "+f"(d[62]), "+f"(d[63]),
        "+f"(d[64]), "+f"(d[65]), "+f"(d[66]), "+f"(d[67]), "+f"(d[68]), "+f"(d[69]), "+f"(d[70]), "+f"(d[71]),
        "+f"(d[72]), "+f"(d[73]), "+f"(d[74]), "+f"(d[75]), "+f"(d[76]), "+f"(d[77]), "+f"(d[78]), "+f"(d[79]),
        "+f"(d[80]), "+f"(d[81]), "+f"(d[82]), "+f"(d[83]), "+f"(d[84]), "+f"(d[85]), "+f"(d[86]), "+f"(d[87])
      : "l"(desc_a), "l"(desc_b), "r"(scale_d));
}

// D(64x128) (+)= A(64x16, registers) * B(16x128, smem, MN-major: trans-b)
__device__ __forceinline__ void wgmma_m64n128k16_rs(float (&d)[64], const uint32_t (&a)[4], uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %69, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n128k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, "
      "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, "
      "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63"
      "}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
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

// The 4 threads of a quad hold the same two rows of a wgmma accumulator.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
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

// ---- the redo walk: the tiles of this CTA marked in `bits` (bit L: its L-th tile, blockIdx.x + L * gridDim.x), in
// ascending order, numbered n_local, n_local + 1, ... after the first pass's n_local tiles (so the Q buffer's and
// the ring's phases carry on). Producer and consumers walk the same bits in the same order. ---------------------
template <typename F>
__device__ __forceinline__ void redo_tiles(const uint32_t* bits, int n_local, F&& run) {
  int local = n_local;
#pragma unroll 1
  for (int w = 0; w < kRedoWords && 32 * w < n_local; ++w) {
    uint32_t b = bits[w];
#pragma unroll 1
    while (b != 0) {
      const int bit = __ffs(b) - 1;
      b &= b - 1;
      run(static_cast<int>(blockIdx.x) + (32 * w + bit) * static_cast<int>(gridDim.x), local++);
    }
  }
}

// ---- producer: one thread streams, tile after tile, Q (into the buffer the consumers released after their last
// S = Q K^T of the previous tile) and the K/V ring. Every tile restarts the ring at stage 0, so stage indices derive
// from the loop counter alone; the phase of each stage is carried across tiles as one bit per stage. ------------
__device__ __forceinline__ void producer(const Params& p, SharedStorage& s) {
  constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(uint16_t);
  constexpr uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(uint16_t);
  const int n_blocks = p.seqlen / kBlockN;
  uint32_t empty_phase = 0;  // bit s: parity of stage s's next "empty" phase to wait for, xor 1
  auto produce = [&](int tile, int local) {
    const TileCoord tc = tile_coord(p, tile);
    mbarrier_wait(&s.q_empty, (local & 1) ^ 1);
    mbarrier_arrive_expect_tx(&s.q_full, kQBytes);
#pragma unroll
    for (int c = 0; c < kChunks; ++c) {
      tma_load_4d(s.q + c * kBlockM * kChunkCols, &p.tm_q, &s.q_full, c * kChunkCols, tc.m_block * kBlockM,
                  tc.head, tc.batch);
    }
    for (int j = 0; j < n_blocks; ++j) {
      const int stage = j % kStages;
      const uint32_t phase = (empty_phase >> stage) & 1;
      empty_phase ^= 1u << stage;
      // K before V: the consumers need K first (S = Q K^T), V only after their softmax.
      mbarrier_wait(&s.k_empty[stage], phase ^ 1);
      mbarrier_arrive_expect_tx(&s.k_full[stage], kKVBytes);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        tma_load_4d(s.k[stage] + c * kBlockN * kChunkCols, &p.tm_k, &s.k_full[stage], c * kChunkCols,
                    j * kBlockN, tc.head, tc.batch);
      }
      mbarrier_wait(&s.v_empty[stage], phase ^ 1);
      mbarrier_arrive_expect_tx(&s.v_full[stage], kKVBytes);
#pragma unroll
      for (int c = 0; c < kChunks; ++c) {
        tma_load_4d(s.v[stage] + c * kBlockN * kChunkCols, &p.tm_v, &s.v_full[stage], c * kChunkCols,
                    j * kBlockN, tc.head, tc.batch);
      }
    }
  };
  int local = 0;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, ++local) produce(tile, local);
  // Then the tiles the consumers marked, in the order they run them, once their marks are final.
  mbarrier_wait(&s.redo_ready, 0);
  redo_tiles(s.redo_bits, local, [&](int tile, int l) { produce(tile, l); });
}

// ---- consumer building blocks: each one step of the algorithm, all on one thread's fragments ---------------------

// Online softmax in base 2: p = 2^(s*scale_log2 - m*scale_log2), one FFMA + one MUFU per score. Exponentiates
// sacc in place, updates the running max and (per-thread partial) sum, and returns the factor O must be scaled by.
// kSum = false leaves the sum to the caller (add_packed_row_sum; the fixed reference's first block).
template <bool kSum>
__device__ __forceinline__ void online_softmax(float (&sacc)[kBlockN / 2], float (&row_max)[2], float (&row_sum)[2],
                                               float (&alpha)[2], float scale_log2) {
  float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
  for (int i = 0; i < kBlockN / 8; ++i) {
    mx[0] = fmaxf(mx[0], fmaxf(sacc[4 * i], sacc[4 * i + 1]));
    mx[1] = fmaxf(mx[1], fmaxf(sacc[4 * i + 2], sacc[4 * i + 3]));
  }
  float neg_ms[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = quad_max(mx[r]);
    alpha[r] = exp2_approx((row_max[r] - mx[r]) * scale_log2);  // first tile: 2^-inf = 0 times a zero O and sum
    neg_ms[r] = -mx[r] * scale_log2;
    row_max[r] = mx[r];
  }
  float tile_sum[2] = {0.f, 0.f};
#pragma unroll
  for (int i = 0; i < kBlockN / 8; ++i) {
    sacc[4 * i + 0] = exp2_approx(fmaf(sacc[4 * i + 0], scale_log2, neg_ms[0]));
    sacc[4 * i + 1] = exp2_approx(fmaf(sacc[4 * i + 1], scale_log2, neg_ms[0]));
    sacc[4 * i + 2] = exp2_approx(fmaf(sacc[4 * i + 2], scale_log2, neg_ms[1]));
    sacc[4 * i + 3] = exp2_approx(fmaf(sacc[4 * i + 3], scale_log2, neg_ms[1]));
    if constexpr (kSum) {
      tile_sum[0] += sacc[4 * i + 0] + sacc[4 * i + 1];
      tile_sum[1] += sacc[4 * i + 2] + sacc[4 * i + 3];
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * alpha[r] + tile_sum[r];
}

// Softmax against a fixed reference: p = 2^(s*scale_log2 - m0*scale_log2) with m0 the row max of the tile's first
// key block, one FFMA + one MUFU per score and nothing else: no max, no shuffles, no alpha, no rescale of O.
__device__ __forceinline__ void softmax_fixed_ref(float (&sacc)[kBlockN / 2], const float (&m0)[2],
                                                  float scale_log2) {
  const float neg_ref[2] = {-m0[0] * scale_log2, -m0[1] * scale_log2};
#pragma unroll
  for (int i = 0; i < kBlockN / 8; ++i) {
    sacc[4 * i + 0] = exp2_approx(fmaf(sacc[4 * i + 0], scale_log2, neg_ref[0]));
    sacc[4 * i + 1] = exp2_approx(fmaf(sacc[4 * i + 1], scale_log2, neg_ref[0]));
    sacc[4 * i + 2] = exp2_approx(fmaf(sacc[4 * i + 2], scale_log2, neg_ref[1]));
    sacc[4 * i + 3] = exp2_approx(fmaf(sacc[4 * i + 3], scale_log2, neg_ref[1]));
  }
}

__device__ __forceinline__ void rescale_o(float (&o)[kHeadDim / 2], const float (&alpha)[2]) {
#pragma unroll
  for (int i = 0; i < kHeadDim / 8; ++i) {
    o[4 * i + 0] *= alpha[0];
    o[4 * i + 1] *= alpha[0];
    o[4 * i + 2] *= alpha[1];
    o[4 * i + 3] *= alpha[1];
  }
}

// P to bf16 A fragments: for keys 16kk..16kk+15 this thread's 8 scores (rows r, r+8; two column pairs each) are
// exactly the 4 registers wgmma's m64k16 A fragment wants from it.
__device__ __forceinline__ void pack_p(const float (&sacc)[kBlockN / 2], uint32_t (&pa)[kBlockN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) pa[kk][r] = pack_bf16x2(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
  }
}

// Row sums of P as P V sees it, after the bf16 rounding (bf16 to fp32: the high half masked, the low half shifted
// up), so O = sum p^ v / sum p^ is an exact weighted mean of V's rows. Fragment r of each 16-key group holds row
// r % 2 (pack_p). Summing the unrounded p instead measured up to 2x cuDNN's max error on a score ramp.
__device__ __forceinline__ void add_packed_row_sum(const uint32_t (&pa)[kBlockN / 16][4], float (&row_sum)[2]) {
  float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float hi = __uint_as_float(pa[kk][r] & 0xffff0000u), lo = __uint_as_float(pa[kk][r] << 16);
      part[r % 2][r / 2] += hi + lo;
    }
  }
  row_sum[0] += part[0][0] + part[0][1];
  row_sum[1] += part[1][0] + part[1][1];
}

// S = Q K^T: 8 wgmmas of k=16 along the head dim. Q (A) and K (B) K-major: a k-step moves 32 bytes along the
// 128-byte swizzled row (4 per chunk); SBO = 1024 B between 8-row core groups. Committed as one group.
__device__ __forceinline__ void issue_qk(float (&sacc)[kBlockN / 2], uint32_t q_smem, uint32_t k_smem) {
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const uint32_t chunk = kk / 4, within = (kk % 4) * 32;
    const uint64_t da = make_smem_desc_sw128(q_smem + chunk * kBlockM * kChunkBytes + within, 16, 1024);
    const uint64_t db = make_smem_desc_sw128(k_smem + chunk * kBlockN * kChunkBytes + within, 16, 1024);
    wgmma_m64n176k16_ss(sacc, da, db, kk > 0);
  }
  wgmma_commit();
}

// O += P V: wgmmas of k=16 along the keys, A = P from registers. V (B) MN-major (rows = keys, trans-b): a k-step
// moves 16 key rows = 2048 B; SBO = 1024 B per 8 keys, LBO = the 64-column chunk stride. Committed as one group.
__device__ __forceinline__ void issue_pv(float (&o)[kHeadDim / 2], const uint32_t (&pa)[kBlockN / 16][4],
                                         uint32_t v_smem) {
#pragma unroll
  for (int kk = 0; kk < kBlockN / 16; ++kk) {
    const uint64_t db = make_smem_desc_sw128(v_smem + kk * 16 * kChunkBytes, kBlockN * kChunkBytes, 1024);
    wgmma_m64n128k16_rs(o, pa[kk], db, 1);
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

// Epilogue: normalise and store O straight from the accumulator fragments (4-byte stores; a quad covers 16
// contiguous bytes of a row). Not staging through shared memory keeps Q's buffer free for the producer to
// prefetch the next tile's Q during this tile's last P V.
__device__ __forceinline__ void store_o(const Params& p, const TileCoord& tc, int row0, int col_in_group,
                                        const float (&o)[kHeadDim / 2], const float (&row_sum)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = 1.f / row_sum[r];
    const int64_t row = row0 + 8 * r;
    uint16_t* dst = p.o + ((static_cast<int64_t>(tc.batch) * p.seqlen + row) * p.heads + tc.head) * kHeadDim +
                    col_in_group;
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i) {
      *reinterpret_cast<uint32_t*>(dst + 8 * i) = pack_bf16x2(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
    }
  }
}

// ---- consumer: 64 query rows of every tile this CTA walks. S_j = Q K_j is issued together with
// O += P_{j-1} V_{j-1}, and the softmax of S_j runs on the CUDA cores while that P V is still on the tensor cores.
// First pass: the fixed reference; then the marked tiles again with the exact online softmax.
template <bool B>
struct BoolTag {
  static constexpr bool value = B;
};
enum class RedoBarrier : uint32_t { kId = 5 };  // both consumer warpgroups, after the first pass (3, 4: ping-pong)

__device__ __forceinline__ void consumer(const Params& p, SharedStorage& s, int cwg) {
  const int tid = threadIdx.x - 128 * (cwg + 1);
  const float scale_log2 = p.scale_log2;
  const float kNegInf = -__int_as_float(0x7f800000);
  // This warpgroup's 64 rows of Q: rows 64*cwg.. of every chunk (8 KB in, so still 1024-byte aligned).
  const uint32_t q_smem = smem_addr(s.q) + cwg * kRowsPerWG * kChunkBytes;
  const int n_blocks = p.seqlen / kBlockN;

  uint32_t k_phase = 0, v_phase = 0;  // bit s: parity of stage s's next K / V "full" phase (see producer)
  // Warpgroup 0 takes the first turn. Warpgroup 1's last pass then has no matching wait; warpgroup 0 absorbs it
  // with one extra wait after its last tile, so both barriers end balanced whatever the tile count.
  if (cwg == 1) sched_pass(cwg);
  auto consume = [&](int tile, int local, auto fixed_tag) {
    constexpr bool kFixed = decltype(fixed_tag)::value;
    // Lane-dependent values read afresh per tile (%laneid, %tid.x): held across the tile loop of a consumer with
    // two instantiations of this body, they spilled in the production kernel.
    const int lane = lane_id(), warp = (thread_x() / 32) % 4;
    // Accumulator fragment (wgmma m64nN, fp32): this thread holds rows r and r+8 of its warp's 16, and for every
    // group i of 8 columns the pair at columns 8i + 2*(lane%4) + {0,1}: acc[4i+0..1] row r, acc[4i+2..3] row r+8.
    const int row_in_wg = warp * 16 + lane / 4;
    const int col_in_group = 2 * (lane % 4);
    const TileCoord tc = tile_coord(p, tile);

    float o[kHeadDim / 2];
#pragma unroll
    for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    float sacc[kBlockN / 2];
    uint32_t pa[kBlockN / 16][4];
    float row_max[2] = {kNegInf, kNegInf};  // kFixed: after the first block, m0 for good
    float row_sum[2] = {0.f, 0.f};  // per-thread partial sums; the quad reduction waits for the epilogue
    float alpha[2];

    // Q's buffer goes back to the producer right after this tile's last S = Q K^T.
    mbarrier_wait(&s.q_full, local & 1);
    // Prologue: S_0 alone, then its (exact) softmax, which sets the reference m0; P_0 is ready for the first
    // overlapped step.
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
      online_softmax<!kFixed>(sacc, row_max, row_sum, alpha, scale_log2);
      pack_p(sacc, pa);
      if constexpr (kFixed) add_packed_row_sum(pa, row_sum);
    }

    // Steady state: issue S_j = Q K_j and O += P_{j-1} V_{j-1} back to back; the softmax of S_j then runs while
    // P V is still on the tensor cores. The exact softmax rescales O only after P V retires; the fixed one never.
    for (int j = 1; j < n_blocks; ++j) {
      const int stage = j % kStages, prev = (j - 1) % kStages;
      mbarrier_wait(&s.k_full[stage], (k_phase >> stage) & 1);
      mbarrier_wait(&s.v_full[prev], (v_phase >> prev) & 1);
      k_phase ^= 1u << stage;
      v_phase ^= 1u << prev;
      sched_wait(cwg);
      wgmma_fence();  // P was packed (and O rescaled) by ordinary code
      issue_qk(sacc, q_smem, smem_addr(s.k[stage]));
      issue_pv(o, pa, smem_addr(s.v[prev]));
      sched_pass(cwg);
      wgmma_wait<1>();  // S_j done (groups retire in order); P V may still run
      fence_regs(sacc);
      if (lane == 0) {
        mbarrier_arrive(&s.k_empty[stage]);
        if (j == n_blocks - 1) mbarrier_arrive(&s.q_empty);
      }
      if constexpr (kFixed)
        softmax_fixed_ref(sacc, row_max, scale_log2);
      else
        online_softmax<true>(sacc, row_max, row_sum, alpha, scale_log2);
      wgmma_wait<0>();  // P_{j-1} V_{j-1} done: O and P's registers are free again
      fence_regs(o);
      fence_frag(pa);
      if (lane == 0) mbarrier_arrive(&s.v_empty[prev]);
      if constexpr (!kFixed) rescale_o(o, alpha);
      pack_p(sacc, pa);
      if constexpr (kFixed) add_packed_row_sum(pa, row_sum);
    }

    // Drain: the last P V.
    const int last = (n_blocks - 1) % kStages;
    mbarrier_wait(&s.v_full[last], (v_phase >> last) & 1);
    v_phase ^= 1u << last;
    sched_wait(cwg);
    wgmma_fence();
    issue_pv(o, pa, smem_addr(s.v[last]));
    sched_pass(cwg);
    wgmma_wait<0>();
    fence_regs(o);
    fence_frag(pa);
    if (lane == 0) mbarrier_arrive(&s.v_empty[last]);

#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = quad_sum(row_sum[r]);
    const int row0 = tc.m_block * kBlockM + cwg * kRowsPerWG + row_in_wg;
    store_o(p, tc, row0, col_in_group, o, row_sum);
    // Out of range (or NaN, for which the comparison is false): mark the tile; its O is overwritten in the redo.
    if constexpr (kFixed) {
      if (!(row_sum[0] <= kMaxRowSum && row_sum[1] <= kMaxRowSum))
        atomicOr(&s.redo_bits[local >> 5], 1u << (local & 31));
    }
  };
  int local = 0;
  for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, ++local)
    consume(tile, local, BoolTag<true>{});
  // Every mark is in (bar.sync orders shared memory among the threads it joins), then the producer may read them.
  named_barrier_sync(static_cast<uint32_t>(RedoBarrier::kId), 128 * kConsumerWGs);
  if (cwg == 0 && tid == 0) mbarrier_arrive(&s.redo_ready);
  redo_tiles(s.redo_bits, local, [&](int tile, int l) { consume(tile, l, BoolTag<false>{}); });
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
    prefetch_tensormap(&p.tm_v);
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
    mbarrier_init(&s.redo_ready, 1);
    fence_barrier_init();
  }
  if (threadIdx.x < kRedoWords) s.redo_bits[threadIdx.x] = 0;
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
    if (reinterpret_cast<uintptr_t>(ptr) % 16 != 0) return "q, k, v and o must be 16-byte aligned (TMA)";
  }
  if (static_cast<int64_t>(a->seqlen / kBlockM) * a->heads * a->batch > INT_MAX) {
    return "too many tiles (batch * heads * seqlen / 128 over 2^31 - 1)";
  }
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

// A 4-D map over contiguous (B, S, H, D) bf16 seen as (D, S, H, B); the box is 64 columns (128 bytes, the most a
// 128B-swizzled box row may hold) x box_rows rows of one head of one batch.
bool make_tensor_map(CUtensorMap* map, const void* base, const LineageArgs& a, uint32_t box_rows, std::string* err) {
  auto encode = tensor_map_encoder();
  if (encode == nullptr) {
    *err = "cuTensorMapEncodeTiled not available from the driver";
    return false;
  }
  const uint64_t row_bytes = static_cast<uint64_t>(kHeadDim) * sizeof(uint16_t);
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(kHeadDim), static_cast<cuuint64_t>(a.seqlen),
                        static_cast<cuuint64_t>(a.heads), static_cast<cuuint64_t>(a.batch)};
  cuuint64_t strides[3] = {row_bytes * a.heads, row_bytes, row_bytes * a.heads * a.seqlen};  // seq, head, batch
  cuuint32_t box[4] = {static_cast<cuuint32_t>(kChunkCols), box_rows, 1, 1};
  cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box,
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

extern "C" int lineage_fwd(const LineageArgs* a, void* stream) {
  g_error.clear();
  const std::string bad = contract_error(a);
  if (!bad.empty()) return fail(bad);
  Params p{};
  std::string err;
  if (!make_tensor_map(&p.tm_q, a->q, *a, kBlockM, &err) || !make_tensor_map(&p.tm_k, a->k, *a, kBlockN, &err) ||
      !make_tensor_map(&p.tm_v, a->v, *a, kBlockN, &err)) {
    return fail(err);
  }
  p.o = static_cast<uint16_t*>(a->o);
  p.seqlen = a->seqlen;
  p.heads = a->heads;
  p.num_m_blocks = a->seqlen / kBlockM;
  p.num_tiles = p.num_m_blocks * a->heads * a->batch;  // fits: checked in contract_error
  p.scale_log2 = a->scale * 1.4426950408889634f;  // log2(e)
  const size_t smem = sizeof(SharedStorage) + 1024;  // +1 KB to align the tiles to 1024 B in the kernel
  cudaError_t e = cudaFuncSetAttribute(attn_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return fail(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e));
  int device = 0, sms = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || sms < 1) {
    return fail("could not query the device's SM count");
  }
  if (p.num_tiles > sms * 32 * kRedoWords) {
    return fail("too many tiles: a CTA can mark at most " + std::to_string(32 * kRedoWords) + " for the redo");
  }
  // Persistent: one CTA per SM (shared memory allows no second), each walking the tile list.
  const dim3 grid(static_cast<unsigned>(p.num_tiles < sms ? p.num_tiles : sms));
  attn_fwd_kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(p);
  e = cudaGetLastError();
  if (e != cudaSuccess) return fail(std::string("kernel launch: ") + cudaGetErrorString(e));
  return 0;
}
