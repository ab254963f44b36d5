// Tile sizes and register budgets, one place, per head dim. Each choice names the limit that set it.
#pragma once
#include <cstdint>

// Ping-pong scheduling of the two consumer warpgroups (see flash_fwd.cuh); a macro so A/B builds need no edit.
#ifndef VIDATTN_PINGPONG
#define VIDATTN_PINGPONG 1
#endif

// KV tile width per head dim (A/B builds override these; defaults are the measured best, see dev/NOTES.md).
#ifndef VIDATTN_BLOCK_N_D128
#define VIDATTN_BLOCK_N_D128 176
#endif
// D=128 has a second build for short keys (capi.cu, pick_d128_block_n): at N=128 two Q buffers and a scratch box
// per O half fit beside two K/V stages, which N=176 leaves no room for, so the next tile's Q loads a tile early and
// the epilogue does not wait between its halves. Measured (seventh session, same process as N=176): Wan
// cross-attention 0.996 -> 1.062x cuDNN, FA-bench 1K 1.036 -> 1.081x, the long shapes 0-2% slower.
#ifndef VIDATTN_BLOCK_N_D128_SHORT
#define VIDATTN_BLOCK_N_D128_SHORT 128
#endif
// At most this many O scratch boxes per warp (FwdTraits::kOScratchSlots). 1 takes the second box away from the
// short-key build: measured no different (Wan cross 1.039 against 1.035x cuDNN; dev/NOTES.md, eighth session).
#ifndef VIDATTN_O_SCRATCH_SLOTS_MAX
#define VIDATTN_O_SCRATCH_SLOTS_MAX 2
#endif
#ifndef VIDATTN_BLOCK_N_D64
#define VIDATTN_BLOCK_N_D64 128
#endif
// The D=96, 192 and 256 builds (docs/guide/head_dims.md has the arithmetic). Their smem rows are 64-column chunks
// as at D=128, so D=96 occupies two chunks (the second half zero-filled by TMA) and its stages cost what D=128's
// cost: shared memory, not registers, caps it at N=176 (N=192: 2 x 96 KB stages + Q + scratch = 242 KB). Its O is 48
// registers (S 88 + P 44 + O 48 = 180 of 240). D=192: Q 48 KB, a stage 768 B per key: 2 stages beside Q and the
// 16 KB O scratch hold N <= 107, so 96 (S 48 + P 24 + O 96 = 168). D=256: Q 64 KB, 1 KB per key: N <= 72, so 64
// (S 32 + P 16 + O 128 = 176): the narrow builds. FlashAttention-3's 112 and 80 keep no separate O scratch.
#ifndef VIDATTN_BLOCK_N_D96
#define VIDATTN_BLOCK_N_D96 176
#endif
// The wide builds (FwdTraits::kOInQ): with O's epilogue boxes in Q's own buffer instead of the separate scratch,
// 2 stages beside Q hold N <= 118 at D=192 (so 112: S 56 + P 28 + O 96 = 180 registers) and N <= 80 at D=256
// (S 40 + P 20 + O 128 = 188). The narrow widths stay as the A/B's other side (capi.cu, vidattn_sm90_set_wide_hd).
#ifndef VIDATTN_BLOCK_N_D192
#define VIDATTN_BLOCK_N_D192 112
#endif
#ifndef VIDATTN_BLOCK_N_D256
#define VIDATTN_BLOCK_N_D256 80
#endif
#ifndef VIDATTN_BLOCK_N_D192_NARROW
#define VIDATTN_BLOCK_N_D192_NARROW 96
#endif
#ifndef VIDATTN_BLOCK_N_D256_NARROW
#define VIDATTN_BLOCK_N_D256_NARROW 64
#endif
// D=96 on three consumer warpgroups (192-row tiles, as D=64's long build; capi.cu, pick_d96_three_wgs, bf16): each
// K/V byte read from L2 serves 1.5x the rows, which is what Allegro's 79200 keys per head (30 MB of K/V, most of L2)
// are short of. 160 registers per consumer thread: S 48 + P 24 + O 48 = 120 at N=96 compiles without spills, N=112
// spills 256 bytes. Shared memory: Q 48 KB x 2 buffers + 2 stages of 48 KB + 24 KB scratch, so the next Q loads a
// tile early. (A D=192 build at N=64 with two Q buffers lost 2-7% to N=112 at 1K-32K keys: dev/NOTES.md.)
#ifndef VIDATTN_BLOCK_N_D96_3WG
#define VIDATTN_BLOCK_N_D96_3WG 96
#endif
// 0: never put O's epilogue boxes in Q's buffer (a D=192/256 width that then does not fit fails its static_assert).
#ifndef VIDATTN_O_IN_Q
#define VIDATTN_O_IN_Q 1
#endif

