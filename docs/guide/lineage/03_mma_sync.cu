// Step 03: step 02 + tensor cores through mma.sync (m16n8k16, bf16 in, fp32 accumulate) fed by ldmatrix, with P
// kept in registers between the two GEMMs, because the CUDA cores top out near 60 TFLOPS and the tensor cores
// do ~15x more.
//
// What to look at: one warp owns 16 query rows, 4 warps make a 64-row block, K/V tiles are 64 keys. S = Q.K^T and
// O += P.V are each a loop of mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 (PTX ISA 9.7.14); the score
// accumulator fragment (rows g and g+8, columns 2t and 2t+1) is exactly the A fragment the second GEMM needs, so P
// never leaves registers (the FlashAttention-2 trick). Row max and row sum are reduced across the 4 threads of a
// quad with two shuffles. Shared-memory rows are padded to 136 elements so the 8 row addresses of each ldmatrix
// hit 8 different bank groups. Loads are still synchronous: the warps wait for every K/V tile (step 04 fixes that).
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "lineage.h"

namespace {

constexpr int kHeadDim = 128;
constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerWarp = 16;                  // the M of m16n8k16
constexpr int kBlockM = kWarps * kRowsPerWarp;    // 64 query rows per block
constexpr int kBlockN = 64;                       // keys per K/V tile
constexpr int kStride = kHeadDim + 8;             // padded smem row: 272 bytes = 17 x 16, conflict-free ldmatrix
constexpr int kChunks = kHeadDim / 8;             // 16-byte chunks per row
constexpr int kSeqMultiple = 1408;                // the lineage contract: lcm(128, 176)
constexpr size_t kTileBytes = sizeof(__nv_bfloat16) * kBlockN * kStride;
constexpr size_t kSmemBytes = 3 * kTileBytes;     // Q, K, V tiles (kBlockM == kBlockN): 52 KB, above the 48 KB
                                                  // static limit, so it is dynamic shared memory
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBlockM == kBlockN, "Q, K and V tiles share one size here");
static_assert(kSeqMultiple % kBlockM == 0 && kSeqMultiple % kBlockN == 0, "tiles must divide the contract");

char g_error[512] = "";

int fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof(g_error), fmt, ap);
  va_end(ap);
  return 1;
}

// ---- PTX wrappers -----------------------------------------------------------------------------------------
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// ldmatrix (PTX ISA 9.7.14, warp-level matrix load): four 8x8 b16 matrices; lanes 8i..8i+7 give the row
// addresses of matrix i, and each lane receives (row lane/4, columns 2*(lane%4), +1) of every matrix, one
// register per matrix.
__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}
// The same with each matrix transposed on the way: lane receives (rows 2*(lane%4), +1; column lane/4).
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr)
               : "memory");
}

