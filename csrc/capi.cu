// The C ABI: validates arguments, encodes TMA descriptors, picks the (head dim, dtype) instantiation and
// launches on the caller's stream. The only host code of the library; no torch.
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cfloat>
#include <cmath>
#include <string>

#include "capi.h"
#include "sm90/combine.cuh"
#include "sm90/flash_fwd.cuh"
#include "sm90/tma_desc.h"
#include "tail_plan.h"

namespace vidattn {
// The block-sparse launch, defined in capi_sparse.cu. A build of capi.cu alone (the developer scripts' single-file
// builds) links this weak stand-in instead, and lacks vidattn_sm90_sparse_layout too, so vidattn/sparse.py never sends
// it a block-sparse call.
__attribute__((weak)) int sparse_launch(const VidattnFwdArgs&, cudaStream_t, int, std::string* err) {
  *err = "this library was built without csrc/capi_sparse.cu (no block-sparse builds)";
  return 1;
}
}  // namespace vidattn

namespace {

thread_local std::string g_last_error;
thread_local int g_last_tail_splits = 0;  // key ranges per tail tile of this thread's last launch (0: no tail launch)
int g_d64_warpgroups = 0;  // 0: pick by shape (pick_d64_three_wgs); 2 or 3: forced (vidattn_sm90_set_d64_warpgroups)
// 0: pick by key count (pick_d128_block_n); 128 or 176: forced (vidattn_sm90_set_d128_block_n)
int g_d128_block_n = 0;
// 0 or 96: head dims 72..96 run on the D=96 build (the default); 128: on the D=128 build, padded
// (vidattn_sm90_set_d96_build: A/B timing)
int g_d96_build = 0;
// bf16 D=192 and 256: 0 picks wide or narrow by key count (pick_hd_narrow), 1 forces the narrow builds with the separate
// O scratch, 2 the wide ones whose O goes through Q's buffer (tile_config.cuh kOInQ), 3 the O-in-V builds (the wide
// widths, O through the V stages: kOInV; vidattn_sm90_set_hd_narrow: A/B timing). fp16 has the wide builds only.
// 4: head dims 200..256 on the D=256 O-in-V build's variant that stores O from registers (kORegs; an A/B build, off
// by default); bf16 head dims 136..192 are refused under 4 (no such D=192 build), fp16 runs wide as under 3.
// 5: head dims 200..256 on the D=256 O-in-V build's variant whose Q is released and loaded per consumer warpgroup
// (kQHalves; an A/B build, off by default); bf16 136..192 refused, fp16 wide, as under 4.
// 6: head dims 200..256 on the D=256 O-in-V build's variant that waits for its O stores' reads under the next tile's
// S_0 (kOReadLate; an A/B build, off by default); bf16 136..192 refused, fp16 wide, as under 4.
// 7: head dims 200..256 on the routed D=256 build (O-in-V, read-late) with a tile's last, partial key block narrowed
// whenever it is partial, by as little as one step (kNarrowAll; an A/B build, off by default); bf16 136..192 refused,
// fp16 wide, as under 4.
// 8: head dims 200..256 on the routed D=256 build run by CTA pairs that share each K/V block, each CTA loading half
// of it into both with TMA multicast (kPairs; an A/B build, off by default; launch_built says when a call falls back
// to the routed build); bf16 136..192 refused, fp16 wide, as under 4.
int g_hd_narrow = 0;
// Where the epilogue of this thread's last launch staged O: 0 a scratch of its own, 1 Q's buffer, 2 the V stages,
// 3 nowhere (stored from registers: kORegs), 4 the V stages with the stores' reads waited for under the next tile's
// S_0 (kOReadLate; also setting 7's build, kNarrowAll, which differs in its partial blocks only).
thread_local int g_last_o_path = 0;
// Head dims 72..96 (bf16, on the D=96 build): 0 picks the consumer warpgroup count by shape (pick_d96_three_wgs), 2 or
// 3 forces it (vidattn_sm90_set_d96_warpgroups: tests and A/B timing). fp16 has the two-warpgroup build only.
int g_d96_warpgroups = 0;
thread_local int g_last_block_n = 0;  // kBlockN of this thread's last launch (0: none)
// Rows of a Q box in this thread's last launch: the tile's (kBlockM), or a warpgroup's (64: kQHalves, Q loaded per
// warpgroup; 0: none).
thread_local int g_last_q_box_rows = 0;
// CTAs per cluster of this thread's last main launch: 1, 2 (CTA pairs sharing K/V: kPairs), 0 (none).
thread_local int g_last_cluster_ctas = 0;

int fail(const std::string& msg) {
  g_last_error = msg;
  return 1;
}

// The tail launch (VIDATTN_TAIL_LAUNCH): with static persistent scheduling a launch of `tiles` tiles lasts
// ceil(tiles / SMs) tile times, so the r = tiles mod SMs tiles of a last, partial round cost a whole tile time while
// most SMs idle (seed 8K: 4096 tiles = 31 rounds + 4 tiles, 3% of the launch). The main launch takes the full rounds;
// the r tiles then run as `splits` key ranges each (one item per SM at most, or two short rounds: below; each at least
// VIDATTN_TAIL_MIN_BLOCKS key blocks, so a range's pipeline fill and workspace write stay small against its keys),
// and combine_kernel merges the ranges. Tiles of fewer than VIDATTN_TAIL_MIN_TILE_BLOCKS key blocks keep the plain
// schedule: the two extra launches cost more than their last round (FA-bench 1K D64, 8 blocks: 1.014x -> 1.000x
// cuDNN split in two, run 2 of the fifth session).
// An in-kernel split of the last round (dev/experiments/tail_split.patch) measured slower: its work-item decoding
// taxed every tile; here the main launch's kernel is the plain one.
#ifndef VIDATTN_TAIL_LAUNCH
#define VIDATTN_TAIL_LAUNCH 1
#endif
#ifndef VIDATTN_TAIL_MIN_BLOCKS
#define VIDATTN_TAIL_MIN_BLOCKS 3
#endif
#ifndef VIDATTN_TAIL_MIN_TILE_BLOCKS
#define VIDATTN_TAIL_MIN_TILE_BLOCKS 12
#endif

// kv_lens calls (dev/NOTES.md "The tail launch with kv_lens"): each range takes its key blocks from its own batch's
// kv_len (flash_fwd.cuh, tile_work), so a short batch's range can hold none. Such an item loads Q, runs no block and
// stores (max -inf, sum 0, O 0), which combine_kernel weighs 0; kv_lens are >= 1 (attention.py), so every row has a
// range with keys. The plan reads the padded key length, an upper bound of each batch's work. 1 splits kv_lens calls
// as any other, 0 keeps them on the plain schedule; vidattn_sm90_set_tail_kv_lens or VIDATTN_TAIL_KV_LENS (read once)
// at run time. The 8-bit path's mode 2 measured +1.9-2.1% a call on padded HunyuanVideo 1.5 and Mochi (call P32).
#ifndef VIDATTN_TAIL_KV_LENS
#define VIDATTN_TAIL_KV_LENS 1
#endif
static_assert(VIDATTN_TAIL_KV_LENS == 0 || VIDATTN_TAIL_KV_LENS == 1, "VIDATTN_TAIL_KV_LENS: 0 or 1");
int g_tail_kv_lens = -1;  // -1: the build's default (or the environment's); 0, 1: forced

bool tail_kv_lens() {
  static const int env = vidattn::env_default("VIDATTN_TAIL_KV_LENS", VIDATTN_TAIL_KV_LENS, 0, 1);
  return (g_tail_kv_lens < 0 ? env : g_tail_kv_lens) != 0;
}

struct TailPlan {
  int64_t tiles = 0;  // tiles of the last round run as key ranges (0: no tail launch)
  int splits = 1;     // ranges a tile; under a balanced plan the most pieces any tile has
  int64_t chunk = 0;  // the balanced plan's key blocks per CTA (0: the uniform split)
  int64_t blocks = 0; // key blocks a tile
  int64_t items = 0;  // the tail launch's work items (a partial each): tiles x splits, or two per SM balanced
  int64_t ctas = 0;   // its grid: a CTA per item, or one per SM balanced
};

// Workspace bytes per tail item: the largest tile of any build (kBlockM x (D + 2) fp32: O and the row statistics),
// D=256's.
constexpr uint64_t kTailItemBytes = 128 * (256 + 2) * sizeof(float);
static_assert(vidattn::sm90::FwdTraits<64, 3>::kBlockM * (64 + 2) * sizeof(float) <= kTailItemBytes, "item bytes");
static_assert(vidattn::sm90::FwdTraits<256>::kBlockM * (256 + 2) * sizeof(float) <= kTailItemBytes, "item bytes");

// Two short rounds (dev/NOTES.md "The tail launch in two rounds"): where the last round holds more than half the SMs'
// tiles (r > SMs / 2), one range a tile per SM leaves nothing to split. Ranges that run in ceil(r s / SMs) rounds
// still save when s is large enough: D=256 at 32K (B1 H8: 15 rounds + 68 tiles of 512 blocks) runs s = 3 as two rounds
// of 171 blocks, 2/3 of a tile. The plan prices s with the cost model the 8-bit plan uses (tail_plan.h,
// cheapest_tail_split): the cheapest s (at most 32, each range at least VIDATTN_TAIL_MIN_BLOCKS blocks, at most 2 x
// SMs ranges: the workspace) when that saves a tenth of the tile. 2 plans so, 1 keeps the one-round plan only (the
// default: call P36 measured D=256 32K +0.6% a call, 10 of 12 rounds, Mochi's exact call level, under its rule's bar;
// dev/NOTES.md); vidattn_sm90_set_tail_rounds or VIDATTN_TAIL_ROUNDS (read once) at run time. The workspace follows
// the setting (vidattn_sm90_workspace_bytes: two items per SM under 2).
// 3 plans the balanced tail there instead (dev/NOTES.md "A balanced tail at D=256"; tail_plan.h balanced_tail_chunk):
// the last round's blocks laid end to end in one equal chunk per CTA, each CTA running at most two pieces (the end of
// one tile, the start of the next) in one round; the workspace as under 2 (items k x SMs + g, k = 0, 1).
#ifndef VIDATTN_TAIL_ROUNDS
#define VIDATTN_TAIL_ROUNDS 1
#endif
static_assert(VIDATTN_TAIL_ROUNDS >= 1 && VIDATTN_TAIL_ROUNDS <= 3, "VIDATTN_TAIL_ROUNDS: 1, 2 or 3");
constexpr int kTailMaxSplits = 32;
constexpr int kTailMaxItemsPerSm = 2;
int g_tail_rounds = -1;  // -1: the build's default (or the environment's); 1, 2, 3: forced

int tail_rounds() {
  static const int env = vidattn::env_default("VIDATTN_TAIL_ROUNDS", VIDATTN_TAIL_ROUNDS, 1, 3);
  return g_tail_rounds < 0 ? env : g_tail_rounds;
}

// grid: the main launch's CTAs, whose last, partial round the tail takes (the SM count, or the CTA-pair build's
// smaller even grid); the tail launch itself spreads over all `sms`.
template <int kHeadDim, int kWGs, int kBN>
TailPlan plan_tail(const VidattnFwdArgs& a, int64_t tiles, int sms, int grid) {
  using T = vidattn::sm90::FwdTraits<kHeadDim, kWGs, kBN>;
  TailPlan plan;
  if (!VIDATTN_TAIL_LAUNCH || (a.kv_lens != nullptr && !tail_kv_lens()) || a.workspace == nullptr) return plan;
  const int64_t r = tiles % grid;
  if (r == 0) return plan;
  const int64_t blocks = (a.seqlen_kv + T::kBlockN - 1) / T::kBlockN;
  if (blocks < VIDATTN_TAIL_MIN_TILE_BLOCKS) return plan;
  int64_t splits = sms / r;
  if (splits > blocks / VIDATTN_TAIL_MIN_BLOCKS) splits = blocks / VIDATTN_TAIL_MIN_BLOCKS;
  int64_t chunk = 0;
  if (splits < 2 && tail_rounds() == 3)
    chunk = vidattn::balanced_tail_chunk(r, blocks, sms, VIDATTN_TAIL_MIN_BLOCKS);
  if (splits < 2 && tail_rounds() == 2)
    splits = vidattn::cheapest_tail_split(r, blocks, sms, VIDATTN_TAIL_MIN_BLOCKS, kTailMaxSplits, kTailMaxItemsPerSm);
  const int64_t items = chunk > 0 ? kTailMaxItemsPerSm * sms : r * splits;
  if ((chunk == 0 && splits < 2) || static_cast<uint64_t>(items) * kTailItemBytes > a.workspace_bytes) return plan;
  if (chunk > 0) {
    splits = 0;
    for (int64_t t = 0; t < r; ++t) splits = std::max(splits, vidattn::balanced_tail_pieces(t, blocks, chunk));
  }
  plan.tiles = r;
  plan.splits = static_cast<int>(splits);
  plan.chunk = chunk;
  plan.blocks = blocks;
  plan.items = items;
  plan.ctas = chunk > 0 ? sms : items;
  return plan;
}

// The dynamic causal schedule (flash_fwd.cuh, next_causal_tile) keeps its counters and redo records in the
// workspace: two words, then 32 * kRedoWords tile indices per CTA. Without that much workspace a causal launch keeps
// the static order. The list is ordered in groups of (batch, head) pairs whose K/V together stay within
// kCausalGroupBytes (a third of the H200's 50 MB L2, so that the tiles running at once read a few heads' K/V from L2),
// heaviest Q block first across the group: dev/probes/causal_schedule_sim.py puts the busiest CTA within 0.7% of the
// mean at the bench and video shapes (head after head at 8K, 2 x 16 heads: 5.8%, the heavy tiles of the last head
// going out late).
#ifndef VIDATTN_CAUSAL_DYNAMIC
#define VIDATTN_CAUSAL_DYNAMIC 1
#endif
constexpr int64_t kCausalGroupBytes = 16ll << 20;
// Where the groups of the budget do not divide the (batch, head) pairs, where the short group goes: 0 last (the
// first dynamic schedule's order), 1 first, so that the launch ends on a full group. The simulator
// (dev/probes/causal_schedule_sim.py, short_first) puts the last group's remainder behind the dynamic schedule's
// 6K D=128 loss (2 x 16 heads, groups of 5: 1.097 of the mean last, 1.011 first; static 1.031). Measured on the H200
// (bench/results/h200_2026-12-02_eve/call_q/causal/grouping.json, 7 back-to-back rounds): first against last 1.088 at
// 2x16x6K D=128 and 1.148 at D=64, 0.99-1.00 where the groups divide the pairs (the same order), so first.
// vidattn_sm90_set_causal_grouping switches it at run time for the A/B (dev/probes/causal_sched_ab.py).
#ifndef VIDATTN_CAUSAL_GROUPING
#define VIDATTN_CAUSAL_GROUPING 1
#endif
int g_causal_grouping = VIDATTN_CAUSAL_GROUPING;
thread_local int g_last_causal_first_group = 0;  // this thread's last causal launch's causal_first_group
// Short causal problems keep the static order even with a workspace: there the simulator finds little imbalance for
// the dynamic schedule to remove, so only its costs (a ticket per tile, the counters' claim per CTA) show. One
// threshold per causal build (D=64, three warpgroups; D=128, N=128; head dims below 64 or 128 run padded on them; the
// D=192 and D=256 builds below take D=128's until measured): the crossover of the dynamic schedule with the short
// group first (the grouping above) against the static order, from dev/probes/causal_sched_ab.py --sweep grouping
// (bench/results/h200_2026-12-02_eve/call_q/causal/grouping.json:
// 7 back-to-back rounds on the H200, the median of the per-round ratios, the median over the batch x heads measured):
// D=64 0.928 at 1K, 1.060 at 2K, 1.090 at 4K, 1.015 at 6K, 1.279 at 8K, so dynamic from 2048 rows; D=128 0.947 at 1K,
// 0.882 at 2K, 1.229 at 4K (2x16 1.027, 1x12 1.229, 1x16 1.462), 1.036 at 6K, 1.524 at 8K, so from 4096. With the
// short group last, 6K lost (0.953 at D=128, 0.884 at D=64), which kept D=128 at 8192 before; the thresholds hold
// for grouping 1 only (the setters below move them without a rebuild). Timed without the host (CUDA graphs of 64
// calls, dev/probes/envelope_ab.py, bench/results/h200_2026-12-02_late/call_c/envelope/causal.json, 12-24 paired
// rounds), dynamic / static at D=128: 1K 0.978, 1.5K 0.990, 2K 1.013 (11/12), 3K 1.023, 4K 1.029 (12/12), so D=128
// from 2048 (the earlier 1K-2K losses were partly the host's: the static probe skipped a workspace allocation); D=64:
// 1K 0.975, 1.5K 0.996, 2K 1.059, 3K 1.009, 4K 1.087: 2048 stays.
#ifndef VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64
#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64 2048
#endif
#ifndef VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128
#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128 2048
#endif
// The D=192 and D=256 causal builds (the narrow widths, one Q buffer): D=128's threshold, not yet measured on them.
#ifndef VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D192
#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D192 2048
#endif
#ifndef VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D256
#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D256 2048
#endif
// [0]: the D=64 build, [1]: D=128, [2]: D=192, [3]: D=256 (vidattn_sm90_set_causal_dynamic_min_sq, ..._for)
constexpr int kCausalDynamicMinSqDefault[4] = {VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64, VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128,
                                               VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D192, VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D256};
int g_causal_dynamic_min_sq[4] = {kCausalDynamicMinSqDefault[0], kCausalDynamicMinSqDefault[1],
                                  kCausalDynamicMinSqDefault[2], kCausalDynamicMinSqDefault[3]};
thread_local int g_last_causal_dynamic = 0;  // 1: this thread's last launch took the dynamic schedule
// The threshold slot of the causal build that runs head_dim (-1: no causal build runs it).
int causal_build_slot(int64_t head_dim) {
  return head_dim < 1 || head_dim > 256 ? -1 : head_dim <= 64 ? 0 : head_dim <= 128 ? 1 : head_dim <= 192 ? 2 : 3;
}
// Whether a causal call of seqlen_q query rows on the kHeadDim build takes the dynamic schedule, given a large
// enough workspace.
bool causal_dynamic_for(int build_head_dim, int64_t seqlen_q) {
  return seqlen_q >= g_causal_dynamic_min_sq[causal_build_slot(build_head_dim)];
}
// Below the length threshold a call still takes the dynamic schedule when the static order would leave its busiest
// CTA more than this over the mean (permille; 0: the length alone decides). The thresholds were measured at batch x
// heads a multiple of 32, where the static snake is at its best (1.03 of the mean at 1K-6K, D=128); at 12, 16, 24 or
// 40 pairs it leaves 1.2-2.0, which the dynamic schedule takes to 1.00-1.08 from 2K on (dev/probes/
// causal_schedule_sim.py). Off: below the thresholds above the shapes it moves lost on the H200 despite the imbalance
// (bench/results/h200_2026-12-02_eve/call_q/causal/grouping.json, short group first / static: 3x7x2K D=128 0.882,
// 1x24x2K D=128 0.877, 2x16x1K D=64 0.880, simulated 1.30-1.44 faster); it won only at 4K (1x12 1.229, 1x16 1.462),
// which the D=128 threshold of 4096 then took by length. Those losses were eager timings with the host in them;
// through CUDA graphs (call_c/envelope/causal.json, 12 paired rounds each) dynamic won at every shape the rule routes:
// 3x7x2K D=128 1.291, 1x24x2K D=128 1.181, 2x16x1K D=64 1.076 (12/12 each), so the rule is on at 1100 permille.
#ifndef VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX
#define VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX 1100
#endif
int g_causal_static_imbalance_max = VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX;
thread_local int g_last_causal_static_imbalance = 0;  // permille, 0 when the rule did not run
// The static order's busiest CTA over the mean, in permille, by the simulator's model (causal_schedule_sim.py,
// static_snake: each tile's key blocks to its diagonal plus half a block; kv_lens not known here, so ignored):
// tiles in list order (each head's Q blocks last first), round r on CTA c, or on grid - 1 - c for odd r (local_tile).
// Memoized per shape (a model's layers repeat a few shapes); 0 where the grid or the list is too large to walk.
int causal_static_imbalance(int64_t sq, int64_t skv, bool bottom_right, int bm, int bn, int64_t m_blocks,
                            int64_t pairs, int grid) {
  struct Entry {
    int64_t sq, skv, m_blocks, pairs;
    int bm, bn, grid, bottom_right, permille;
  };
  thread_local Entry memo[8] = {};
  thread_local int memo_next = 0;
  for (const Entry& e : memo)
    if (e.permille > 0 && e.sq == sq && e.skv == skv && e.m_blocks == m_blocks && e.pairs == pairs && e.bm == bm &&
        e.bn == bn && e.grid == grid && e.bottom_right == (bottom_right ? 1 : 0))
      return e.permille;
  constexpr int kMaxGrid = 1024;
  const int64_t tiles = m_blocks * pairs;
  if (grid < 1 || grid > kMaxGrid || tiles > (1ll << 20)) return 0;
  double loads[kMaxGrid];
  for (int c = 0; c < grid; ++c) loads[c] = 0.0;
  const int64_t shift = bottom_right ? skv - sq : 0;
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t m = m_blocks - 1 - t % m_blocks;
    int64_t kv_end = (m + 1) * bm + shift;
    kv_end = kv_end > skv ? skv : kv_end < 0 ? 0 : kv_end;
    const int64_t r = t / grid, c = t - r * grid;
    loads[(r & 1) ? grid - 1 - c : c] += static_cast<double>((kv_end + bn - 1) / bn) + 0.5;
  }
  double most = 0.0, sum = 0.0;
  for (int c = 0; c < grid; ++c) {
    most = loads[c] > most ? loads[c] : most;
    sum += loads[c];
  }
  const int permille = sum > 0.0 ? static_cast<int>(1000.0 * most * grid / sum + 0.5) : 1000;
  memo[memo_next] = {sq, skv, m_blocks, pairs, bm, bn, grid, bottom_right ? 1 : 0, permille};
  memo_next = (memo_next + 1) % 8;
  return permille;
}
constexpr int kRedoWordsMax = 64;  // FwdTraits::kRedoWords (every build)
uint64_t causal_sched_bytes(int sms) { return 16 + static_cast<uint64_t>(sms) * 32 * kRedoWordsMax * 4; }
// A tag per launch (never 0: the kernel's last CTA leaves 0 behind), so that workspace contents from before, or a
// launch's leftovers, are never taken for this launch's counters.
uint32_t next_sched_epoch() {
  static std::atomic<uint32_t> n{0};
  uint32_t e = 0;
  while (e == 0 || e == 0xffffffffu) e = (n.fetch_add(1, std::memory_order_relaxed) + 1) * 0x9e3779b1u;
  return e;
}

