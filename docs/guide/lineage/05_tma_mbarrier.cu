// Step 05: step 04 + TMA (cp.async.bulk.tensor) loads completing on mbarriers, with 128-byte-swizzled tiles, because
// with cp.async all 128 threads spend issue slots and registers on address arithmetic for every 16-byte chunk,
// while one thread can hand a whole tile to the TMA unit.
//
// What to look at: the host encodes one tensor map per input (cuTensorMapEncodeTiled, reached through
// cudaGetDriverEntryPointByVersion so nothing links libcuda): a 4-D view (D, S, H, B) with 64 x 64 boxes (64
// columns = 128 bytes, the widest row a 128B-swizzled box may have). Thread 0 arms an mbarrier with the byte count
// it expects (mbarrier.arrive.expect_tx) and issues the loads; every thread waits on the barrier's phase parity.
// TMA cannot pad rows the way steps 03-04 did, so bank conflicts are avoided by the 128-byte swizzle instead: 16-byte
// chunk c of row r lands at chunk c ^ (r % 8), and the ldmatrix addresses apply the same XOR (swizzled_offset).
// Compute is still step 03's mma.sync loop; the wgmma steps (06+) read these same swizzled tiles.
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cuda.h>  // CUtensorMap and its enums (the types only; nothing links against libcuda)
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled
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
constexpr int kBoxCols = 64;                      // TMA box width: 64 bf16 = 128 bytes, the 128B-swizzle span
constexpr int kBoxRows = 64;                      // TMA box height = tile rows (Q, K and V tiles alike)
constexpr int kSeqMultiple = 1408;                // the lineage contract: lcm(128, 176)
constexpr uint32_t kBoxBytes = sizeof(__nv_bfloat16) * kBoxCols * kBoxRows;        // 8 KB
constexpr uint32_t kTileBytes = kBoxBytes * (kHeadDim / kBoxCols);                   // 16 KB: two boxes side by side
constexpr int kStages = 2;                        // K/V tiles in flight: the one computed on + the prefetch
constexpr size_t kSwizzleAlign = 1024;            // the 128B swizzle pattern repeats every 8 rows x 128 bytes
constexpr size_t kSmemBytes = (1 + 2 * kStages) * kTileBytes + kSwizzleAlign;  // Q + 2 x (K, V) + alignment slack
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kBlockM == kBoxRows && kBlockN == kBoxRows, "Q, K and V tiles are one box high");
static_assert(kBoxBytes % kSwizzleAlign == 0, "every box must start 1024-byte aligned");
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

// ---- mbarrier (PTX ISA 9.7.13.15) --------------------------------------------------------------------------
__device__ __forceinline__ void mbarrier_init(uint64_t* bar, uint32_t arrive_count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(arrive_count) : "memory");
}
// Makes the initialised barriers visible to the async proxy (the TMA unit) before it signals them.
__device__ __forceinline__ void fence_barrier_init() {
  asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
}
// One arrival that also says how many bytes of TMA traffic the current phase must wait for.
__device__ __forceinline__ void mbarrier_arrive_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes)
               : "memory");
}
// Spins until the phase with this parity has completed (try_wait suspends the thread in hardware for a while).
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

// ---- TMA: cp.async.bulk.tensor (PTX ISA 9.7.9.25.5) ---------------------------------------------------------
// One 4-D box global -> shared; the bytes are counted on `bar` when they land.
__device__ __forceinline__ void tma_load_4d(void* dst, const CUtensorMap* map, uint64_t* bar, int c0, int c1, int c2,
                                            int c3) {
  asm volatile(
      "cp.async.bulk.tensor.4d.shared::cluster.global.tile.mbarrier::complete_tx::bytes"
      " [%0], [%1, {%3, %4, %5, %6}], [%2];" ::"r"(smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(smem_addr(bar)), "r"(c0), "r"(c1), "r"(c2), "r"(c3)
      : "memory");
}

__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);  // .x (lo) in the low 16 bits
  return *reinterpret_cast<const uint32_t*>(&v);
}

// ---- the kernel -------------------------------------------------------------------------------------------
// Byte offset of (row, col) in a 64 x 128 tile stored as two 128B-swizzled 64-column boxes (col a multiple of 8):
// box col / 64, then 128-byte rows, then the 16-byte chunk index XOR (row % 8), as the TMA unit wrote it.
__device__ __forceinline__ uint32_t swizzled_offset(int row, int col) {
  const int chunk = (col % kBoxCols) / 8;
  return (col / kBoxCols) * kBoxBytes + row * (kBoxCols * 2) + ((chunk ^ (row % 8)) * 16);
}

