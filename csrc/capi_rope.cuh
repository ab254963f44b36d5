// C ABI of the fused RoPE (common/rope.cuh): argument checks and the launch on the caller's stream. Included at the
// end of capi.cu, so it shares its error reporting (fail, check_launch: vidattn_sm90_last_error); no torch.
#pragma once
#include <cuda_runtime.h>

#include <string>
#include <type_traits>

#include "capi.h"
#include "common/norm_rope.cuh"
#include "common/rope.cuh"

namespace {

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Strides of extent-1 dimensions are never stepped (a (1, S, 1, D) table's batch stride can be anything).
bool strides_multiple(const int64_t* stride, const int64_t* extent, int n, int64_t m) {
  for (int i = 0; i < n; ++i)
    if (extent[i] > 1 && stride[i] % m != 0) return false;
  return true;
}

// The checks and the copy both entries make of their shared geometry (x, out, cos, sin and their shapes and strides;
// VidattnRopeArgs and VidattnNormRopeArgs name these fields alike). `what` prefixes the error.
template <typename A>
bool tensors_aligned(const A* a, const char* what) {
  // 16-byte vector accesses: x and out rows in 8-element steps, table rows in 16 bytes.
  const int64_t x_extent[3] = {a->batch, a->seqlen, a->heads};
  if (!aligned16(a->x) || !aligned16(a->out) || !strides_multiple(a->x_stride, x_extent, 3, 8) ||
      !strides_multiple(a->out_stride, x_extent, 3, 8)) {
    fail(std::string(what) + ": x and out must be 16-byte aligned with (batch, seq, head) strides multiples of 8 "
         "elements");
    return false;
  }
  const int64_t table_elems16 = a->table_dtype == 2 ? 4 : 8;
  const int64_t t_extent[2] = {a->batch, a->seqlen};
  if (!aligned16(a->cos) || !aligned16(a->sin) || !strides_multiple(a->cos_stride, t_extent, 2, table_elems16) ||
      !strides_multiple(a->sin_stride, t_extent, 2, table_elems16)) {
    fail(std::string(what) + ": cos and sin must be 16-byte aligned with (batch, seq) strides multiples of 16 bytes");
    return false;
  }
  return true;
}

template <typename P, typename A>
void copy_geometry(P& p, const A* a) {
  p.x = a->x;
  p.out = a->out;
  p.cos = a->cos;
  p.sin = a->sin;
  p.batch = a->batch;
  p.seqlen = a->seqlen;
  p.heads = a->heads;
  p.head_dim = a->head_dim;
  for (int i = 0; i < 3; ++i) p.x_stride[i] = a->x_stride[i], p.out_stride[i] = a->out_stride[i];
  for (int i = 0; i < 2; ++i) p.cos_stride[i] = a->cos_stride[i], p.sin_stride[i] = a->sin_stride[i];
}

template <typename T, typename C, int kMode, bool kRoundMid>
int rope_launch(const vidattn::rope::RopeParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  vidattn::rope::rope_kernel<T, C, kMode, kRoundMid><<<grid, block, 0, stream>>>(p);
  return check_launch("rope_kernel");
}

template <typename T, typename C>
int rope_dispatch(const vidattn::rope::RopeParams& p, int mode, bool round_mid, dim3 grid, dim3 block,
                  cudaStream_t s) {
  using namespace vidattn::rope;
  if (mode == kRopeWan)
    return round_mid ? rope_launch<T, C, kRopeWan, true>(p, grid, block, s)
                     : rope_launch<T, C, kRopeWan, false>(p, grid, block, s);
  if (mode == kRopePairs) return rope_launch<T, C, kRopePairs, false>(p, grid, block, s);
  return rope_launch<T, C, kRopeHalves, false>(p, grid, block, s);
}

template <typename T>
int rope_dispatch_table(const vidattn::rope::RopeParams& p, int table_dtype, int mode, bool round_mid, dim3 grid,
                        dim3 block, cudaStream_t s) {
  if (table_dtype == 2) return rope_dispatch<T, float>(p, mode, round_mid, grid, block, s);
  if (table_dtype == 0) return rope_dispatch<T, __nv_bfloat16>(p, mode, round_mid, grid, block, s);
  return rope_dispatch<T, __half>(p, mode, round_mid, grid, block, s);
}

// The fused norm + RoPE kernel's schedule (norm_rope.cuh NormRopeSchedule): 0, the library's (norm_rope_default); 1
// one row per CTA, 2 CTAs looping over rows, 3 one row per CTA with lean index math, for the A/B
// (vidattn_norm_rope_set_schedule; a forced schedule is built for bf16 x with fp32 tables, Wan's case, only: other
// calls run the default). The default is kLean since call N1 of the ninth sitting (bench/results/
// h200_2026-12-03_ninth/call_n1: 0.584 against kOneRow's 0.713 ms per Wan 14B tensor, 6/6 passes; 1.3B a tie),
// and kOneRow where kLean's 32-bit row offsets do not fit (lean_offsets_fit). At 2 vectors a thread with bf16 x and
// fp32 tables (Wan 14B's rows: 5120 channels) the default is kLean32 since call O6 of the eleventh sitting
// (bench/results/h200_2026-12-03_eleventh/call_o6: 0.509 against kLean's 0.567 ms per Wan 14B tensor, 6/6 passes);
// at one vector a thread (1.3B's 1536 channels) it tied (1.003x, faster in 2/6) and kLean stays.
template <typename T, typename C, int kVecs>
constexpr int norm_rope_default() {
  using namespace vidattn::norm_rope;
  return std::is_same<T, __nv_bfloat16>::value && std::is_same<C, float>::value && kVecs == 2 ? kLean32 : kLean;
}
int g_norm_rope_schedule = 0;
thread_local int g_norm_rope_last = 0;  // the schedule of this thread's last launch (vidattn_norm_rope_last_schedule)

// kLean's offsets within a row are 32-bit: (heads - 1) * head stride + head_dim must fit for x and out (strides
// that torch gives, >= 0; a stride of one head is never stepped). Rows that do not fit run kOneRow instead.
bool lean_offsets_fit(const vidattn::norm_rope::NormRopeParams& p) {
  if (p.heads == 1) return true;
  const int64_t most = (int64_t(UINT32_MAX) - p.head_dim) / (p.heads - 1);
  return p.x_stride[2] >= 0 && p.x_stride[2] <= most && p.out_stride[2] >= 0 && p.out_stride[2] <= most;
}

template <typename T, typename C, int kVecs, int kSchedule>
int norm_rope_run(const vidattn::norm_rope::NormRopeParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  using namespace vidattn::norm_rope;
  // Tables of x's own dtype under the Wan formula: torch computes each op in that dtype (rope.cuh, kRoundMid).
  constexpr bool kRoundMid = sizeof(C) == sizeof(T);
  g_norm_rope_last = kSchedule;
  if constexpr (kSchedule == kLean32) {
    rms_norm_rope_lean32_kernel<T, C, kRoundMid, kVecs><<<grid, block, 0, stream>>>(p);
    return check_launch("rms_norm_rope_lean32_kernel");
  } else {
    auto kernel = rms_norm_rope_kernel<T, C, kRoundMid, kVecs, kSchedule>;
    if constexpr (kSchedule == kRows) {
      // As many CTAs as are resident at once, each looping over rows (at most one per row).
      int per_sm = 0;
      if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, static_cast<int>(block.x), 0) !=
              cudaSuccess ||
          per_sm < 1)
        per_sm = 1;
      const int64_t rows = int64_t(grid.x), ctas = int64_t(per_sm) * sm_count();
      grid.x = static_cast<unsigned>(rows < ctas ? rows : ctas);
    }
    kernel<<<grid, block, 0, stream>>>(p);
    return check_launch("rms_norm_rope_kernel");
  }
}