// mma.sync m16n8k16 (PTX ISA 9.7.14, warp-level matrix multiply-accumulate):
// C(16x8 fp32) += A(16x16 bf16, row-major) * B(16x8 bf16, column-major).
__device__ __forceinline__ void mma_m16n8k16(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low 16 bits
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- the kernel -------------------------------------------------------------------------------------------
// Copies a 64 x 128 tile (rows row_stride elements apart in global memory) into a padded shared-memory tile.
__device__ __forceinline__ void load_tile(__nv_bfloat16* dst, const __nv_bfloat16* src, size_t row_stride) {
#pragma unroll
  for (int i = threadIdx.x; i < kBlockN * kChunks; i += kThreads) {
    const int r = i / kChunks, c = i % kChunks;
    *reinterpret_cast<uint4*>(dst + r * kStride + c * 8) =
        __ldg(reinterpret_cast<const uint4*>(src + r * row_stride) + c);
  }
}

// grid (seqlen / kBlockM, heads, batch).
__global__ void __launch_bounds__(kThreads) mma_attention_kernel(const __nv_bfloat16* __restrict__ q,
                                                                 const __nv_bfloat16* __restrict__ k,
                                                                 const __nv_bfloat16* __restrict__ v,
                                                                 __nv_bfloat16* __restrict__ o, int heads,
                                                                 int seqlen, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem[];
  __nv_bfloat16* qs = reinterpret_cast<__nv_bfloat16*>(smem);
  __nv_bfloat16* ks = qs + kBlockM * kStride;
  __nv_bfloat16* vs = ks + kBlockN * kStride;

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.x * kBlockM;
  const size_t row_stride = static_cast<size_t>(heads) * kHeadDim;
  const size_t head_base =
      static_cast<size_t>(blockIdx.z) * seqlen * row_stride + static_cast<size_t>(blockIdx.y) * kHeadDim;

  load_tile(qs, q + head_base + m0 * row_stride, row_stride);
  __syncthreads();

  // This warp's 16 query rows as A fragments, one per 16-wide k-step of the head dim (8 x 4 registers).
  uint32_t qf[kHeadDim / 16][4];
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk)
    ldmatrix_x4(qf[kk], smem_addr(qs + (warp * kRowsPerWarp + lane % 16) * kStride + kk * 16 + (lane / 16) * 8));

  // Accumulator fragments: thread holds rows g = lane/4 and g + 8, columns 2t, 2t+1 (t = lane%4) of each 8-wide
  // block: acc[block][0..1] for row g, acc[block][2..3] for row g + 8.
  float acc[kHeadDim / 8][4];
#pragma unroll
  for (int i = 0; i < kHeadDim / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 units, rows g and g + 8
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums (its 2 columns of each block)

  for (int n0 = 0; n0 < seqlen; n0 += kBlockN) {
    __syncthreads();  // every warp is done with the previous K/V tile
    load_tile(ks, k + head_base + n0 * row_stride, row_stride);
    load_tile(vs, v + head_base + n0 * row_stride, row_stride);
    __syncthreads();

    // S = Q.K^T: 16 x 64 per warp, 8 blocks of 8 keys. K rows (keys) with d contiguous are B in "col" layout,
    // so plain ldmatrix gives B fragments: matrices = 4 consecutive 8-wide d slices of 8 keys = 2 k-steps.
    float s[kBlockN / 8][4];
#pragma unroll
    for (int nb = 0; nb < kBlockN / 8; ++nb) {
      s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(ks + (nb * 8 + lane % 8) * kStride + kk * 32 + (lane / 8) * 8));
        mma_m16n8k16(s[nb], qf[2 * kk], b[0], b[1]);
        mma_m16n8k16(s[nb], qf[2 * kk + 1], b[2], b[3]);
      }
    }

    // Online softmax on rows g (r = 0) and g + 8 (r = 1); a row's 64 scores are spread over a quad of 4 lanes.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float mx = -INFINITY;
#pragma unroll
      for (int nb = 0; nb < kBlockN / 8; ++nb) {
        s[nb][2 * r] *= scale_log2;
        s[nb][2 * r + 1] *= scale_log2;
        mx = fmaxf(mx, fmaxf(s[nb][2 * r], s[nb][2 * r + 1]));
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(row_max[r], mx);
      const float corr = exp2f(row_max[r] - m_new);  // 0 on the first tile
      row_max[r] = m_new;
      float sum = 0.f;
#pragma unroll
      for (int nb = 0; nb < kBlockN / 8; ++nb) {
        s[nb][2 * r] = exp2f(s[nb][2 * r] - m_new);
        s[nb][2 * r + 1] = exp2f(s[nb][2 * r + 1] - m_new);
        sum += s[nb][2 * r] + s[nb][2 * r + 1];
      }
      row_sum[r] = row_sum[r] * corr + sum;
#pragma unroll
      for (int db = 0; db < kHeadDim / 8; ++db) {
        acc[db][2 * r] *= corr;
        acc[db][2 * r + 1] *= corr;
      }
    }

    // P as A fragments: the accumulator of key blocks 2i and 2i+1 is the A fragment of k-step i (16 keys).
    uint32_t pf[kBlockN / 16][4];
#pragma unroll
    for (int i = 0; i < kBlockN / 16; ++i) {
      pf[i][0] = pack_bf16x2(s[2 * i][0], s[2 * i][1]);
      pf[i][1] = pack_bf16x2(s[2 * i][2], s[2 * i][3]);
      pf[i][2] = pack_bf16x2(s[2 * i + 1][0], s[2 * i + 1][1]);
      pf[i][3] = pack_bf16x2(s[2 * i + 1][2], s[2 * i + 1][3]);
    }

    // O += P.V: V rows (keys) with d contiguous are B in "row" layout, so ldmatrix.trans makes the col fragments;
    // matrices = 4 consecutive 8-key slices of one 8-wide d block = 2 k-steps.
#pragma unroll
    for (int db = 0; db < kHeadDim / 8; ++db) {
#pragma unroll
      for (int kk = 0; kk < kBlockN / 32; ++kk) {
        uint32_t b[4];
        ldmatrix_x4_trans(b, smem_addr(vs + (kk * 32 + lane) * kStride + db * 8));
        mma_m16n8k16(acc[db], pf[2 * kk], b[0], b[1]);
        mma_m16n8k16(acc[db], pf[2 * kk + 1], b[2], b[3]);
      }
    }
  }

  // Epilogue: finish the row sums across the quad, normalise, store bf16 pairs straight from the fragments.
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    float sum = row_sum[r];
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    sum += __shfl_xor_sync(0xffffffffu, sum, 2);
    const float inv = 1.f / sum;
    const int row = m0 + warp * kRowsPerWarp + lane / 4 + 8 * r;
    __nv_bfloat16* orow = o + head_base + row * row_stride;