// Prefetch the next tile's Q into L2 when Q has a single shared-memory buffer (see the producer). Off: measured
// no gain (Wan cross-attention 0.881x cuDNN with it, 0.897x without, within the spread), nor at D=192 with 1K keys
// (2 of 12 rounds): Q's wait there reads as the SM's share of L2 bandwidth beside K_0 and K_1, not HBM latency.
// The O-in-V builds prefetch regardless (FwdTraits::kQPrefetchL2).
#ifndef VIDATTN_Q_L2_PREFETCH
#define VIDATTN_Q_L2_PREFETCH 0
#endif

// Issue a tile's O stores (stmatrix into the scratch, TMA store) behind the next tile's S_0 instead of before it
// (flash_fwd.cuh, consumer: kDeferOStore), holding O packed in 32 registers across the tile boundary.
#ifndef VIDATTN_DEFER_O_STORE
#define VIDATTN_DEFER_O_STORE 1
#endif
// With the deferred O store, also leave O unnormalised and unpacked until then (its registers are free anyway until
// the next tile's first P V, which then overwrites O instead of adding to a zeroed one): the normalising multiplies
// and the 16-bit packing move from between the tiles to under S_0 with the stores. Only where Q has two buffers
// (FwdTraits::kDeferONormalise).
#ifndef VIDATTN_DEFER_O_NORMALISE
#define VIDATTN_DEFER_O_NORMALISE 1
#endif

// In a key iteration, wait for V_{j-1} only after S_j = Q K_j^T has gone to the tensor cores, inside the same turn,
// instead of waiting for K_j and V_{j-1} before issuing either: V's stage is released last (after both warpgroups'
// P V), so V is the load that arrives late, and S_j needs only K_j (flash_fwd.cuh, mainloop). Measured (tenth
// session, call 2, 7 rounds): geometric mean 1.171 -> 1.187x cuDNN, seed 4K 1.113 -> 1.151, Wan 1.3B 1.233 -> 1.264.
#ifndef VIDATTN_LATE_V_WAIT
#define VIDATTN_LATE_V_WAIT 1
#endif

// Hold each warpgroup's Q in registers for the tile (wgmma's A from registers, 32 per thread at D=128) instead of
// reading it from shared memory in every S = Q K^T, in the D=128 builds whose N is at most this (0: none). The
// N=176 consumer uses 234 of its 240 registers without them (at N=160 they spill). Measured (eleventh session, two
// A/Bs of 7 rounds): Wan cross-attention 1.079 -> 1.087 and 1.065 -> 1.088x cuDNN, FA-bench 1K 1.097 -> 1.110 and
// 1.100 -> 1.105; all of D=128 at N=128 then keeps up with N=176 on the long shapes (N=128 without it: 5-7% behind),
// and N=144 with it does not (dev/NOTES.md).
#ifndef VIDATTN_Q_IN_REGS_MAX_N
#define VIDATTN_Q_IN_REGS_MAX_N 128
#endif

// Rotate each tile's key-block order by (tile index mod its block count), so that the CTAs running at one time do
// not all read the same K/V block of the same head from L2 at once (a suspect for the short-KV gap; dev/NOTES.md).
#ifndef VIDATTN_KV_ROTATE
#define VIDATTN_KV_ROTATE 0
#endif

// DIAGNOSTIC ONLY, never a default: skip the O stores (the epilogue still computes them) to price the epilogue's
// global-memory traffic by difference. Results are garbage; kernel_ab.sh times "diag_*" variants without its
// correctness gate.
#ifndef VIDATTN_DIAG_SKIP_O_STORE
#define VIDATTN_DIAG_SKIP_O_STORE 0
#endif