// The error of the launch just made, as this file reports one (0 if none).
int check_launch(const char* what) {
  const cudaError_t e = cudaGetLastError();
  return e == cudaSuccess ? 0 : fail(std::string(what) + ": " + cudaGetErrorString(e));
}

// Opts `kernel` into `smem` bytes of dynamic shared memory (above the 48 KB default).
template <typename Kernel>
int allow_smem(Kernel kernel, size_t smem) {
  const cudaError_t e =
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  return e == cudaSuccess ? 0 : fail(std::string("cudaFuncSetAttribute: ") + cudaGetErrorString(e));
}

// The balanced tail's merge (combine.cuh, CombineParams: chunk 0, the default, for the uniform split).
struct BalancedMerge {
  int chunk = 0, tile_blocks = 0, ctas = 0;
};

// The tail launch's merge (combine.cuh): `tiles` tiles of block_m rows, `splits` key ranges each (or the balanced
// plan's pieces, `balanced`), whose partials lie at ws_o / ws_ml, into the caller's O and LSE; the bf16 path's
// (launch_built) and the 8-bit path's (capi_8bit.cuh). head_dim: the caller's (the workspace's padded columns are not
// written).
template <int kHeadDim, bool kFp16>
int launch_combine(const VidattnFwdArgs& a, const float* ws_o, const float* ws_ml, int seqlen_q, int heads,
                   int num_m_blocks, int tile_base, int block_m, int splits, int64_t tiles, int head_dim,
                   cudaStream_t stream, const char* what, BalancedMerge balanced = {}) {
  using namespace vidattn::sm90;
  CombineParams c{};
  c.ws_o = ws_o;
  c.ws_ml = ws_ml;
  c.o = a.o;
  for (int i = 0; i < 3; ++i) c.o_stride[i] = a.o_stride[i];
  c.lse = a.lse;
  c.seqlen_q = seqlen_q;
  c.heads = heads;
  c.num_m_blocks = num_m_blocks;
  c.tile_base = tile_base;
  c.block_m = block_m;
  c.splits = splits;
  c.num_rows = static_cast<int>(tiles * block_m);
  c.head_dim = head_dim;
  c.chunk = balanced.chunk;
  c.tile_blocks = balanced.tile_blocks;
  c.ctas = balanced.ctas;
  constexpr int kRowsPerBlock = kCombineThreads / 32;  // one warp per row
  combine_kernel<kHeadDim, kFp16><<<dim3(static_cast<unsigned>((c.num_rows + kRowsPerBlock - 1) / kRowsPerBlock)),
                                    kCombineThreads, 0, stream>>>(c);
  return check_launch(what);
}