template <typename T, typename C, int kVecs>
int norm_rope_launch(const vidattn::norm_rope::NormRopeParams& p, dim3 grid, dim3 block, cudaStream_t stream) {
  using namespace vidattn::norm_rope;
  if constexpr (std::is_same<T, __nv_bfloat16>::value && std::is_same<C, float>::value) {
    if (g_norm_rope_schedule == kOneRow) return norm_rope_run<T, C, kVecs, kOneRow>(p, grid, block, stream);
    if (g_norm_rope_schedule == kRows) return norm_rope_run<T, C, kVecs, kRows>(p, grid, block, stream);
    if (g_norm_rope_schedule == kLean && lean_offsets_fit(p))
      return norm_rope_run<T, C, kVecs, kLean>(p, grid, block, stream);
    // (kLean32 holds at most 2 vectors a thread in its 32 registers: wider rows, over 8192 channels, run the default.)
    if constexpr (kVecs <= 2) {
      if (g_norm_rope_schedule == kLean32 && lean_offsets_fit(p))
        return norm_rope_run<T, C, kVecs, kLean32>(p, grid, block, stream);
    }
  }
  // The default (or a forced schedule this launch has no build of); kOneRow where the lean offsets do not fit.
  constexpr int kDefault = norm_rope_default<T, C, kVecs>();
  if (!lean_offsets_fit(p)) return norm_rope_run<T, C, kVecs, kOneRow>(p, grid, block, stream);
  return norm_rope_run<T, C, kVecs, kDefault>(p, grid, block, stream);
}

