// Step 02: step 01 + K/V tiles staged in shared memory and shared by a block of 128 query rows, with the online
// softmax applied once per 8 keys, because every key row was being fetched from L1/L2 by each of the block's warps.
//
// What to look at: the block loads a 32-key tile of K and V once (coalesced 16-byte loads by all 128 threads),
// then every thread scores its query row against the tile's keys from shared memory (broadcast reads), 8 at a
// time: takes the group's max, rescales its accumulator once per 8 keys instead of once per key, and accumulates
// P.V. This is the FlashAttention-1 loop, still on the fp32 CUDA cores: the tensor cores come in step 03.
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "lineage.h"

namespace {

constexpr int kHeadDim = 128;
constexpr int kThreads = 128;       // query rows per block (one per thread)
constexpr int kTileKeys = 32;       // keys per shared-memory tile: q (32 KB) + K and V tiles (2 x 8 KB) = 48 KB,
                                    // the static shared-memory limit
constexpr int kGroupKeys = 8;       // keys scored per online-softmax update: 8 score registers; 16 spill next to
                                    // the 128-float accumulator
constexpr int kSeqMultiple = 1408;  // the lineage contract: lcm(128, 176)
constexpr int kChunks = kHeadDim / 8;  // 16-byte chunks per row
constexpr float kLog2e = 1.4426950408889634f;
static_assert(kSeqMultiple % kThreads == 0 && kSeqMultiple % kTileKeys == 0, "tiles must divide the contract");
static_assert(kTileKeys % kGroupKeys == 0, "softmax groups must divide the tile");
static_assert((kTileKeys * kChunks) % kThreads == 0, "every thread loads the same number of chunks");

char g_error[512] = "";

int fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof(g_error), fmt, ap);
  va_end(ap);
  return 1;
}

// grid (seqlen / kThreads, heads, batch); thread = one query row of one head.
__global__ void __launch_bounds__(kThreads) smem_tile_attention_kernel(const __nv_bfloat16* __restrict__ q,
                                                                       const __nv_bfloat16* __restrict__ k,
                                                                       const __nv_bfloat16* __restrict__ v,
                                                                       __nv_bfloat16* __restrict__ o, int heads,
                                                                       int seqlen, float scale_log2) {
  const int t = threadIdx.x;
  const int row = blockIdx.x * kThreads + t;
  const size_t row_stride = static_cast<size_t>(heads) * kHeadDim;  // elements between consecutive s in BSHD
  const size_t head_base =
      static_cast<size_t>(blockIdx.z) * seqlen * row_stride + static_cast<size_t>(blockIdx.y) * kHeadDim;

  // Query rows column-major (qs[d/2][thread]: conflict-free, as in step 01); K/V tiles row-major (all threads read
  // the same key row at once: a broadcast).
  __shared__ __nv_bfloat162 qs[kHeadDim / 2][kThreads];
  __shared__ uint4 ks[kTileKeys][kChunks];
  __shared__ uint4 vs[kTileKeys][kChunks];

  const uint4* qrow = reinterpret_cast<const uint4*>(q + head_base + row * row_stride);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    const uint4 raw = qrow[c];
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) qs[c * 4 + i][t] = p[i];
  }

  float acc[kHeadDim];
#pragma unroll
  for (int d = 0; d < kHeadDim; ++d) acc[d] = 0.f;
  float m = -INFINITY;  // running row max, log2 units
  float l = 0.f;        // running row sum of exp2(score - m)

  for (int kv0 = 0; kv0 < seqlen; kv0 += kTileKeys) {
    // All 128 threads load the tile together: consecutive threads take consecutive 16-byte chunks (coalesced).
#pragma unroll
    for (int i = t; i < kTileKeys * kChunks; i += kThreads) {
      const int key = i / kChunks, c = i % kChunks;
      const size_t off = head_base + (kv0 + key) * row_stride;
      ks[key][c] = __ldg(reinterpret_cast<const uint4*>(k + off) + c);
      vs[key][c] = __ldg(reinterpret_cast<const uint4*>(v + off) + c);
    }
    __syncthreads();

#pragma unroll 1
    for (int g = 0; g < kTileKeys; g += kGroupKeys) {
      // Scores of this row against the group's keys, and their max.
      float s[kGroupKeys];
      float group_max = -INFINITY;
#pragma unroll
      for (int j = 0; j < kGroupKeys; ++j) {
        float dot = 0.f;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const uint4 raw = ks[g + j][c];
          const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 qf = __bfloat1622float2(qs[c * 4 + i][t]);
            const float2 kf = __bfloat1622float2(k2[i]);
            dot = fmaf(qf.x, kf.x, dot);
            dot = fmaf(qf.y, kf.y, dot);
          }
        }
        s[j] = dot * scale_log2;
        group_max = fmaxf(group_max, s[j]);
      }

      // Online softmax, once per group of keys: rescale what was accumulated under the old max, then add this group.
      const float m_new = fmaxf(m, group_max);
      const float corr = exp2f(m - m_new);  // 0 on the first group (m = -inf)
      l *= corr;
#pragma unroll
      for (int d = 0; d < kHeadDim; ++d) acc[d] *= corr;
      m = m_new;
#pragma unroll
      for (int j = 0; j < kGroupKeys; ++j) {
        const float p = exp2f(s[j] - m_new);
        l += p;
#pragma unroll
        for (int c = 0; c < kChunks; ++c) {
          const uint4 raw = vs[g + j][c];
          const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float2 vf = __bfloat1622float2(v2[i]);
            acc[c * 8 + 2 * i] = fmaf(p, vf.x, acc[c * 8 + 2 * i]);
            acc[c * 8 + 2 * i + 1] = fmaf(p, vf.y, acc[c * 8 + 2 * i + 1]);
          }
        }
      }
    }
    __syncthreads();  // everyone is done with this tile before the next one overwrites it
  }

  const float inv_l = 1.f / l;
  uint4* orow = reinterpret_cast<uint4*>(o + head_base + row * row_stride);
#pragma unroll
  for (int c = 0; c < kChunks; ++c) {
    uint4 raw;
    __nv_bfloat162* p = reinterpret_cast<__nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i)
      p[i] = __floats2bfloat162_rn(acc[c * 8 + 2 * i] * inv_l, acc[c * 8 + 2 * i + 1] * inv_l);
    orow[c] = raw;
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
  const dim3 grid(args->seqlen / kThreads, args->heads, args->batch);
  smem_tile_attention_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(args->q), static_cast<const __nv_bfloat16*>(args->k),
      static_cast<const __nv_bfloat16*>(args->v), static_cast<__nv_bfloat16*>(args->o), args->heads, args->seqlen,
      args->scale * kLog2e);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail("launch failed: %s", cudaGetErrorString(e));
  return 0;
}