// The CTA-pair build's launch configuration (FwdTraits::kPairs): clusters of two along x, `ctas` CTAs.
struct PairLaunch {
  cudaLaunchAttribute attr[1];
  cudaLaunchConfig_t cfg;
  PairLaunch(int ctas, int threads, size_t smem, cudaStream_t stream) : attr{}, cfg{} {
    attr[0].id = cudaLaunchAttributeClusterDimension;
    attr[0].val.clusterDim.x = 2;
    attr[0].val.clusterDim.y = 1;
    attr[0].val.clusterDim.z = 1;
    cfg.gridDim = dim3(static_cast<unsigned>(ctas));
    cfg.blockDim = dim3(static_cast<unsigned>(threads));
    cfg.dynamicSmemBytes = smem;
    cfg.stream = stream;
    cfg.attrs = attr;
    cfg.numAttrs = 1;
  }
};

// CTAs the pair build's main launch runs at once: two per cluster of two that fits (cudaOccupancyMaxActiveClusters:
// a GPC with an odd number of SMs leaves one idle), asked once per device and build (Build: its traits; the kernel
// already opted into its shared memory); 0 where none fits or the query fails.
template <typename Build, typename Kernel>
int pair_launch_ctas(Kernel kernel, int sms, int threads, size_t smem) {
  constexpr int kDevices = 64;
  static std::atomic<int> known[kDevices] = {};  // clusters + 1; 0: not asked yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= kDevices) {
    cudaGetLastError();
    return 0;
  }
  int k = known[device].load(std::memory_order_relaxed);
  if (k == 0) {
    PairLaunch l(sms & ~1, threads, smem, nullptr);
    int clusters = 0;
    if (cudaOccupancyMaxActiveClusters(&clusters, kernel, &l.cfg) != cudaSuccess) {
      cudaGetLastError();  // (a device or driver without clusters: the plain launch)
      clusters = 0;
    }
    k = std::max(clusters, 0) + 1;
    known[device].store(k, std::memory_order_relaxed);
  }
  return 2 * std::min(k - 1, sms / 2);
}