template <typename T, typename C>
int norm_rope_vecs(const vidattn::norm_rope::NormRopeParams& p, int per_thread, dim3 grid, dim3 block,
                   cudaStream_t s) {
  if (per_thread == 1) return norm_rope_launch<T, C, 1>(p, grid, block, s);
  if (per_thread == 2) return norm_rope_launch<T, C, 2>(p, grid, block, s);
  return norm_rope_launch<T, C, 4>(p, grid, block, s);
}

template <typename T>
int norm_rope_dispatch(const vidattn::norm_rope::NormRopeParams& p, int table_dtype, int per_thread, dim3 grid,
                       dim3 block, cudaStream_t s) {
  if (table_dtype == 2) return norm_rope_vecs<T, float>(p, per_thread, grid, block, s);
  // A table of the other 16-bit dtype would promote to fp32 in torch; the Python side refuses it (rope_reason's rule).
  return norm_rope_vecs<T, T>(p, per_thread, grid, block, s);
}

}  // namespace

extern "C" int vidattn_rope_version(void) { return 1; }

extern "C" int vidattn_norm_rope_set_schedule(int schedule) {
  if (schedule < 0 || schedule > 4)
    return fail("norm_rope: schedule must be 0 (default), 1 (one row), 2 (rows), 3 (one row, lean index math) or 4 "
                "(3 held to 32 registers)");
  g_norm_rope_schedule = schedule;
  return 0;
}

extern "C" int vidattn_norm_rope_last_schedule(void) { return g_norm_rope_last; }

extern "C" int vidattn_norm_rope(const VidattnNormRopeArgs* a, void* stream) {
  namespace nr = vidattn::norm_rope;
  if (a == nullptr) return fail("norm_rope: null argument block");
  if (!a->x || !a->out || !a->weight || !a->cos || !a->sin) return fail("norm_rope: null x/out/weight/cos/sin pointer");
  if (a->dtype != 0 && a->dtype != 1) return fail("norm_rope: dtype must be 0 (bf16) or 1 (fp16)");
  if (a->table_dtype != 2 && a->table_dtype != a->dtype)
    return fail("norm_rope: table_dtype must be 2 (fp32) or x's dtype");
  if (a->batch < 1 || a->seqlen < 1 || a->heads < 1) return fail("norm_rope: batch, seqlen and heads must be >= 1");
  if (a->head_dim < 8 || a->head_dim % 8 != 0 || a->head_dim > nr::kMaxHeadDim)
    return fail("norm_rope: head dim must be a multiple of 8 from 8 to " + std::to_string(nr::kMaxHeadDim));
  const int64_t width = a->heads * a->head_dim;
  const int64_t max_width = int64_t(nr::kMaxThreads) * nr::kMaxVecsPerThread * 8;
  if (width > max_width) return fail("norm_rope: heads * head_dim over " + std::to_string(max_width));
  if (!(a->eps >= 0.f) || !std::isfinite(a->eps)) return fail("norm_rope: eps must be finite and >= 0");
  if (!aligned16(a->weight)) return fail("norm_rope: weight must be 16-byte aligned");
  if (!tensors_aligned(a, "norm_rope")) return 1;
  const int64_t rows = a->batch * a->seqlen;
  if (rows > (1ll << 31) - 1) return fail("norm_rope: batch * seqlen over 2^31 - 1 (grid.x)");
  if (!make_context_current()) return 1;

  nr::NormRopeParams p{};
  copy_geometry(p, a);
  p.weight = a->weight;
  p.eps = a->eps;
  p.vecs = static_cast<int>(width / 8);
  p.head_magic = static_cast<uint32_t>(((int64_t(1) << 32) + a->head_dim - 1) / a->head_dim);
  // As few vectors per thread as fit kMaxThreads, the threads then spread evenly over them (Wan 14B's 640 vectors:
  // 2 each on 320 threads; 1.3B's 192: one each), in whole warps.
  // 1, 2 or 4 (3 runs as 4: the kernels held to the vectors they need, kVecs).
  int per_thread = (p.vecs + nr::kMaxThreads - 1) / nr::kMaxThreads;
  per_thread = per_thread > 2 ? 4 : per_thread;
  const int threads = ((p.vecs + per_thread - 1) / per_thread + 31) / 32 * 32;
  const dim3 grid(static_cast<unsigned>(rows)), block(threads);
  auto s = static_cast<cudaStream_t>(stream);
  return a->dtype == 0 ? norm_rope_dispatch<__nv_bfloat16>(p, a->table_dtype, per_thread, grid, block, s)
                       : norm_rope_dispatch<__half>(p, a->table_dtype, per_thread, grid, block, s);
}