// Thread 0 only: loads rows [row0, row0 + 64) of one head into a tile (two boxes), counted on `bar`.
__device__ __forceinline__ void load_tile_tma(unsigned char* dst, const CUtensorMap* map, uint64_t* bar, int row0,
                                              int head, int batch) {
#pragma unroll
  for (int box = 0; box < kHeadDim / kBoxCols; ++box)
    tma_load_4d(dst + box * kBoxBytes, map, bar, box * kBoxCols, row0, head, batch);
}

// grid (seqlen / kBlockM, heads, batch).
// The tensor maps are __grid_constant__ kernel parameters: TMA reads them from parameter memory.
__global__ void __launch_bounds__(kThreads) tma_attention_kernel(const __grid_constant__ CUtensorMap q_map,
                                                                 const __grid_constant__ CUtensorMap k_map,
                                                                 const __grid_constant__ CUtensorMap v_map,
                                                                 __nv_bfloat16* __restrict__ o, int heads,
                                                                 int seqlen, float scale_log2) {
  extern __shared__ __align__(16) unsigned char smem_raw[];
  // Swizzled boxes must start on a 1024-byte boundary: align the dynamic shared memory up by hand.
  unsigned char* smem = reinterpret_cast<unsigned char*>(
      (reinterpret_cast<uintptr_t>(smem_raw) + kSwizzleAlign - 1) & ~(uintptr_t)(kSwizzleAlign - 1));
  unsigned char* qs = smem;
  // Stage st: K tile at ks + st * kStageBytes, V tile at vs + st * kStageBytes.
  constexpr uint32_t kStageBytes = 2 * kTileBytes;
  unsigned char* ks = qs + kTileBytes;
  unsigned char* vs = ks + kTileBytes;
  __shared__ uint64_t q_full;             // Q has landed
  __shared__ uint64_t kv_full[kStages];   // stage st's K and V have landed (one phase per use of the stage)

  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m0 = blockIdx.x * kBlockM;
  const int head = blockIdx.y, batch = blockIdx.z;
  const size_t row_stride = static_cast<size_t>(heads) * kHeadDim;
  const size_t head_base = static_cast<size_t>(batch) * seqlen * row_stride + static_cast<size_t>(head) * kHeadDim;
  const int n_tiles = seqlen / kBlockN;

  if (threadIdx.x == 0) {
    mbarrier_init(&q_full, 1);  // one arrival (thread 0's expect_tx) + the transaction bytes
    for (int st = 0; st < kStages; ++st) mbarrier_init(&kv_full[st], 1);
    fence_barrier_init();
  }
  __syncthreads();  // barriers initialised before anyone waits on them
  if (threadIdx.x == 0) {
    mbarrier_arrive_expect_tx(&q_full, kTileBytes);
    load_tile_tma(qs, &q_map, &q_full, m0, head, batch);
    mbarrier_arrive_expect_tx(&kv_full[0], 2 * kTileBytes);
    load_tile_tma(ks, &k_map, &kv_full[0], 0, head, batch);
    load_tile_tma(vs, &v_map, &kv_full[0], 0, head, batch);
  }
  mbarrier_wait(&q_full, 0);  // the barrier's first phase (parity 0) completes when Q's 16 KB have landed

  // This warp's 16 query rows as A fragments, one per 16-wide k-step of the head dim (8 x 4 registers).
  uint32_t qf[kHeadDim / 16][4];
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk)
    ldmatrix_x4(qf[kk], smem_addr(qs + swizzled_offset(warp * kRowsPerWarp + lane % 16, kk * 16 + (lane / 16) * 8)));

  // Accumulator fragments: thread holds rows g = lane/4 and g + 8, columns 2t, 2t+1 (t = lane%4) of each 8-wide
  // block: acc[block][0..1] for row g, acc[block][2..3] for row g + 8.
  float acc[kHeadDim / 8][4];
