// C ABI of the 8-bit attention path (precision="8bit"): workspace sizing, the pre-pass launches (q8_quant.cuh) and
// the kernel's (q8_fwd.cuh), all on the caller's stream. Included at the end of capi.cu, so it shares its error
// reporting (fail, check_launch: vidattn_sm90_last_error) and its TMA encoder; no torch.
#pragma once
#include <cuda_runtime.h>

#include <string>

#include "capi.h"
#include "sm90/q8_fwd.cuh"
#include "sm90/q8_quant.cuh"
#include "sm90/tma_desc.h"
#include "tail_plan.h"

namespace {

using vidattn::env_default;

// Kernel variants (q8_fwd.cuh), as measured on the H200 (dev/NOTES_8bit.md):
//   mode 0: row sums of the unrounded p in the softmax (fp32); 1: by the tensor cores (a column of ones beside V: P V
//   also sums P as rounded, the softmax drops one FADD per score).
//   D=128: mode 0 on schedule 3 (the sequential schedule, three consumer warpgroups, with the exponentials taken in
//   round-robin turns; mode 1's 4 more accumulator registers would spill there) with score conversion 2: 1.02x
//   schedule 1 on Wan 1.3B and 1.06x on seed 8K, every pass (bench/results/h200_2026-12-02_eve/call_q/q8/).
//   D=64: mode 1 on the sequential schedule (schedule 1) with score conversion 1 (1.05x the three-warpgroup
//   ping-pong with I2F, its earlier default, on CogVideoX and LTX: bench/results/h200_2026-12-02_pm/call_g/q8/).
// Schedules: ping-pong (D=64 only: S_j issued with P_{j-1} V_{j-1}; three consumer warpgroups, or two), sequential
// (q8_consumer_seq: three warpgroups, no spills; schedule 1), and schedule 3: the sequential schedule with the
// exponentials in round-robin turns among the warpgroups (one at a time on MUFU), D=128 only, built with conversion 2
// and mode 0 only.
// Built, each for bf16 and fp16 (22 kernels; 2 of them v10 mode 1 of schedule 3, the default, below, and 2 v12's
// build of it, off by default): D=128 mode 0
// on schedule 1 (I2F, and conversion 2: the earlier default, the A/B's reference) and on schedule 3 with
// conversion 2; D=64 modes 0 and 1 on the three-warpgroup
// ping-pong and the sequential schedule, mode 1 on the sequential schedule with conversion 1, and mode 1 on the
// two-warpgroup ping-pong (slower, but spill-free: the sanitizer cases' contrast to the spilling three-warpgroup
// build). The I2F builds stay as the A/B's reference and for the forced variants.
// No longer built, each slower than the default on every shape it was timed on (device runs 2-5, calls G and Q; a
// forced launch is refused with an error): mode 2 (f16 exponentials, sums by the tensor cores), mode 3 (f16
// exponentials, HADD2 sums), modes 4 and 5 (1/8 or 1/4 of the exponentials by an FMA polynomial, q8_exp2_poly; mode 4
// with conversion 1 too), conversion 1 at D=128 and 2 at D=64, the D=128 ping-pong schedule and mode 1 with it, mode
// 0 with two warpgroups at D=64, schedule 2 (the S issues in round-robin turns; at D=64, with I2F at D=128, and with
// conversion 2 at D=128, which call Q measured below schedule 3 on both D=128 shapes), schedule 3 at D=64 (0.95x
// schedule 1 on CogVideoX and LTX, every pass of call Q). q8_fwd.cuh keeps their code paths (kTurns, kExp16, kPoly).
// Forced by vidattn_q8_set_sum_mma / vidattn_q8_set_d64_warpgroups / vidattn_q8_set_sequential, or for both head
// dims by the environment variables VIDATTN_Q8_SUM_MMA / VIDATTN_Q8_D64_WGS / VIDATTN_Q8_SEQ (read once; A/B runs).
#ifndef VIDATTN_Q8_MODE_D128
#define VIDATTN_Q8_MODE_D128 0
#endif
#ifndef VIDATTN_Q8_MODE_D64
#define VIDATTN_Q8_MODE_D64 1
#endif
#ifndef VIDATTN_Q8_D64_WGS
#define VIDATTN_Q8_D64_WGS 3
#endif
#ifndef VIDATTN_Q8_SEQ_D128
#define VIDATTN_Q8_SEQ_D128 3
#endif
#ifndef VIDATTN_Q8_SEQ_D64
#define VIDATTN_Q8_SEQ_D64 1
#endif
static_assert(VIDATTN_Q8_SEQ_D128 == 1 || VIDATTN_Q8_SEQ_D128 == 3, "D=128 builds schedules 1 and 3 only");
static_assert(VIDATTN_Q8_SEQ_D64 == 0 || VIDATTN_Q8_SEQ_D64 == 1, "D=64 builds the ping-pong and schedule 1 only");
// Score conversion (q8_fwd.cuh's kCvt): 0 one I2F per score; 1 the row max on the integers and each score as
// 1.5 * 2^23 + x by an integer add of the bits; 2 that bias added by the tensor cores (S starts at it). Built on the
// sequential schedule only, 2 at D=128 and 1 at D=64 with mode 1 (each won its head dim's A/B; the three-warpgroup
// ping-pong spilled 120-350 bytes with them); forced by vidattn_q8_set_cvt (refused elsewhere) or VIDATTN_Q8_CVT (read
// once; where it is not built, 0 runs).
#ifndef VIDATTN_Q8_CVT_D128
#define VIDATTN_Q8_CVT_D128 2
#endif
#ifndef VIDATTN_Q8_CVT_D64
#define VIDATTN_Q8_CVT_D64 1
#endif
// The pre-pass (q8_quant.cuh): 1 the K/V statistics and Q's quantization in one launch (q8_stats_q_kernel; calls
// with LSE keep 0, since Q's LSE term reads the statistics), 0 the three launches, 2 no Q pass: the statistics and
// the K/V pass only, Q quantized by the attention kernel itself (q8_fwd.cuh's q8_quantize_q_tile; with LSE too, since
// the statistics are complete before it starts); forced by vidattn_q8_set_prep or VIDATTN_Q8_PREP (read once; A/B
// runs).
#ifndef VIDATTN_Q8_PREP
#define VIDATTN_Q8_PREP 1
#endif
// The K/V pass (q8_quant.cuh): 0 q8_kv_kernel (a thread per key, its whole rows), 1 q8_kv2_kernel at D=128 (16 lanes a
// row, whole-row loads, V^T transposed in registers; the same outputs bit for bit; D=64 runs 0). 1 is the default
// since call N5 of the ninth sitting (bench/results/h200_2026-12-03_ninth/call_n5: the pre-pass 0.234 -> 0.223 ms on
// Wan 1.3B self and 0.308 -> 0.296 on seed 8K, lower in 6 of 6 passes each; the Wan 14B forward a tie); 0 stays built
// (the A/B's reference, and D=64's). Forced by vidattn_q8_set_kv_pass or VIDATTN_Q8_KV_PASS (read once).
#ifndef VIDATTN_Q8_KV_PASS
#define VIDATTN_Q8_KV_PASS 1
#endif
static_assert(VIDATTN_Q8_KV_PASS == 0 || VIDATTN_Q8_KV_PASS == 1, "the K/V pass: 0 a thread per key, 1 whole rows");
// v10 (dev/NOTES_8bit.md "v10"), fewer instructions per key block at D=128, schedule 3 (conversion 2, row-sum mode
// 0, three warpgroups): 1, the default, builds the wgmma descriptors by increments (q8_fwd.cuh's kDescInc 2: 546 SASS
// instructions per warp and block instead of 573, the same arithmetic, so the same output bit for bit); 0 rebuilds
// them per wgmma (the earlier default, kept for the A/B). Mode 1 won its A/B on the H200 (11 of 12 paired passes
// with quantization: Wan 1.3B self 905 -> 915 TFLOPS, seed 8K 808 -> 818; kernel only 935 -> 957 and 936 -> 940;
// bench/results/h200_2026-12-02_sixth/call_u/). Mode 2 (that with the lazy reference max, kLazy 2) lost every pass
// (x0.97-0.98 plain, x0.73-0.83 sharpened) and is no longer built: asking for it is an error (q8_fwd.cuh keeps the
// code path). Forced by vidattn_q8_set_v10 or VIDATTN_Q8_V10 (read once); D=64 and schedule 1 have no v10 build and
// refuse a forced mode.
#ifndef VIDATTN_Q8_V10
#define VIDATTN_Q8_V10 1
#endif
static_assert(VIDATTN_Q8_V10 >= 0 && VIDATTN_Q8_V10 <= 2, "v10: 0 (off), 1 descriptors, 2 descriptors + lazy max");
int g_q8_v10 = -1;                   // -1: the default; 0, 1, 2: forced
thread_local int g_q8_last_v10 = -1;
// v12 (dev/NOTES_8bit.md "v12"), on v10 mode 1 (D=128, schedule 3): 1 builds the same arithmetic in fewer
// instructions per key block (q8_fwd.cuh's kV12: the warpgroup index uniform to ptxas, the steady blocks' row max
// in three-input chains and converted by one FADD, the row-sum chains started at their first groups, K's scale
// pointer carried; 515 SASS instructions per warp and block instead of 546, the same output bit for bit), the build
// default since call B of the seventh sitting (bench/results/h200_2026-12-02_seventh/call_b: Wan 1.3B self 913 -> 937
// TFLOPS with quantization, seed 8K 816 -> 828, 11 of 12 paired passes); 0 is v10 mode 1 as it was (the A/B's
// reference). Forced by vidattn_q8_set_v12 or VIDATTN_Q8_V12 (read once); anything but v10 mode 1 of schedule 3
// refuses a forced mode 1 and runs its own build when mode 1 is only the default.
#ifndef VIDATTN_Q8_V12
#define VIDATTN_Q8_V12 1
#endif
static_assert(VIDATTN_Q8_V12 >= 0 && VIDATTN_Q8_V12 <= 1, "v12: 0 (off), 1 fewer instructions per block");
int g_q8_v12 = -1;                   // -1: the default; 0, 1: forced
thread_local int g_q8_last_v12 = -1;
int g_q8_prep = -1;                  // -1: the default; 0 three launches, 1 statistics and Q fused, 2 Q in the kernel
thread_local int g_q8_last_prep = -1;
int g_q8_kv_pass = -1;               // -1: the default; 0, 1: forced
thread_local int g_q8_last_kv_pass = -1;
int g_q8_d64_wgs = 0;                // 0: the default; 2 or 3: forced (vidattn_q8_set_d64_warpgroups)
int g_q8_sum_mma = -1;               // -1: the default; 0-5: the mode, forced (vidattn_q8_set_sum_mma)
int g_q8_seq = -1;                   // -1: the default; 0 ping-pong, 1 sequential, 2 turns at S, 3 at exp, forced
int g_q8_cvt = -1;                   // -1: the default; 0 I2F, 1 integer max + magic add, 2 biased S, forced
thread_local int g_q8_last_wgs = 0;  // consumer warpgroups of this thread's last 8-bit launch
thread_local int g_q8_last_sum_mma = -1;
thread_local int g_q8_last_seq = -1;
thread_local int g_q8_last_cvt = -1;

// The tail launch (dev/NOTES_8bit.md "v18"): the kernel is one CTA per 192-row tile, one CTA per SM, so a launch of
// `tiles` tiles lasts ceil(tiles / SMs) tile times, and the r = tiles mod SMs tiles of the last round cost a whole
// tile time while most SMs idle (Wan 1.3B self-attention: 2052 tiles = 15 rounds + 72, 3-6% of the kernel; LTX: 31 +
// 4). With a plan, the main launch takes the full rounds and the r tiles run as key ranges (q8_fwd_kernel's kSplit
// build), `splits` per tile, whose partials combine_kernel (combine.cuh, the bf16 tail launch's) merges. Where r x
// splits passes the SMs the ranges run in several short rounds: the plan weighs them (q8_plan_tail). Built for the
// default builds only (D=128 schedule 3 with v12, D=64 schedule 1 with mode 1 and conversion 1); prep mode 2 keeps
// the plain launch. 2 (the default since call P32) plans a tail launch for calls with or without kv_lens
// (dev/NOTES_8bit.md "v18b": each range's blocks come from its batch's kv_len in the kernel, so a short batch's range
// can hold none; its partial is then (max -inf, sum 0), which combine_kernel weighs 0), 1 for calls without kv_lens
// only, 0 never; forced by vidattn_q8_set_tail or VIDATTN_Q8_TAIL (read once).
#ifndef VIDATTN_Q8_TAIL
#define VIDATTN_Q8_TAIL 2
#endif
static_assert(VIDATTN_Q8_TAIL >= 0 && VIDATTN_Q8_TAIL <= 2, "the tail launch: 0 (never), 1, or 2 (kv_lens too)");
int g_q8_tail = -1;                           // -1: the default; 0, 1, 2: forced
thread_local int g_q8_last_tail_splits = -1;  // key ranges per tail tile of the last launch (0: no tail launch)
constexpr int64_t kQ8TailBlockM = 192;        // the three-warpgroup builds' tiles (every build with a split twin)
constexpr int kQ8TailMaxSplits = 32;
constexpr int kQ8TailMinBlocks = 4;           // key blocks per range at least: its pipeline fill and store stay small
constexpr int kQ8TailMaxItemsPerSm = 2;       // ranges per SM at most (the workspace's partials)

inline int q8_tail_asked() {
  static const int env = env_default("VIDATTN_Q8_TAIL", VIDATTN_Q8_TAIL, 0, 2);
  return g_q8_tail < 0 ? env : g_q8_tail;
}

struct Q8TailPlan {
  int64_t tiles = 0;  // tiles of the last round run as key ranges (0: no tail launch)
  int splits = 1;
};

// The plan's cost (tail_plan.h, cheapest_tail_split), in key-block times of one CTA: the plain last round is one
// tile, nb blocks; `splits` ranges a tile run in ceil(r splits / SMs) rounds of ceil(nb / splits) blocks plus 2 for a
// range's own pipeline fill, Q load and store (a CTA's start and end measured ~1.5-2 us, about a D=128 block's 1.7 us:
// dev/NOTES_8bit.md "pre-pass mode 2 outcome"), and the merge reads each range's 192 x (D + 2) fp32 partials once
// (~100 KB at D=128: 1/50 of a block's time at the H200's bandwidth). A plan is taken when it saves at least a tenth
// of the tile time, with at most kQ8TailMaxItemsPerSm x SMs ranges (the workspace: 25 MB at D=128).
Q8TailPlan q8_plan_tail(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_kv, int sms) {
  Q8TailPlan plan;
  if (q8_tail_asked() == 0 || sms < 1) return plan;
  const int64_t tiles = (seqlen_q + kQ8TailBlockM - 1) / kQ8TailBlockM * heads * batch;
  const int64_t r = tiles % sms;
  const int64_t nb = (seqlen_kv + vidattn::sm90::kQ8BlockN - 1) / vidattn::sm90::kQ8BlockN;
  if (r == 0) return plan;
  plan.splits = static_cast<int>(
      vidattn::cheapest_tail_split(r, nb, sms, kQ8TailMinBlocks, kQ8TailMaxSplits, kQ8TailMaxItemsPerSm));
  if (plan.splits < 2) return Q8TailPlan{};
  plan.tiles = r;
  return plan;
}

// The workspace's parts, each 256-byte aligned; k_sum and v_amax adjoin so one memset zeroes both. With a tail plan,
// the ranges' partials last (ws_o, ws_ml).
struct Q8Layout {
  int64_t sq_pad = 0, skv_pad = 0;
  uint64_t q8 = 0, q_scale = 0, k8 = 0, k_scale = 0, vt8 = 0, v_scale = 0, k_sum = 0, v_amax = 0, lse_corr = 0;
  uint64_t ws_o = 0, ws_ml = 0;
  Q8TailPlan tail;
  uint64_t stats_bytes = 0, total = 0;
};

// Q's parts are per (batch, query head), K's and V's per (batch, key/value head): grouped-query attention quantizes
// each key/value head once for its group.
Q8Layout q8_layout(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seqlen_q, int64_t seqlen_kv,
                   int64_t head_dim, bool with_tail = true) {
  using namespace vidattn::sm90;
  Q8Layout l;
  l.sq_pad = (seqlen_q + kQ8BlockMPad - 1) / kQ8BlockMPad * kQ8BlockMPad;
  l.skv_pad = (seqlen_kv + kQ8BlockN - 1) / kQ8BlockN * kQ8BlockN;
  const uint64_t bh = static_cast<uint64_t>(batch * heads), bhkv = static_cast<uint64_t>(batch * kv_heads);
  uint64_t at = 0;
  auto take = [&](uint64_t bytes) {
    const uint64_t off = at;
    at = (at + bytes + 255) / 256 * 256;
    return off;
  };
  l.q8 = take(bh * l.sq_pad * head_dim);
  l.q_scale = take(bh * l.sq_pad * 4);
  l.k8 = take(bhkv * l.skv_pad * head_dim);
  l.k_scale = take(bhkv * (l.skv_pad / kQ8BlockN) * kQ8KGroups * 4);
  l.vt8 = take(bhkv * head_dim * l.skv_pad);
  l.v_scale = take(bhkv * head_dim * 4);
  l.k_sum = take(bhkv * head_dim * 4);
  l.v_amax = take(bhkv * head_dim * 4);
  l.stats_bytes = at - l.k_sum;
  l.lse_corr = take(bh * seqlen_q * 4);
  if (with_tail && (head_dim == 64 || head_dim == 128)) {
    l.tail = q8_plan_tail(batch, heads, seqlen_q, seqlen_kv, sm_count());
    const uint64_t items = static_cast<uint64_t>(l.tail.tiles * l.tail.splits);
    if (items > 0) {
      l.ws_o = take(items * kQ8TailBlockM * head_dim * 4);
      l.ws_ml = take(items * kQ8TailBlockM * 2 * 4);
    }
  }
  l.total = at;
  return l;
}

// A 2-D map over rows of 8-bit elements (`inner` bytes, `rows` rows, contiguous), box (box_inner, box_rows).
bool q8_tensor_map_2d(CUtensorMap* map, const void* base, uint64_t inner, uint64_t rows, uint32_t box_inner,
                      uint32_t box_rows, CUtensorMapSwizzle swizzle, std::string* err) {
  auto encode = vidattn::sm90::tensor_map_encoder(err);
  if (encode == nullptr) return false;
  cuuint64_t dims[2] = {inner, rows};
  cuuint64_t gstrides[1] = {inner};
  cuuint32_t box[2] = {box_inner, box_rows};
  cuuint32_t estrides[2] = {1, 1};
  CUresult r = encode(map, CU_TENSOR_MAP_DATA_TYPE_UINT8, 2, const_cast<void*>(base), dims, gstrides, box, estrides,
                      CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
                      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS) {
    *err = "cuTensorMapEncodeTiled (8-bit workspace) failed with CUresult " + std::to_string(static_cast<int>(r));
    return false;
  }
  return true;
}

// The row-sum mode and the score conversion later launches at head dim kD ask for (forced, else the environment's,
// else the build default). q8_dispatch builds from them, and D=128's default schedule looks at them first.
template <int kD>
int q8_mode_asked() {
  static const int env = env_default("VIDATTN_Q8_SUM_MMA", kD == 64 ? VIDATTN_Q8_MODE_D64 : VIDATTN_Q8_MODE_D128,
                                     0, 5);
  return g_q8_sum_mma < 0 ? env : g_q8_sum_mma;
}
// The v10 mode later launches ask for (forced, else the environment's, else the build default).
inline int q8_v10_asked() {
  static const int env = env_default("VIDATTN_Q8_V10", VIDATTN_Q8_V10, 0, 2);
  return g_q8_v10 < 0 ? env : g_q8_v10;
}
// The v12 mode later launches ask for (as q8_v10_asked).
inline int q8_v12_asked() {
  static const int env = env_default("VIDATTN_Q8_V12", VIDATTN_Q8_V12, 0, 1);
  return g_q8_v12 < 0 ? env : g_q8_v12;
}
template <int kD>
int q8_cvt_asked() {
  static const int env = env_default("VIDATTN_Q8_CVT", kD == 64 ? VIDATTN_Q8_CVT_D64 : VIDATTN_Q8_CVT_D128, 0, 2);
  return g_q8_cvt < 0 ? env : g_q8_cvt;
}

// Every built variant takes its exponentials in fp32: q8_fwd.cuh's kExp16 (the lost modes 2 and 3) stays false, and
// kPoly (modes 4, 5) is 0 in every build (q8_dispatch launches none with it).
// kTurns (the sequential schedule's round-robin turns): 0 none (schedule 1), 1 around the S issues (schedule 2, no
// longer built), 2 around the exponentials (schedule 3, D=128).
template <int kD, int kWGs, bool kSumMma, bool kFp16, bool kSeq, int kTurns = 0, int kCvt = 0, int kPoly = 0,
          int kLazy = 0, int kDescInc = 0, int kV12 = 0>
int q8_launch(const VidattnFwdArgs& a, const Q8Layout& l, cudaStream_t stream) {
  using namespace vidattn::sm90;
  using T = Q8Traits<kD, kWGs>;
  uint8_t* ws = static_cast<uint8_t*>(a.workspace);
  Q8PrepParams pp{};
  pp.q = a.q;
  pp.k = a.k;
  pp.v = a.v;
  for (int i = 0; i < 3; ++i) {
    pp.q_stride[i] = a.q_stride[i];
    pp.k_stride[i] = a.k_stride[i];
    pp.v_stride[i] = a.v_stride[i];
  }
  pp.kv_lens = a.kv_lens;
  pp.batch = static_cast<int>(a.batch);
  pp.heads = static_cast<int>(a.heads);
  pp.kv_heads = static_cast<int>(vidattn::grouped_kv_heads(a.heads, a.kv_heads));  // (never 0: vidattn_q8_fwd)
  pp.kv_group = pp.heads / pp.kv_heads;
  pp.seqlen_q = static_cast<int>(a.seqlen_q);
  pp.seqlen_kv = static_cast<int>(a.seqlen_kv);
  pp.sq_pad = static_cast<int>(l.sq_pad);
  pp.skv_pad = static_cast<int>(l.skv_pad);
  pp.scale = a.scale;
  pp.want_lse = a.lse != nullptr;
  pp.ws.q8 = reinterpret_cast<int8_t*>(ws + l.q8);
  pp.ws.q_scale = reinterpret_cast<float*>(ws + l.q_scale);
  pp.ws.k8 = reinterpret_cast<int8_t*>(ws + l.k8);
  pp.ws.k_scale = reinterpret_cast<float*>(ws + l.k_scale);
  pp.ws.vt8 = ws + l.vt8;
  pp.ws.v_scale = reinterpret_cast<float*>(ws + l.v_scale);
  pp.ws.k_sum = reinterpret_cast<float*>(ws + l.k_sum);
  pp.ws.v_amax = reinterpret_cast<uint32_t*>(ws + l.v_amax);
  pp.ws.lse_corr = reinterpret_cast<float*>(ws + l.lse_corr);

  Q8FwdParams p{};
  std::string err;
  const uint64_t bh = static_cast<uint64_t>(a.batch * a.heads);
  const uint64_t bhkv = static_cast<uint64_t>(a.batch) * static_cast<uint64_t>(pp.kv_heads);
  const CUtensorMapSwizzle qk_swizzle = kD == 128 ? CU_TENSOR_MAP_SWIZZLE_128B : CU_TENSOR_MAP_SWIZZLE_64B;
  const bool ok =
      q8_tensor_map_2d(&p.tm_q, pp.ws.q8, kD, bh * l.sq_pad, kD, T::kBlockM, qk_swizzle, &err) &&
      q8_tensor_map_2d(&p.tm_k, pp.ws.k8, kD, bhkv * l.skv_pad, kD, T::kBlockN, qk_swizzle, &err) &&
      q8_tensor_map_2d(&p.tm_v, pp.ws.vt8, l.skv_pad, bhkv * kD, T::kBlockN, kD, CU_TENSOR_MAP_SWIZZLE_128B, &err) &&
      make_tensor_map_4d(&p.tm_o, a.o, kFp16, kD, a.seqlen_q, a.heads, a.batch, a.o_stride, 16, &err);
  if (!ok) return fail(err);
  p.q_scale = pp.ws.q_scale;
  p.k_scale = pp.ws.k_scale;
  p.v_scale = pp.ws.v_scale;
  p.lse_corr = pp.ws.lse_corr;
  p.lse = a.lse;
  p.kv_lens = a.kv_lens;
  p.seqlen_q = pp.seqlen_q;
  p.seqlen_kv = pp.seqlen_kv;
  p.heads = pp.heads;
  p.kv_heads = pp.kv_heads;
  p.kv_group = pp.kv_group;
  p.sq_pad = pp.sq_pad;
  p.skv_pad = pp.skv_pad;
  static const int env_prep = env_default("VIDATTN_Q8_PREP", VIDATTN_Q8_PREP, 0, 2);
  const int prep = g_q8_prep < 0 ? env_prep : g_q8_prep;
  if (prep == 2) {  // Q quantized in the kernel (q8_quantize_q_tile): no Q pass
    p.q_in = a.q;
    for (int i = 0; i < 3; ++i) p.q_in_stride[i] = a.q_stride[i];
    p.q_scale_out = pp.ws.q_scale;
    p.lse_corr_out = a.lse != nullptr ? pp.ws.lse_corr : nullptr;
    p.k_sum = pp.ws.k_sum;
    p.scale = a.scale;
  }

  cudaError_t e = cudaMemsetAsync(pp.ws.k_sum, 0, l.stats_bytes, stream);
  if (e != cudaSuccess) return fail(std::string("8-bit workspace memset: ") + cudaGetErrorString(e));
  const unsigned ubhkv = static_cast<unsigned>(bhkv);  // the K/V passes' grids: one row per key/value head
  const int64_t stat_key_blocks = (a.seqlen_kv + kQ8StatKeys - 1) / kQ8StatKeys;
  const int64_t q_rows = static_cast<int64_t>(bh) * l.sq_pad;
  constexpr int kRowsPerBlock = q8_q_rows_per_block<kD>();
  const int64_t q_blocks = (q_rows + kRowsPerBlock - 1) / kRowsPerBlock;
  // The fused launch needs Q's rows free of the statistics (no LSE) and one grid dimension for both halves.
  const bool fused = prep == 1 && !pp.want_lse &&
                     stat_key_blocks * static_cast<int64_t>(bhkv) + q_blocks <= 0x7fffffff;
  g_q8_last_prep = prep == 2 ? 2 : (fused ? 1 : 0);
  if (prep == 2) {
    q8_kv_stats_kernel<kD, kFp16>
        <<<dim3(static_cast<unsigned>(stat_key_blocks), ubhkv), kQ8StatThreads, 0, stream>>>(pp);
    if (check_launch("8-bit K/V statistics launch") != 0) return 1;
  } else if (fused) {
    const int64_t stat_blocks = stat_key_blocks * static_cast<int64_t>(bhkv);
    q8_stats_q_kernel<kD, kFp16><<<dim3(static_cast<unsigned>(stat_blocks + q_blocks)), kQ8QThreads, 0, stream>>>(
        pp, static_cast<int>(stat_key_blocks), static_cast<int>(stat_blocks));
    if (check_launch("8-bit K/V statistics and Q quantization launch") != 0) return 1;
  } else {
    q8_kv_stats_kernel<kD, kFp16>
        <<<dim3(static_cast<unsigned>(stat_key_blocks), ubhkv), kQ8StatThreads, 0, stream>>>(pp);
    if (check_launch("8-bit K/V statistics launch") != 0) return 1;
    q8_q_kernel<kD, kFp16><<<dim3(static_cast<unsigned>(q_blocks)), kQ8QThreads, 0, stream>>>(pp);
    if (check_launch("8-bit Q quantization launch") != 0) return 1;
  }
  static const int env_kv_pass = env_default("VIDATTN_Q8_KV_PASS", VIDATTN_Q8_KV_PASS, 0, 1);
  const int kv_pass = kD == 128 ? (g_q8_kv_pass < 0 ? env_kv_pass : g_q8_kv_pass) : 0;
  g_q8_last_kv_pass = kv_pass;
  if (kv_pass == 1) {
    if constexpr (kD == 128)
      q8_kv2_kernel<kFp16>
          <<<dim3(static_cast<unsigned>(l.skv_pad / kQ8BlockN), ubhkv), kQ8Kv2Threads, 0, stream>>>(pp);
  } else {
    q8_kv_kernel<kD, kFp16>
        <<<dim3(static_cast<unsigned>(l.skv_pad / kQ8BlockN), ubhkv), kQ8KvThreads, 0, stream>>>(pp);
  }
  if (check_launch("8-bit K/V quantization launch") != 0) return 1;

  const size_t smem = sizeof(Q8Shared<kD, kWGs>) + 1024;
  auto kernel = q8_fwd_kernel<kD, kWGs, kSumMma, false, kFp16, kSeq, kPoly, kTurns == 1, kCvt, kTurns == 2, kLazy,
                              kDescInc, kV12>;
  if (allow_smem(kernel, smem) != 0) return 1;
  g_q8_last_wgs = kWGs;
  g_q8_last_sum_mma = kPoly == 2 ? 4 : (kSumMma ? 1 : 0);
  g_q8_last_seq = kSeq ? 1 + kTurns : 0;
  g_q8_last_cvt = kCvt;
  g_q8_last_v10 = kDescInc == 0 ? 0 : (kLazy > 0 ? 2 : 1);
  g_q8_last_v12 = kV12;
  g_q8_last_tail_splits = 0;
  // The builds with a split twin (the tail launch): the defaults at each head dim.
  constexpr bool kTailBuilt =
      kSeq && kWGs == 3 && kLazy == 0 && kPoly == 0 &&
      ((kD == 128 && kTurns == 2 && kCvt == 2 && kDescInc == 2 && kV12 == 1 && !kSumMma) ||
       (kD == 64 && kTurns == 0 && kCvt == 1 && kDescInc == 0 && kV12 == 0 && kSumMma));
  static_assert(!kTailBuilt || T::kBlockM == kQ8TailBlockM, "the tail plan's tiles");
  const int64_t m_blocks = (a.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  if (!kTailBuilt || l.tail.tiles == 0 || (a.kv_lens != nullptr && q8_tail_asked() < 2) || prep == 2) {
    kernel<<<dim3(static_cast<unsigned>(m_blocks), static_cast<unsigned>(a.heads), static_cast<unsigned>(a.batch)),
             T::kThreads, smem, stream>>>(p);
    return check_launch("8-bit attention launch");
  }
  if constexpr (kTailBuilt) {
    const int64_t tiles = m_blocks * a.heads * a.batch;
    const int64_t main_tiles = tiles - l.tail.tiles;
    p.num_m_blocks = static_cast<int>(m_blocks);
    p.tile_base = 0;
    p.kv_splits = 1;
    if (main_tiles > 0) {
      kernel<<<dim3(static_cast<unsigned>(main_tiles)), T::kThreads, smem, stream>>>(p);
      if (check_launch("8-bit attention launch") != 0) return 1;
    }
    auto split_kernel = q8_fwd_kernel<kD, kWGs, kSumMma, false, kFp16, kSeq, kPoly, kTurns == 1, kCvt, kTurns == 2,
                                      kLazy, kDescInc, kV12, true>;
    if (allow_smem(split_kernel, smem) != 0) return 1;
    const int64_t items = l.tail.tiles * l.tail.splits;
    p.tile_base = static_cast<int>(main_tiles);
    p.kv_splits = l.tail.splits;
    p.ws_o = reinterpret_cast<float*>(ws + l.ws_o);
    p.ws_ml = reinterpret_cast<float*>(ws + l.ws_ml);
    split_kernel<<<dim3(static_cast<unsigned>(items)), T::kThreads, smem, stream>>>(p);
    if (check_launch("8-bit tail launch") != 0) return 1;
    g_q8_last_tail_splits = l.tail.splits;
    return launch_combine<kD, kFp16>(a, p.ws_o, p.ws_ml, p.seqlen_q, p.heads, p.num_m_blocks, p.tile_base, T::kBlockM,
                                     l.tail.splits, l.tail.tiles, kD, stream, "8-bit tail merge launch");
  }
  return 0;
}

// The instantiation for (head dim, consumer warpgroups, schedule): the row-sum mode and the dtype chosen at run time;
// the builds that lost their A/B are refused with a clear error (see the list above).
template <int kD, int kWGs, bool kSeq, int kTurns = 0>
int q8_dispatch(const VidattnFwdArgs& a, const Q8Layout& l, cudaStream_t s) {
  const bool fp16 = a.dtype == 1;
  const int mode = q8_mode_asked<kD>();
  // The score conversion: 1 and 2 built on the sequential schedule only (D=64: with mode 1; the three-warpgroup
  // ping-pong spilled 120-350 bytes with them, against 68 with I2F).
  // Each head dim keeps the conversion that won its A/B (bench/results/h200_2026-12-02_pm/call_g/q8/): 2 at D=128,
  // 1 at D=64 (mode 1), both on the sequential schedule; the other (and mode 4 with conversion 1) is no longer built.
  // (On the sequential schedule without turns; schedule 3 is built with D=128's default conversion and row-sum
  // mode only, below.)
  constexpr bool kCvtBuilt = kSeq && !kTurns;
  constexpr int kCvtWon = kD == 128 ? 2 : 1;
  int cvt = q8_cvt_asked<kD>();
  if constexpr (kTurns != 0) {
    // Schedule 2 (kTurns 1) and schedule 3 at D=64 lost their A/Bs (call Q) and are no longer instantiated.
    static_assert(kSeq && kD == 128 && kTurns == 2, "turns: schedule 3 at head dim 128 only");
    if (cvt != kCvtWon || mode != 0)
      return fail("8-bit path: schedule 3 is built with score conversion 2 and row-sum mode 0 only at head dim 128 "
                  "(asked: conversion " + std::to_string(cvt) + ", mode " + std::to_string(mode) + ")");
    const int v10 = q8_v10_asked();
    if (v10 != 1 && g_q8_v12 > 0)
      return fail("8-bit path: v12 (set_v12) is built on v10 mode 1 of schedule 3 only (asked: v10 mode " +
                  std::to_string(v10) + ")");
    switch (v10) {
      case 1:
        if (q8_v12_asked() == 1)
          return fp16 ? q8_launch<kD, 3, false, true, kSeq, kTurns, 2, 0, 0, 2, 1>(a, l, s)
                      : q8_launch<kD, 3, false, false, kSeq, kTurns, 2, 0, 0, 2, 1>(a, l, s);
        return fp16 ? q8_launch<kD, 3, false, true, kSeq, kTurns, 2, 0, 0, 2>(a, l, s)
                    : q8_launch<kD, 3, false, false, kSeq, kTurns, 2, 0, 0, 2>(a, l, s);
      case 2: return fail("8-bit path: v10 mode 2 (the lazy reference max) is no longer built: it lost its A/B on "
                          "every pass (dev/NOTES_8bit.md \"v10\"); modes 0 and 1 are");
      default: return fp16 ? q8_launch<kD, 3, false, true, kSeq, kTurns, 2>(a, l, s)
                           : q8_launch<kD, 3, false, false, kSeq, kTurns, 2>(a, l, s);
    }
  }
  if (g_q8_v10 > 0)
    return fail("8-bit path: v10 (set_v10: descriptor increments, lazy reference max) is built for head dim 128 on "
                "schedule 3 with score conversion 2 and row-sum mode 0 only");
  if (g_q8_v12 > 0)
    return fail("8-bit path: v12 (set_v12) is built for head dim 128 on schedule 3 (v10 mode 1) only");
  // (Below: schedule 1 and the ping-pong; for the turn schedules it is never reached and instantiates nothing new.)
  if (cvt != 0 && !(kCvtBuilt && cvt == kCvtWon && (kD == 128 || mode == 1))) {
    if (g_q8_cvt > 0)
      return fail("8-bit path: score conversion " + std::to_string(cvt) + " is not built here: conversion " +
                  std::to_string(kCvtWon) + " is built on the sequential schedule (1) only" +
                  (kD == 64 ? ", with row-sum mode 1" : "") + " at head dim " + std::to_string(kD) +
                  " (the other lost its A/B)");
    cvt = 0;  // (the default, or VIDATTN_Q8_CVT, leaves the variants without the conversion on I2F)
  }
  if (mode >= 2)
    return fail("8-bit path: row-sum mode " + std::to_string(mode) +
                " is no longer built (it measured slower than the default on every shape); modes 0 and 1 are");
  if constexpr (kD == 128) {
    if (mode == 1)
      return fail("8-bit path: head dim 128 takes row-sum mode 0 only (mode 1's ones columns do not fit the "
                  "sequential schedule's registers; the ping-pong build that took it is no longer built)");
    if constexpr (kCvtBuilt) {
      if (cvt == 2)
        return fp16 ? q8_launch<kD, 3, false, true, kSeq, kTurns, 2>(a, l, s)
                    : q8_launch<kD, 3, false, false, kSeq, kTurns, 2>(a, l, s);
    }
    return fp16 ? q8_launch<kD, 3, false, true, kSeq>(a, l, s)
                : q8_launch<kD, 3, false, false, kSeq>(a, l, s);
  } else {
    if constexpr (kCvtBuilt) {
      if (mode == 1 && cvt == 1)
        return fp16 ? q8_launch<kD, kWGs, true, true, kSeq, false, 1>(a, l, s)
                    : q8_launch<kD, kWGs, true, false, kSeq, false, 1>(a, l, s);
    }
    if (mode == 1) {
      return fp16 ? q8_launch<kD, kWGs, true, true, kSeq>(a, l, s)
                  : q8_launch<kD, kWGs, true, false, kSeq>(a, l, s);
    } else if constexpr (kWGs == 2) {
      return fail("8-bit path: two consumer warpgroups at head dim 64 take row-sum mode 1 only (mode 0 there is no "
                  "longer built)");
    } else {
      return fp16 ? q8_launch<kD, kWGs, false, true, kSeq>(a, l, s)
                  : q8_launch<kD, kWGs, false, false, kSeq>(a, l, s);
    }
  }
}

}  // namespace

// Bytes of workspace vidattn_q8_fwd needs for this problem (any contents; one launch at a time per workspace), with
// kv_heads key/value heads (grouped-query attention; 0 for as many as heads). 0 for a problem it cannot take.
extern "C" uint64_t vidattn_q8_workspace_bytes_kv(int64_t batch, int64_t heads, int64_t kv_heads, int64_t seqlen_q,
                                                    int64_t seqlen_kv, int64_t head_dim) {
  kv_heads = vidattn::grouped_kv_heads(heads, kv_heads);
  if (batch < 1 || heads < 1 || kv_heads < 1 || seqlen_q < 1 || seqlen_kv < 1 || head_dim < 1) return 0;
  return q8_layout(batch, heads, kv_heads, seqlen_q, seqlen_kv, head_dim).total;
}

// As vidattn_q8_workspace_bytes_kv with as many key/value heads as heads (the entry point before grouped-query
// attention; kept for callers built against it).
extern "C" uint64_t vidattn_q8_workspace_bytes(int64_t batch, int64_t heads, int64_t seqlen_q, int64_t seqlen_kv,
                                                 int64_t head_dim) {
  return vidattn_q8_workspace_bytes_kv(batch, heads, heads, seqlen_q, seqlen_kv, head_dim);
}

// The 8-bit forward: the same argument block as vidattn_sm90_fwd; `workspace` must hold
// vidattn_q8_workspace_bytes(...) bytes, 256-byte aligned. Returns 0, or 1 with vidattn_sm90_last_error() set.
extern "C" int vidattn_q8_fwd(const VidattnFwdArgs* a, void* stream) {
  if (a == nullptr) return fail("null argument block");
  if (!a->q || !a->k || !a->v || !a->o) return fail("null q/k/v/o pointer");
  if (a->batch < 1 || a->heads < 1 || a->seqlen_q < 1 || a->seqlen_kv < 1)
    return fail("batch, heads and sequence lengths must be >= 1");
  if (a->seqlen_q > (1ll << 30) || a->seqlen_kv > (1ll << 30)) return fail("sequence length over 2^30");
  if (a->batch * a->heads > 65535) return fail("batch * heads over 65535 (the 8-bit path's grid)");
  if (a->batch > 65535 || a->heads > 65535) return fail("batch or heads over 65535");
  // (A caller that predates the field passes 0: as many key/value heads as heads.)
  const int64_t kv_heads = vidattn::grouped_kv_heads(a->heads, a->kv_heads);
  if (kv_heads == 0) return fail(vidattn::kGroupedKvError);
  // (The struct's last field; callers that predate it pass 0.) The 8-bit kernel has no mask: a causal call must not
  // silently attend to every key. vidattn.attention sends causal calls at precision="8bit" to the exact kernel.
  if (a->causal != 0)
    return fail("8-bit path: causal masks are not supported (causal = " + std::to_string(a->causal) +
                "); the exact kernel (vidattn_sm90_fwd) takes them");
  if (!(a->scale > 0.f)) return fail("softmax scale must be positive");
  if (a->dtype != 0 && a->dtype != 1) return fail("dtype must be 0 (bf16) or 1 (fp16)");
  const int64_t o_extent[3] = {a->batch, a->seqlen_q, a->heads};
  bool aligned = reinterpret_cast<uintptr_t>(a->o) % 16 == 0;
  for (int i = 0; i < 3; ++i) aligned = aligned && (o_extent[i] == 1 || a->o_stride[i] % 8 == 0);
  if (!aligned) return fail("output must be 16-byte aligned with strides that are multiples of 8 elements");
  Q8Layout l = q8_layout(a->batch, a->heads, kv_heads, a->seqlen_q, a->seqlen_kv, a->head_dim);
  // A workspace sized before the tail setting changed (or by a caller that ignores it): the plain launch.
  if (a->workspace_bytes < l.total)
    l = q8_layout(a->batch, a->heads, kv_heads, a->seqlen_q, a->seqlen_kv, a->head_dim, false);
  if (a->workspace == nullptr || a->workspace_bytes < l.total || reinterpret_cast<uintptr_t>(a->workspace) % 256)
    return fail("8-bit workspace missing, too small (need " + std::to_string(l.total) +
                " bytes) or not 256-byte aligned");
  if (!make_context_current()) return 1;  // capi.cu: the tensor maps below are encoded through the driver API
  auto s = static_cast<cudaStream_t>(stream);
  g_q8_last_wgs = 0;
  g_q8_last_sum_mma = -1;
  g_q8_last_seq = -1;
  g_q8_last_cvt = -1;
  g_q8_last_prep = -1;
  g_q8_last_kv_pass = -1;
  g_q8_last_v10 = -1;
  g_q8_last_v12 = -1;
  g_q8_last_tail_splits = -1;
  switch (a->head_dim) {
    case 64: {
      // (VIDATTN_Q8_SEQ=3, for a D=128 A/B, leaves D=64 on its default; a forced schedule 3 or 2 is refused.)
      static const int env_seq = [] {
        const int e = env_default("VIDATTN_Q8_SEQ", VIDATTN_Q8_SEQ_D64, 0, 3);
        return e >= 2 ? VIDATTN_Q8_SEQ_D64 : e;
      }();
      // Forced warpgroups name a ping-pong build (the sequential schedule has three), so with the schedule left to
      // the default they select the ping-pong (the sanitizer cases' two- and three-warpgroup builds).
      const int seq = g_q8_seq >= 0 ? g_q8_seq : (g_q8_d64_wgs != 0 ? 0 : env_seq);
      if (seq == 2)
        return fail("8-bit path: the sequential schedule with turns around S (2) is no longer built (at head dim 64 "
                    "it measured slower than both other schedules, at 128 slower than schedule 3)");
      if (seq == 3)
        return fail("8-bit path: the sequential schedule with turns around the exponentials (3) is built at head dim "
                    "128 only (at 64 it measured 0.95x schedule 1)");
      if (seq == 1) return q8_dispatch<64, 3, true>(*a, l, s);
      static const int env_wgs = env_default("VIDATTN_Q8_D64_WGS", VIDATTN_Q8_D64_WGS, 2, 3);
      if ((g_q8_d64_wgs == 0 ? env_wgs : g_q8_d64_wgs) == 3) return q8_dispatch<64, 3, false>(*a, l, s);
      return q8_dispatch<64, 2, false>(*a, l, s);
    }
    case 128: {
      static const int env_seq = env_default("VIDATTN_Q8_SEQ", -1, 0, 3);  // -1: not set
      int seq = g_q8_seq < 0 ? env_seq : g_q8_seq;
      // Schedule 3, the default, is built with conversion 2 and row-sum mode 0 only: with the schedule left to the
      // default, a forced other conversion or mode (the I2F reference, the refusals) names a schedule-1 build, as
      // forced warpgroups name the D=64 ping-pong. vidattn_q8_last_sequential reports which ran.
      if (seq < 0) seq = q8_cvt_asked<128>() == 2 && q8_mode_asked<128>() == 0 ? VIDATTN_Q8_SEQ_D128 : 1;
      if (seq == 3) return q8_dispatch<128, 3, true, 2>(*a, l, s);
      if (seq == 1) return q8_dispatch<128, 3, true>(*a, l, s);
      if (seq == 2)
        return fail("8-bit path: the sequential schedule with turns around S (2) is no longer built (at head dim 128 "
                    "it measured slower than schedule 3, the default); schedules 1 and 3 are");
      return fail("8-bit path: the ping-pong schedule (0) at head dim 128 is no longer built (the sequential schedule "
                  "measured 7% faster); schedules 1 and 3 are");
    }
    default: return fail("8-bit path: head dim must be 64 or 128");
  }
}

// Head dim 64 only: force the consumer warpgroups of later ping-pong 8-bit launches (2 or 3), or 0 for the default.
// Unless vidattn_q8_set_sequential forces a schedule, a forced count also selects the ping-pong schedule (the default
// is sequential). For tests and A/B timing; returns 0, or 1 for any other value (nothing changes).
extern "C" int vidattn_q8_set_d64_warpgroups(int warpgroups) {
  if (warpgroups != 0 && warpgroups != 2 && warpgroups != 3) return 1;
  g_q8_d64_wgs = warpgroups;
  return 0;
}

// Consumer warpgroups of this thread's last vidattn_q8_fwd launch (0: it launched none).
extern "C" int vidattn_q8_last_warpgroups(void) { return g_q8_last_wgs; }

// Row sums of later 8-bit launches in the softmax (0), by the tensor cores (1, head dim 64 only), or the default
// (-1). Modes 2-5 (f16 exponentials, polynomial exponentials) are accepted here and refused by the launch: they are no
// longer built. For tests and A/B timing; returns 0, or 1 for any other value.
extern "C" int vidattn_q8_set_sum_mma(int mode) {
  if (mode < -1 || mode > 5) return 1;
  g_q8_sum_mma = mode;
  return 0;
}

// The variant of this thread's last vidattn_q8_fwd launch (as vidattn_q8_set_sum_mma's modes; -1: none launched).
extern "C" int vidattn_q8_last_sum_mma(void) { return g_q8_last_sum_mma; }

// The schedule of later 8-bit launches: ping-pong (0, head dim 64 only), sequential with three consumer warpgroups
// (1; D=64's default), that with the S issues in round-robin turns (2: no longer built, a launch is refused), with
// the exponentials in round-robin turns (3, head dim 128 only: its default, built with conversion 2 and row-sum mode
// 0 only), or the default (-1). For tests and A/B timing; returns 0, or 1 for any other value.
extern "C" int vidattn_q8_set_sequential(int seq) {
  if (seq < -1 || seq > 3) return 1;
  g_q8_seq = seq;
  return 0;
}

// The schedule of this thread's last vidattn_q8_fwd launch (as vidattn_q8_set_sequential's; -1: none launched).
extern "C" int vidattn_q8_last_sequential(void) { return g_q8_last_seq; }

// The score conversion of later 8-bit launches (q8_fwd.cuh's kCvt): one I2F per score (0), the row max on the
// integers and the scores by an integer add of 1.5 * 2^23's bits (1), that bias added by the tensor cores (2), or the
// default (-1). Built on the sequential schedule only, 2 at D=128 and 1 at D=64 (mode 1), the defaults there; a
// launch of another is refused. For tests and A/B timing; returns 0, or 1 for any other value.
extern "C" int vidattn_q8_set_cvt(int cvt) {
  if (cvt < -1 || cvt > 2) return 1;
  g_q8_cvt = cvt;
  return 0;
}

// The score conversion of this thread's last vidattn_q8_fwd launch (as vidattn_q8_set_cvt's; -1: none launched).
extern "C" int vidattn_q8_last_cvt(void) { return g_q8_last_cvt; }

// The pre-pass of later 8-bit launches: the K/V statistics and Q's quantization in one launch (1; calls with LSE run
// 0 regardless), three launches (0), no Q pass, Q quantized inside the attention kernel (2; with LSE too), or the
// default (-1). For tests and A/B timing; returns 0, or 1 for any other value.
extern "C" int vidattn_q8_set_prep(int prep) {
  if (prep < -1 || prep > 2) return 1;
  g_q8_prep = prep;
  return 0;
}

// The pre-pass of this thread's last vidattn_q8_fwd launch (as vidattn_q8_set_prep's; -1: none launched).
extern "C" int vidattn_q8_last_prep(void) { return g_q8_last_prep; }

// The K/V pass of later 8-bit launches: 0 a thread per key (q8_kv_kernel), 1 whole rows at D=128 (q8_kv2_kernel; D=64
// runs 0), or the default (-1). For tests and A/B timing; returns 0, or 1 for any other value.
extern "C" int vidattn_q8_set_kv_pass(int mode) {
  if (mode < -1 || mode > 1) return 1;
  g_q8_kv_pass = mode;
  return 0;
}

// The K/V pass of this thread's last vidattn_q8_fwd launch (as vidattn_q8_set_kv_pass's; -1: none launched).
extern "C" int vidattn_q8_last_kv_pass(void) { return g_q8_last_kv_pass; }

// The v10 mode of later 8-bit launches: 0 off, 1 the wgmma descriptors by increments, 2 that with the lazy reference
// max (built for head dim 128 on schedule 3, conversion 2, row-sum mode 0 only; a forced mode elsewhere is refused),
// or the default (-1). For tests and A/B timing; returns 0, or 1 for any other value (nothing changes).
extern "C" int vidattn_q8_set_v10(int mode) {
  if (mode < -1 || mode > 2) return 1;
  g_q8_v10 = mode;
  return 0;
}

// The v10 mode of this thread's last vidattn_q8_fwd launch (as vidattn_q8_set_v10's; -1: none launched).
extern "C" int vidattn_q8_last_v10(void) { return g_q8_last_v10; }

// The v12 mode of later 8-bit launches: 0 off, 1 fewer instructions per key block (built on v10 mode 1 of schedule
// 3 only; a forced mode 1 elsewhere is refused), or the default (-1). For tests and A/B timing; returns 0, or 1 for
// any other value (nothing changes).
extern "C" int vidattn_q8_set_v12(int mode) {
  if (mode < -1 || mode > 1) return 1;
  g_q8_v12 = mode;
  return 0;
}

// The v12 mode of this thread's last vidattn_q8_fwd launch (as vidattn_q8_set_v12's; -1: none launched).
extern "C" int vidattn_q8_last_v12(void) { return g_q8_last_v12; }

// The tail launch of later 8-bit launches (q8_plan_tail): 1 planned where it pays (calls without kv_lens), 2 the same
// with kv_lens too, 0 never, or the default (-1). For tests and A/B timing; returns 0, or 1 for any other value
// (nothing changes). The workspace size (vidattn_q8_workspace_bytes) follows the setting: a workspace sized before a
// change runs the plain launch.
extern "C" int vidattn_q8_set_tail(int mode) {
  if (mode < -1 || mode > 2) return 1;
  g_q8_tail = mode;
  return 0;
}

// Key ranges per tail tile of this thread's last vidattn_q8_fwd launch (0: no tail launch; -1: none launched).
extern "C" int vidattn_q8_last_tail_splits(void) { return g_q8_last_tail_splits; }