extern "C" int vidattn_rope(const VidattnRopeArgs* a, void* stream) {
  if (a == nullptr) return fail("rope: null argument block");
  if (!a->x || !a->out || !a->cos || !a->sin) return fail("rope: null x/out/cos/sin pointer");
  if (a->dtype != 0 && a->dtype != 1) return fail("rope: dtype must be 0 (bf16) or 1 (fp16)");
  if (a->table_dtype < 0 || a->table_dtype > 2) return fail("rope: table_dtype must be 0 (bf16), 1 (fp16) or 2 (fp32)");
  if (a->mode < 0 || a->mode > 2) return fail("rope: mode must be 0 (wan), 1 (pairs) or 2 (halves)");
  if (a->batch < 1 || a->seqlen < 1 || a->heads < 1) return fail("rope: batch, seqlen and heads must be >= 1");
  if (a->batch > 65535) return fail("rope: batch over 65535 (grid.y)");
  const int64_t per_lane = a->mode == 2 ? 16 : 8;  // channels per thread (halves: 8 and their 8 partners)
  // At most 512 threads per position in the pair modes, 8 channels each, and 256 of 16 channels in halves mode (the
  // kernel's launch bounds): 4096 channels, which takes LTX-Video's and LTX-2's RoPE over a whole (B, S, C) row
  // (C = 2048 or 4096) as one "head".
  if (a->head_dim < per_lane || a->head_dim > 4096 || a->head_dim % per_lane != 0)
    return fail(a->mode == 2 ? "rope: head dim must be a multiple of 16 from 16 to 4096 (halves mode)"
                             : "rope: head dim must be a multiple of 8 from 8 to 4096");
  if (!tensors_aligned(a, "rope")) return 1;
  if (!make_context_current()) return 1;

  vidattn::rope::RopeParams p{};
  copy_geometry(p, a);

  const int lanes = static_cast<int>(a->head_dim / per_lane);  // threads per position, 512 (halves: 256) at most
  const int rows = lanes >= 256 ? 1 : 256 / lanes;             // positions per CTA
  const int64_t tiles = (a->seqlen + rows - 1) / rows;
  // Enough CTAs for ~5 waves (6 CTAs of 256 threads fit an SM at the kernel's 40 registers): with fewer, the last,
  // partial wave idles SMs for a large share of the launch (Wan 1.3B's 2048 (tile, batch) CTAs are 2.6 waves on 132
  // SMs). Where the (tile, batch) grid alone is short of that, the heads split into groups of at least 4 (a group
  // re-reads its tile's cos/sin rows, from L2: the group index varies fastest in the grid).
  const int64_t target = int64_t(sm_count()) * 32;
  const int64_t max_groups = (a->heads + 3) / 4;
  int64_t groups = (target + tiles * a->batch - 1) / (tiles * a->batch);
  groups = groups < 1 ? 1 : groups > max_groups ? max_groups : groups;
  p.heads_per_cta = static_cast<int>((a->heads + groups - 1) / groups);
  p.head_groups = static_cast<int>((a->heads + p.heads_per_cta - 1) / p.heads_per_cta);
  if (tiles * p.head_groups > (1ll << 31) - 1) return fail("rope: too many CTAs (seqlen too long)");
  const dim3 grid(static_cast<unsigned>(tiles * p.head_groups), static_cast<unsigned>(a->batch));
  const dim3 block(lanes, rows);
  auto s = static_cast<cudaStream_t>(stream);
  // Tables of x's own dtype under the Wan formula: torch computes each op in that dtype (rope.cuh, kRoundMid).
  const bool round_mid = a->mode == 0 && a->table_dtype == a->dtype;
  return a->dtype == 0 ? rope_dispatch_table<__nv_bfloat16>(p, a->table_dtype, a->mode, round_mid, grid, block, s)
                       : rope_dispatch_table<__half>(p, a->table_dtype, a->mode, round_mid, grid, block, s);
}