// DIAGNOSTIC ONLY, never a default: leave one part of the online softmax out to price it by difference, as the O
// stores were priced. 1 = no row max (the max is pinned at 0: no FMNMX chains, no quad shuffles; inputs of unit
// scale do not overflow); 2 = no exponentials (P is the scaled score itself: no MUFU); 3 = no row sum (no FADDs);
// 4 = no O rescale (no FMULs on O). Results are garbage. They act on the exact online softmax, which with
// VIDATTN_FIXED_REF runs only for each tile's first key block and fp16: build them with -DVIDATTN_FIXED_REF=0;
// 3 also drops the fixed-reference path's row sums, wherever VIDATTN_ROW_SUM_UNROUNDED takes them (softmax_fixed_ref,
// or add_packed_row_sum: per score one integer op and one FADD, which it priced in the fourteenth session).
#ifndef VIDATTN_DIAG_SOFTMAX
#define VIDATTN_DIAG_SOFTMAX 0
#endif

// Softmax against a fixed reference (flash_fwd.cuh, softmax_fixed_ref; bf16 only): each row's exponentials after
// its first key block are taken against that block's max, so the steady loop has no row max, no quad shuffles and
// no rescale of O; a tile whose row sum leaves the safe range is run again with the exact online softmax
// (redo_tiles). Measured +4 to +14% on every shape of the table (dev/NOTES.md, run21).
#ifndef VIDATTN_FIXED_REF
#define VIDATTN_FIXED_REF 1
#endif
// The same in the tail launch's split kernel (1, an A/B build): a range's partial carries its reference as its row
// "max" (store_partial), which the merge weighs like any other, and a range whose row sum leaves the safe range is
// run again exact, as a tile is. 0 (the default): its items run the exact online softmax, which call P49 read ~12%
// slower a key block than the main launch at D=256. Call P50 measured 1: its split kernel 6-8% faster, but the per-call
// library A/B read 0.979-1.019 across six shapes, three under the 0.995 its rule asked (dev/NOTES.md "Call P50").
// The block-sparse builds' softmax against each warpgroup's first reference (flash_fwd.cuh, mainloop's ref_set), with
// the dense builds' redo of a tile whose row sum leaves the range; 0: the online softmax throughout.
#ifndef VIDATTN_SPARSE_FIXED_REF
#define VIDATTN_SPARSE_FIXED_REF 1
#endif
#ifndef VIDATTN_SPLIT_FIXED_REF
#define VIDATTN_SPLIT_FIXED_REF 0
#endif

// With the fixed-reference softmax, sum each row's p in fp32 as exponentiated (one FADD per score, in the softmax)
// rather than after their bf16 rounding (add_packed_row_sum: one more integer op per score to unpack). At the power
// limit that op is worth far more than its issue slot: in full runs on one card +3-5% on Wan 1.3B (683 -> 700-713
// TFLOPS), LTX and Wan cross-attention, +4-7% at D = 64, seed 16K -1.6% (fifteenth session, calls 1-2). The cost is
// accuracy: O = sum p^ v / sum p carries the rounding's mismatch as a scale error of the row, up to 2^-9 of the
// dominant key's share of it. Relative L2 +0.4%; max |error| 1.31x cuDNN's at the median on randn (rounded sums 1.26x)
// and 2.2x (1.3x) where one late key takes half of each row; FlashAttention's bound holds with margin (0.64 of it at
// most), the GPU suite's. 0 gives the rounded sums back (dev/NOTES.md, fourteenth and fifteenth sessions).
#ifndef VIDATTN_ROW_SUM_UNROUNDED
#define VIDATTN_ROW_SUM_UNROUNDED 1
#endif

// Run S = Q K^T and P V of a tile's last, partial key block only over its keys (flash_fwd.cuh, block_steps): seed
// 4K's last block holds 48 of 176 keys. In steps of 16 keys, and only when that leaves out at least
// VIDATTN_NARROW_MIN_SAVED steps; each narrow width is one more copy of the wgmma sequences in the library.
// Measured (dev/NOTES.md, sixth session), against the full-width block: long shapes +2-4%. MIN_SAVED 1 (every
// partial block; d05d46c as committed) cost Wan cross-attention (10 of 11 steps) and FA-bench 1K (9) 1-4%, which 3
// gives back; 32-key steps (a build of that session) lost the long shapes' gain.
#ifndef VIDATTN_NARROW_TAIL
#define VIDATTN_NARROW_TAIL 1
#endif
#ifndef VIDATTN_NARROW_MIN_SAVED
#define VIDATTN_NARROW_MIN_SAVED 3
#endif