// kCausal: the causal build (flash_fwd.cuh, tile_work), a.causal picking the alignment. Causal launches have no tail
// launch: with the workspace their CTAs take tiles from a counter, heaviest first (next_causal_tile), so they end
// within a light tile of each other; without it, the static order (heaviest first within each head, snaking across
// the CTAs: local_tile).
template <int kHeadDim, int kWGs, int kBN, bool kFp16, bool kCausal = false>
int launch_built(const VidattnFwdArgs& a, cudaStream_t stream, int sms) {
  using namespace vidattn::sm90;
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  FwdParams p{};
  std::string err;
  // a.head_dim may be below kHeadDim (FwdParams: TMA pads the columns); a.kv_heads divides a.heads (vidattn_sm90_fwd).
  const int64_t kv_heads = vidattn::grouped_kv_heads(a.heads, a.kv_heads);
  const bool ok = make_tensor_map_4d(&p.tm_q, a.q, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.q_stride,
                                     T::kQBoxRows, &err) &&
                  make_tensor_map_4d(&p.tm_k, a.k, kFp16, a.head_dim, a.seqlen_kv, kv_heads, a.batch, a.k_stride,
                                     T::kBlockN, &err) &&
                  make_tensor_map_4d(&p.tm_v, a.v, kFp16, a.head_dim, a.seqlen_kv, kv_heads, a.batch, a.v_stride,
                                     T::kBlockN, &err) &&
                  make_tensor_map_4d(&p.tm_o, a.o, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.o_stride, 16,
                                     &err);
  if (!ok) return fail(err);
  p.lse = a.lse;
  p.o = static_cast<uint16_t*>(a.o);
  for (int i = 0; i < 3; ++i) p.o_stride[i] = a.o_stride[i];
  p.head_dim = static_cast<int>(a.head_dim);
  p.kv_lens = a.kv_lens;
  p.seqlen_q = static_cast<int>(a.seqlen_q);
  p.seqlen_kv = static_cast<int>(a.seqlen_kv);
  p.heads = static_cast<int>(a.heads);
  p.kv_group = static_cast<int>(a.heads / kv_heads);
  p.scale_log2 = a.scale * 1.4426950408889634f;
  p.causal_bottom_right = a.causal == 2 ? 1 : 0;
  p.causal_group = 1;
  p.causal_pairs = static_cast<int>(a.heads * a.batch);
  const int64_t m_blocks = (a.seqlen_q + T::kBlockM - 1) / T::kBlockM;
  const int64_t tiles = m_blocks * a.heads * a.batch;
  if (tiles > (1ll << 31) - 1) return fail("too many tiles (batch * heads * ceil(Sq/kBlockM) over 2^31)");
  p.num_m_blocks = static_cast<int>(m_blocks);
  g_last_block_n = T::kBlockN;
  g_last_o_path = T::kOReadLate ? 4 : T::kORegs ? 3 : T::kOInV ? 2 : T::kOInQ ? 1 : 0;
  g_last_q_box_rows = T::kQBoxRows;
  g_last_cluster_ctas = 1;  // (2 once a pair launch is made: a call that is all tail launch makes none)
  // +1 KB to align the ring to 1024 B in-kernel (flash_fwd_kernel asserts that it fits)
  const size_t smem = dynamic_smem_bytes<kHeadDim, kWGs, kBN>();
  auto kernel = flash_fwd_kernel<kHeadDim, kWGs, kBN, kFp16, false, kCausal>;
  if (allow_smem(kernel, smem) != 0) return 1;
  // The main launch's CTAs at most: one per SM, or (CTA pairs) two per cluster that fits.
  int grid = sms;
  if constexpr (T::kPairs) {
    // A pair runs Q tiles 2i and 2i + 1 of one launch, partners only within one (batch, head): an even Q-block count,
    // an even grid, and one launch (below), so that every CTA's L-th tile has its partner in the other CTA. Else the
    // call runs on the routed build it varies (g_last_cluster_ctas then reads 1).
    grid = pair_launch_ctas<T>(kernel, sms, T::kThreads, smem);
    if (grid < 2 || m_blocks % 2 != 0 || tiles > redo_launch_tiles<T>(grid))
      return launch_built<kHeadDim, kWGs, kBN & ~kPairBuild, kFp16, kCausal>(a, stream, sms);
  }
  // Persistent: one CTA per SM (shared memory allows no second), each walking the tile list. A CTA can mark at most
  // 32 * kRedoWords of its tiles for a redo (flash_fwd.cuh, kFixedRef), so larger problems take several launches;
  // such a problem keeps the plain schedule, its last round being a sliver of it. (CTA pairs: the main launch's rounds
  // are of `grid` tiles, so its tile count stays even.)
  const int64_t per_launch = redo_launch_tiles<T>(grid);
  const TailPlan tail =
      tiles <= per_launch && !kCausal ? plan_tail<kHeadDim, kWGs, kBN>(a, tiles, sms, grid) : TailPlan{};
  const int64_t main_tiles = tiles - tail.tiles;
  g_last_tail_splits = tail.tiles > 0 ? tail.splits : 0;
  for (int64_t base = 0; base < main_tiles; base += per_launch) {
    const int64_t n = main_tiles - base < per_launch ? main_tiles - base : per_launch;
    p.tile_base = static_cast<int>(base);
    p.num_tiles = static_cast<int>(n);
    if constexpr (kCausal) {
      static_assert(T::kRedoWords <= kRedoWordsMax, "causal_sched_bytes");
      static_assert(kHeadDim == 64 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                    "one dynamic threshold per causal build: causal_build_slot");
      g_last_causal_static_imbalance = 0;
      bool dynamic = causal_dynamic_for(kHeadDim, a.seqlen_q);
      if (!dynamic && g_causal_static_imbalance_max > 0) {
        g_last_causal_static_imbalance = causal_static_imbalance(a.seqlen_q, a.seqlen_kv, a.causal == 2, T::kBlockM,
                                                                 T::kBlockN, m_blocks, p.causal_pairs,
                                                                 static_cast<int>(n < sms ? n : sms));
        dynamic = g_last_causal_static_imbalance > g_causal_static_imbalance_max;
      }
      if (VIDATTN_CAUSAL_DYNAMIC && a.workspace != nullptr && a.workspace_bytes >= causal_sched_bytes(sms) &&
          dynamic) {
        p.sched = static_cast<unsigned long long*>(a.workspace);
        p.sched_epoch = next_sched_epoch();
        const int64_t kv_bytes = a.seqlen_kv * kHeadDim * 2 * 2;
        const int64_t group = kCausalGroupBytes / (kv_bytes > 0 ? kv_bytes : 1);
        p.causal_group = static_cast<int>(group < 1 ? 1 : group > p.causal_pairs ? p.causal_pairs : group);
        p.causal_first_group = g_causal_grouping == 1 ? p.causal_pairs % p.causal_group : 0;
      }
    }
    if constexpr (kCausal) {
      g_last_causal_dynamic = p.sched != nullptr ? 1 : 0;
      g_last_causal_first_group = p.causal_first_group;
    }
    const int ctas = static_cast<int>(n < grid ? n : grid);
    if constexpr (T::kPairs) {
      PairLaunch l(ctas, T::kThreads, smem, stream);
      if (cudaLaunchKernelEx(&l.cfg, kernel, p) != cudaSuccess) {
        // A refused cluster launch (the occupancy query said it fits, so a device that takes no clusters here): the
        // error is cleared, not left for the next call's check, and the call runs on the routed build. Nothing ran.
        cudaGetLastError();
        return launch_built<kHeadDim, kWGs, kBN & ~kPairBuild, kFp16, kCausal>(a, stream, sms);
      }
      g_last_cluster_ctas = 2;
    } else {
      kernel<<<dim3(static_cast<unsigned>(ctas)), T::kThreads, smem, stream>>>(p);
    }
    if (check_launch("kernel launch") != 0) return 1;
  }
  // Causal launches have no tail launch: its split kernel is not instantiated for them (at fp16 D=192/256 it would
  // be a kernel no call runs).
  if constexpr (kCausal) {
    return 0;
  } else {
    if (tail.tiles == 0) return 0;
    // The tail launch stores partials (no epilogue of O): the O-from-registers build shares the O-in-V build's. So does
    // the Q-halves build (one item per CTA: no next tile whose Q could load early), with Q's box back at the tile's
    // rows: its own split kernel spilled the producer's 24 registers (84 bytes). And the read-late build (its items'
    // partials go to the workspace, nothing deferred), and its variant narrowing every partial block (a tail launch
    // ends one block per item, on the shared kernel's MIN_SAVED rule: no second split kernel for it). And the CTA-pair
    // build: its tail launch runs without clusters.
    auto split_kernel = flash_fwd_kernel<kHeadDim, kWGs,
                                         kBN & ~kORegsBuild & ~kQHalvesBuild & ~kOReadLateBuild & ~kNarrowAllBuild &
                                             ~kPairBuild,
                                         kFp16, true>;
    if (allow_smem(split_kernel, smem) != 0) return 1;
    if constexpr (T::kQHalves) {
      if (!make_tensor_map_4d(&p.tm_q, a.q, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.q_stride, T::kBlockM,
                              &err))
        return fail(err);
    }
    // The balanced plan: one CTA per SM, two items each (its chunk's pieces); the uniform one: a CTA per range.
    p.tile_base = static_cast<int>(main_tiles);
    p.num_tiles = static_cast<int>(tail.items);
    p.kv_splits = tail.chunk > 0 ? 0 : tail.splits;
    p.tail_chunk = static_cast<int>(tail.chunk);
    p.tail_blocks = static_cast<int>(tail.blocks);
    p.tail_ctas = static_cast<int>(tail.ctas);
    p.tail_tiles = static_cast<int>(tail.tiles);
    p.ws_o = static_cast<float*>(a.workspace);
    p.ws_ml = p.ws_o + tail.items * T::kBlockM * kHeadDim;
    split_kernel<<<dim3(static_cast<unsigned>(tail.ctas)), T::kThreads, smem, stream>>>(p);
    if (check_launch("tail launch") != 0) return 1;
    const BalancedMerge merge{p.tail_chunk, p.tail_blocks, p.tail_ctas};
    return launch_combine<kHeadDim, kFp16>(a, p.ws_o, p.ws_ml, p.seqlen_q, p.heads, p.num_m_blocks, p.tile_base,
                                           T::kBlockM, tail.splits, tail.tiles, static_cast<int>(a.head_dim), stream,
                                           "tail merge launch", merge);
  }
}

