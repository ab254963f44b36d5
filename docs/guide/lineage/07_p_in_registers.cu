// Step 07: step 06 + P V with P straight from registers (wgmma's RS form), because S's fp32 accumulator layout is
// already wgmma's A-register layout: packing P to bf16 in place skips the shared-memory round trip, the proxy
// fence and the barrier step 06 needed between the softmax and P V.
//
// What to look at:
//   - pack P: S's accumulator fragment (rows r and r+8, column pairs 8i + 2*(lane%4)) is, for each 16-key slice,
//     exactly the 4 x b32 A fragment of an m64k16 wgmma: 8 fp32 -> 4 packed bf16x2 registers, no data moves
//     between threads.
//   - wgmma_m64n128k16_rs: A is a register list, B (V, MN-major) is still a descriptor with trans-b.
//   - the registers of P (and O) are kept alive with empty asm statements until wait_group 0 has retired the
//     wgmma that reads them: the hardware reads them asynchronously, after the instruction has issued.
// Still one warpgroup per CTA issuing its own TMA loads; the tensor cores still idle during the softmax.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <initializer_list>
#include <string>

#include "lineage.h"

namespace {

// ---- tile sizes ------------------------------------------------------------------------------------------------
constexpr int kHeadDim = 128;
constexpr int kBlockM = 64;    // query rows per CTA: one warpgroup, wgmma's M
// Step 05's tiles and ring: 64 keys per K/V tile (S is 64 x 64 fp32 = 32 registers per thread), 2 stages.
// Shared memory stays under half an SM's 228 KB, so two CTAs (two warpgroups) share each SM and one's softmax
// can run under the other's GEMMs.
constexpr int kBlockN = 64;
constexpr int kStages = 2;     // K/V ring: tile j+1 loads while tile j computes
constexpr int kThreads = 128;  // one warpgroup
// TMA's 128-byte swizzle caps a box row at 128 bytes = 64 bf16, so every 128-column tile is stored as two
// 64-column chunks of [rows][128 bytes].
constexpr int kChunkCols = 64;
constexpr int kChunkBytes = kChunkCols * 2;
constexpr int kChunks = kHeadDim / kChunkCols;
constexpr int kSeqMultiple = 1408;  // the lineage contract: lcm(128, 176)
static_assert(kSeqMultiple % kBlockM == 0 && kSeqMultiple % kBlockN == 0, "tiles must divide the sequence");

// alignas(1024): the 128-byte swizzle repeats every 8 rows x 128 B; TMA and the descriptors assume aligned atoms.
struct SharedStorage {
  alignas(1024) uint16_t q[kBlockM * kHeadDim];           // 16 KB: 2 chunks of [64 rows][64 cols]
  alignas(1024) uint16_t k[kStages][kBlockN * kHeadDim];  // 16 KB per stage: 2 chunks of [64 keys][64 cols]
  alignas(1024) uint16_t v[kStages][kBlockN * kHeadDim];
  uint64_t q_full;
  uint64_t kv_full[kStages];
};
static_assert(2 * (sizeof(SharedStorage) + 1024 + 1024) <= 228 * 1024, "shared memory: two CTAs must fit on an SM");

struct Params {
  CUtensorMap tm_q, tm_k, tm_v;  // (D, S, H, B) maps, 128B swizzle, boxes of 64 columns
  uint16_t* o;                   // (B, S, H, D) bf16
  int seqlen, heads;
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
// D(64x64) (+)= A(64x16, smem, K-major) * B(16x64, smem, K-major)
__device__ __forceinline__ void wgmma_m64n64k16_ss(float (&d)[32], uint64_t desc_a, uint64_t desc_b, int scale_d) {
  asm volatile(
      "{\n.reg .pred p;\n"
      "setp.ne.b32 p, %34, 0;\n"
      "wgmma.mma_async.sync.aligned.m64n64k16.f32.bf16.bf16 {"
      "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, "
      "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31"
      "}, %32, %33, p, 1, 1, 0, 0;\n}\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), "+f"(d[6]), "+f"(d[7]),
        "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]),
        "+f"(d[16]), "+f"(d[17]), "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]),
        "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), "+f"(d[30]), "+f"(d[31])
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

// ---- the kernel --------------------------------------------------------------------------------------------------
// One CTA = one warpgroup = 64 query rows of one (head, batch). Thread 0 also streams K/V with TMA.
__global__ void __launch_bounds__(kThreads, 1) attn_fwd_kernel(const __grid_constant__ Params p) {
  extern __shared__ uint8_t smem_raw[];
  // Dynamic shared memory is only 16-byte aligned; the launcher over-allocates 1 KB for this.
  const uint32_t pad = (1024 - (smem_addr(smem_raw) & 1023)) & 1023;
  SharedStorage& s = *reinterpret_cast<SharedStorage*>(smem_raw + pad);
  constexpr uint32_t kQBytes = kBlockM * kHeadDim * sizeof(uint16_t);
  constexpr uint32_t kKVBytes = kBlockN * kHeadDim * sizeof(uint16_t);

  const int m_block = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  const int tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32;
  const int n_blocks = p.seqlen / kBlockN;

  if (tid == 0) {
    prefetch_tensormap(&p.tm_q);
    prefetch_tensormap(&p.tm_k);
    prefetch_tensormap(&p.tm_v);
    mbarrier_init(&s.q_full, 1);
    for (int st = 0; st < kStages; ++st) mbarrier_init(&s.kv_full[st], 1);
    fence_barrier_init();
  }
  __syncthreads();
  if (tid == 0) {
    mbarrier_arrive_expect_tx(&s.q_full, kQBytes);
    for (int c = 0; c < kChunks; ++c)
      tma_load_4d(s.q + c * kBlockM * kChunkCols, &p.tm_q, &s.q_full, c * kChunkCols, m_block * kBlockM, head, batch);
    mbarrier_arrive_expect_tx(&s.kv_full[0], 2 * kKVBytes);
    for (int c = 0; c < kChunks; ++c) {
      tma_load_4d(s.k[0] + c * kBlockN * kChunkCols, &p.tm_k, &s.kv_full[0], c * kChunkCols, 0, head, batch);
      tma_load_4d(s.v[0] + c * kBlockN * kChunkCols, &p.tm_v, &s.kv_full[0], c * kChunkCols, 0, head, batch);
    }
  }

  // Accumulator fragment (wgmma m64nN, fp32): this thread holds rows r and r+8 of its warp's 16, and for every
  // group i of 8 columns the pair at columns 8i + 2*(lane%4) + {0,1}: acc[4i+0..1] row r, acc[4i+2..3] row r+8.
  const int row_in_tile = warp * 16 + lane / 4;
  const int col_in_group = 2 * (lane % 4);
  const float scale_log2 = p.scale_log2;
  const float kNegInf = -__int_as_float(0x7f800000);
  const uint32_t q_smem = smem_addr(s.q);

  float o[kHeadDim / 2];
#pragma unroll
  for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
  float sacc[kBlockN / 2];
  float row_max[2] = {kNegInf, kNegInf};
  float row_sum[2] = {0.f, 0.f};  // per-thread partial sums; the quad reduction waits for the epilogue

  mbarrier_wait(&s.q_full, 0);
  for (int j = 0; j < n_blocks; ++j) {
    const int stage = j % kStages;
    // Prefetch tile j+1 into the other stage: its previous tile (j-1) was released by every warp at the barrier
    // that closed iteration j-1.
    if (tid == 0 && j + 1 < n_blocks) {
      const int next = (j + 1) % kStages;
      mbarrier_arrive_expect_tx(&s.kv_full[next], 2 * kKVBytes);
      for (int c = 0; c < kChunks; ++c) {
        tma_load_4d(s.k[next] + c * kBlockN * kChunkCols, &p.tm_k, &s.kv_full[next], c * kChunkCols,
                    (j + 1) * kBlockN, head, batch);
        tma_load_4d(s.v[next] + c * kBlockN * kChunkCols, &p.tm_v, &s.kv_full[next], c * kChunkCols,
                    (j + 1) * kBlockN, head, batch);
      }
    }
    mbarrier_wait(&s.kv_full[stage], (j / kStages) & 1);
    const uint32_t k_smem = smem_addr(s.k[stage]);
    const uint32_t v_smem = smem_addr(s.v[stage]);

    // ---- S = Q K^T: 8 wgmmas of k=16 along the head dim. Q (A) and K (B) K-major: a k-step moves 32 bytes
    // along the 128-byte swizzled row (4 per chunk); SBO = 1024 B between 8-row core groups.
    wgmma_fence();
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const uint32_t chunk = kk / 4, within = (kk % 4) * 32;
      const uint64_t da = make_smem_desc_sw128(q_smem + chunk * kBlockM * kChunkBytes + within, 16, 1024);
      const uint64_t db = make_smem_desc_sw128(k_smem + chunk * kBlockN * kChunkBytes + within, 16, 1024);
      wgmma_m64n64k16_ss(sacc, da, db, kk > 0);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(sacc);

    // ---- online softmax, base 2: p = 2^(s*scale_log2 - m*scale_log2), one FFMA + one MUFU per score --------
    float mx[2] = {row_max[0], row_max[1]};
#pragma unroll
    for (int i = 0; i < kBlockN / 8; ++i) {
      mx[0] = fmaxf(mx[0], fmaxf(sacc[4 * i], sacc[4 * i + 1]));
      mx[1] = fmaxf(mx[1], fmaxf(sacc[4 * i + 2], sacc[4 * i + 3]));
    }
    float alpha[2], neg_ms[2];
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      mx[r] = quad_max(mx[r]);
      alpha[r] = exp2_approx((row_max[r] - mx[r]) * scale_log2);  // first tile: 2^-inf = 0 times a zero O
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
      tile_sum[0] += sacc[4 * i + 0] + sacc[4 * i + 1];
      tile_sum[1] += sacc[4 * i + 2] + sacc[4 * i + 3];
    }
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * alpha[r] + tile_sum[r];
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i) {
      o[4 * i + 0] *= alpha[0];
      o[4 * i + 1] *= alpha[0];
      o[4 * i + 2] *= alpha[1];
      o[4 * i + 3] *= alpha[1];
    }

    // ---- P to bf16 A fragments: for keys 16kk..16kk+15 this thread's 8 scores (rows r, r+8; two column pairs
    // each) are exactly the 4 registers wgmma's m64k16 A fragment wants from it.
    uint32_t pa[kBlockN / 16][4];
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
#pragma unroll
      for (int r = 0; r < 4; ++r) pa[kk][r] = pack_bf16x2(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
    }

    // ---- O += P V: 4 wgmmas of k=16 along the keys, A = P from registers. V (B) MN-major (rows = keys,
    // trans-b): a k-step moves 16 key rows = 2048 B; SBO = 1024 B per 8 keys, LBO = the 64-column chunk stride.
    wgmma_fence();  // O was rescaled and P packed by ordinary code above
#pragma unroll
    for (int kk = 0; kk < kBlockN / 16; ++kk) {
      const uint64_t db = make_smem_desc_sw128(v_smem + kk * 16 * kChunkBytes, kBlockN * kChunkBytes, 1024);
      wgmma_m64n128k16_rs(o, pa[kk], db, 1);
    }
    wgmma_commit();
    wgmma_wait<0>();
    fence_regs(o);
    fence_frag(pa);  // P's registers stay untouched until the wgmma reading them has retired
    __syncthreads();  // every warp is done with this K/V stage: the prefetch may overwrite it
  }

  // ---- epilogue: normalise and store O straight from the accumulator (a quad writes 16 contiguous bytes) -------
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const float inv = 1.f / quad_sum(row_sum[r]);
    const int64_t row = static_cast<int64_t>(m_block) * kBlockM + row_in_tile + 8 * r;
    uint16_t* dst = p.o + ((static_cast<int64_t>(batch) * p.seqlen + row) * p.heads + head) * kHeadDim + col_in_group;
#pragma unroll
    for (int i = 0; i < kHeadDim / 8; ++i) {
      *reinterpret_cast<uint32_t*>(dst + 8 * i) = pack_bf16x2(o[4 * i + 2 * r] * inv, o[4 * i + 2 * r + 1] * inv);
    }
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
  if (a->heads > 65535 || a->batch > 65535) return "heads and batch must be <= 65535 (grid y and z)";
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
  p.scale_log2 = a->scale * 1.4426950408889634f;  // log2(e)
  const size_t smem = sizeof(SharedStorage) + 1024;  // +1 KB to align the tiles to 1024 B in the kernel
  cudaError_t e = cudaFuncSetAttribute(attn_fwd_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(smem));
  if (e != cudaSuccess) return fail(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e));
  const dim3 grid(static_cast<unsigned>(a->seqlen / kBlockM), static_cast<unsigned>(a->heads),
                  static_cast<unsigned>(a->batch));
  attn_fwd_kernel<<<grid, kThreads, smem, static_cast<cudaStream_t>(stream)>>>(p);
  e = cudaGetLastError();
  if (e != cudaSuccess) return fail(std::string("kernel launch: ") + cudaGetErrorString(e));
  return 0;
}