// The causal producer reads each K's and V's coordinates back from shared memory once, before the stage's empty
// wait (flash_fwd.cuh, producer, `early`), instead of in front of every chunk's TMA issue after it. Measured
// (dev/NOTES.md, fourteenth sitting; bench/results/h200_2026-12-03_fourteenth/): causal D=256 +16-20%, D=192 +7-10%,
// D=128 and D=64 within the A/A pair. 0 builds the previous producer, for the A/B.
#ifndef VIDATTN_CAUSAL_EARLY_KV_COORDS
#define VIDATTN_CAUSAL_EARLY_KV_COORDS 1
#endif

namespace vidattn::sm90 {

constexpr bool kNarrowTail = VIDATTN_NARROW_TAIL != 0;
constexpr bool kCausalEarlyKvCoords = VIDATTN_CAUSAL_EARLY_KV_COORDS != 0;
constexpr bool kRowSumUnrounded = VIDATTN_ROW_SUM_UNROUNDED != 0;

constexpr int kSmemBudget = 227 * 1024;  // per-block opt-in maximum on sm_90

// Rows of one TMA box / one 128-byte swizzle row: 64 bf16/fp16 elements. TMA's 128B swizzle caps the box's inner
// extent at 128 bytes, so a head dim of 128 is loaded as two 64-column chunks.
constexpr int kChunkCols = 64;
constexpr int kChunkBytes = kChunkCols * 2;

// kWGs: consumer warpgroups (64 query rows each). D=64 defaults to three (see kConsumerWGs); the launcher also
// has a two-warpgroup D=64 build for short queries, where 192-row tiles waste rows (capi.cu, pick_d64_wgs).
// kBN: the KV tile width (kBlockN); each head dim has its default, D=128 a second build for short keys.
constexpr int default_block_n(int head_dim) {
  return head_dim == 128   ? VIDATTN_BLOCK_N_D128
         : head_dim == 96  ? VIDATTN_BLOCK_N_D96
         : head_dim == 192 ? VIDATTN_BLOCK_N_D192
         : head_dim == 256 ? VIDATTN_BLOCK_N_D256
                           : VIDATTN_BLOCK_N_D64;
}

// The O-in-V builds of D=192 and 256 (FwdTraits::kOInV; capi.cu, vidattn_sm90_set_hd_narrow(3)): a build's kBN is its
// key-block width plus this flag. A flag in the width rather than a fourth template parameter, so that the kernel's
// many <kHeadDim, kWGs, kBN> signatures stay as they are.
constexpr int kOInVBuild = 1 << 12;
// The D=256 O-in-V build's variant whose epilogue stores O from registers (FwdTraits::kORegs; capi.cu,
// vidattn_sm90_set_hd_narrow(4)): kBN is its width plus kOInVBuild plus this flag.
constexpr int kORegsBuild = 1 << 13;
// The D=256 O-in-V build's variant whose Q buffer is released and loaded per consumer warpgroup (FwdTraits::kQHalves;
// capi.cu, vidattn_sm90_set_hd_narrow(5)): kBN is its width plus kOInVBuild plus this flag.
constexpr int kQHalvesBuild = 1 << 14;
// The D=256 O-in-V build's variant whose epilogue leaves its TMA stores' reads unwaited until the next tile's S_0
// (FwdTraits::kOReadLate; capi.cu, vidattn_sm90_set_hd_narrow(6)): kBN is its width plus kOInVBuild plus this flag.
constexpr int kOReadLateBuild = 1 << 15;
// The D=256 read-late O-in-V build's variant that narrows a tile's last, partial key block whenever it holds fewer
// steps than a full block (FwdTraits::kNarrowAll; capi.cu, vidattn_sm90_set_hd_narrow(7)): kBN is its width plus
// kOInVBuild plus kOReadLateBuild plus this flag.
constexpr int kNarrowAllBuild = 1 << 16;
// The routed D=256 build (O-in-V, read-late) run by CTA pairs that share K and V (FwdTraits::kPairs; capi.cu,
// vidattn_sm90_set_hd_narrow(8)): kBN is its width plus kOInVBuild plus kOReadLateBuild plus this flag.
constexpr int kPairBuild = 1 << 17;
// The block-sparse builds (FwdTraits::kSparse; capi.cu, VidattnFwdArgs::blk_cnt): D=64 and 128 at 128 x 128 tiles
// (D=64 also at 192 x 128, kSparseWGsD64Max), whose key blocks come from a per-tile list and whose rows are masked
// per 64 x 64 block (flash_fwd.cuh, sparse_block). kBN is the width plus this flag; it is a multiple of kOInVBuild,
// so kBlockN = kBN % kOInVBuild still reads the width.
constexpr int kSparseBuild = 1 << 18;
// The block-sparse layout's granularity in query rows and keys (a block mask's 64 x 64 blocks), and the tile the
// sparse builds run: two 64-row blocks of queries (one per consumer warpgroup) by two 64-key blocks.
constexpr int kSparseBlock = 64;
constexpr int kSparseTileM = 128;
// D=64 also has a block-sparse build with three consumer warpgroups (192-row tiles, as its dense long build;
// VidattnFwdArgs::blk_wgs): the tables then pair three 64-row blocks a tile, six bits an entry.
constexpr int kSparseWGsD64Max = 3;
constexpr int kSparseTileN = 128;

// Shared-memory columns of a head dim: whole 64-column chunks (D=96 takes two, its second half zero-filled).
constexpr int padded_head_dim(int head_dim) { return (head_dim + kChunkCols - 1) / kChunkCols * kChunkCols; }

template <int kHeadDim, int kWGs = (kHeadDim == 64 ? 3 : 2), int kBN = default_block_n(kHeadDim)>
struct FwdTraits {
  static_assert(kHeadDim == 64 || kHeadDim == 96 || kHeadDim == 128 || kHeadDim == 192 || kHeadDim == 256,
                "vidattn sm90 forward: head dim must be 64, 96, 128, 192 or 256");
  static constexpr int kHeadDimV = kHeadDim;
  // kOInV (D=192/256, bf16 A/B builds; kBN carries kOInVBuild): each consumer warpgroup writes its O boxes into one
  // of the two V stages instead of Q's buffer or a scratch, the stage its own last reads (and the other warpgroup's)
  // have finished with: warpgroup 0, which finishes first, the block before last's (where the next tile's V_0 loads),
  // warpgroup 1 the last block's. Q's buffer then goes back to the producer after the tile's last S = Q K^T as in the
  // narrow builds, so the next Q loads under the last P V and the epilogue (prefetched into L2 a tile ahead), and K_0,
  // K_1 of the next tile load before the producer waits for the O stores (o_done) to refill V_0 and V_1.
  static constexpr bool kOInV = (kBN & kOInVBuild) != 0;
  static_assert(!kOInV || kHeadDim >= 192, "O through V's stages: D=192 and 256 only");
  // Columns each smem row of Q, K and V holds (and each TMA load transfers, zero fill included): the math runs over
  // kHeadDim only (D/16 k-steps of S, a P V wgmma of N = D), so D=96 pays smem, not tensor-core work, for its pad.
  static constexpr int kHeadDimPad = padded_head_dim(kHeadDim);
  // wgmma's M is 64 per warpgroup; the consumer warpgroups share one Q tile so each K/V tile is read once for
  // all their rows. D=128: two (128 rows; S, P and O need 240 registers). D=64: three (192 rows; S, P and O fit
  // in 160, O being only 32), so each K/V byte fetched serves 1.5x the rows: measured +9 to +11% on the long D=64
  // shapes (dev/NOTES.md). D=96 has both (bf16), at N=96 on three (VIDATTN_BLOCK_N_D96_3WG).
  static constexpr int kConsumerWGs = kWGs;
  static_assert(kWGs == 2 || (kWGs == 3 && kHeadDim <= 96), "three consumer warpgroups fit only at D=64 and 96");
  static constexpr int kRowsPerWG = 64;
  static constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
  // KV tile: S (64 x kBlockN fp32), P (kBlockN/2 packed 16-bit) and O (64 x D fp32) all live in registers;
  // at D=128, N=128 that is 64 + 32 + 64 of the consumers' 240.
  static constexpr int kBlockN = kBN % kOInVBuild;
  // kORegs (kBN carries kORegsBuild, an O-in-V build): O leaves the epilogue from registers, 16-byte global stores
  // after a quad transpose (store_o_regs), instead of TMA stores out of the V stages. No V stage then waits for O's
  // stores (o_done), so the next tile's V_0 loads during this tile's last block, as K_0 does (dev/NOTES.md, "The
  // D=256 boundary: O from registers"). The V stages, Q and the ring are the O-in-V build's.
  static constexpr bool kORegs = (kBN & kORegsBuild) != 0;
  static_assert(!kORegs || (kBN & kOInVBuild) != 0, "O from registers: an O-in-V build's variant");
  // kQHalves (kBN carries kQHalvesBuild, an O-in-V build): Q's single buffer is two halves, one per consumer
  // warpgroup (its 64 rows of every chunk), each with its own q_full / q_empty: the producer loads warpgroup 0's half
  // of the next tile once warpgroup 0's last S = Q K^T has retired, without waiting for warpgroup 1's, half an
  // iteration later (dev/NOTES.md, "The D=256 boundary: a timeline, and Q released per warpgroup").
  static constexpr bool kQHalves = (kBN & kQHalvesBuild) != 0;
  static_assert(!kQHalves || (kBN & kOInVBuild) != 0, "Q per warpgroup: an O-in-V build's variant");
  // kOReadLate (kBN carries kOReadLateBuild, an O-in-V build): the epilogue writes O into its V stage and issues the
  // TMA stores as the O-in-V build does, but does not wait for the stores' reads of the stage there: that wait and
  // o_done (the producer's go-ahead to refill the stage) come in the next tile's prologue, right after S_0 is issued
  // and before the turn passes (consumer, flush_o). The whole store deferred, O held in registers across the
  // boundary as D=128 does, spilled (268 bytes; dev/NOTES.md, "The D=256 epilogue deferred").
  static constexpr bool kOReadLate = (kBN & kOReadLateBuild) != 0;
  static_assert(!kOReadLate || (kBN & kOInVBuild) != 0, "O's read wait deferred: an O-in-V build's variant");
  // kNarrowAll (kBN carries kNarrowAllBuild, an O-in-V build): a tile's last, partial key block runs S = Q K^T and
  // P V over its own steps even when that leaves out 1 or 2 of the 5 (flash_fwd.cuh, block_steps), not only 3 or
  // more (VIDATTN_NARROW_MIN_SAVED). D=256 at 1K keys ends every tile in a block of 4 steps, which the default runs
  // full width; a D=256 step is twice a D=128 step's tensor work, where narrowing by 1-2 steps lost 1-4%
  // (dev/NOTES.md, "The D=256 partial block narrowed by one step").
  static constexpr bool kNarrowAll = (kBN & kNarrowAllBuild) != 0;
  static_assert(!kNarrowAll || (kBN & kOInVBuild) != 0, "every partial block narrowed: an O-in-V build's variant");
  static_assert(kBlockN % 16 == 0 && kBlockN <= 256, "kBlockN: a wgmma N, multiple of 16, at most 256");
  // kSparse (kBN carries kSparseBuild): each tile runs the key blocks of its list (FwdParams::blk_list) with the 64 x 64
  // blocks of their bits unmasked, each warpgroup's fixed reference from its first block with a key (flash_fwd.cuh,
  // mainloop's ref_set) with the dense builds' redo, and no tail launch.
  static constexpr bool kSparse = (kBN & kSparseBuild) != 0;
  static_assert(!kSparse || (kBN == (kSparseTileN | kSparseBuild) &&
                             (kWGs * 64 == kSparseTileM || (kHeadDim == 64 && kWGs == kSparseWGsD64Max)) &&
                             (kHeadDim == 64 || kHeadDim == 128)),
                "block-sparse: the plain D=64 / D=128 build at 128 x 128 tiles, or D=64's at 192 x 128");
  // kPairs (kBN carries kPairBuild, a read-late O-in-V build): the main launch runs in clusters of two CTAs, the two
  // neighbouring Q tiles of a pair being of one (batch, head), so that they read the same K/V blocks in the same order.
  // Each CTA's producer loads half of every K and V block (half its 64-column chunks) into both CTAs' stages with TMA
  // multicast: the L2 -> shared traffic per query row halves (dev/NOTES.md "A multicast D=256 kernel"). The price is
  // a lock-step: a stage is refilled only once both CTAs' consumers have released it (remote arrivals on the empty
  // barriers), and O's stores into a V stage gate both producers (o_done). The tail launch runs without clusters.
  static constexpr bool kPairs = (kBN & kPairBuild) != 0;
  static_assert(!kPairs || (kOInV && kOReadLate && !kORegs && !kQHalves && !kNarrowAll),
                "CTA pairs: a variant of the read-late O-in-V build only");
  // The most 16-key steps a narrowed partial block runs (flash_fwd.cuh, block_steps): fewer than a full block by at
  // least VIDATTN_NARROW_MIN_SAVED, or by 1 with kNarrowAll.
  static constexpr int kNarrowMax = kBlockN / 16 - (kNarrowAll ? 1 : VIDATTN_NARROW_MIN_SAVED);
  // (block-sparse: a first-half-only block runs as a narrowed one of kBlockN / 32 steps, sparse_steps)
  static_assert(!kSparse || kNarrowMax >= kBlockN / 32, "block-sparse: half a block must be a narrow width");
  // As many K+V stages as shared memory holds next to Q (up to 4): at D=128, N=128 that is Q 32 KB + 2 x 64 KB.
  static constexpr int kQBytes = kBlockM * kHeadDimPad * 2;
  static constexpr int kStageBytes = 2 * kBlockN * kHeadDimPad * 2;
  // The epilogue's scratch: per consumer warp 16 rows x 64 columns of O (2 KB), see store_o. At D=128, N=176 it
  // takes 16 of the 17 KB left beside one Q buffer and two K/V stages.
  static constexpr int kOScratchBytes = kConsumerWGs * 4 * 16 * kChunkCols * 2;
  // kOInQ (D=192/256 only, where the scratch would leave fewer than 2 stages beside one Q buffer): each warp writes
  // its O boxes into its own 16 rows of Q's buffer (one box per 64-column chunk, in the chunk's own rows), which
  // its warpgroup's last S = Q K^T has finished reading. Q's buffer then goes back to the producer only once those
  // boxes' TMA stores have read them (consumer), so the O store cannot be deferred under the next tile's S_0,
  // which needs the next Q in the same buffer (kDeferOStore off).
  static constexpr bool kOInQ = !kOInV && VIDATTN_O_IN_Q != 0 && kHeadDim >= 192 &&
                                (kSmemBudget - 2048 - kOScratchBytes - kQBytes) / kStageBytes < 2;
  static constexpr int kFree = kSmemBudget - 2048 - (kOInQ || kOInV ? 0 : kOScratchBytes);
  // A second Q buffer lets the next tile's Q load a whole tile early; taken only when 2 K/V stages still fit.
  static constexpr int kQBuffers = (kFree - 2 * kQBytes) / kStageBytes >= 2 ? 2 : 1;
  static_assert(!kQHalves || (kQBuffers == 1 && kConsumerWGs == 2), "Q per warpgroup: one Q buffer, two halves");
  // Q's full / empty barriers: one pair per buffer, or per half (kQHalves); the rows of a Q box (the tensor map).
  static constexpr int kQBarriers = kQHalves ? kConsumerWGs : kQBuffers;
  static constexpr int kQBoxRows = kQHalves ? kRowsPerWG : kBlockM;
  static constexpr int kChunks = kHeadDimPad / kChunkCols;
  static constexpr int kFreeBesideQ = kFree - kQBuffers * kQBytes;
  // A scratch box per 64-column chunk of O, when 2 K/V stages still fit beside them: the epilogue then writes its
  // second half without waiting for the first half's TMA store to read the first (store_o). At D=128 that takes
  // N <= 128 (N=176 leaves no room); D=64 has one chunk.
  static constexpr int kOScratchSlots =
      kOInQ || kOInV || (VIDATTN_O_SCRATCH_SLOTS_MAX >= kChunks &&
                (kFreeBesideQ - (kChunks - 1) * kOScratchBytes) / kStageBytes >= 2)
          ? kChunks
          : 1;
  // No separate O scratch in shared memory where O's boxes go into Q's buffer or a V stage: SharedStorage keeps a
  // 16-byte stub there (the full scratch would put the O-in-V builds at 266 and 290 KB, over the 227 KB).
  static constexpr bool kOScratchStub = kOInQ || kOInV;
  // Elements from one of a warp's boxes to the next: adjacent in the scratch, a Q chunk apart with kOInQ.
  static constexpr int kOBoxStride = kOInQ ? kBlockM * kChunkCols : 16 * kChunkCols;
  static constexpr int kStagesFit =
      (kFreeBesideQ - (kOInQ || kOInV ? 0 : (kOScratchSlots - 1) * kOScratchBytes)) / kStageBytes;
  static constexpr int kStages = kStagesFit > 4 ? 4 : kStagesFit;
  static_assert(kStages >= 2, "tile too large: fewer than 2 K/V stages fit in shared memory");
  static constexpr bool kPingpong = VIDATTN_PINGPONG != 0;
  // kOInV: one V stage per consumer warpgroup's O, each warp's kChunks boxes of 16 x 64 in a row. Whoever wrote O into
  // a stage's rows before has had its store read before this warpgroup gets there only because the ping-pong orders
  // the two warpgroups' tile boundaries (consumer), hence the turn-taking is required.
  static_assert(!kOInV || (kStages == 2 && kConsumerWGs == 2 && kPingpong &&
                           4 * kChunks * 16 * kChunkCols * 2 <= kBlockN * kHeadDimPad * 2),
                "O through V's stages: two stages, two warpgroups taking turns, a warpgroup's O within a stage");
  static constexpr bool kQPrefetchL2 = VIDATTN_Q_L2_PREFETCH != 0 || kOInV;
  static constexpr bool kDeferOStore = VIDATTN_DEFER_O_STORE != 0 && !kOInQ && !kOInV;
  // Where Q has two buffers (the short-key D=128 build, D=64): measured ahead there and behind on the long D=128
  // shapes (dev/NOTES.md, ninth session, call 5), so the N=176 build keeps O's packing at the tile's end.
  // (block-sparse builds zero O at the tile start instead: a warpgroup's first block may skip its P V, sparse_steps)
  static constexpr bool kDeferONormalise =
      VIDATTN_DEFER_O_NORMALISE != 0 && kDeferOStore && kQBuffers == 2 && (kBN & kSparseBuild) == 0;
  static constexpr bool kKvRotate = VIDATTN_KV_ROTATE != 0;
  // Both CTAs of a pair must walk one block order, and each loads half of a block's chunks.
  static_assert(!kPairs || (!kKvRotate && kChunks % 2 == 0), "CTA pairs: one key order, whole chunks per CTA");
  static_assert(!kSparse || !kKvRotate, "block-sparse: the list's order");
  static constexpr bool kLateVWait = VIDATTN_LATE_V_WAIT != 0;
  static constexpr bool kQInRegs = kHeadDim == 128 && kBlockN <= VIDATTN_Q_IN_REGS_MAX_N;
  static constexpr bool kFixedRef = VIDATTN_FIXED_REF != 0;
  // Tiles a CTA can mark for a redo, one bit each (64 words: 2048 tiles per CTA, 270K tiles per launch on 132 SMs);
  // the host splits larger problems into several launches (redo_launch_tiles).
  static constexpr int kRedoWords = 64;

  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  // setmaxnreg budgets: the producer issues TMA from one thread and needs almost nothing; the consumers hold
  // S, O and P. 24*128 + 240*256 = 64512 <= 65536 registers per SM at one block per SM; with three consumer
  // warpgroups (D=64: S 64 + P 32 + O 32 at N=128) 24*128 + 160*384 = 64512.
  static constexpr uint32_t kProducerRegs = 24;
  static constexpr uint32_t kConsumerRegs = kConsumerWGs == 3 ? 160 : 240;
  // (Within the CTA's launch allocation, not the file: setmaxnreg moves only those; see Q8Traits, q8_fwd.cuh.)
  static constexpr uint32_t kLaunchRegs = 65536 / kThreads / 8 * 8;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= kLaunchRegs * kThreads,
                "setmaxnreg.inc would wait forever: the CTA's registers are those of its launch");
};

// The most tiles one persistent launch of `ctas` CTAs may run: a CTA marks at most 32 * kRedoWords of its tiles for a
// redo (flash_fwd.cuh, redo_bits), so the host splits a larger problem into several launches (capi.cu, capi_sparse.cu).
template <class T>
constexpr int64_t redo_launch_tiles(int ctas) {
  return static_cast<int64_t>(ctas) * 32 * T::kRedoWords;
}

}  // namespace vidattn::sm90