// DIAGNOSTIC ONLY, never a default: VIDATTN_KERNEL_SUBSET=1 instantiates only the bf16 non-causal D=256 O-in-V
// builds (the routed one and its variants), the D=192 builds (what 1K keys run, narrow, among them) and the D=128
// short-key build (N=128, what 1K keys run), and leaves the 8-bit and RoPE entry points out, so that a timeline
// build (-DVIDATTN_DIAG_TIMELINE, dev/probes/timeline_d256.sh) compiles in a fraction of the library's time. Every
// other launch is refused with an error (vidattn runs SDPA).
#ifndef VIDATTN_KERNEL_SUBSET
#define VIDATTN_KERNEL_SUBSET 0
#endif
// VIDATTN_KERNEL_SUBSET=2 instantiates the bf16 non-causal D=64 builds only, 3 no dense build at all
// (dev/probes/timeline_sparse.sh: the block-sparse kernels, with the dense kernel at the bench's D=64 shape or not).
template <int kHeadDim, int kBN, bool kFp16, bool kCausal>
constexpr bool in_kernel_subset() {
  constexpr bool kD256OInV = kHeadDim == 256 && (kBN & vidattn::sm90::kOInVBuild) != 0;
  constexpr bool kD128Short = kHeadDim == 128 && kBN == VIDATTN_BLOCK_N_D128_SHORT;
  if constexpr (VIDATTN_KERNEL_SUBSET == 3) return false;
  if constexpr (VIDATTN_KERNEL_SUBSET == 2) return !kFp16 && !kCausal && kHeadDim == 64;
  return !VIDATTN_KERNEL_SUBSET || (!kFp16 && !kCausal && (kD256OInV || kD128Short || kHeadDim == 192));
}

// The launcher's entry for one build: launch_built, unless a subset build (above) left that build out. if constexpr,
// so a left-out build's kernels are never instantiated.
template <int kHeadDim, int kWGs, int kBN, bool kFp16, bool kCausal = false>
int launch(const VidattnFwdArgs& a, cudaStream_t stream, int sms) {
  if constexpr (in_kernel_subset<kHeadDim, kBN, kFp16, kCausal>())
    return launch_built<kHeadDim, kWGs, kBN, kFp16, kCausal>(a, stream, sms);
  else
    return fail(VIDATTN_KERNEL_SUBSET >= 2
                    ? "this library is a kernel subset build (VIDATTN_KERNEL_SUBSET=2: bf16 D=64 non-causal only; 3: "
                      "block-sparse only): no dense build for this call"
                    : "this library is a kernel subset build (VIDATTN_KERNEL_SUBSET: bf16 D=256 O-in-V, D=192 and "
                      "D=128 N=128, non-causal): no build for this call");
}

// D=64 has two builds: three consumer warpgroups (192-row tiles, about 1.1x the throughput per row on long
// sequences: dev/NOTES.md) and two (128-row tiles). With static persistent scheduling a launch lasts about
// ceil(tiles / SMs) tile times; pick the build with the smaller estimate, so short queries whose 192-row tiles
// would be mostly padding (FA-bench 1K: 1152 rows computed for 1024) keep the 128-row tiles.
// m3 / m2: the two builds' tile rows; gain: the three-warpgroup build's throughput per row over the two's.
bool three_wgs_round_estimate(int64_t seqlen_q, int64_t batch_heads, int sms, int64_t m3, int64_t m2, double gain) {
  const int64_t tiles3 = (seqlen_q + m3 - 1) / m3 * batch_heads, tiles2 = (seqlen_q + m2 - 1) / m2 * batch_heads;
  const double t3 = static_cast<double>((tiles3 + sms - 1) / sms) * m3 / gain;
  const double t2 = static_cast<double>((tiles2 + sms - 1) / sms) * m2;
  return t3 <= t2;
}
bool pick_d64_three_wgs(int64_t seqlen_q, int64_t batch_heads, int sms) {
  return three_wgs_round_estimate(seqlen_q, batch_heads, sms, vidattn::sm90::FwdTraits<64, 3>::kBlockM,
                                  vidattn::sm90::FwdTraits<64, 2>::kBlockM, 1.1);
}

