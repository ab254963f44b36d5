// The block-sparse builds' launcher (flash_fwd.cuh, kSparse): a translation unit of their own. Instantiated in
// capi.cu beside the dense builds, they changed how cicc optimised the dense kernels of the same module (the same
// source compiled to different PTX: 960 fewer register moves in the D=128 N=128 kernel, whose wgmmas ptxas then
// serialised, C7511, in 44 dense kernels), while the dense module without them compiled to the PTX it had before
// (dev/NOTES.md, "The sparse kernels in a module of their own"). capi.cu validates the call and calls
// sparse_launch; nothing here touches the dense builds. No torch.
#include <cuda_runtime.h>

#include <string>

#include "capi.h"
#include "sm90/flash_fwd.cuh"
#include "sm90/tma_desc.h"
#include "tail_plan.h"

namespace vidattn {

namespace {

template <int kHeadDim, int kWGs, bool kFp16>
int launch_sparse_build(const VidattnFwdArgs& a, cudaStream_t stream, int sms, std::string* err) {
  using namespace vidattn::sm90;
  constexpr int kBN = kSparseTileN | kSparseBuild;
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  static_assert(T::kSparse && T::kBlockM == 64 * kWGs && T::kBlockN == kSparseTileN, "the sparse tables' tile");
  FwdParams p{};
  const int64_t kv_heads = grouped_kv_heads(a.heads, a.kv_heads);
  const bool ok = make_tensor_map_4d(&p.tm_q, a.q, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.q_stride,
                                     T::kQBoxRows, err) &&
                  make_tensor_map_4d(&p.tm_k, a.k, kFp16, a.head_dim, a.seqlen_kv, kv_heads, a.batch, a.k_stride,
                                     T::kBlockN, err) &&
                  make_tensor_map_4d(&p.tm_v, a.v, kFp16, a.head_dim, a.seqlen_kv, kv_heads, a.batch, a.v_stride,
                                     T::kBlockN, err) &&
                  make_tensor_map_4d(&p.tm_o, a.o, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.o_stride, 16,
                                     err);
  if (!ok) return 1;
  p.lse = a.lse;
  p.o = static_cast<uint16_t*>(a.o);
  for (int i = 0; i < 3; ++i) p.o_stride[i] = a.o_stride[i];
  p.head_dim = static_cast<int>(a.head_dim);
  p.seqlen_q = static_cast<int>(a.seqlen_q);
  p.seqlen_kv = static_cast<int>(a.seqlen_kv);
  p.heads = static_cast<int>(a.heads);
  p.kv_group = static_cast<int>(a.heads / kv_heads);
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.blk_cnt = a.blk_cnt;
  p.blk_list = reinterpret_cast<const int2*>(a.blk_list);
  p.blk_stride = static_cast<int>(a.blk_stride);
  const int64_t m_blocks = (a.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const int64_t tiles = m_blocks * a.heads * a.batch;
  if (tiles > (1ll << 31) - 1) {
    *err = "too many tiles (batch * heads * ceil(Sq / tile rows) over 2^31)";
    return 1;
  }
  p.num_m_blocks = static_cast<int>(m_blocks);
  const size_t smem = dynamic_smem_bytes<kHeadDim, kWGs, kBN>();
  auto kernel = flash_fwd_kernel<kHeadDim, kWGs, kBN, kFp16, false, false>;
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  if (e != cudaSuccess) {
    *err = std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e);
    return 1;
  }
  // Persistent launches (no tail launch). With the fixed reference (bf16, VIDATTN_SPARSE_FIXED_REF) a CTA marks at
  // most 32 * kRedoWords of its tiles for a redo, so a larger problem takes several launches, as in capi.cu.
  const int64_t per_launch = VIDATTN_SPARSE_FIXED_REF && !kFp16 ? redo_launch_tiles<T>(sms) : tiles;
  for (int64_t base = 0; base < tiles; base += per_launch) {
    const int64_t n = tiles - base < per_launch ? tiles - base : per_launch;
    p.tile_base = static_cast<int>(base);
    p.num_tiles = static_cast<int>(n);
    const int ctas = static_cast<int>(n < sms ? n : sms);
    kernel<<<dim3(static_cast<unsigned>(ctas)), T::kThreads, smem, stream>>>(p);
    e = cudaGetLastError();
    if (e != cudaSuccess) {
      *err = std::string("block-sparse kernel launch: ") + cudaGetErrorString(e);
      return 1;
    }
  }
  return 0;
}

}  // namespace

// The D=64 / D=128 block-sparse launch of a call capi.cu has validated (fwd_sparse). 0, or 1 with *err set. (Overrides
// capi.cu's weak stand-in.)
int sparse_launch(const VidattnFwdArgs& a, cudaStream_t stream, int sms, std::string* err) {
  const bool fp16 = a.dtype == 1;
  constexpr int kWGs3 = sm90::kSparseWGsD64Max;
  if (a.head_dim == 64 && a.blk_wgs == kWGs3)
    return fp16 ? launch_sparse_build<64, kWGs3, true>(a, stream, sms, err)
                : launch_sparse_build<64, kWGs3, false>(a, stream, sms, err);
  if (a.head_dim == 64)
    return fp16 ? launch_sparse_build<64, 2, true>(a, stream, sms, err)
                : launch_sparse_build<64, 2, false>(a, stream, sms, err);
  return fp16 ? launch_sparse_build<128, 2, true>(a, stream, sms, err)
              : launch_sparse_build<128, 2, false>(a, stream, sms, err);
}

}  // namespace vidattn

// The consumer warpgroup counts of this head dim's block-sparse builds, as bits (bit w: a build with w; capi.h).
extern "C" int vidattn_sm90_sparse_warpgroups(int32_t head_dim) {
  if (head_dim == 64) return (1 << 2) | (1 << vidattn::sm90::kSparseWGsD64Max);
  return head_dim == 128 ? 1 << 2 : 0;
}

// The block-sparse layout (capi.h): defined here, so that a library built without this file says it has none.
extern "C" int vidattn_sm90_sparse_layout(int32_t* tile_m, int32_t* tile_n, int32_t* block, int32_t* key_unit) {
  if (tile_m != nullptr) *tile_m = vidattn::sm90::kSparseTileM;
  if (tile_n != nullptr) *tile_n = vidattn::sm90::kSparseTileN;
  if (block != nullptr) *block = vidattn::sm90::kSparseBlock;
  if (key_unit != nullptr) *key_unit = vidattn::sm90::kSparseBlock;  // (flash_fwd.cuh, sparse_entry)
  return 0;
}

#if VIDATTN_DIAG_TIMELINE
// Diagnostic builds only (dev/probes/timeline_sparse.sh): the block-sparse kernels' stamps, as capi.cu's
// vidattn_sm90_diag_timeline gives the dense kernels' (the rows are each translation unit's own: diag_timeline.cuh).
extern "C" int vidattn_sm90_diag_timeline_sparse(void* consumer, uint64_t consumer_bytes, void* producer,
                                                 uint64_t producer_bytes, int reset) {
  using namespace vidattn::sm90;
  if (consumer_bytes != kTlConsumerBytes || producer_bytes != kTlProducerBytes) return 1;
  return tl_copy_rows(consumer, producer, reset != 0) == cudaSuccess ? 0 : 1;
}
#endif