#pragma unroll
    for (int db = 0; db < kHeadDim / 8; ++db)
      *reinterpret_cast<__nv_bfloat162*>(orow + db * 8 + 2 * (lane % 4)) =
          __floats2bfloat162_rn(acc[db][2 * r] * inv, acc[db][2 * r + 1] * inv);
  }
}

int check_args(const LineageArgs* a) {
  if (a == nullptr) return fail("args is NULL");
  if (!a->q || !a->k || !a->v || !a->o) return fail("q, k, v and o must be non-NULL device pointers");
  for (const void* p : {a->q, a->k, a->v, static_cast<const void*>(a->o)})
    if (reinterpret_cast<uintptr_t>(p) % 16) return fail("q, k, v and o must be 16-byte aligned");
  if (a->head_dim != kHeadDim) return fail("head_dim %d: this step supports head_dim 128 only", a->head_dim);
  if (a->seqlen <= 0 || a->seqlen % kSeqMultiple)
    return fail("seqlen %d: must be a positive multiple of %d", a->seqlen, kSeqMultiple);
  if (a->batch <= 0 || a->batch > 65535 || a->heads <= 0 || a->heads > 65535)
    return fail("batch %d / heads %d out of range [1, 65535]", a->batch, a->heads);
  if (!std::isfinite(a->scale)) return fail("scale must be finite");
  return 0;
}

}  // namespace

extern "C" const char* lineage_error(void) { return g_error; }

extern "C" int lineage_fwd(const LineageArgs* args, void* stream) {
  g_error[0] = '\0';
  if (check_args(args)) return 1;
  cudaError_t e = cudaFuncSetAttribute(mma_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes));
  if (e != cudaSuccess) return fail("cudaFuncSetAttribute: %s", cudaGetErrorString(e));
  const dim3 grid(args->seqlen / kBlockM, args->heads, args->batch);
  mma_attention_kernel<<<grid, kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(args->q), static_cast<const __nv_bfloat16*>(args->k),
      static_cast<const __nv_bfloat16*>(args->v), static_cast<__nv_bfloat16*>(args->o), args->heads, args->seqlen,
      args->scale * kLog2e);
  e = cudaGetLastError();
  if (e != cudaSuccess) return fail("launch failed: %s", cudaGetErrorString(e));
  return 0;
}