// bf16 D=192 and 256 have a wide build (N=112 / 80, O through Q's buffer) and a narrow one (N=96 / 64, separate O
// scratch). Back to back on the H200 (bench/results/h200_2026-12-02_pm/call_z/hd_ab_table.txt; the earlier
// hd_wide_ab agrees at 1K): D=192 narrow +4.4% at 1K keys, +1.3% at 8K (where hd_wide_ab had wide +5%), -0.8% at 32K;
// D=256 narrow +0.8% at 1K (inside the spread), -4.7% at 32K. So D=192 calls of at most 2048 keys run narrow; D=256
// stays wide everywhere.
// Causal D=200..256 (bf16) on the dense routed build's width, N=80 with O through the V stages, read-late, at 24 / 240
// registers (FA3's width there): +4-5% over the N=64 narrow causal build at 8K and 32K (call P18 of the fifteenth
// sitting, dev/NOTES.md "D=256 causal at N=80"). 0 keeps the narrow build (fp16 stays on it either way).
#ifndef VIDATTN_CAUSAL_D256_OINV
#define VIDATTN_CAUSAL_D256_OINV 1
#endif
#ifndef VIDATTN_D192_NARROW_KV_MAX
#define VIDATTN_D192_NARROW_KV_MAX 2048
#endif
#ifndef VIDATTN_D256_NARROW_KV_MAX
#define VIDATTN_D256_NARROW_KV_MAX 0
#endif
bool pick_hd_narrow(int64_t head_dim, int64_t seqlen_kv) {
  if (g_hd_narrow == 1 || g_hd_narrow == 2) return g_hd_narrow == 1;
  if (g_hd_narrow >= 3) return false;
  return seqlen_kv <= (head_dim <= 192 ? VIDATTN_D192_NARROW_KV_MAX : VIDATTN_D256_NARROW_KV_MAX);
}
// The O-in-V builds (the wide widths, O through the V stages: tile_config.cuh, kOInV) for the calls the narrow pick
// leaves that have at most this many keys (setting 3 forces them). From 16 paired palindrome rounds against what a
// plain call ran before (bench/results/h200_2026-12-02_late/call_c/envelope/ov.json, sign test, dev/NOTES.md "O
// through the V stages"): D=256 won at 1K (16/16, x1.038), 8K (14/16, x1.007) and 32K (13/16, x1.006), so every
// length; D=192 won at 8K (12/16, x1.012), tied at 32K (11/16) and lost to the narrow build at 1K (which keeps <=
// 2048), so up to 16384 keys.
#ifndef VIDATTN_D192_O_IN_V_KV_MAX
#define VIDATTN_D192_O_IN_V_KV_MAX 16384
#endif
#ifndef VIDATTN_D256_O_IN_V_KV_MAX
#define VIDATTN_D256_O_IN_V_KV_MAX (1 << 30)
#endif
// The routed D=256 O-in-V launch (setting 0) takes the build that waits for its O stores' reads under the next tile's
// S_0 (kOReadLate, setting 6's kernel; dev/NOTES.md "The D=256 epilogue deferred"): 16 palindrome rounds against the
// O-in-V build (bench/results/h200_2026-12-02_seventh/call_b/d256c/ab) won at 1K (13/16, x1.010) and tied at 8K
// (8/16) and 32K (10/16). Setting 3 keeps the plain O-in-V build (the reference); 0 routes there too.
#ifndef VIDATTN_D256_O_READ_LATE
#define VIDATTN_D256_O_READ_LATE 1
#endif
bool pick_hd_o_in_v(int64_t head_dim, int64_t seqlen_kv) {
  if (g_hd_narrow != 0) return g_hd_narrow >= 3;
  return seqlen_kv <= (head_dim <= 192 ? VIDATTN_D192_O_IN_V_KV_MAX : VIDATTN_D256_O_IN_V_KV_MAX);
}

// Head dims 72..96 (bf16) have the same two builds as D=64: three consumer warpgroups (192-row tiles at N=96) and two
// (128-row tiles at N=176). The same estimate as pick_d64_three_wgs, with a three-warpgroup gain of 1.1: back to
// back (bench/results/h200_2026-12-02_pm/call_z/hd_ab_table.txt) three warpgroups won Allegro (79200 keys) by 14%,
// D=72 / 80 / 96 at 8K by 15 / 4 / 5%, and lost D=96 1K by 7%, where the estimate keeps two (21 rounds of 128 rows
// against 16 of 192 / 1.1).
#ifndef VIDATTN_D96_THREE_WG_GAIN
#define VIDATTN_D96_THREE_WG_GAIN 1.1
#endif
bool pick_d96_three_wgs(int64_t seqlen_q, int64_t batch_heads, int sms) {
  return three_wgs_round_estimate(seqlen_q, batch_heads, sms,
                                  vidattn::sm90::FwdTraits<96, 3, VIDATTN_BLOCK_N_D96_3WG>::kBlockM,
                                  vidattn::sm90::FwdTraits<96, 2>::kBlockM, VIDATTN_D96_THREE_WG_GAIN);
}

// D=128 has two builds: N=176 key blocks (the default) and N=128, whose smaller stages leave room for a second Q
// buffer and a second O scratch box (tile_config.cuh, VIDATTN_BLOCK_N_D128_SHORT). Those help where tile boundaries
// are frequent, that is where tiles have few key blocks: Wan cross-attention (512 keys) and FA-bench 1K gained 7
// and 4% at N=128, the long shapes lost 0-2% (dev/NOTES.md, seventh session). The threshold: a sweep of the key
// count (dev/probes/block_n_sweep.py) put N=128 ahead by 4-17% up to 1024 keys, the two within 2% either way from 1536
// to 4096, and N=176 ahead at 6144. It was 2048 until the N=128 build held Q in registers (VIDATTN_Q_IN_REGS_MAX_N,
// eleventh session), which took N=128 from 5-7% behind N=176 on the long shapes to level; seed 4K (4096 keys, 32
// blocks of 128 against 23.3 of 176) then read 1.151 -> 1.172x cuDNN at 4096 in an A/B of 9 rounds (and +0.7%, +0.9%
// with every shape on N=128), where with Q in shared memory it had read 1-5% slower twice (tenth session).
#ifndef VIDATTN_D128_SHORT_KV_MAX
#define VIDATTN_D128_SHORT_KV_MAX 4096
#endif
constexpr int kD128Long = vidattn::sm90::default_block_n(128);
constexpr int kD128Short = VIDATTN_BLOCK_N_D128_SHORT;
// One width everywhere (an A/B of N=128 against N=176): VIDATTN_D128_SHORT_KV_MAX=0 or a huge value, not equal widths.
static_assert(kD128Short != kD128Long, "the two D=128 builds must differ in kBlockN");

int pick_d128_block_n(int64_t seqlen_kv) {
  if (g_d128_block_n != 0) return g_d128_block_n;
  return seqlen_kv <= VIDATTN_D128_SHORT_KV_MAX ? kD128Short : kD128Long;
}

// Multiprocessors of the current device (at least 1): the persistent grid, the tail plan and the workspace size.
int sm_count() {
  int device = 0, sms = 0;
  cudaGetDevice(&device);
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device);
  return sms > 0 ? sms : 1;
}

// A worker thread whose first CUDA work is a vidattn call has no current context: the runtime would create one on its
// first runtime call, but cuTensorMapEncodeTiled (driver API) comes first and fails with CUDA_ERROR_INVALID_CONTEXT.
// Since CUDA 12, cudaSetDevice makes the device's primary context current in this thread (a cheap check when it is
// already). The caller made the tensors' device current (vidattn/_ext.py, forward). Both entry points (the exact
// forward here, the 8-bit one in capi_8bit.cuh) call this before any driver API call.
bool make_context_current() {
  int device = 0;
  cudaError_t ctx = cudaGetDevice(&device);
  if (ctx == cudaSuccess) ctx = cudaSetDevice(device);
  if (ctx != cudaSuccess) fail(std::string("cannot make the device's context current: ") + cudaGetErrorString(ctx));
  return ctx == cudaSuccess;
}

}  // namespace

extern "C" const char* vidattn_sm90_last_error(void) { return g_last_error.c_str(); }

// The tail launch's scratch (plan_tail): one item per SM, or kTailMaxItemsPerSm under two short rounds (the setting
// when asked: a workspace sized before a switch to 2 keeps those calls' plans to what fits). Without it (or with
// less) launches keep the plain schedule.
extern "C" uint64_t vidattn_sm90_workspace_bytes(void) {
  const uint64_t causal = VIDATTN_CAUSAL_DYNAMIC ? causal_sched_bytes(sm_count()) : 0;
  if (!VIDATTN_TAIL_LAUNCH) return causal;
  const uint64_t per_sm = tail_rounds() >= 2 ? kTailMaxItemsPerSm : 1;
  const uint64_t tail = per_sm * sm_count() * kTailItemBytes;
  return tail > causal ? tail : causal;
}

extern "C" int vidattn_sm90_last_tail_splits(void) { return g_last_tail_splits; }

extern "C" int vidattn_sm90_set_tail_rounds(int rounds) {
  if (rounds != -1 && (rounds < 1 || rounds > 3)) return 1;
  g_tail_rounds = rounds;
  return 0;
}

extern "C" int vidattn_sm90_tail_rounds(void) { return tail_rounds(); }

extern "C" int vidattn_sm90_set_tail_kv_lens(int mode) {
  if (mode < -1 || mode > 1) return 1;
  g_tail_kv_lens = mode;
  return 0;
}

extern "C" int vidattn_sm90_tail_kv_lens(void) { return tail_kv_lens() ? 1 : 0; }

extern "C" int vidattn_sm90_last_block_n(void) { return g_last_block_n; }

extern "C" int vidattn_sm90_last_o_path(void) { return g_last_o_path; }

extern "C" int vidattn_sm90_last_q_box_rows(void) { return g_last_q_box_rows; }

extern "C" int vidattn_sm90_last_cluster_ctas(void) { return g_last_cluster_ctas; }

extern "C" int vidattn_sm90_causal_modes(void) { return 2; }