#pragma unroll
  for (int i = 0; i < kHeadDim / 8; ++i) acc[i][0] = acc[i][1] = acc[i][2] = acc[i][3] = 0.f;
  float row_max[2] = {-INFINITY, -INFINITY};  // log2 units, rows g and g + 8
  float row_sum[2] = {0.f, 0.f};              // this thread's partial sums (its 2 columns of each block)

  for (int j = 0; j < n_tiles; ++j) {
    // Prefetch tile j+1 into the other stage. That stage last held tile j-1, which every warp finished before
    // the __syncthreads closing iteration j-1.
    if (threadIdx.x == 0 && j + 1 < n_tiles) {
      const int st = (j + 1) % kStages;
      mbarrier_arrive_expect_tx(&kv_full[st], 2 * kTileBytes);
      load_tile_tma(ks + st * kStageBytes, &k_map, &kv_full[st], (j + 1) * kBlockN, head, batch);
      load_tile_tma(vs + st * kStageBytes, &v_map, &kv_full[st], (j + 1) * kBlockN, head, batch);
    }
    // Tile j is stage j % 2's (j / 2)-th use, so it completes that barrier's phase of parity (j / 2) & 1.
    mbarrier_wait(&kv_full[j % kStages], (j / kStages) & 1);
    const unsigned char* kt = ks + (j % kStages) * kStageBytes;
    const unsigned char* vt = vs + (j % kStages) * kStageBytes;

    // S = Q.K^T: 16 x 64 per warp, 8 blocks of 8 keys. K rows (keys) with d contiguous are B in "col" layout,
    // so plain ldmatrix gives B fragments: matrices = 4 consecutive 8-wide d slices of 8 keys = 2 k-steps.
    float s[kBlockN / 8][4];
#pragma unroll
    for (int nb = 0; nb < kBlockN / 8; ++nb) {
      s[nb][0] = s[nb][1] = s[nb][2] = s[nb][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < kHeadDim / 32; ++kk) {
        uint32_t b[4];
        ldmatrix_x4(b, smem_addr(kt + swizzled_offset(nb * 8 + lane % 8, kk * 32 + (lane / 8) * 8)));
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
        ldmatrix_x4_trans(b, smem_addr(vt + swizzled_offset(kk * 32 + lane, db * 8)));
        mma_m16n8k16(acc[db], pf[2 * kk], b[0], b[1]);
        mma_m16n8k16(acc[db], pf[2 * kk + 1], b[2], b[3]);
      }
    }
    __syncthreads();  // every warp is done with stage j % 2 before iteration j+1 prefetches tile j+2 into it
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

// A 4-D map over (D, S, H, B) bf16 with BSHD strides, 64 x 64 boxes, 128-byte swizzle.
bool make_tensor_map(CUtensorMap* map, const void* base, const LineageArgs& a) {
  static PFN_cuTensorMapEncodeTiled_v12000 encode = nullptr;
  if (encode == nullptr) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault, &found) !=
            cudaSuccess ||
        found != cudaDriverEntryPointSuccess || fn == nullptr) {
      fail("cuTensorMapEncodeTiled is not available from the driver");
      return false;
    }
    encode = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn);
  }
  const cuuint64_t elem = sizeof(__nv_bfloat16);
  cuuint64_t dims[4] = {static_cast<cuuint64_t>(a.head_dim), static_cast<cuuint64_t>(a.seqlen),
                        static_cast<cuuint64_t>(a.heads), static_cast<cuuint64_t>(a.batch)};
  // Byte strides of dims 1..3 (dim 0 is contiguous): seq -> H*D, head -> D, batch -> S*H*D elements.
  cuuint64_t strides[3] = {dims[2] * dims[0] * elem, dims[0] * elem, dims[1] * dims[2] * dims[0] * elem};
  cuuint32_t box[4] = {kBoxCols, kBoxRows, 1, 1};
  cuuint32_t elem_strides[4] = {1, 1, 1, 1};
  const CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 4, const_cast<void*>(base), dims, strides, box,
                            elem_strides, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    fail("cuTensorMapEncodeTiled failed with CUresult %d", static_cast<int>(r));
    return false;
  }
  return true;
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
  CUtensorMap q_map, k_map, v_map;
  if (!make_tensor_map(&q_map, args->q, *args) || !make_tensor_map(&k_map, args->k, *args) ||
      !make_tensor_map(&v_map, args->v, *args))
    return 1;
  cudaError_t e = cudaFuncSetAttribute(tma_attention_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                       static_cast<int>(kSmemBytes));
  if (e != cudaSuccess) return fail("cudaFuncSetAttribute: %s", cudaGetErrorString(e));
  const dim3 grid(args->seqlen / kBlockM, args->heads, args->batch);
  tma_attention_kernel<<<grid, kThreads, kSmemBytes, static_cast<cudaStream_t>(stream)>>>(
      q_map, k_map, v_map, static_cast<__nv_bfloat16*>(args->o), args->heads, args->seqlen, args->scale * kLog2e);
  e = cudaGetLastError();
  if (e != cudaSuccess) return fail("launch failed: %s", cudaGetErrorString(e));
  return 0;
}
