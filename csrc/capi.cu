// The C ABI: validates arguments, encodes TMA descriptors, picks the (head dim, dtype) instantiation and
// launches on the caller's stream. The only host code of the library; no torch.
#include <cuda_runtime.h>

#include <string>

#include "capi.h"
#include "sm90/flash_fwd.cuh"
#include "sm90/tma_desc.h"

namespace {

thread_local std::string g_last_error;

int fail(const std::string& msg) {
  g_last_error = msg;
  return 1;
}

template <int kHeadDim, bool kFp16>
int launch(const VidattnFwdArgs& a, cudaStream_t stream) {
  using namespace vidattn::sm90;
  using T = FwdTraits<kHeadDim>;
  FwdParams p{};
  std::string err;
  const bool ok = make_tensor_map_4d(&p.tm_q, a.q, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.q_stride,
                                     T::kBlockM, &err) &&
                  make_tensor_map_4d(&p.tm_k, a.k, kFp16, a.head_dim, a.seqlen_kv, a.heads, a.batch, a.k_stride,
                                     T::kBlockN, &err) &&
                  make_tensor_map_4d(&p.tm_v, a.v, kFp16, a.head_dim, a.seqlen_kv, a.heads, a.batch, a.v_stride,
                                     T::kBlockN, &err) &&
                  make_tensor_map_4d(&p.tm_o, a.o, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.o_stride,
                                     T::kRowsPerWG, &err);
  if (!ok) return fail(err);
  p.lse = a.lse;
  p.kv_lens = a.kv_lens;
  p.seqlen_q = static_cast<int>(a.seqlen_q);
  p.seqlen_kv = static_cast<int>(a.seqlen_kv);
  p.heads = static_cast<int>(a.heads);
  p.scale_log2 = a.scale * 1.4426950408889634f;

  const size_t smem = sizeof(SharedStorage<kHeadDim>) + 1024;  // +1 KB to align the ring to 1024 B in-kernel
  auto kernel = flash_fwd_kernel<kHeadDim, kFp16>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return fail(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e));
  const dim3 grid(static_cast<unsigned>((a.seqlen_q + T::kBlockM - 1) / T::kBlockM), static_cast<unsigned>(a.heads),
                  static_cast<unsigned>(a.batch));
  kernel<<<grid, T::kThreads, smem, stream>>>(p);
  e = cudaGetLastError();
  if (e != cudaSuccess) return fail(std::string("kernel launch: ") + cudaGetErrorString(e));
  return 0;
}

}  // namespace

extern "C" const char* vidattn_sm90_last_error(void) { return g_last_error.c_str(); }

extern "C" int vidattn_sm90_fwd(const VidattnFwdArgs* a, void* stream) {
  if (a == nullptr) return fail("null argument block");
  if (!a->q || !a->k || !a->v || !a->o) return fail("null q/k/v/o pointer");
  if (a->batch < 1 || a->heads < 1 || a->seqlen_q < 1 || a->seqlen_kv < 1)
    return fail("batch, heads and sequence lengths must be >= 1");
  if (a->seqlen_q > (1ll << 31) - 1 || a->seqlen_kv > (1ll << 31) - 1) return fail("sequence length over 2^31");
  if (a->heads > 65535 || a->batch > 65535) return fail("heads and batch must be <= 65535 (grid limits)");
  if (!(a->scale > 0.f)) return fail("softmax scale must be positive");
  auto s = static_cast<cudaStream_t>(stream);
  const bool fp16 = a->dtype == 1;
  if (a->dtype != 0 && a->dtype != 1) return fail("dtype must be 0 (bf16) or 1 (fp16)");
  switch (a->head_dim) {
    case 64: return fp16 ? launch<64, true>(*a, s) : launch<64, false>(*a, s);
    case 128: return fp16 ? launch<128, true>(*a, s) : launch<128, false>(*a, s);
    default: return fail("head dim must be 64 or 128");
  }
}