extern "C" int vidattn_sm90_causal_max_head_dim(void) { return 256; }

extern "C" int vidattn_sm90_set_causal_dynamic_min_sq_for(int head_dim, int min_sq) {
  const int slot = causal_build_slot(head_dim);
  if (min_sq < -1 || slot < 0) return 1;
  g_causal_dynamic_min_sq[slot] = min_sq == -1 ? kCausalDynamicMinSqDefault[slot] : min_sq;
  return 0;
}

extern "C" int vidattn_sm90_set_causal_dynamic_min_sq(int min_sq) {
  if (min_sq < -1) return 1;
  for (int head_dim : {64, 128, 192, 256}) vidattn_sm90_set_causal_dynamic_min_sq_for(head_dim, min_sq);
  return 0;
}

extern "C" int vidattn_sm90_causal_dynamic_min_sq_for(int head_dim) {
  const int slot = causal_build_slot(head_dim);
  return slot < 0 ? -1 : g_causal_dynamic_min_sq[slot];
}

extern "C" int vidattn_sm90_last_causal_dynamic(void) { return g_last_causal_dynamic; }

extern "C" int vidattn_sm90_set_causal_grouping(int mode) {
  if (mode < -1 || mode > 1) return 1;
  g_causal_grouping = mode == -1 ? VIDATTN_CAUSAL_GROUPING : mode;
  return 0;
}

extern "C" int vidattn_sm90_causal_grouping(void) { return g_causal_grouping; }

extern "C" int vidattn_sm90_last_causal_first_group(void) { return g_last_causal_first_group; }

extern "C" int vidattn_sm90_set_causal_static_imbalance_max(int permille) {
  if (permille < -1 || (permille > 0 && permille < 1000)) return 1;
  g_causal_static_imbalance_max = permille == -1 ? VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX : permille;
  return 0;
}

extern "C" int vidattn_sm90_causal_static_imbalance_max(void) { return g_causal_static_imbalance_max; }

extern "C" int vidattn_sm90_last_causal_static_imbalance(void) { return g_last_causal_static_imbalance; }

extern "C" int vidattn_sm90_set_d128_block_n(int block_n) {
  if (block_n != 0 && block_n != kD128Short && block_n != kD128Long) return 1;
  g_d128_block_n = block_n;
  return 0;
}

#if VIDATTN_DIAG_TIMELINE
// Diagnostic builds only (diag_timeline.cuh): copies the stamps of the launches since the last reset into the two
// host buffers (consumer rows, then producer rows; their exact sizes in bytes), then zeroes them if `reset`.
extern "C" int vidattn_sm90_diag_timeline(void* consumer, uint64_t consumer_bytes, void* producer,
                                          uint64_t producer_bytes, int reset) {
  using namespace vidattn::sm90;
  if (consumer_bytes != kTlConsumerBytes || producer_bytes != kTlProducerBytes)
    return fail("timeline buffers must be " + std::to_string(kTlConsumerBytes) + " and " +
                std::to_string(kTlProducerBytes) + " bytes");
  const cudaError_t e = tl_copy_rows(consumer, producer, reset != 0);
  return e == cudaSuccess ? 0 : fail(std::string("timeline copy: ") + cudaGetErrorString(e));
}
#endif

extern "C" int vidattn_sm90_set_d96_build(int build) {
  if (build != 0 && build != 96 && build != 128) return 1;
  g_d96_build = build;
  return 0;
}

extern "C" int vidattn_sm90_set_hd_narrow(int narrow) {
  if (narrow < 0 || narrow > 8) return 1;
  g_hd_narrow = narrow;
  return 0;
}

extern "C" int vidattn_sm90_set_d96_warpgroups(int warpgroups) {
  if (warpgroups != 0 && warpgroups != 2 && warpgroups != 3) return 1;
  g_d96_warpgroups = warpgroups;
  return 0;
}

extern "C" int vidattn_sm90_build_head_dim(int head_dim, int causal) {
  if (head_dim < 8 || head_dim > 256 || head_dim % 8 != 0) return 0;
  if (head_dim <= 64) return 64;
  if (causal != 0) return head_dim <= 128 ? 128 : head_dim <= 192 ? 192 : 256;
  if (head_dim <= 96 && g_d96_build != 128) return 96;
  if (head_dim <= 128) return 128;
  return head_dim <= 192 ? 192 : 256;
}

extern "C" int vidattn_sm90_set_d64_warpgroups(int warpgroups) {
  if (warpgroups != 0 && warpgroups != 2 && warpgroups != 3) return 1;
  g_d64_warpgroups = warpgroups;
  return 0;
}

// Block-sparse calls (VidattnFwdArgs::blk_cnt): the D=64 and D=128 builds at 128 x 128 tiles (D=64 also at 192 x 128,
// blk_wgs 3), launched from their own translation unit (capi_sparse.cu says why). The tables are the caller's
// (vidattn/sparse.py builds them from a block mask); what can be checked without reading them is.
static int fwd_sparse(const VidattnFwdArgs* a, cudaStream_t s, int sms) {
  using namespace vidattn::sm90;
  if (a->blk_list == nullptr) return fail("block-sparse: blk_list is null");
  if (a->head_dim != 64 && a->head_dim != 128) return fail("block-sparse: head dim must be 64 or 128");
  if (a->kv_lens != nullptr) return fail("block-sparse: no kv_lens (mask the padded keys' blocks instead)");
  if (a->causal != 0) return fail("block-sparse: no causal mask (give the causal blocks in the block mask instead)");
  if (a->blk_stride < (a->seqlen_kv + kSparseTileN - 1) / kSparseTileN || a->blk_stride > (1 << 24))
    return fail("block-sparse: blk_stride must be at least ceil(seqlen_kv / 128) key blocks (and at most 2^24)");
  if (reinterpret_cast<uintptr_t>(a->blk_list) % 8 != 0 || reinterpret_cast<uintptr_t>(a->blk_cnt) % 4 != 0)
    return fail("block-sparse: blk_list must be 8-byte and blk_cnt 4-byte aligned");
  if (a->blk_wgs != 0 && a->blk_wgs != 2 && !(a->blk_wgs == kSparseWGsD64Max && a->head_dim == 64))
    return fail("block-sparse: blk_wgs must be 0 or 2, or 3 at head dim 64");
  std::string err;
  if (vidattn::sparse_launch(*a, s, sms, &err) != 0) return fail(err);
  g_last_block_n = kSparseTileN;
  g_last_q_box_rows = a->blk_wgs == kSparseWGsD64Max ? kSparseBlock * kSparseWGsD64Max : kSparseTileM;
  g_last_cluster_ctas = 1;
  return 0;
}

