// The C ABI: validates arguments, encodes TMA descriptors, picks the (head dim, dtype) instantiation and
// launches on the caller's stream. The only host code of the library; no torch.
#include <cuda_runtime.h>

#include <string>

#include "capi.h"
#include "sm90/flash_fwd.cuh"
#include "sm90/tma_desc.h"

namespace {

thread_local std::string g_last_error;
int g_d64_warpgroups = 0;  // 0: pick by shape (pick_d64_three_wgs); 2 or 3: forced (vidattn_sm90_set_d64_warpgroups)

int fail(const std::string& msg) {
  g_last_error = msg;
  return 1;
}

template <int kHeadDim, int kWGs, bool kFp16>
int launch(const VidattnFwdArgs& a, cudaStream_t stream, int sms) {
  using namespace vidattn::sm90;
  using T = FwdTraits<kHeadDim, kWGs>;
  FwdParams p{};
  std::string err;
  const bool ok = make_tensor_map_4d(&p.tm_q, a.q, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.q_stride,
                                     T::kBlockM, &err) &&
                  make_tensor_map_4d(&p.tm_k, a.k, kFp16, a.head_dim, a.seqlen_kv, a.heads, a.batch, a.k_stride,
                                     T::kBlockN, &err) &&
                  make_tensor_map_4d(&p.tm_v, a.v, kFp16, a.head_dim, a.seqlen_kv, a.heads, a.batch, a.v_stride,
                                     T::kBlockN, &err) &&
                  make_tensor_map_4d(&p.tm_o, a.o, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.o_stride, 16,
                                     &err);
  if (!ok) return fail(err);
  p.lse = a.lse;
  p.kv_lens = a.kv_lens;
  p.seqlen_q = static_cast<int>(a.seqlen_q);
  p.seqlen_kv = static_cast<int>(a.seqlen_kv);
  p.heads = static_cast<int>(a.heads);
  p.scale_log2 = a.scale * 1.4426950408889634f;
  const int64_t m_blocks = (a.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const int64_t tiles = m_blocks * a.heads * a.batch;
  if (tiles > (1ll << 31) - 1) return fail("too many tiles (batch * heads * ceil(Sq/kBlockM) over 2^31)");
  p.num_m_blocks = static_cast<int>(m_blocks);
  const size_t smem = sizeof(SharedStorage<kHeadDim, kWGs>) + 1024;  // +1 KB to align the ring to 1024 B in-kernel
  auto kernel = flash_fwd_kernel<kHeadDim, kWGs, kFp16>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) return fail(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e));
  // Persistent: one CTA per SM (shared memory allows no second), each walking the tile list. A CTA can mark at most
  // 32 * kRedoWords of its tiles for a redo (flash_fwd.cuh, kFixedRef), so larger problems take several launches.
  const int64_t per_launch = static_cast<int64_t>(sms) * 32 * T::kRedoWords;
  for (int64_t base = 0; base < tiles; base += per_launch) {
    const int64_t n = tiles - base < per_launch ? tiles - base : per_launch;
    p.tile_base = static_cast<int>(base);
    p.num_tiles = static_cast<int>(n);
    kernel<<<dim3(static_cast<unsigned>(n < sms ? n : sms)), T::kThreads, smem, stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess) return fail(std::string("kernel launch: ") + cudaGetErrorString(e));
  }
  return 0;
}

// D=64 has two builds: three consumer warpgroups (192-row tiles, about 1.1x the throughput per row on long
// sequences: csrc/NOTES.md) and two (128-row tiles). With static persistent scheduling a launch lasts about
// ceil(tiles / SMs) tile times; pick the build with the smaller estimate, so short queries whose 192-row tiles
// would be mostly padding (FA-bench 1K: 1152 rows computed for 1024) keep the 128-row tiles.
bool pick_d64_three_wgs(int64_t seqlen_q, int64_t batch_heads, int sms) {
  constexpr double kThreeWgGain = 1.1;
  constexpr int64_t m3 = vidattn::sm90::FwdTraits<64, 3>::kBlockM, m2 = vidattn::sm90::FwdTraits<64, 2>::kBlockM;
  const int64_t tiles3 = (seqlen_q + m3 - 1) / m3 * batch_heads, tiles2 = (seqlen_q + m2 - 1) / m2 * batch_heads;
  const double t3 = static_cast<double>((tiles3 + sms - 1) / sms) * m3 / kThreeWgGain;
  const double t2 = static_cast<double>((tiles2 + sms - 1) / sms) * m2;
  return t3 <= t2;
}

}  // namespace

extern "C" const char* vidattn_sm90_last_error(void) { return g_last_error.c_str(); }

// The shipped kernel does not split its last round (csrc/experiments/tail_split.patch did, and measured slower): it
// asks for no workspace and ignores one given.
extern "C" uint64_t vidattn_sm90_workspace_bytes(void) { return 0; }

extern "C" int vidattn_sm90_set_d64_warpgroups(int warpgroups) {
  if (warpgroups != 0 && warpgroups != 2 && warpgroups != 3) return 1;
  g_d64_warpgroups = warpgroups;
  return 0;
}

extern "C" int vidattn_sm90_fwd(const VidattnFwdArgs* a, void* stream) {
  if (a == nullptr) return fail("null argument block");
  if (!a->q || !a->k || !a->v || !a->o) return fail("null q/k/v/o pointer");
  if (a->batch < 1 || a->heads < 1 || a->seqlen_q < 1 || a->seqlen_kv < 1)
    return fail("batch, heads and sequence lengths must be >= 1");
  if (a->seqlen_q > (1ll << 31) - 1 || a->seqlen_kv > (1ll << 31) - 1) return fail("sequence length over 2^31");
  if (!(a->scale > 0.f)) return fail("softmax scale must be positive");
  // The epilogue stores O with TMA (flash_fwd.cuh, store_o), which wants 16-byte aligned bases and strides (the
  // stride of an extent-1 dimension is never stepped, as for q, k and v: make_tensor_map_4d).
  const int64_t o_extent[3] = {a->batch, a->seqlen_q, a->heads};
  bool o_aligned = reinterpret_cast<uintptr_t>(a->o) % 16 == 0;
  for (int i = 0; i < 3; ++i) o_aligned = o_aligned && (o_extent[i] == 1 || a->o_stride[i] % 8 == 0);
  if (!o_aligned) return fail("output must be 16-byte aligned with strides that are multiples of 8 elements");
  auto s = static_cast<cudaStream_t>(stream);
  const bool fp16 = a->dtype == 1;
  if (a->dtype != 0 && a->dtype != 1) return fail("dtype must be 0 (bf16) or 1 (fp16)");
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  if (sms < 1) sms = 1;
  switch (a->head_dim) {
    case 64:
      if (g_d64_warpgroups == 3 ||
          (g_d64_warpgroups == 0 && pick_d64_three_wgs(a->seqlen_q, a->batch * a->heads, sms)))
        return fp16 ? launch<64, 3, true>(*a, s, sms) : launch<64, 3, false>(*a, s, sms);
      return fp16 ? launch<64, 2, true>(*a, s, sms) : launch<64, 2, false>(*a, s, sms);
    case 128: return fp16 ? launch<128, 2, true>(*a, s, sms) : launch<128, 2, false>(*a, s, sms);
    default: return fail("head dim must be 64 or 128");
  }
}
