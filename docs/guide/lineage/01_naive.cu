// Step 01: naive attention, one thread per (query row, head), fp32 math, online softmax over every key read
// straight from global memory, because a correct baseline comes before any fast one.
//
// What to look at: the online softmax (running max m, running sum l, the accumulator rescaled by
// exp2(m_old - m_new) whenever the max grows) is the whole algorithm every later step keeps. Everything else here
// is slow on purpose: each key row is re-read from global memory (L1/L2) by every warp, and all math runs on the
// fp32 CUDA cores. A warp's 32 threads are 32 consecutive query rows of one head, so they read the same key row
// at the same time (one broadcast load per warp). The thread's own query row is parked in shared memory only to
// keep it out of registers (see below); no data is shared between threads.
#include <cmath>
#include <cstdarg>
#include <cstdint>
#include <cstdio>
#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include "lineage.h"

namespace {

constexpr int kHeadDim = 128;
constexpr int kThreads = 128;           // query rows per block
constexpr int kSeqMultiple = 1408;      // the lineage contract: lcm(128, 176)
constexpr float kLog2e = 1.4426950408889634f;

char g_error[512] = "";

int fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(g_error, sizeof(g_error), fmt, ap);
  va_end(ap);
  return 1;
}

// Dot product of one 16-byte load of 8 key values with the matching 8 query values (4 columns of qs).
__device__ __forceinline__ float dot8(const __nv_bfloat162 (*qs)[kThreads], int t, uint4 raw) {
  const __nv_bfloat162* k2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
  float s = 0.f;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float2 qf = __bfloat1622float2(qs[i][t]);
    const float2 kf = __bfloat1622float2(k2[i]);
    s = fmaf(qf.x, kf.x, s);
    s = fmaf(qf.y, kf.y, s);
  }
  return s;
}

// grid (seqlen / kThreads, heads, batch); thread = one query row of one head.
__global__ void __launch_bounds__(kThreads) naive_attention_kernel(const __nv_bfloat16* __restrict__ q,
                                                                   const __nv_bfloat16* __restrict__ k,
                                                                   const __nv_bfloat16* __restrict__ v,
                                                                   __nv_bfloat16* __restrict__ o, int heads,
                                                                   int seqlen, float scale_log2) {
  const int row = blockIdx.x * kThreads + threadIdx.x;
  const int head = blockIdx.y;
  const int batch = blockIdx.z;
  const size_t row_stride = static_cast<size_t>(heads) * kHeadDim;  // elements between consecutive s in BSHD
  const size_t head_base = static_cast<size_t>(batch) * seqlen * row_stride + static_cast<size_t>(head) * kHeadDim;

  // The query row is parked in shared memory, column-major (qs[d/2][thread]), so the 32 threads of a warp read
  // 32 consecutive words: no bank conflicts. In registers it would spill: 64 packed query registers, the
  // 128-float accumulator and the 64 registers of one key row's loads in flight do not fit in 255.
  __shared__ __nv_bfloat162 qs[kHeadDim / 2][kThreads];
  const uint4* qrow = reinterpret_cast<const uint4*>(q + head_base + row * row_stride);
#pragma unroll
  for (int c = 0; c < kHeadDim / 8; ++c) {
    const uint4 raw = qrow[c];
    const __nv_bfloat162* p = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
    for (int i = 0; i < 4; ++i) qs[c * 4 + i][threadIdx.x] = p[i];
  }
  // Each thread reads back only its own column, so no __syncthreads is needed.

  float acc[kHeadDim];
#pragma unroll
  for (int d = 0; d < kHeadDim; ++d) acc[d] = 0.f;
  float m = -INFINITY;  // running max of the scores, in log2 units (score * scale * log2 e)
  float l = 0.f;        // running sum of exp2(score - m)

  for (int j = 0; j < seqlen; ++j) {
    const uint4* krow = reinterpret_cast<const uint4*>(k + head_base + j * row_stride);
    const uint4* vrow = reinterpret_cast<const uint4*>(v + head_base + j * row_stride);
    float s = 0.f;
#pragma unroll
    for (int c = 0; c < kHeadDim / 8; ++c) s += dot8(&qs[c * 4], threadIdx.x, __ldg(krow + c));
    s *= scale_log2;

    const float m_new = fmaxf(m, s);
    const float corr = exp2f(m - m_new);  // 0 on the first key (m = -inf)
    const float p = exp2f(s - m_new);
    l = l * corr + p;
    m = m_new;
#pragma unroll
    for (int c = 0; c < kHeadDim / 8; ++c) {
      const uint4 raw = __ldg(vrow + c);
      const __nv_bfloat162* v2 = reinterpret_cast<const __nv_bfloat162*>(&raw);
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const float2 vf = __bfloat1622float2(v2[i]);
        acc[c * 8 + 2 * i] = fmaf(p, vf.x, acc[c * 8 + 2 * i] * corr);
        acc[c * 8 + 2 * i + 1] = fmaf(p, vf.y, acc[c * 8 + 2 * i + 1] * corr);
      }
    }
  }

  const float inv_l = 1.f / l;
  uint4* orow = reinterpret_cast<uint4*>(o + head_base + row * row_stride);
#pragma unroll
  for (int c = 0; c < kHeadDim / 8; ++c) {
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
  naive_attention_kernel<<<grid, kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const __nv_bfloat16*>(args->q), static_cast<const __nv_bfloat16*>(args->k),
      static_cast<const __nv_bfloat16*>(args->v), static_cast<__nv_bfloat16*>(args->o), args->heads, args->seqlen,
      args->scale * kLog2e);
  const cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess) return fail("launch failed: %s", cudaGetErrorString(e));
  return 0;
}