static int fwd(const VidattnFwdArgs* a, void* stream) {
  if (a == nullptr) return fail("null argument block");
  if (!a->q || !a->k || !a->v || !a->o) return fail("null q/k/v/o pointer");
  if (a->batch < 1 || a->heads < 1 || a->seqlen_q < 1 || a->seqlen_kv < 1)
    return fail("batch, heads and sequence lengths must be >= 1");
  if (a->seqlen_q > (1ll << 31) - 1 || a->seqlen_kv > (1ll << 31) - 1) return fail("sequence length over 2^31");
  // Grouped-query attention: every query head maps to one key/value head (launch: kv_group).
  if (vidattn::grouped_kv_heads(a->heads, a->kv_heads) == 0) return fail(vidattn::kGroupedKvError);
  // Head dims below a build's run on it with TMA's zero fill (fwd_params.h); TMA wants rows of a multiple of 16 bytes.
  if (a->head_dim < 8 || a->head_dim > 256 || a->head_dim % 8 != 0)
    return fail("head dim must be a multiple of 8 from 8 to 256");
  // The kernel works with scale * log2(e); a denormal scale would be flushed to zero (the same bound as
  // vidattn/_ext.py, envelope_reason, so the Python side never launches what this refuses).
  if (!(a->scale >= FLT_MIN) || !(a->scale * 1.4426950408889634f < INFINITY))
    return fail("softmax scale must be a positive, normal float32 whose product with log2(e) is finite");
  // vidattn/_ext.py's MAX_SCALE: past it the scaled scores overflow fp32 in the softmax (rows turn NaN).
  if (a->scale > 65536.f) return fail("softmax scale must be at most 65536");
  // The epilogue stores O with TMA (flash_fwd.cuh, store_o), which wants 16-byte aligned bases and strides (the
  // stride of an extent-1 dimension is never stepped, as for q, k and v: make_tensor_map_4d).
  const int64_t o_extent[3] = {a->batch, a->seqlen_q, a->heads};
  bool o_aligned = reinterpret_cast<uintptr_t>(a->o) % 16 == 0;
  for (int i = 0; i < 3; ++i) o_aligned = o_aligned && (o_extent[i] == 1 || a->o_stride[i] % 8 == 0);
  if (!o_aligned) return fail("output must be 16-byte aligned with strides that are multiples of 8 elements");
  if (!make_context_current()) return 1;
  auto s = static_cast<cudaStream_t>(stream);
  g_last_tail_splits = 0;
  g_last_block_n = 0;
  g_last_o_path = 0;
  g_last_q_box_rows = 0;
  g_last_cluster_ctas = 0;
  const bool fp16 = a->dtype == 1;
  if (a->dtype != 0 && a->dtype != 1) return fail("dtype must be 0 (bf16) or 1 (fp16)");
  if (a->causal < 0 || a->causal > 2) return fail("causal must be 0 (none), 1 (top-left) or 2 (bottom-right)");
  const int sms = sm_count();
  if (a->blk_cnt != nullptr) return fwd_sparse(a, s, sms);
  constexpr int kD64N = vidattn::sm90::default_block_n(64);
  constexpr int kD96N = vidattn::sm90::default_block_n(96);
  constexpr int kD192N = vidattn::sm90::default_block_n(192);
  constexpr int kD256N = vidattn::sm90::default_block_n(256);
  // Causal: one build per head dim (build time), chosen for tiles whose key count varies from one block to all: D=64
  // on three warpgroups (the long-sequence build), D=128 on N=128 (Q in registers, two Q buffers: its tile
  // boundaries come every few blocks), D=192 on its narrow width (N=96: the diagonal block wastes less, and O leaves
  // through the scratch under the next tile's S_0, as at D=128), bf16 D=256 on the dense routed build's N=80 with O
  // through the V stages (VIDATTN_CAUSAL_D256_OINV; fp16 on the narrow N=64). The D=64 warpgroup, D=128 width and
  // head-dim variant switches do not apply. Head dims 72..128 run on the D=128 causal build (padded), 136..192 on
  // D=192's, 200..256 on D=256's.
  if (a->causal != 0) {
    constexpr int kD192Narrow = VIDATTN_BLOCK_N_D192_NARROW, kD256Narrow = VIDATTN_BLOCK_N_D256_NARROW;
    if (a->head_dim <= 64)
      return fp16 ? launch<64, 3, kD64N, true, true>(*a, s, sms) : launch<64, 3, kD64N, false, true>(*a, s, sms);
    if (a->head_dim <= 128)
      return fp16 ? launch<128, 2, kD128Short, true, true>(*a, s, sms)
                  : launch<128, 2, kD128Short, false, true>(*a, s, sms);
    if (a->head_dim <= 192)
      return fp16 ? launch<192, 2, kD192Narrow, true, true>(*a, s, sms)
                  : launch<192, 2, kD192Narrow, false, true>(*a, s, sms);
#if VIDATTN_CAUSAL_D256_OINV
    if (!fp16)
      return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild + vidattn::sm90::kOReadLateBuild, false, true>(*a, s,
                                                                                                              sms);
#endif
    return fp16 ? launch<256, 2, kD256Narrow, true, true>(*a, s, sms)
                : launch<256, 2, kD256Narrow, false, true>(*a, s, sms);
  }
  // The smallest build at least as wide: 8..64 on D=64, 72..96 on D=96, 104..128 on D=128, 136..192 on D=192,
  // 200..256 on D=256 (vidattn_sm90_build_head_dim; dedicated narrower builds: dev/NOTES.md). The new dims have one
  // build each (no short-key width, no second warpgroup count): build time.
  if (a->head_dim > 128) {
    constexpr int kD192Narrow = VIDATTN_BLOCK_N_D192_NARROW, kD256Narrow = VIDATTN_BLOCK_N_D256_NARROW;
    if (!fp16 && kD192Narrow != kD192N && kD256Narrow != kD256N && pick_hd_narrow(a->head_dim, a->seqlen_kv))
      return a->head_dim <= 192 ? launch<192, 2, kD192Narrow, false>(*a, s, sms)
                                : launch<256, 2, kD256Narrow, false>(*a, s, sms);
#if VIDATTN_PINGPONG  // the O-in-V builds rely on the turn-taking (tile_config.cuh, kOInV): a build without runs wide
    if (!fp16 && g_hd_narrow == 4) {
      if (a->head_dim <= 192) return fail("VIDATTN_HD_NARROW=4 (O from registers) is built for head dims 200..256 only");
      return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild + vidattn::sm90::kORegsBuild, false>(*a, s, sms);
    }
    if (!fp16 && g_hd_narrow == 5) {
      if (a->head_dim <= 192) return fail("VIDATTN_HD_NARROW=5 (Q per warpgroup) is built for head dims 200..256 only");
      return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild + vidattn::sm90::kQHalvesBuild, false>(*a, s, sms);
    }
    if (!fp16 && g_hd_narrow == 6) {
      if (a->head_dim <= 192)
        return fail("VIDATTN_HD_NARROW=6 (O read wait deferred) is built for head dims 200..256 only");
      return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild + vidattn::sm90::kOReadLateBuild, false>(*a, s, sms);
    }
    if (!fp16 && g_hd_narrow == 7) {
      if (a->head_dim <= 192)
        return fail("VIDATTN_HD_NARROW=7 (every partial block narrowed) is built for head dims 200..256 only");
      using namespace vidattn::sm90;
      return launch<256, 2, kD256N + kOInVBuild + kOReadLateBuild + kNarrowAllBuild, false>(*a, s, sms);
    }
    if (!fp16 && g_hd_narrow == 8) {
      if (a->head_dim <= 192)
        return fail("VIDATTN_HD_NARROW=8 (CTA pairs sharing K/V) is built for head dims 200..256 only");
      using namespace vidattn::sm90;
      return launch<256, 2, kD256N + kOInVBuild + kOReadLateBuild + kPairBuild, false>(*a, s, sms);
    }
    if (!fp16 && pick_hd_o_in_v(a->head_dim, a->seqlen_kv)) {
      if (a->head_dim <= 192) return launch<192, 2, kD192N + vidattn::sm90::kOInVBuild, false>(*a, s, sms);
      if (VIDATTN_D256_O_READ_LATE && g_hd_narrow == 0)
        return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild + vidattn::sm90::kOReadLateBuild, false>(*a, s, sms);
      return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild, false>(*a, s, sms);
    }
#endif
    if (a->head_dim <= 192) return fp16 ? launch<192, 2, kD192N, true>(*a, s, sms) : launch<192, 2, kD192N, false>(*a, s, sms);
    return fp16 ? launch<256, 2, kD256N, true>(*a, s, sms) : launch<256, 2, kD256N, false>(*a, s, sms);
  }
  if (a->head_dim > 64 && a->head_dim <= 96 && g_d96_build != 128 && !fp16 &&
      (g_d96_warpgroups == 3 ||
       (g_d96_warpgroups == 0 && pick_d96_three_wgs(a->seqlen_q, a->batch * a->heads, sms))))
    return launch<96, 3, VIDATTN_BLOCK_N_D96_3WG, false>(*a, s, sms);
  if (a->head_dim > 64 && a->head_dim <= 96 && g_d96_build != 128)
    return fp16 ? launch<96, 2, kD96N, true>(*a, s, sms) : launch<96, 2, kD96N, false>(*a, s, sms);
  if (a->head_dim <= 64) {
    if (g_d64_warpgroups == 3 ||
        (g_d64_warpgroups == 0 && pick_d64_three_wgs(a->seqlen_q, a->batch * a->heads, sms)))
      return fp16 ? launch<64, 3, kD64N, true>(*a, s, sms) : launch<64, 3, kD64N, false>(*a, s, sms);
    return fp16 ? launch<64, 2, kD64N, true>(*a, s, sms) : launch<64, 2, kD64N, false>(*a, s, sms);
  }
  if (pick_d128_block_n(a->seqlen_kv) == kD128Short)
    return fp16 ? launch<128, 2, kD128Short, true>(*a, s, sms) : launch<128, 2, kD128Short, false>(*a, s, sms);
  return fp16 ? launch<128, 2, kD128Long, true>(*a, s, sms) : launch<128, 2, kD128Long, false>(*a, s, sms);
}

extern "C" int vidattn_sm90_fwd(const VidattnFwdArgs* a, void* stream) {
  const int rc = fwd(a, stream);
  // launch() records its build before it opts into shared memory and launches: a refused or failed launch launched
  // nothing, and must not read as the build a caller asked for (capi.h: 0, none).
  if (rc != 0) g_last_tail_splits = g_last_block_n = g_last_o_path = g_last_q_box_rows = g_last_cluster_ctas = 0;
  return rc;
}
#if !VIDATTN_KERNEL_SUBSET  // (a diagnostic subset build: the exact kernel's entry points only)
#include "capi_8bit.cuh"
#include "capi_rope.cuh"
#endif
