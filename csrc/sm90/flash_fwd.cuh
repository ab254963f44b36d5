// Attention forward for sm_90a: O = softmax(Q K^T * scale) V, dense or (kCausal builds) with a causal mask. Persistent CTAs (one per SM) walk
// Q tiles of every (head, batch), 64 query rows per consumer warpgroup (two warpgroups at D=128, three at D=64).
// Warp-specialized: warpgroup 0 streams Q and K/V tiles with TMA into double-buffered Q and a ring of shared-memory
// stages that runs on across tiles, guarded by mbarriers; each consumer warpgroup runs S = Q K^T (wgmma, both
// operands in shared memory), a softmax in registers (base 2, scale folded into one FFMA; against the first key
// block's row max for bf16, with tiles that leave the safe range run again exactly), and O += P V (wgmma with P
// straight from registers), taking turns on the tensor cores. Key tails and per-batch kv_lens are
// masked in registers; O leaves through shared memory with TMA stores, which clip query tails. The kSplit build runs
// the tail launch's key ranges (capi.cu, plan_tail) and leaves unnormalised O for combine.cuh. The kCausal build
// visits each tile's key blocks only up to its last row's diagonal and masks the blocks that cross a row's diagonal
// (tile_work, mask_keys_causal; docs/guide/causal.md). The kPairs build (an A/B variant of the D=256 routed build) runs
// in CTA pairs that load each K/V block once for both (TMA multicast; FwdTraits::kPairs). Pure CUDA + PTX: no torch, no
// CUTLASS.
#pragma once
#include <cstdint>
#include <cuda.h>

#include "../common/special_regs.cuh"
#include "../tail_plan.h"  // the balanced tail's pieces (tile_work)
#include "row_sum.cuh"
#include "diag_timeline.cuh"
#include "fwd_params.h"
#include "ptx.cuh"
#include "tile_config.cuh"
#include "wgmma_ops.cuh"

namespace vidattn::sm90 {

// Every tile is stored as kChunks column chunks of [rows][64 elements], each row 128 bytes, 128B-swizzled by TMA
// (D=96: two chunks, the second half zero-filled; FwdTraits::kHeadDimPad).
// alignas(1024): the swizzle pattern repeats every 8 rows x 128 B, and descriptors assume atoms start aligned.
template <int kHeadDim, int kWGs, int kBN>
struct SharedStorage {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  alignas(1024) uint16_t q[T::kQBuffers][T::kBlockM * T::kHeadDimPad];
  alignas(1024) uint16_t k[T::kStages][T::kBlockN * T::kHeadDimPad];
  alignas(1024) uint16_t v[T::kStages][T::kBlockN * T::kHeadDimPad];
  // per consumer warp, see store_o; 1024-aligned so that a TMA store's 128B swizzle matches the layout written
  // (kOInQ, kOInV: the boxes are in q or v, and this is a 16-byte stub)
  alignas(1024) uint16_t o_scratch[T::kOScratchStub ? 1 : T::kConsumerWGs * 4]
                                  [T::kOScratchStub ? 8 : T::kOScratchSlots * 16 * kChunkCols];
  uint64_t q_full[T::kQBarriers];  // per Q buffer, or per warpgroup's half (kQHalves)
  uint64_t q_empty[T::kQBarriers];
  uint64_t k_full[T::kStages];
  uint64_t k_empty[T::kStages];
  uint64_t v_full[T::kStages];
  uint64_t v_empty[T::kStages];
  uint64_t redo_ready;                 // the consumers' redo marks are final (redo_tiles)
  uint32_t redo_bits[T::kRedoWords];   // bit L: this CTA's L-th tile must run again, exact (kFixedRef)
  int32_t sched_tile[4];  // causal builds: local tile L's index in slot L % 4 (producer, the causal loop)
  // causal builds, the producer's state parked out of its registers (see producer): the tile's first key block, K/V
  // head and batch, then the producer's local tile count
  int32_t prod_state[4];
  // kOInV: o_done[w] completes once per tile, when consumer warpgroup w's O stores have read its V stage (4
  // arrivals, one per warp); the producer refills that stage only after (last, so the other builds' offsets stay)
  uint64_t o_done[T::kOInV ? 2 : 1];
  // causal builds, the producer's redo walk parked beside its count (redo_causal_tiles): word index, remaining bits,
  // bound. After o_done so that no earlier member moves (the struct's 1024-byte alignment pads its end anyway).
  int32_t redo_walk[3];
  // kPairs: [0] completes when the peer's redo marks are in peer_bits, [1] when the peer makes no more remote arrivals
  // on this CTA's barriers (consumer). One unused word each in the other builds, after every other member.
  uint64_t pair_bar[T::kPairs ? 2 : 1];
  uint32_t peer_bits[T::kPairs ? T::kRedoWords : 1];
  // kSparse: per ring stage, the first key of the key block in it: the producer's own note from its K load to its V
  // load (the consumers read the tile's list from global memory themselves: sparse_next).
  int32_t blk_at[T::kSparse ? T::kStages : 1];
};

// Shared memory beside the dynamic buffer: the kernel declares none (its PTX has only the extern buffer), but
// cuobjdump -res-usage reports SHARED:1024 for every flash_fwd kernel, sm_90's per-block system reserve. Counted,
// so the check errs on the safe side: the largest builds (D=128 N=176, D=256 wide) then sit exactly at the limit.
constexpr size_t kStaticSmemBytes = 1024;
// The launcher's dynamic shared memory (capi.cu, launch): the storage and 1 KB to align it to 1024 B in-kernel
// (dynamic shared memory is only 16-byte aligned by contract).
template <int kHeadDim, int kWGs, int kBN>
constexpr size_t dynamic_smem_bytes() {
  return sizeof(SharedStorage<kHeadDim, kWGs, kBN>) + 1024;
}

constexpr float kLn2 = 0.693147180559945309f;

// Causal builds read the CTA's index and count afresh where used: held in registers across the producer's loop they
// spilled (its 24 registers).
// (common/special_regs.cuh: a volatile read of the special register.)
__device__ __forceinline__ int cta_index() { return static_cast<int>(sreg::ctaid_x()); }
__device__ __forceinline__ int cta_count() { return static_cast<int>(sreg::nctaid_x()); }

// Persistent tile order: m_block fastest, then head, then batch. The ~132 tiles in flight at once are neighbouring
// Q blocks of one head, so that head's K/V (16 MB at Wan 480p) is fetched from HBM once and then served by L2.
struct TileCoord {
  int m_block, head, batch;
};
__device__ __forceinline__ TileCoord decode_tile(int tile, int num_m_blocks, int heads) {
  const int hb = tile / num_m_blocks;
  return {tile - hb * num_m_blocks, hb % heads, hb / heads};
}
// Causal builds walk each head's Q blocks last first: a block's work grows with its index (its keys end at its
// diagonal), so each CTA meets the heavy blocks of a head before the light ones, and the last, partial round of the
// launch is made of the last head's lightest blocks (see local_tile for the balance across CTAs).
// The dynamic schedule (next_causal_tile) walks the list in groups of causal_group (batch, head) pairs, heaviest
// first across the group: Q block M - 1 of each of its heads, then M - 2, ... A CTA takes the next tile when it is
// free, so the launch ends balanced when its last tiles are light ones, which a list sorted by weight gives; the
// group's K/V (capi.cu: at most kCausalGroupBytes) stays what L2 holds. causal_group 1 (the static order's) is the
// head-major order above. Where the groups do not divide the pairs, the short group either comes last
// (causal_first_group 0) or opens the list (causal_first_group = its size): the launch then ends on a full group, whose
// light tiles fill the CTAs' last gaps, where a short last group's few heavy tiles go out late and end alone.
template <bool kCausal = false>
__device__ __forceinline__ TileCoord tile_coord(const FwdParams& p, int tile) {
  if constexpr (kCausal) {
    int r = tile + p.tile_base;
    int base = 0, hg = p.causal_first_group;
    const int lead = p.causal_first_group * p.num_m_blocks;
    if (r >= lead) {
      r -= lead;
      const int span = p.causal_group * p.num_m_blocks;
      const int g = r / span;
      r -= g * span;
      base = p.causal_first_group + g * p.causal_group;
      hg = min(p.causal_group, p.causal_pairs - base);  // the last group may be short
    }
    const int i = r / hg;
    const int hb = base + (r - i * hg);
    const int batch = hb / p.heads;
    return {p.num_m_blocks - 1 - i, hb - batch * p.heads, batch};
  }
  return decode_tile(tile + p.tile_base, p.num_m_blocks, p.heads);
}

// The dynamic causal schedule (p.sched != nullptr): p.sched[0] counts the tickets taken, p.sched[1] the CTAs done,
// each in its low 32 bits, the high 32 bits holding the launch's epoch. The workspace holds anything at launch, so
// each CTA first makes both words carry its launch's epoch (the first CTA to find another tag resets the word;
// the host never uses epoch 0), and the last CTA out writes 0 to both, so that a CUDA graph's replay (same epoch)
// starts from a word of another tag. After the two words, kRedoWords * 32 tile indices per CTA (the tiles it marked
// for a redo: its tiles are no longer a function of its index).
__device__ __forceinline__ void sched_claim(unsigned long long* word, uint32_t epoch) {
  unsigned long long old = atomicAdd(word, 0ull);
  while (static_cast<uint32_t>(old >> 32) != epoch) {
    const unsigned long long seen = atomicCAS(word, old, static_cast<unsigned long long>(epoch) << 32);
    if (seen == old) break;
    old = seen;
  }
}
// CTA c runs tile c first, then tile gridDim.x + (the tickets taken before its own).
__device__ __forceinline__ int next_causal_tile(const FwdParams& p) {
  return static_cast<int>(static_cast<uint32_t>(atomicAdd(p.sched, 1ull))) + cta_count();
}
// cta_index (not blockIdx.x): the address is then formed at each use, where hoisted out of the producer's redo loop
// its 64 bits spilled.
template <int kWords>
__device__ __forceinline__ int* redo_tile_ids(const FwdParams& p) {
  return reinterpret_cast<int*>(p.sched + 2) + cta_index() * 32 * kWords;
}

// The tile a CTA runs as its local-th: round-robin, blockIdx.x + local * gridDim.x. Causal builds snake instead
// (odd rounds run the CTAs in reverse order): with unequal tiles a plain round robin hands CTA c the tiles whose
// index is c mod gridDim.x in every round, and where gridDim.x and the Q block count share factors that is a fixed
// residue class of block indices, heavier for some CTAs than for others (132 CTAs over 64 blocks: 4 classes, up to
// 5% apart at 8K keys); reversing every other round pairs class r with class 3 - r. Producer and consumers walk the
// same order.
template <bool kCausal>
__device__ __forceinline__ int local_tile(int local) {
  if constexpr (kCausal) {
    const int g = cta_count(), c = cta_index();
    return local * g + ((local & 1) ? g - 1 - c : c);
  }
  const int base = local * static_cast<int>(gridDim.x);
  return static_cast<int>(blockIdx.x) + base;
}
__device__ __forceinline__ int kv_len_of(const FwdParams& p, int batch) {
  return p.kv_lens != nullptr ? max(0, min(p.seqlen_kv, p.kv_lens[batch])) : p.seqlen_kv;
}

// Key-block order (kKvRotate): tile t visits block (j + t mod n) mod n at step j. The online softmax does not care
// about the order, and every block below n holds at least one valid key, so any block may come first.
template <bool kRotate>
__device__ __forceinline__ int kv_rotation(int tile, int n_blocks) {
  if constexpr (kRotate) return n_blocks > 1 ? tile % n_blocks : 0;
  return 0;
}
template <bool kRotate>
__device__ __forceinline__ int kv_block(int j, int rot, int n_blocks) {
  if constexpr (kRotate) return j + rot >= n_blocks ? j + rot - n_blocks : j + rot;
  return j;
}

// kSparse: a tile's row in the block-sparse tables (FwdParams::blk_cnt).
__device__ __forceinline__ int sparse_tile(const FwdParams& p, const TileCoord& tc) {
  return (tc.batch * p.heads + tc.head) * p.num_m_blocks + tc.m_block;
}

// kSparse: the j-th entry of a tile's list: {first key / 64, 64 x 64 bits} (FwdParams::blk_list).
__device__ __forceinline__ int2 sparse_entry(const FwdParams& p, const TileCoord& tc, int j) {
  return p.blk_list[static_cast<int64_t>(sparse_tile(p, tc)) * p.blk_stride + j];
}

// One work item: a whole tile, or in the tail launch (kSplit, capi.cu) one of p.kv_splits contiguous key-block
// ranges of a tile, item t being range t % kv_splits of tile t / kv_splits; or, in the balanced tail (p.tail_chunk >
// 0), piece k of CTA g's chunk for item k * tail_ctas + g (tail_plan.h, balanced_piece). An absent piece (a chunk
// inside one tile has no second) ends the CTA's loop in producer and consumers alike (piece_absent).
// Causal builds (kCausal): kv_lens shortens the batch's keys first, then the mask aligns to them: query row i sees
// keys j < kv_len with j <= i + shift, shift = 0 (top-left) or kv_len - seqlen_q (bottom-right). A tile then needs
// keys up to its last row's diagonal only: kv_len is cut to kv_end = min(kv_len, (m_block + 1) * kBlockM + shift), and
// the blocks past it are neither loaded nor computed (a tile whose rows see no key at all has none: O = 0, LSE -inf).
// Within kv_end, row i's keys are the prefix [0, min(kv_end, i + shift + 1)), so key block 0, which every tile
// visits first, holds key 0 of every row that has a key.
struct TileWork {
  TileCoord tc;
  int kv_len;    // valid keys of the batch (causal: of the tile, kv_end above)
  int kv_first;  // first key block of this item
  int n_blocks;  // key blocks of this item (0 only when kv_len is, or a range is empty)
  int shift;     // causal only: the diagonal's offset, row i sees keys j <= i + shift
};
// An absent piece is always a CTA's last item (piece 1, or piece 0 of an empty chunk, whose piece 1 is absent too), so
// both loops stop at it without taking a local number: the redo pass's locals then follow the items that ran, whose
// Q fills and releases are the only ones the single-buffer builds' Q barrier parities count (call P50 hung when an
// absent piece took a number and a redone item then waited for a second release of Q that never came).
__device__ __forceinline__ bool piece_absent(const FwdParams& p, int item) {
  return p.tail_chunk > 0 && balanced_piece(item, p.tail_chunk, p.tail_blocks, p.tail_ctas, p.tail_tiles).absent;
}
// kSparse: the tile's key-block count from its list (blk_cnt); the blocks themselves come from it (sparse_entry).
template <int kN, bool kSplit, bool kCausal = false, int kM = 0, bool kSparse = false>
__device__ __forceinline__ TileWork tile_work(const FwdParams& p, int item) {
  static_assert(!(kCausal && kSplit), "causal launches have no tail launch (capi.cu)");
  int tile = item, range = 0;
  BalancedPiece piece{0, 0, 0, false};  // (tail_plan.h)
  if constexpr (kSplit) {
    if (p.tail_chunk > 0) {
      piece = balanced_piece(item, p.tail_chunk, p.tail_blocks, p.tail_ctas, p.tail_tiles);
      tile = piece.tile;
    } else {
      tile = item / p.kv_splits;
      range = item - tile * p.kv_splits;
    }
  }
  TileWork w;
  w.tc = tile_coord<kCausal>(p, tile);
  w.kv_len = kv_len_of(p, w.tc.batch);
  w.shift = 0;
  if constexpr (kCausal) {
    static_assert(kM > 0, "tile_work: causal needs the Q block's rows");
    if (p.causal_bottom_right) w.shift = w.kv_len - p.seqlen_q;
    const long long diag_end = static_cast<long long>(w.tc.m_block + 1) * kM + w.shift;
    w.kv_len = static_cast<int>(max(0ll, min(static_cast<long long>(w.kv_len), diag_end)));
  }
  const int n = (w.kv_len + kN - 1) / kN;
  if constexpr (kSplit) {
    if (p.tail_chunk > 0) {
      // clipped to the batch's key blocks (kv_lens): a piece past them holds no key and weighs nothing in the merge
      w.kv_first = min(piece.first, n);
      w.n_blocks = min(piece.end, n) - w.kv_first;
    } else {
      w.kv_first = range * n / p.kv_splits;
      w.n_blocks = (range + 1) * n / p.kv_splits - w.kv_first;
    }
  } else {
    w.kv_first = 0;
    w.n_blocks = n;
    if constexpr (kSparse) w.n_blocks = min(n, p.blk_cnt[sparse_tile(p, w.tc)]);
  }
  return w;
}

// Where a redo walk keeps its word index, the word's remaining bits and its bound (the first pass's tile count): in
// registers (RegWalk), or for the causal producer in three words of shared memory read back after each tile's loads
// (SmemWalk: held in registers across a tile's loads, beside the dynamic schedule's vector-register coordinates, they
// spilled the 24-register producer of the O-in-V causal build).
struct RegWalk {
  int w = 0;
  uint32_t b = 0;
  int n;
  __device__ explicit RegWalk(int n_local) : n(n_local) {}
  __device__ int word() const { return w; }
  __device__ void set_word(int x) { w = x; }
  __device__ uint32_t bits() const { return b; }
  __device__ void set_bits(uint32_t x) { b = x; }
  __device__ int bound() const { return n; }
};
struct SmemWalk {
  volatile int32_t* s;  // [0] word index, [1] remaining bits, [2] bound
  __device__ int word() const { return s[0]; }
  __device__ void set_word(int x) { s[0] = x; }
  __device__ uint32_t bits() const { return static_cast<uint32_t>(s[1]); }
  __device__ void set_bits(uint32_t x) { s[1] = static_cast<int32_t>(x); }
  __device__ int bound() const { return s[2]; }
};

// The walk of the redo bits every caller shares: the tiles of this CTA marked for a redo (bit L of `bits`: its L-th
// tile of the first pass, whose index `tile_of(L)` gives), in ascending order, each run with the local number `next()`
// hands out. Producer and consumers walk the same bits in the same order, the walk's state where `st` keeps it.
template <int kWords, typename Walk, typename Next, typename TileOf, typename F>
__device__ __forceinline__ void walk_redo_bits(const uint32_t* bits, Walk& st, Next&& next, TileOf&& tile_of,
                                               F&& run) {
#pragma unroll 1
  for (st.set_word(0); st.word() < kWords && 32 * st.word() < st.bound(); st.set_word(st.word() + 1)) {
    st.set_bits(bits[st.word()]);
#pragma unroll 1
    while (st.bits() != 0) {
      const uint32_t b = st.bits();
      const int bit = __ffs(b) - 1;
      st.set_bits(b & (b - 1));
      const int tile = tile_of(32 * st.word() + bit);
      run(tile, next());
    }
  }
}

// Non-causal builds: tile L is local_tile(L); the redone tiles run as local n_local, n_local + 1, ... after the
// n_local tiles of the first pass (Q buffers and the ring's stages carry on).
template <int kWords, bool kCausal = false, typename F>
__device__ __forceinline__ void redo_tiles(const uint32_t* bits, int n_local, F&& run) {
  int local = n_local;
  RegWalk st(n_local);
  walk_redo_bits<kWords>(bits, st, [&]() { return local++; }, [](int l) { return local_tile<kCausal>(l); }, run);
}

// Causal builds: the n_local tiles of the first pass are followed by the end-of-list fill (local n_local), and with
// the dynamic schedule a marked tile's index is the one its consumer recorded (redo_tile_ids).
template <int kWords>
__device__ __forceinline__ int causal_redo_tile(const FwdParams& p, int l) {
  return p.sched != nullptr ? redo_tile_ids<kWords>(p)[l] : local_tile<true>(l);
}
template <int kWords, typename F>
__device__ __forceinline__ void redo_causal_tiles(const FwdParams& p, const uint32_t* bits, int n_local, F&& run) {
  int local = n_local + 1;
  RegWalk st(n_local);
  walk_redo_bits<kWords>(bits, st, [&]() { return local++; },
                         [&](int l) { return causal_redo_tile<kWords>(p, l); }, run);
}
// The producer's: its local count in shared memory (*local, n_local on entry) as in its first pass, the walk's state
// in `walk` (SmemWalk).
template <int kWords, typename F>
__device__ __forceinline__ void redo_causal_tiles(const FwdParams& p, const uint32_t* bits, volatile int32_t* local,
                                                  volatile int32_t* walk, F&& run) {
  walk[2] = *local;
  *local = walk[2] + 1;
  SmemWalk st{walk};
  walk_redo_bits<kWords>(bits, st, [&]() {
    const int n = *local;
    *local = n + 1;
    return n;
  }, [&](int l) { return causal_redo_tile<kWords>(p, l); }, run);
}

template <bool B>
struct BoolTag {
  static constexpr bool value = B;
};

// One K or V block into a ring stage, kChunks TMA loads of 64 columns. In CTA pairs (kPairs) this CTA loads half of
// the chunks, rank r the r-th half, each multicast into the same stage of both CTAs and counted on both CTAs' `full`
// barrier, which expects the whole block: the peer's half may land before this CTA's expect_tx, which the barrier's
// transaction count allows (it completes only once the producer's own arrival is in too).
template <typename T>
__device__ __forceinline__ void load_kv_block(uint16_t* stage, const CUtensorMap* map, uint64_t* full, int row,
                                              int head, int batch) {
  if constexpr (T::kPairs) {
    constexpr int kHalf = T::kChunks / 2;
    const int c0 = static_cast<int>(ptx::cluster_ctarank()) * kHalf;
#pragma unroll 1
    for (int c = c0; c < c0 + kHalf; ++c)
      ptx::tma_load_4d_multicast(stage + c * T::kBlockN * kChunkCols, map, full, c * kChunkCols, row, head, batch, 0x3);
  } else {
#pragma unroll 1
    for (int c = 0; c < T::kChunks; ++c)
      ptx::tma_load_4d(stage + c * T::kBlockN * kChunkCols, map, full, c * kChunkCols, row, head, batch);
  }
}

// An arrival on a barrier of this CTA that the peer's producer waits on too, in CTA pairs (kPairs: a K/V stage's
// `empty`, whose next fill the peer writes half of; o_done, whose V stage the peer refills): on both CTAs' copies (this
// warp's reads of the stage are done; ptx::mbarrier_arrive_remote).
template <bool kPairs>
__device__ __forceinline__ void arrive_pair(uint64_t* bar) {
  ptx::mbarrier_arrive(bar);
  if constexpr (kPairs) ptx::mbarrier_arrive_remote(bar, ptx::cluster_ctarank() ^ 1u);
}

// Producer: one thread streams, tile after tile, Q (into whichever of the kQBuffers buffers the consumers released
// after their last S = Q K^T of the tile before) and the K/V ring. The ring runs on across tiles (tile t+1's K_0
// goes to the stage after tile t's last), so the next tile's first loads need not wait for this tile's last block;
// the consumer dispatches each tile on its start stage (mainloop_from) so stage indices stay compile-time offsets
// of the loop counter, in uniform registers (a plain carried counter measured 5% slower from R2UR moves). The
// phase of each stage is carried across tiles as one bit per stage.
// Causal builds: each tile's blocks are 0 .. n_blocks - 1 up to its diagonal (tile_work), the same count the
// consumers compute, so the ring's stage and phase accounting is unchanged; blocks past the diagonal are never loaded.
template <int kHeadDim, int kWGs, int kBN, bool kFixedRef, bool kSplit, bool kCausal>
__device__ __forceinline__ void producer(const FwdParams& p, SharedStorage<kHeadDim, kWGs, kBN>& s) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  // whole chunks: TMA counts a box's zero-filled columns (D=96's second half, a narrower caller's) as transferred
  constexpr uint32_t kQBytes = T::kBlockM * T::kHeadDimPad * sizeof(uint16_t);
  constexpr uint32_t kKVBytes = T::kBlockN * T::kHeadDimPad * sizeof(uint16_t);
  // bit s: parity of stage s's next K / V "empty" phase to wait for, xor 1
  uint32_t k_empty_phase = 0, v_empty_phase = 0;
  int start = 0;             // the ring runs on across tiles: tile t+1's K_0 goes where tile t left off
  // CTA pairs: the tiles before this one that stored their O through a V stage, those with keys (consumer, and
  // dev/probes/pair_protocol_sim.py for why a tile without keys must not take an o_done phase there). The peer's
  // o_done arrivals are ordered behind nothing of this CTA's Q: the parity waits stay within a phase because every tile
  // with keys waits for o_done[0] at its V_0 (the wait before bounds the next), and V_1, loaded only with two or more
  // blocks, comes after K_1, whose stage last held the previous keyed tile's last K (two stages: tile_config.cuh
  // asserts it for kOInV), released by all 16 warps after their flush of the keyed tile before. Loading V_0 or V_1
  // before K_1, or a third stage, would take that away. Named only under `if constexpr (T::kPairs)`: captured by the
  // loads' lambdas in the other builds, it moved the routed build's uniform registers around.
  int o_tiles = 0;
  // early (a BoolTag): the causal first pass reads each block's coordinates before the stage's wait, the redo pass per
  // chunk after it (kv_at below; VIDATTN_CAUSAL_EARLY_KV_COORDS=0: both passes per chunk, the previous producer).
  // redo (a BoolTag): the tile is a redone one (the O-in-V builds count the tiles that stored an O before it).
  auto produce = [&](int tile, int local, auto early, auto redo) {
    (void)redo;
    // Causal: the consumers read it once this tile's q_full phase completes (the arrive below releases it). Slot
    // local % 4 was last read at the start of tile local - 4, before the consumers released tile local - 3's Q buffer,
    // which this producer has waited for (two Q buffers at most).
    if constexpr (kCausal) s.sched_tile[local % 4] = tile;
    tl_producer_clock_pair(kSplit, local);  // timeline build only: the clock against the global timer
    const TileWork w = tile_work<T::kBlockN, kSplit, kCausal, T::kBlockM, T::kSparse>(p, tile);
    const TileCoord& tc = w.tc;
    const int n_blocks = w.n_blocks;
    // causal: ascending key blocks (block 0 first: it holds every non-empty row's first key, tile_work)
    const int rot = kv_rotation<T::kKvRotate && !kCausal>(tile, n_blocks);
    const int kv_head = tc.head / p.kv_group;  // grouped-query: one division per tile, in the producer only
    // kSparse: the key block of the tile's next K load (sparse_entry), read one load ahead
    int sp_next = 0;
    if constexpr (T::kSparse) {
      if (n_blocks > 0) sp_next = sparse_entry(p, tc, 0).x;
    }
    const int qb = local % T::kQBuffers;
    // Causal builds park the K/V coordinates in shared memory for the K/V loop and read them back (volatile, so not
    // kept in registers) at each load: the dynamic schedule's tile index is not warp-uniform, so its coordinates take
    // vector registers, and held across the loop beside its counters they overflowed the producer's 24 (a 24-byte
    // stack frame at D=128, 64 at D=64). A shared load per TMA issue costs the one producer thread nothing measurable.
    volatile int32_t* kv_coord = s.prod_state;
    if constexpr (kCausal) {
      kv_coord[0] = w.kv_first;
      kv_coord[1] = kv_head;
      kv_coord[2] = tc.batch;
    }
    auto load_q = [&]() {
      tl_producer_stamp(kSplit, local, kTlQEmptyWait);
      if constexpr (T::kQHalves) {
        // warpgroup w's rows of every chunk, each half as soon as its own warpgroup has released it (its last S)
#pragma unroll 1
        for (int w = 0; w < T::kConsumerWGs; ++w) {
          ptx::mbarrier_wait(&s.q_empty[w], (local & 1) ^ 1);
          ptx::mbarrier_arrive_expect_tx(&s.q_full[w], kQBytes / T::kConsumerWGs);
#pragma unroll 1
          for (int c = 0; c < T::kChunks; ++c) {
            ptx::tma_load_4d(s.q[0] + (c * T::kBlockM + w * T::kRowsPerWG) * kChunkCols, &p.tm_q, &s.q_full[w],
                             c * kChunkCols, tc.m_block * T::kBlockM + w * T::kRowsPerWG, tc.head, tc.batch);
          }
        }
      } else {
        // causal O-in-V (D=256): Q's empty barrier's address formed here, from a base the compiler cannot carry
        // over from an earlier tile (hoisted out of the first pass, it stayed live into the redo pass and spilled)
        SharedStorage<kHeadDim, kWGs, kBN>* sq = &s;
        if constexpr (kCausal && T::kOInV) asm volatile("" : "+l"(sq));
        ptx::mbarrier_wait(&sq->q_empty[qb], ((local / T::kQBuffers) & 1) ^ 1);
        ptx::mbarrier_arrive_expect_tx(&s.q_full[qb], kQBytes);
#pragma unroll 1
        for (int c = 0; c < T::kChunks; ++c) {
          ptx::tma_load_4d(s.q[qb] + c * T::kBlockM * kChunkCols, &p.tm_q, &s.q_full[qb], c * kChunkCols,
                           tc.m_block * T::kBlockM, tc.head, tc.batch);
        }
      }
      tl_producer_stamp(kSplit, local, kTlQIssued);
    };
    // Causal builds load Q first, so the tile's coordinates are dead before the K/V loop (the dynamic schedule's tile
    // index is not warp-uniform, so they take vector registers, and across the loop the producer's 24 spilled). With
    // two Q buffers (D=64, D=128) Q's buffer was released a tile ago; with one (D=192, D=256) the next tile's K_0
    // then waits with Q for this tile's last S: a Q load inside the loop, or block 0 peeled out of it, still spilled
    // the producer (24-68 bytes in the bf16 builds).
    if (kCausal || n_blocks == 0) load_q();
    if constexpr (T::kQPrefetchL2 && !kSplit) {  // (a tail launch runs one item per CTA: no next tile)
      // With one Q buffer the next tile's Q can only load after this tile's last S; fetched from HBM then, its
      // latency lands between tiles (short-KV shapes have a boundary every few blocks). Asked into L2 now, that
      // load later reads L2 instead.
      const int next = kCausal ? local_tile<kCausal>(local + 1) : tile + static_cast<int>(gridDim.x);
      if (T::kQBuffers == 1 && next < p.num_tiles) {
        const TileCoord nc = tile_coord<kCausal>(p, next);
#pragma unroll 1
        for (int c = 0; c < T::kChunks; ++c) {
#pragma unroll
          for (int r = 0; r < T::kBlockM; r += T::kQBoxRows)  // (the box: kQBoxRows rows)
            ptx::tma_prefetch_l2_4d(&p.tm_q, c * kChunkCols, nc.m_block * T::kBlockM + r, nc.head, nc.batch);
        }
      }
    }
    TlWaits<2> waits;  // timeline build only: how long the ring stayed full
    // Causal: block j's K/V coordinates, read back from shared memory. The first pass (early) reads them once per K
    // and per V, before the stage's empty wait, so they are in registers when the stage frees: read per chunk after
    // the wait (three dependent shared loads in front of each of the kChunks TMA issues) they held every K and V a few
    // hundred cycles past its stage's release, and with two stages the consumers waited for K (Nsight Compute at
    // D=256 8K: k_full 18% of the stall samples causal, 7% dense; dev/NOTES.md, "D=256 causal under FA3"). The redo
    // pass keeps the per-chunk reads: held across the chunks there, they spilled the 24- and 32-register producers.
    struct KvAt {
      int row, head, batch;
    };
    auto kv_at = [&](int j) { return KvAt{(kv_coord[0] + j) * T::kBlockN, kv_coord[1], kv_coord[2]}; };
    auto load_k = [&](int j) {
      const int stage = (start + j) % T::kStages;
      const uint32_t phase = (k_empty_phase >> stage) & 1;
      k_empty_phase ^= 1u << stage;
      KvAt at{};
      if constexpr (kCausal && decltype(early)::value) at = kv_at(j);
      const uint32_t t_wait = waits.start();
      ptx::mbarrier_wait(&s.k_empty[stage], phase ^ 1);
      waits.add(0, t_wait);
      if constexpr (!T::kSparse) ptx::mbarrier_arrive_expect_tx(&s.k_full[stage], kKVBytes);
      if constexpr (kCausal) {
#pragma unroll 1
        for (int c = 0; c < T::kChunks; ++c) {
          if constexpr (!decltype(early)::value) at = kv_at(j);
          ptx::tma_load_4d(s.k[stage] + c * T::kBlockN * kChunkCols, &p.tm_k, &s.k_full[stage], c * kChunkCols,
                           at.row, at.head, at.batch);
        }
      } else if constexpr (T::kSparse) {
        // Block j's key block was read a block ahead (its load in flight under the previous block's waits); the next
        // one's is issued here, before this stage's K goes out. V's load reads the first key back from the slot.
        const int row0 = sp_next * kSparseBlock;
        if (j + 1 < n_blocks) sp_next = sparse_entry(p, tc, j + 1).x;
        s.blk_at[stage] = row0;
        ptx::mbarrier_arrive_expect_tx(&s.k_full[stage], kKVBytes);
        load_kv_block<T>(s.k[stage], &p.tm_k, &s.k_full[stage], row0, kv_head, tc.batch);
      } else {
        load_kv_block<T>(s.k[stage], &p.tm_k, &s.k_full[stage],
                         (w.kv_first + kv_block<T::kKvRotate>(j, rot, n_blocks)) * T::kBlockN, kv_head, tc.batch);
      }
    };
    auto load_v = [&](int j) {
      const int stage = (start + j) % T::kStages;
      // V's stages turn in step with K's (load_k(j) just flipped this stage's K bit): causal builds read V's parity
      // from K's bits, which frees the register the dynamic schedule's tile coordinates need (Q loaded first, above).
      uint32_t phase;
      if constexpr (kCausal) {
        phase = ((k_empty_phase >> stage) & 1) ^ 1;
      } else {
        phase = (v_empty_phase >> stage) & 1;
        v_empty_phase ^= 1u << stage;
      }
      KvAt at{};  // causal: as load_k reads them
      if constexpr (kCausal && decltype(early)::value) at = kv_at(j);
      const uint32_t t_wait = waits.start();
      ptx::mbarrier_wait(&s.v_empty[stage], phase ^ 1);
      if constexpr (T::kOInV && !T::kORegs && !kSplit) {
        // the previous tile left warpgroup j's O in the stage V_j goes to (consumer); once per tile, in tile order
        // o_done completes once per tile that stored an O: in causal builds the end-of-list fill took a local number
        // and stored none, so a redone tile has local - 1 O-storing tiles before it
        int o_before;
        if constexpr (T::kPairs)
          o_before = o_tiles;
        else
          o_before = local - (kCausal && decltype(redo)::value ? 1 : 0);
        if (j < 2 && o_before > 0) ptx::mbarrier_wait(&s.o_done[j], (o_before - 1) & 1);
      }
      waits.add(1, t_wait);
      ptx::mbarrier_arrive_expect_tx(&s.v_full[stage], kKVBytes);
      if constexpr (kCausal) {
#pragma unroll 1
        for (int c = 0; c < T::kChunks; ++c) {
          if constexpr (!decltype(early)::value) at = kv_at(j);
          ptx::tma_load_4d(s.v[stage] + c * T::kBlockN * kChunkCols, &p.tm_v, &s.v_full[stage], c * kChunkCols,
                           at.row, at.head, at.batch);
        }
      } else if constexpr (T::kSparse) {
        // (this stage's slot holds block j's first key: load_k(j) wrote it, and only load_k(j + kStages) rewrites it)
        load_kv_block<T>(s.v[stage], &p.tm_v, &s.v_full[stage], s.blk_at[stage], kv_head, tc.batch);
      } else {
        load_kv_block<T>(s.v[stage], &p.tm_v, &s.v_full[stage],
                         (w.kv_first + kv_block<T::kKvRotate>(j, rot, n_blocks)) * T::kBlockN, kv_head, tc.batch);
      }
    };
    if constexpr (kCausal) {
      // Rolled: unrolled (four blocks a pass at D=64), its copies' addresses spilled the producer's 24 registers.
#pragma unroll 1
      for (int j = 0; j < n_blocks; ++j) {
        load_k(j);
        load_v(j);
      }
    } else {
      // K_0 before Q: K_0's slot frees during the previous tile, Q's (single) buffer only at its last S. K_{j+1}
      // before V_j measured slower with the late V wait (dev/experiments/k_ahead.patch, tenth session). kOInV: K_1
      // before V_0, whose stage may wait for the previous tile's O stores, so the next tile's S_0 and S_1 need not
      // wait for them.
      constexpr bool kK1First = T::kOInV && !kSplit;
      for (int j = 0; j < n_blocks; ++j) {
        if (!(kK1First && j == 1)) load_k(j);
        if (j == 0) load_q();
        if (kK1First && j == 0 && n_blocks > 1) load_k(1);
        load_v(j);
      }
    }
    tl_producer_value(kSplit, local, kTlKEmptyWaitSum, waits.get(0));
    tl_producer_value(kSplit, local, kTlVEmptyWaitSum, waits.get(1));
    start = (start + n_blocks) % T::kStages;
    if constexpr (T::kPairs) o_tiles += n_blocks > 0 ? 1 : 0;
  };
  int local = 0;
  if constexpr (kCausal) {
    // Dynamic (p.sched) or static, the consumers learn each tile from its Q fill (sched_tile), and a fill of no bytes
    // whose tile is past the list ends their loop; they release it like an empty tile.
    constexpr int kCap = 32 * T::kRedoWords;  // a CTA marks at most this many of its tiles (redo_bits)
    // The local count stays in shared memory across a tile's loads, read back after (prod_state[3]; see kv_coord).
    volatile int32_t* const n_local = s.prod_state + 3;
    *n_local = 0;
#pragma unroll 1
    for (int tile = local_tile<kCausal>(0); tile < p.num_tiles;) {
      const int l = *n_local;
      *n_local = l + 1;
      produce(tile, l, BoolTag<kCausalEarlyKvCoords>{}, BoolTag<false>{});
      // The counter is claimed for this launch only once the first tile's loads are out (its tile, this CTA's index,
      // needs no ticket): every CTA claims at once at launch, a contended read and CAS on one word, a few us that on
      // a short problem (1K tokens: ~100 us in all) the first loads would otherwise wait for. The CTAs-done word is
      // claimed at the end, before this CTA counts itself.
      if (l == 0 && p.sched != nullptr) sched_claim(p.sched, p.sched_epoch);
      // The ticket is taken after this tile's last loads: its latency (an L2 atomic) passes while the producer would
      // wait for a ring stage anyway. (Taken a tile ahead, it held one more register than the producer's 24: spills.)
      const int next = *n_local;
      tile = p.sched == nullptr ? local_tile<kCausal>(next) : next < kCap ? next_causal_tile(p) : p.num_tiles;
    }
    local = *n_local;
    const int qb = local % T::kQBuffers;
    s.sched_tile[local % 4] = p.num_tiles;
    ptx::mbarrier_wait(&s.q_empty[qb], ((local / T::kQBuffers) & 1) ^ 1);
    // q_full's address formed after the wait (the count read back): held across it, it spilled the 24 registers
    ptx::mbarrier_arrive(&s.q_full[*n_local % T::kQBuffers]);
    if (p.sched != nullptr) {
      // Every CTA's last ticket is taken before it counts itself done, so the last one out may reset the words.
      sched_claim(p.sched + 1, p.sched_epoch);
      __threadfence();
      if (static_cast<uint32_t>(atomicAdd(p.sched + 1, 1ull)) == gridDim.x - 1) {
        __threadfence();
        atomicExch(p.sched, 0ull);
        atomicExch(p.sched + 1, 0ull);
      }
    }
    if constexpr (kFixedRef) {
      ptx::mbarrier_wait(&s.redo_ready, 0);
      redo_causal_tiles<T::kRedoWords>(p, s.redo_bits, n_local, s.redo_walk,
                                       [&](int tile, int l) { produce(tile, l, BoolTag<false>{}, BoolTag<true>{}); });
    }
    return;
  } else {
    for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, ++local) {
      if (kSplit && piece_absent(p, tile)) break;  // (the consumers stop there too)
      produce(tile, local, BoolTag<true>{}, BoolTag<false>{});
    }
  }
  if constexpr (kFixedRef) {
    // Then the tiles the consumers marked, in the order they run them (redo_tiles): once their marks are final.
    ptx::mbarrier_wait(&s.redo_ready, 0);
    redo_tiles<T::kRedoWords, kCausal>(s.redo_bits, local,
                                       [&](int tile, int l) { produce(tile, l, BoolTag<false>{}, BoolTag<true>{}); });
  }
}

// Quad reduction: the 4 threads of a quad hold the same two rows of a wgmma accumulator.
__device__ __forceinline__ float quad_max(float x) {
  x = fmaxf(x, __shfl_xor_sync(0xffffffff, x, 1));
  return fmaxf(x, __shfl_xor_sync(0xffffffff, x, 2));
}
__device__ __forceinline__ float quad_sum(float x) {
  x += __shfl_xor_sync(0xffffffff, x, 1);
  return x + __shfl_xor_sync(0xffffffff, x, 2);
}

// ---- consumer building blocks: each one step of the algorithm, all operating on one thread's fragments ----------

// Causal blocks that cross a row's diagonal (tile_work): this thread's rows r and r + 8 see the keys below
// lim[r] = min(kv_end, diag + 8 r), diag = (row r) + shift + 1; the rest get -inf. kv_end also cuts the keys past the
// tile's last block, as mask_keys does with kv_len. lim may be <= kv0 (a row with no key in this block, or none at all).
template <int kN>
__device__ __forceinline__ void mask_keys_causal(float (&sacc)[kN / 2], int kv0, int kv_end, int diag,
                                                 int col_in_group) {
  const float kNegInf = -__int_as_float(0x7f800000);
  const int lim0 = min(kv_end, diag) - kv0 - col_in_group, lim1 = min(kv_end, diag + 8) - kv0 - col_in_group;
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (8 * i + e >= lim0) sacc[4 * i + e] = kNegInf;
      if (8 * i + e >= lim1) sacc[4 * i + 2 + e] = kNegInf;
    }
  }
}

// Keys at or past kv_len (sequence tail, or text padding through kv_lens) get score -inf, so exp2 makes them 0.
template <int kN>
__device__ __forceinline__ void mask_keys(float (&sacc)[kN / 2], int kv0, int kv_len, int col_in_group) {
  const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 2; ++e) {
      if (kv0 + 8 * i + col_in_group + e >= kv_len) {
        sacc[4 * i + e] = kNegInf;
        sacc[4 * i + 2 + e] = kNegInf;
      }
    }
  }
}

// The exponentials of 8-column group i of S (this thread's two pairs, rows r and r + 8): p = 2^(s*scale_log2 +
// neg[row]), one FFMA + one MUFU each; neg[row] = -(the row's reference) * scale_log2.
template <int kN>
__device__ __forceinline__ void exp2_group(float (&sacc)[kN / 2], int i, const float (&neg)[2], float scale_log2) {
  sacc[4 * i + 0] = ptx::exp2_approx(fmaf(sacc[4 * i + 0], scale_log2, neg[0]));
  sacc[4 * i + 1] = ptx::exp2_approx(fmaf(sacc[4 * i + 1], scale_log2, neg[0]));
  sacc[4 * i + 2] = ptx::exp2_approx(fmaf(sacc[4 * i + 2], scale_log2, neg[1]));
  sacc[4 * i + 3] = ptx::exp2_approx(fmaf(sacc[4 * i + 3], scale_log2, neg[1]));
}

// A key block's first key, and (kSparse) this warpgroup's two bits of its 64 x 64 blocks: from the tile's list entry
// (sparse_next read it a block ahead), or from the block index.
template <typename T>
__device__ __forceinline__ int2 block_at(int2 entry, int block, int cwg) {
  if constexpr (T::kSparse) {
    // Warp-uniform by construction, and said so with a shuffle from lane 0: loaded from memory, ptxas cannot tell,
    // and serialised every wgmma behind the branches the bits steer (sparse_steps: 580 wgmma waits in the D=128 build
    // instead of 32).
    return {__shfl_sync(0xffffffffu, entry.x * kSparseBlock, 0),
            __shfl_sync(0xffffffffu, (entry.y >> (2 * cwg)) & 3, 0)};
  } else {
    return {block * T::kBlockN, 3};
  }
}

// kSparse: entry j of the tile's list (row: FwdParams::blk_list at the tile), or nothing past the list's end. The
// consumers read the list themselves, a block ahead (its global load under the block before), rather than from a slot
// the producer fills: every lane reads, and only lane 0 of a warp releases a stage, which racecheck reported as
// hazards on such a slot even behind a __syncwarp.
template <bool kSparse>
__device__ __forceinline__ int2 sparse_next(const int2* row, int j, int n_blocks) {
  if constexpr (kSparse) {
    if (j < n_blocks) return row[j];
  }
  return int2{0, 0};
}

// kSparse: the block's 64-key halves whose bit is clear get -inf in this warpgroup's rows (the accumulator layout of
// mask_keys: group i of 8 columns is sacc[4 i .. 4 i + 3]). The bits are the warpgroup's, so the branch is uniform.
template <int kN>
__device__ __forceinline__ void mask_sparse(float (&sacc)[kN / 2], int bits) {
  constexpr int kGroups = kSparseBlock / 8;
#pragma unroll
  for (int c = 0; c < kN / kSparseBlock; ++c) {
    if (((bits >> c) & 1) == 0) {
#pragma unroll
      for (int i = c * kGroups; i < (c + 1) * kGroups; ++i) {
#pragma unroll
        for (int e = 0; e < 4; ++e) sacc[4 * i + e] = -__int_as_float(0x7f800000);
      }
    }
  }
}

// kSparse: whether a key block holds scores of this warpgroup's, from its two bits (block_at): online_softmax's
// `any`. (A block of which it needs only the first half is exponentiated whole: a break out of the unrolled loop at
// 64 columns cost the other blocks more than it saved, P85-P87, and a branch around the fixed path's second half
// cost the full block about 3% at D=64, P95-P96.)
__device__ __forceinline__ bool sparse_any(int bits) { return bits != 0; }

// Online softmax in base 2: p = 2^(s*scale_log2 - m*scale_log2), one FFMA + one MUFU per score. Exponentiates
// sacc in place, updates the running max and (per-thread partial) sum, and returns the factor O must be scaled by.
// kEmptyRows (causal builds, a tile's first block): a row may have no key at all (bottom-right with kv_len below
// seqlen_q); its max stays -inf, and -inf - -inf would make it NaN. It takes 0 as its max instead: every p of it is
// 2^-inf = 0, its sum stays 0, and the epilogue writes O = 0 and LSE = -inf.
// kKeepNegInf (block-sparse builds): a row may have no key in any block, the first included; the reference is 0
// then, as with kEmptyRows, but the row's max stays -inf, so that a later block's max replaces it whatever its value
// (with 0 kept, a row whose scores all lie below 2^-126 of it would sum to 0).
// kKeepNegInf builds take `any` (sparse_any): whether the block holds any score of this warpgroup's. Without one,
// every score of the block is -inf for it (a block none of its bits names, mask_sparse): its exponentials are
// skipped and the one 16-key step its P V runs (sparse_steps) gets P = 0. The max pass still runs, so alpha and the
// sum come out as the exponentials of -inf would leave them (1 and unchanged, or 0 on a zero O for a row that has met
// no key yet). A masked half of a block it does compute is exponentiated to 0 with the rest.
template <int kN, bool kSumHere = true, bool kEmptyRows = false, bool kKeepNegInf = false>
__device__ __forceinline__ void online_softmax(float (&sacc)[kN / 2], float (&row_max)[2], float (&row_sum)[2],
                                               float (&alpha)[2], float scale_log2, bool any = true) {
  // Row max in kMaxChains independent chains per row, folded at the end: every exponential waits for it, and one
  // chain of kN/8 dependent FMNMX (16 at D=64) was the longest stretch of the softmax's critical path.
  constexpr int kMaxChains = 4;
  float part[2][kMaxChains];
#pragma unroll
  for (int c = 0; c < kMaxChains; ++c) {
    part[0][c] = fmaxf(sacc[4 * c], sacc[4 * c + 1]);
    part[1][c] = fmaxf(sacc[4 * c + 2], sacc[4 * c + 3]);
  }
#pragma unroll
  for (int i = kMaxChains; i < kN / 8; ++i) {
    part[0][i % kMaxChains] = fmaxf(part[0][i % kMaxChains], fmaxf(sacc[4 * i], sacc[4 * i + 1]));
    part[1][i % kMaxChains] = fmaxf(part[1][i % kMaxChains], fmaxf(sacc[4 * i + 2], sacc[4 * i + 3]));
  }
  float mx[2];
#pragma unroll
  for (int r = 0; r < 2; ++r)
    mx[r] = fmaxf(fmaxf(fmaxf(part[r][0], part[r][1]), fmaxf(part[r][2], part[r][3])), row_max[r]);
  float neg_ms[2];
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    mx[r] = quad_max(mx[r]);
    const float raw = mx[r];
    if constexpr (kEmptyRows || kKeepNegInf) mx[r] = mx[r] == -__int_as_float(0x7f800000) ? 0.f : mx[r];
    if constexpr (VIDATTN_DIAG_SOFTMAX == 1) mx[r] = 0.f;  // diagnostic: the max path above is dead code now
    // Key 0 of tile 0 is always valid (a tile exists only when kv_len >= 1), so mx is finite; on the first tile
    // alpha = 2^-inf = 0 and multiplies the still-zero O and sum.
    alpha[r] = ptx::exp2_approx((row_max[r] - mx[r]) * scale_log2);
    neg_ms[r] = -mx[r] * scale_log2;
    row_max[r] = kKeepNegInf ? raw : mx[r];
  }
  float tile_sum[2] = {0.f, 0.f};
  if (kKeepNegInf && !any) {
#pragma unroll
    for (int e = 0; e < 8; ++e) sacc[e] = 0.f;
  } else {
#pragma unroll
    for (int i = 0; i < kN / 8; ++i) {
      if constexpr (VIDATTN_DIAG_SOFTMAX == 2) {  // diagnostic: no MUFU
        sacc[4 * i + 0] = fmaf(sacc[4 * i + 0], scale_log2, neg_ms[0]);
        sacc[4 * i + 1] = fmaf(sacc[4 * i + 1], scale_log2, neg_ms[0]);
        sacc[4 * i + 2] = fmaf(sacc[4 * i + 2], scale_log2, neg_ms[1]);
        sacc[4 * i + 3] = fmaf(sacc[4 * i + 3], scale_log2, neg_ms[1]);
      } else {
        exp2_group<kN>(sacc, i, neg_ms, scale_log2);
      }
      if constexpr (kSumHere && VIDATTN_DIAG_SOFTMAX != 3) {  // (3, diagnostic: no row sum)
        tile_sum[0] += sacc[4 * i + 0] + sacc[4 * i + 1];
        tile_sum[1] += sacc[4 * i + 2] + sacc[4 * i + 3];
      }
    }
  }
#pragma unroll
  for (int r = 0; r < 2; ++r) row_sum[r] = row_sum[r] * alpha[r] + tile_sum[r];
}

// Softmax against a fixed reference (kFixedRef): every block after a row's first is exponentiated against that first
// block's row max m0, p = 2^(s*scale_log2 - m0*scale_log2) (summed here, kSumHere, or after P's bf16 rounding in
// add_packed_row_sum: VIDATTN_ROW_SUM_UNROUNDED); no row max, no quad shuffles, no factor for O. The algebra is exact
// for any reference (O and the sum share it, and the epilogue divides it out, LSE = m0 + log2 l). What a reference
// below the row's true max risks is range: p grows by 2^(jump) for a later score above m0, and fp32 holds 2^128. The
// epilogue checks the final row sum l (>= 1, since m0's own key gives 2^0): l <= 2^64 bounds every p, hence O <= 2^64
// sum |v|, far from overflow; a tile with a row past that (or NaN) is marked and run again with the exact online
// softmax (redo_tiles). Precision: no p underflows that the exact softmax would keep, but P's bf16 rounding falls
// differently (there a row's largest p is exactly 1; here a later key that dominates its row carries up to 2^-8
// relative rounding in its weight, and with the unrounded sum, the default, a scale error of the row as well): relative
// L2 error 1.00-1.04x cuDNN's, max |error| 1.3x cuDNN's at the median on short randn rows and 2.2x where a late key
// takes half of each row, within FlashAttention's test bound (dev/NOTES.md, fourteenth and fifteenth sessions).
//
// kBits (block-sparse builds): `bits` are this warpgroup's (block_at), and a 64-key half whose bit is clear takes -inf
// as its offset, so its p come out 0 from the FFMA every score runs anyway: mask_sparse's 64 FSELs a block (which
// ptxas made of its tests, and a block with every bit set paid for nothing) are left to the online blocks. A score
// of +inf or NaN in a masked half then gives NaN instead of 0; the row sum carries it to the redo, whose online
// softmax masks with mask_sparse. (Not in the diagnostic build without row sums, VIDATTN_DIAG_SOFTMAX=3.)
template <int kN, bool kSumHere, bool kBits = false>
__device__ __forceinline__ void softmax_fixed_ref(float (&sacc)[kN / 2], const float (&row_max)[2], float (&row_sum)[2],
                                                  float scale_log2, int bits = 0) {
  constexpr bool kSum = kSumHere && VIDATTN_DIAG_SOFTMAX != 3;  // (3, diagnostic: no row sum, as online_softmax)
  constexpr int kParts = kBits ? kN / kSparseBlock : 1;  // offsets: one per 64-key half (kBits), else one
  float neg_ref[kParts][2];
#pragma unroll
  for (int h = 0; h < kParts; ++h) {
    const bool keep = !kBits || ((bits >> h) & 1) != 0;
#pragma unroll
    for (int r = 0; r < 2; ++r) neg_ref[h][r] = keep ? -row_max[r] * scale_log2 : -__int_as_float(0x7f800000);
  }
  float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int i = 0; i < kN / 8; ++i) {
    exp2_group<kN>(sacc, i, neg_ref[kBits ? i / (kSparseBlock / 8) : 0], scale_log2);
    if constexpr (kSum) {
      part[0][i % 2] += sacc[4 * i + 0] + sacc[4 * i + 1];
      part[1][i % 2] += sacc[4 * i + 2] + sacc[4 * i + 3];
    }
  }
  if constexpr (kSum) {
    row_sum[0] += part[0][0] + part[0][1];
    row_sum[1] += part[1][0] + part[1][1];
  }
}

// Row sums of P as P V will see it (the fixed reference's sums with -DVIDATTN_ROW_SUM_UNROUNDED=0; the default sums p
// unrounded, in softmax_fixed_ref, one integer op per score cheaper: tile_config.cuh): of the bf16-rounded values
// (pack_p's fragments), so that O = sum p^ v / sum p^ is an exact weighted mean of V's rows. With the running max as
// reference (the exact softmax, and cuDNN) a row's largest p is 1, which bf16 holds exactly; against a fixed reference
// it is any value and rounds by up to 2^-9, and summing the unrounded p then left that error in the output (max |err|
// up to 2x cuDNN's on rows dominated by few keys: run22). bf16 to fp32 is a shift: the high half masked, the low half
// moved up. Fragment r of each 16-key group holds row r % 2 (pack_p).
template <int kN>
__device__ __forceinline__ void add_packed_row_sum(const uint32_t (&pa)[kN / 16][4], float (&row_sum)[2]) {
  if constexpr (VIDATTN_DIAG_SOFTMAX == 3) return;  // diagnostic: no row sums (the first block's come here too)
  float part[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) {
      const float hi = __uint_as_float(pa[kk][r] & 0xffff0000u), lo = __uint_as_float(pa[kk][r] << 16);
      part[r % 2][r / 2] += hi + lo;
    }
  }
  row_sum[0] += part[0][0] + part[0][1];
  row_sum[1] += part[1][0] + part[1][1];
}

// bf16 only: P is packed to the input type for P V, and fp16 overflows at 65504, so an fp16 P leaves no room for
// p > 1 (the smoke test's score ramp made it inf); fp16 launches run the exact online softmax.
template <bool kFp16>
constexpr bool fixed_ref_softmax(bool enabled) {
  return enabled && !kFp16;
}

// The largest row sum the fixed-reference softmax accepts (see softmax_fixed_ref).
constexpr float kFixedRefMaxSum = 18446744073709551616.f;  // 2^64

template <int kD>
__device__ __forceinline__ void rescale_o(float (&o)[kD / 2], const float (&alpha)[2]) {
  if constexpr (VIDATTN_DIAG_SOFTMAX == 4) return;  // diagnostic: no O rescale
#pragma unroll
  for (int i = 0; i < kD / 8; ++i) {
    o[4 * i + 0] *= alpha[0];
    o[4 * i + 1] *= alpha[0];
    o[4 * i + 2] *= alpha[1];
    o[4 * i + 3] *= alpha[1];
  }
}

// P to 16-bit A fragments: S's accumulator layout (rows r, r+8; column pairs) is exactly wgmma's register-A layout
// for m64k16, so no data moves between threads.
template <int kN, bool kFp16>
__device__ __forceinline__ void pack_p(const float (&sacc)[kN / 2], uint32_t (&pa)[kN / 16][4]) {
#pragma unroll
  for (int kk = 0; kk < kN / 16; ++kk) {
#pragma unroll
    for (int r = 0; r < 4; ++r) pa[kk][r] = ptx::pack2<kFp16>(sacc[8 * kk + 2 * r], sacc[8 * kk + 2 * r + 1]);
  }
}

template <int N>
__device__ __forceinline__ void fence_frag(uint32_t (&a)[N][4]) {
#pragma unroll
  for (int i = 0; i < N; ++i) {
#pragma unroll
    for (int r = 0; r < 4; ++r) asm volatile("" : "+r"(a[i][r])::"memory");
  }
}

// This warpgroup's Q for S = Q K^T: its rows in shared memory, and with kQInRegs (VIDATTN_Q_IN_REGS_MAX_N) a copy in
// registers in wgmma's A fragment layout, one [4] per 16-column k-step, loaded once per tile (load_q_regs).
template <int kHeadDim, bool kRegs>
struct QOperand {
  uint32_t smem;
  uint32_t a[kRegs ? kHeadDim / 16 : 1][4];
};
template <int kHeadDim, int kWGs, int kBN>
using QOp = QOperand<kHeadDim, FwdTraits<kHeadDim, kWGs, kBN>::kQInRegs>;

// ldmatrix of this warp's 16 rows, 16 columns per k-step. Q sits in 64-column chunks of 128-byte rows with TMA's
// 128-byte swizzle (16-byte unit u of row r at u ^ (r % 8)); the warpgroup's rows start 1024-byte aligned.
template <int kHeadDim, int kWGs, int kBN>
__device__ __forceinline__ void load_q_regs(QOp<kHeadDim, kWGs, kBN>& q, int warp, int lane) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  if constexpr (T::kQInRegs) {
    const int r = 16 * warp + (lane & 7) + (lane & 8);
#pragma unroll
    for (int kk = 0; kk < kHeadDim / 16; ++kk) {
      const int chunk = kk / 4, unit = (kk % 4) * 2 + (lane >> 4);
      ptx::ldmatrix_x4(q.smem + chunk * T::kBlockM * kChunkBytes + r * kChunkBytes + ((unit ^ (r & 7)) << 4), q.a[kk]);
    }
  }
}

// S = Q K^T: D/16 wgmmas over the head dim; Q (A) and K (B) both K-major, 8-row core groups 1024 B apart (Q from
// registers with kQInRegs). N: the keys computed, kBlockN, or fewer for a tile's last, partial block
// (issue_qk_block).
template <int kHeadDim, int kWGs, int kBN, bool kFp16, int N = FwdTraits<kHeadDim, kWGs, kBN>::kBlockN>
__device__ __forceinline__ void issue_qk(float (&sacc)[N / 2], const QOp<kHeadDim, kWGs, kBN>& q, uint32_t k_smem) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
#pragma unroll
  for (int kk = 0; kk < kHeadDim / 16; ++kk) {
    const uint32_t chunk = kk / 4, within = (kk % 4) * 32;  // 4 k-steps of 16 elements per 128-byte row
    const uint64_t db = ptx::make_smem_desc_sw128(k_smem + chunk * T::kBlockN * kChunkBytes + within, 16, 1024);
    if constexpr (T::kQInRegs) {
      ptx::Wgmma<N, kFp16>::template rs<0>(sacc, q.a[kk], db, kk > 0);  // B (K) K-major
    } else {
      const uint64_t da = ptx::make_smem_desc_sw128(q.smem + chunk * T::kBlockM * kChunkBytes + within, 16, 1024);
      ptx::Wgmma<N, kFp16>::ss(sacc, da, db, kk > 0);
    }
  }
  ptx::wgmma_commit();
}

// O += P V: one wgmma per 16 keys. V sits MN-major (rows = keys): SBO steps 8 keys, LBO steps 64-column chunks.
// kSteps < kBlockN / 16 for a partial block: the steps past its last valid key hold P = 0.
// first (kDeferONormalise only): the tile's first P V, whose first step overwrites O instead of adding to it, so O
// need not be zeroed at the tile start and can still hold the previous tile's output until then.
template <int kHeadDim, int kWGs, int kBN, bool kFp16, int kSteps = FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 16>
__device__ __forceinline__ void issue_pv(float (&o)[kHeadDim / 2],
                                         const uint32_t (&pa)[FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 16][4],
                                         uint32_t v_smem, bool first = false) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
#pragma unroll
  for (int kk = 0; kk < kSteps; ++kk) {
    const uint64_t db = ptx::make_smem_desc_sw128(v_smem + kk * 16 * kChunkBytes, T::kBlockN * kChunkBytes, 1024);
    if constexpr (T::kDeferONormalise)
      ptx::Wgmma<kHeadDim, kFp16>::rs(o, pa[kk], db, kk > 0 || !first);
    else
      ptx::Wgmma<kHeadDim, kFp16>::rs(o, pa[kk], db, 1);
  }
  ptx::wgmma_commit();
}

// The 16-key steps S and P V run over for the block starting at key kv0: kN / 16, or fewer for a partial block,
// at most kMax (a narrowed partial block: FwdTraits::kNarrowMax, from VIDATTN_NARROW_MIN_SAVED or kNarrowAll).
template <int kN, int kMax>
__device__ __forceinline__ int block_steps(int kv0, int kv_len) {
  if constexpr (!kNarrowTail) return kN / 16;
  if (kv0 + kN <= kv_len) return kN / 16;
  const int steps = (kv_len - kv0 + 15) / 16;
  return steps <= kMax ? steps : kN / 16;
}

// Block-sparse builds: the 16-key steps this warpgroup runs S and P V over, from its two bits of the block (block_at)
// and the block's own steps (block_steps): one without a bit (an eighth of the block's tensor work, whose scores are
// masked and whose P is 0), the first half's only when the second half's bit is clear, else the block's. Not none:
// a path that issued no wgmma (an empty commit group in its place) made ptxas serialise every wgmma of the D=64 build
// (968 waits instead of 56; dev/NOTES.md, "The sparse kernel's own pipeline").
template <int kN, bool kSparse>
__device__ __forceinline__ int sparse_steps(int bits, int steps) {
  if constexpr (!kSparse) return steps;
  if (bits == 0) return 1;
  if (bits == 1) return min(steps, kN / 32);
  return steps;
}

// Keys past kv_len inside a tile's partial key block, made zeros in V before this warpgroup's P V reads them. P is 0
// there, but the tensor cores' 0 * NaN is NaN: an unwritten key/value slot behind a batch's kv_lens holding NaN or Inf
// in V reached every row (dev/NOTES.md, "Keys past kv_lens holding NaN"). K needs nothing: a masked score is set to
// -inf (mask_keys, a select). Rows past seqlen_kv need nothing either: TMA fills rows outside the tensor with zeros,
// so callers run this only with kv_lens. Rows [row0, row1) of every 64-column chunk of the stage: a 128B-swizzled row
// is one whole 128-byte line of its chunk (the swizzle moves 16-byte units only within the line), so the rows are one
// contiguous byte range a chunk, written in 16-byte units by the warpgroup's 128 threads. Both warpgroups of a tile
// write the same zeros into the stage, each before its own P V, so neither can read anything but zeros there; the
// producer refills the stage only after both have released it, and an O stored through a V stage (kOInV) goes into it
// only after every warpgroup's last P V of it. The fence orders this thread's writes before the async proxy's reads
// (wgmma), and a barrier of the warpgroup's 128 threads puts all of their writes before any of its warps issues the
// wgmma: its own (kBarrier), or the caller's next bar.sync where one follows before the wgmma (the ping-pong's turn,
// sched_wait: P63 measured the extra barrier and fence at +1.8% / +3.2% on text-padded cross-attention).
enum class ZeroVBarrier : uint32_t { kBase = 8 };  // 8..10, one a consumer warpgroup (3..5: ping-pong, 7: redo)
template <typename T, bool kBarrier>
__device__ __forceinline__ void zero_v_rows(uint16_t* stage, int row0, int row1, int cwg) {
  const uint32_t base = ptx::smem_addr(stage) + static_cast<uint32_t>(row0 * kChunkBytes);
  const int units = (row1 - row0) * 8;  // 16-byte units a chunk
  const int tid = static_cast<int>(threadIdx.x % 128);
#pragma unroll 1
  for (int c = 0; c < T::kChunks; ++c) {
#pragma unroll 1
    for (int u = tid; u < units; u += 128)
      ptx::st_shared_zero16(base + static_cast<uint32_t>(c * T::kBlockN * kChunkBytes + u * 16));
  }
  ptx::fence_proxy_async_smem();
  if constexpr (kBarrier) ptx::named_barrier_sync(static_cast<uint32_t>(ZeroVBarrier::kBase) + cwg, 128);
}

template <int V>
struct IntTag {
  static constexpr int value = V;
};
// f(IntTag<steps>{}) for the steps of a narrowed block (block_steps: 1 .. kMax): a chain of compares, run once per
// tile at most. steps is the same in every thread of the warpgroup (wgmma needs it).
template <int kMax, int kC = 1, typename F>
__device__ __forceinline__ void with_partial_steps(int steps, F&& f) {
  if constexpr (kC < kMax) {
    if (steps != kC) {
      with_partial_steps<kMax, kC + 1>(steps, f);
      return;
    }
  }
  f(IntTag<kC>{});
}

// S of one key block: issued, followed by `after` (the overlapped P V and the turn's pass), then waited for with
// wgmma_wait<kWait>. A tile's last block is partial unless kBlockN divides the keys (seed 4K: 48 of 176 keys), and
// its S then runs only steps * 16 keys wide, into an accumulator of its own that is copied into sacc after the wait,
// -inf past it (one block per tile pays the copies); mask_keys then masks the computed keys past the last valid one
// as for a full block. ptxas serialised every wgmma of the kernel (C7511) when the narrow wgmma wrote the leading
// registers of sacc itself, and injected its own warpgroup.arrive (C7519) when the fence stood before the branch.
template <int kHeadDim, int kWGs, int kBN, bool kFp16, int kWait, typename After>
__device__ __forceinline__ void issue_qk_block(int steps, float (&sacc)[FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 2],
                                               const QOp<kHeadDim, kWGs, kBN>& q, uint32_t k_smem, After&& after) {
  constexpr int kN = FwdTraits<kHeadDim, kWGs, kBN>::kBlockN;
  if (steps == kN / 16) {
    ptx::wgmma_fence();
    issue_qk<kHeadDim, kWGs, kBN, kFp16>(sacc, q, k_smem);
    after();
    ptx::wgmma_wait<kWait>();
    ptx::fence_regs(sacc);
  } else {
    with_partial_steps<FwdTraits<kHeadDim, kWGs, kBN>::kNarrowMax>(steps, [&](auto c) {
      constexpr int kCols = decltype(c)::value * 16;
      float part[kCols / 2];
      ptx::wgmma_fence();
      issue_qk<kHeadDim, kWGs, kBN, kFp16, kCols>(part, q, k_smem);
      after();
      ptx::wgmma_wait<kWait>();
      ptx::fence_regs(part);
      const float kNegInf = -__int_as_float(0x7f800000);
#pragma unroll
      for (int i = 0; i < kN / 2; ++i) sacc[i] = i < kCols / 2 ? part[i] : kNegInf;
    });
  }
}

// O += P V of the block whose P is in pa, over its steps only (issue_qk_block).
template <int kHeadDim, int kWGs, int kBN, bool kFp16>
__device__ __forceinline__ void issue_pv_block(int steps, float (&o)[kHeadDim / 2],
                                               const uint32_t (&pa)[FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 16][4],
                                               uint32_t v_smem, bool first = false) {
  constexpr int kN = FwdTraits<kHeadDim, kWGs, kBN>::kBlockN;
  if (steps == kN / 16) {
    ptx::wgmma_fence();
    issue_pv<kHeadDim, kWGs, kBN, kFp16>(o, pa, v_smem, first);
  } else {
    with_partial_steps<FwdTraits<kHeadDim, kWGs, kBN>::kNarrowMax>(steps, [&](auto c) {
      ptx::wgmma_fence();
      issue_pv<kHeadDim, kWGs, kBN, kFp16, decltype(c)::value>(o, pa, v_smem, first);
    });
  }
}

// Ping-pong between the consumer warpgroups: each takes a turn to issue its wgmmas, so one warpgroup's softmax
// runs while another's GEMMs own the tensor cores. Barrier kBase + w (256 threads: the passer's 128 arrive, w's 128
// sync) = "warpgroup w may issue"; the turn goes round 0 -> 1 (-> 2) -> 0. It passes continuously across tiles
// (all warpgroups have the same issue points per tile), so they stay out of phase through tile boundaries instead
// of re-synchronising at every tile: measured on short-KV shapes, where boundaries are frequent.
enum class SchedBarrier : uint32_t { kBase = 3 };
template <bool kPingpong>
__device__ __forceinline__ void sched_wait(int cwg) {
  if constexpr (kPingpong) ptx::named_barrier_sync(static_cast<uint32_t>(SchedBarrier::kBase) + cwg, 256);
}
template <bool kPingpong, int kWGs = 2>
__device__ __forceinline__ void sched_pass(int cwg) {
  // The turn goes round the consumer warpgroups in order (0 -> 1 -> ... -> 0).
  if constexpr (kPingpong)
    ptx::named_barrier_arrive(static_cast<uint32_t>(SchedBarrier::kBase) + (cwg + 1 == kWGs ? 0 : cwg + 1), 256);
}

// Epilogue: normalise O, write it with stmatrix into a per-warp 2 KB shared-memory scratch (16 rows x 64 columns
// in the accumulator layout, no shuffles), and let one lane store that box with TMA; twice at D=128. Stored
// straight from the fragments (4 bytes a thread: eight rows of 16 bytes per warp instruction), O cost Wan
// cross-attention 14% of its time (a build without the O stores measured 1.018x cuDNN against 0.876x); 16-byte
// stores from the scratch won back most of it (0.954-0.972x), the TMA store the rest (0.994x; dev/NOTES.md).
// Scratch rows are 128 bytes with the 16-byte chunk index xor-ed by the row (mod 8) in a 1024-aligned buffer:
// TMA's 128B swizzle, and the eight rows of each 8x8 stmatrix hit all banks once. Rows past seqlen_q lie outside
// the tensor map and are not written.
// kSlots (FwdTraits::kOScratchSlots): boxes in this warp's scratch; half h goes to box h % kSlots, and waits only
// for the store that last read that box (the bulk groups of one thread complete in order). kStride
// (FwdTraits::kOBoxStride): elements from one box to the next (a Q chunk with kOInQ).
// The boxes of O: word(g, i) is the i-th 32-bit register (two 16-bit values) of 8-column groups g, g + 1 for
// stmatrix (i = 0, 2: row r; 1, 3: row r + 8), computed on the spot (store_o) or packed earlier (pack_o).
template <int kHeadDim, int kSlots, int kStride = 16 * kChunkCols, typename Word>
__device__ __forceinline__ void store_o_boxes(const FwdParams& p, const TileCoord& tc, int warp_row0,
                                              uint16_t* scratch, Word&& word) {
  const int lane = ptx::lane_id();  // not the caller's lane: see lane_id (at D=64 with three warpgroups it spilled)
  const uint32_t scratch_addr = ptx::smem_addr(scratch);
  // This lane's stmatrix row address: matrix m = lane / 8 is (rows 8 * (m % 2) .., column group 2c + m / 2).
  const int m = lane / 8, st_row = lane % 8 + 8 * (m & 1);
#pragma unroll
  for (int h = 0; h < (kHeadDim + kChunkCols - 1) / kChunkCols; ++h) {
    constexpr int kBoxElems = 16 * kChunkCols;
    static_assert(kStride >= kBoxElems, "O scratch boxes overlap");
    uint16_t* box = scratch + (h % kSlots) * kStride;
    const uint32_t base = scratch_addr + (h % kSlots) * kStride * 2;
    // Lane 0's TMA store that last read this box (the other half, or the last tile's) has finished reading it.
    if (lane == 0) ptx::bulk_wait_group_read<kSlots - 1>();
    __syncwarp();
#pragma unroll
    for (int c = 0; c < 4; ++c) {
      const int g = 8 * h + 2 * c;  // the 8-column groups g and g + 1
      const int chunk = 2 * c + (m >> 1);
      // D=96's last box holds 32 columns: the rest of it is never read (the store clips at the caller's head dim)
      if (g < kHeadDim / 8)
        ptx::stmatrix_x4(base + st_row * 128 + ((chunk ^ (st_row & 7)) << 4), word(g, 0), word(g, 1), word(g, 2),
                         word(g, 3));
    }
    ptx::fence_proxy_async_smem();  // each lane's stmatrix writes, before the async proxy reads them
    __syncwarp();
    // The diagnostic build tests a runtime value the compiler cannot fold, so the work above stays.
    if (lane == 0 && !(VIDATTN_DIAG_SKIP_O_STORE && p.seqlen_q > 0)) {
      ptx::tma_store_4d(&p.tm_o, box, h * kChunkCols, warp_row0, tc.head, tc.batch);
      ptx::bulk_commit_group();
    }
  }
}

// 1 / row sum, or 0 for a row without keys (kv_len == 0: O = 0); NaN for a NaN sum (row_sum.cuh).
__device__ __forceinline__ void inv_row_sums(const float (&row_sum)[2], float (&inv)[2]) {
#pragma unroll
  for (int r = 0; r < 2; ++r) inv[r] = row_has_sum(row_sum[r]) ? ptx::rcp_approx(row_sum[r]) : 0.f;
}

// store_o_boxes's word(g, i) of O scaled by inv (1 / row sum: inv_row_sums).
template <int kHeadDim, bool kFp16>
__device__ __forceinline__ uint32_t o_word(const float (&o)[kHeadDim / 2], const float (&inv)[2], int g, int i) {
  return ptx::pack2<kFp16>(o[4 * g + 2 * i] * inv[i % 2], o[4 * g + 2 * i + 1] * inv[i % 2]);
}

// O normalised and packed to 16 bits in the order store_o_boxes takes it: the deferred epilogue (kDeferOStore)
// holds these 32 registers instead of O's 64 until the next tile's S_0 is on the tensor cores.
template <int kHeadDim, bool kFp16>
__device__ __forceinline__ void pack_o(const float (&o)[kHeadDim / 2], const float (&row_sum)[2],
                                       uint32_t (&opk)[kHeadDim / 4]) {
  float inv[2];
  inv_row_sums(row_sum, inv);
#pragma unroll
  for (int g = 0; g < kHeadDim / 8; g += 2) {
#pragma unroll
    for (int i = 0; i < 4; ++i) opk[2 * g + i] = o_word<kHeadDim, kFp16>(o, inv, g, i);
  }
}

template <int kHeadDim, int kSlots>
__device__ __forceinline__ void store_packed_o(const FwdParams& p, const TileCoord& tc, int warp_row0,
                                               uint16_t* scratch, const uint32_t (&opk)[kHeadDim / 4]) {
  store_o_boxes<kHeadDim, kSlots>(p, tc, warp_row0, scratch, [&](int g, int i) { return opk[2 * g + i]; });
}

// O scaled by inv (1 / row sum, inv_row_sums) and stored.
template <int kHeadDim, bool kFp16, int kSlots, int kStride = 16 * kChunkCols>
__device__ __forceinline__ void store_o_scaled(const FwdParams& p, const TileCoord& tc, int warp_row0,
                                               uint16_t* scratch, const float (&o)[kHeadDim / 2],
                                               const float (&inv)[2]) {
  store_o_boxes<kHeadDim, kSlots, kStride>(p, tc, warp_row0, scratch,
                                  [&](int g, int i) { return o_word<kHeadDim, kFp16>(o, inv, g, i); });
}

template <int kHeadDim, bool kFp16, int kSlots, int kStride = 16 * kChunkCols>
__device__ __forceinline__ void store_o(const FwdParams& p, const TileCoord& tc, int warp_row0, uint16_t* scratch,
                                        const float (&o)[kHeadDim / 2], const float (&row_sum)[2]) {
  float inv[2];
  inv_row_sums(row_sum, inv);
  store_o_scaled<kHeadDim, kFp16, kSlots, kStride>(p, tc, warp_row0, scratch, o, inv);
}

// The 4 x 4 transpose of 32-bit words across a quad: lane q's w[j] becomes lane j's w[q]. Two exchanges (lanes 2
// apart swap the off-diagonal 2 x 2 blocks, neighbours transpose each block), two shuffles each; the selects keep
// every register index a constant (a dynamically indexed array would go to local memory).
__device__ __forceinline__ void quad_transpose(uint32_t (&w)[4], int q) {
  const bool hi = (q & 2) != 0, odd = (q & 1) != 0;
  uint32_t a = __shfl_xor_sync(0xffffffff, hi ? w[0] : w[2], 2);
  uint32_t b = __shfl_xor_sync(0xffffffff, hi ? w[1] : w[3], 2);
  w[0] = hi ? a : w[0];
  w[1] = hi ? b : w[1];
  w[2] = hi ? w[2] : a;
  w[3] = hi ? w[3] : b;
  a = __shfl_xor_sync(0xffffffff, odd ? w[0] : w[1], 1);
  b = __shfl_xor_sync(0xffffffff, odd ? w[2] : w[3], 1);
  w[0] = odd ? a : w[0];
  w[2] = odd ? b : w[2];
  w[1] = odd ? w[1] : a;
  w[3] = odd ? w[3] : b;
}

// The epilogue's O straight from registers (FwdTraits::kORegs; row sums already reduced over the quad): no shared
// memory, so no V stage waits for it. A quad holds 8 columns of each 8-column group of its two rows, 4 bytes a lane;
// after quad_transpose of 4 groups' words each lane holds one group's 16 contiguous bytes (lane q: group 4s + q), one
// 16-byte store (a warp writes 64 contiguous bytes of each of 8 rows per store). Rows past seqlen_q and columns past
// the caller's head dim (a multiple of 8, so a 16-byte piece is wholly in or out) are not stored, as TMA clips them.
template <int kHeadDim, bool kFp16>
__device__ __forceinline__ void store_o_regs(const FwdParams& p, const TileCoord& tc, int warp_row0,
                                             const float (&o)[kHeadDim / 2], const float (&row_sum)[2]) {
  static_assert(kHeadDim % 32 == 0, "store_o_regs: whole sets of 4 column groups");
  const int lane = ptx::lane_id(), q = lane % 4;
  float inv[2];
  inv_row_sums(row_sum, inv);
#pragma unroll
  for (int r = 0; r < 2; ++r) {
    const int row = warp_row0 + lane / 4 + 8 * r;
    uint16_t* out = p.o + tc.batch * p.o_stride[0] + static_cast<int64_t>(row) * p.o_stride[1] +
                    tc.head * p.o_stride[2] + 8 * q;
    const bool row_in = row < p.seqlen_q;
#pragma unroll
    for (int set = 0; set < kHeadDim / 32; ++set) {
      uint32_t w[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const int g = 4 * set + j;
        w[j] = ptx::pack2<kFp16>(o[4 * g + 2 * r] * inv[r], o[4 * g + 2 * r + 1] * inv[r]);
      }
      quad_transpose(w, q);
      if (row_in && 32 * set + 8 * q < p.head_dim)
        *reinterpret_cast<uint4*>(out + 32 * set) = make_uint4(w[0], w[1], w[2], w[3]);
    }
  }
}

// Each row's LSE, if asked (row sums already reduced over the quad).
__device__ __forceinline__ void write_lse(const FwdParams& p, const TileCoord& tc, int warp_row0, int lane,
                                          const float (&row_max)[2], const float (&row_sum)[2]) {
  const float kNegInf = -__int_as_float(0x7f800000);
  const int row0 = warp_row0 + lane / 4;
  if (p.lse != nullptr && lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row0 + 8 * r;
      if (row < p.seqlen_q) {
        const float lse = row_has_sum(row_sum[r]) ? (row_max[r] * p.scale_log2 + __log2f(row_sum[r])) * kLn2 : kNegInf;
        p.lse[(static_cast<int64_t>(tc.batch) * p.heads + tc.head) * p.seqlen_q + row] = lse;
      }
    }
  }
}

// The first row of this warp's 16 in the output.
template <int kHeadDim, int kWGs, int kBN>
__device__ __forceinline__ int warp_first_row(const TileCoord& tc, int cwg, int warp) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  return tc.m_block * T::kBlockM + cwg * T::kRowsPerWG + warp * 16;
}

// Epilogue of one tile (row sums already reduced over the quad): O normalised and stored, LSE if asked.
template <int kHeadDim, int kWGs, int kBN, bool kFp16>
__device__ __forceinline__ void finish_tile(const FwdParams& p, const TileCoord& tc, int cwg, int warp, int lane,
                                            uint16_t* scratch, float (&o)[kHeadDim / 2], const float (&row_max)[2],
                                            const float (&row_sum)[2]) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  const int warp_row0 = warp_first_row<kHeadDim, kWGs, kBN>(tc, cwg, warp);
  store_o<kHeadDim, kFp16, T::kOScratchSlots, T::kOBoxStride>(p, tc, warp_row0, scratch, o, row_sum);
  write_lse(p, tc, warp_row0, lane, row_max, row_sum);
}

// Epilogue of a work item of the tail launch (kSplit): its unnormalised O in fp32 and each row's (max * scale_log2,
// sum) go to the workspace, item t's rows at [t * kBlockM, (t + 1) * kBlockM); combine_kernel (combine.cuh) merges
// the items of a tile and stores O. Plain 8-byte stores: a tail launch has at most one item per SM.
template <int kHeadDim, int kWGs, int kBN>
__device__ __forceinline__ void store_partial(const FwdParams& p, int item, int cwg, int warp, int lane,
                                              const float (&o)[kHeadDim / 2], const float (&row_max)[2],
                                              const float (&row_sum)[2]) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  const int64_t row0 = static_cast<int64_t>(item) * T::kBlockM + cwg * T::kRowsPerWG + warp * 16 + lane / 4;
  float* out = p.ws_o + row0 * kHeadDim + 2 * (lane % 4);
#pragma unroll
  for (int i = 0; i < kHeadDim / 8; ++i) {
    *reinterpret_cast<float2*>(out + 8 * i) = make_float2(o[4 * i + 0], o[4 * i + 1]);
    *reinterpret_cast<float2*>(out + 8 * kHeadDim + 8 * i) = make_float2(o[4 * i + 2], o[4 * i + 3]);
  }
  if (lane % 4 == 0) {
#pragma unroll
    for (int r = 0; r < 2; ++r)
      *reinterpret_cast<float2*>(p.ws_ml + 2 * (row0 + 8 * r)) = make_float2(row_max[r] * p.scale_log2, row_sum[r]);
  }
}

// One tile's K/V loop, starting at ring stage kStart. A template per start stage keeps every stage index a
// function of the loop counter alone, so the wgmma descriptors stay in uniform registers while the ring runs on
// across tiles (the next tile's first K/V loads no longer wait for this tile's last block to be released).
// kCausal: kv_len is the tile's kv_end (tile_work) and diag this thread's first row's diagonal (mask_keys_causal).
template <int kHeadDim, int kWGs, int kBN, bool kFp16, bool kFixed, bool kCausal, int kStart, typename Flush>
__device__ __forceinline__ void mainloop(const FwdParams& p, SharedStorage<kHeadDim, kWGs, kBN>& s, int cwg,
                                         const QOp<kHeadDim, kWGs, kBN>& q,
                                         int qb, int n_blocks, int kv_first, int rot, int kv_len, int col_in_group,
                                         int diag, int lane,
                                         uint32_t& k_phase, uint32_t& v_phase, float (&o)[kHeadDim / 2],
                                         float (&row_max)[2], float (&row_sum)[2],
                                         float (&sacc)[FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 2],
                                         uint32_t (&pa)[FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 16][4],
                                         const Timeline& tl, Flush&& flush, const int2* blk_row) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  static_assert(!(kFixed && kFp16), "the fixed-reference softmax is bf16 only (fixed_ref_softmax)");
  int2 blk_next = int2{0, 0};  // kSparse: the list entry of the next block (sparse_next)
  // Where each block's row sums are taken: in the softmax, of p as exponentiated (the exact softmax, and the fixed
  // reference by default), or of P after its bf16 rounding (add_packed_row_sum; VIDATTN_ROW_SUM_UNROUNDED=0).
  // (not in block-sparse builds: their online blocks leave a block they skip at -inf, `any`, which P's sums would
  // then take in)
  constexpr bool kSumRounded = kFixed && !kRowSumUnrounded && !T::kSparse;
  constexpr int kN = T::kBlockN;
  constexpr bool kPingpong = T::kPingpong;
  const float scale_log2 = p.scale_log2;
  float alpha[2];
  int pv_steps;  // key steps of the block whose P V is issued next (block_steps, issue_pv_block)
  // kSparse && kFixed: whether this warpgroup's rows have their reference. A 64 x 64 block of the mask is kept or not
  // for all 64 rows of a warpgroup alike, so its rows meet their first key in the same block, the first whose bits
  // name this warpgroup (at.y, warp-uniform): that block runs the online softmax (from a max of -inf: alpha 0 on a
  // zero O and sum), and every later one the fixed reference it set. Dense builds take block 0's for every row.
  bool ref_set = true;
  // Prologue: S_0 alone, then its softmax; P_0 is ready for the first overlapped step.
  {
    constexpr int stage = kStart;
    ptx::mbarrier_wait(&s.k_full[stage], (k_phase >> stage) & 1);
    tl.stamp(kTlK0Full);
    k_phase ^= 1u << stage;
    const int2 at = block_at<T>(sparse_next<T::kSparse>(blk_row, 0, n_blocks),
                                kv_first + kv_block<T::kKvRotate>(0, rot, n_blocks), cwg);
    blk_next = sparse_next<T::kSparse>(blk_row, 1, n_blocks);
    const int kv0 = at.x;
    pv_steps = sparse_steps<kN, T::kSparse>(at.y, block_steps<kN, T::kNarrowMax>(kv0, kv_len));
    sched_wait<kPingpong>(cwg);
    issue_qk_block<kHeadDim, kWGs, kBN, kFp16, 0>(pv_steps, sacc, q, ptx::smem_addr(s.k[stage]),
                                             [&] {
                                               // kOReadLate: the wait for the last O stores' reads, before the
                                               // turn passes (the other warpgroup's drain, behind that turn, may
                                               // write its O into this warpgroup's stage: flush_o)
                                               if constexpr (T::kOReadLate) flush();
                                               sched_pass<kPingpong, T::kConsumerWGs>(cwg);
                                               // the previous tile's O stores, under S_0 (kDeferOStore)
                                               if constexpr (!T::kOReadLate) flush();
                                             });
    tl.stamp(kTlS0Done);
    if (lane == 0) {
      arrive_pair<T::kPairs>(&s.k_empty[stage]);
      if constexpr (!T::kOInQ) {  // kOInQ: after the epilogue's O stores (consumer)
        if (n_blocks == 1) ptx::mbarrier_arrive(&s.q_empty[qb]);
      }
    }
    // (block-sparse: a block this warpgroup skips still runs the softmax's max pass, on -inf, and skips only the
    // exponentials (online_softmax's `any`). A branch around the whole softmax made ptxas serialise every wgmma.)
    if constexpr (kCausal) {
      if (kv0 + kN > min(kv_len, diag)) mask_keys_causal<kN>(sacc, kv0, kv_len, diag, col_in_group);
    } else {
      if constexpr (T::kSparse) mask_sparse<kN>(sacc, at.y);
      if (kv0 + kN > kv_len) mask_keys<kN>(sacc, kv0, kv_len, col_in_group);
    }
    online_softmax<kN, !kSumRounded, kCausal, T::kSparse>(sacc, row_max, row_sum, alpha, scale_log2,
                                                           sparse_any(at.y));
    if constexpr (T::kSparse && kFixed) ref_set = at.y != 0;
    pack_p<kN, kFp16>(sacc, pa);
    if constexpr (kSumRounded) add_packed_row_sum<kN>(pa, row_sum);
  }

  // Steady state: issue S_j = Q K_j and O += P_{j-1} V_{j-1} back to back; the softmax of S_j then runs on the
  // CUDA cores while P V is still on the tensor cores. O is rescaled only after P V retires.
  TlWaits<4> waits;  // timeline build only: what the steady iterations wait for (level 2), and how often (TlLate)
  TlLate<2> late;
  for (int j = 1; j < n_blocks; ++j) {
    const int stage = (kStart + j) % T::kStages, prev = (kStart + j - 1) % T::kStages;
    if (j == 2) tl.stamp(kTlIter2Start);
    if (j == n_blocks - 1) tl.stamp(kTlLastIterStart);
    late.count(0, j == 1, [&] { return !ptx::mbarrier_ready(&s.k_full[stage], (k_phase >> stage) & 1); });
    uint32_t t_wait = waits.start();
    ptx::mbarrier_wait(&s.k_full[stage], (k_phase >> stage) & 1);
    // A rotated key order (kKvRotate, an A/B build) may put the partial block before the last: its P V runs full
    // width here, so its V rows past kv_len are zeroed as the drain's are (zero_v_rows).
    auto zero_prev_past_len = [&] {
      if constexpr (T::kKvRotate) {
        const int pv0 = (kv_first + kv_block<T::kKvRotate>(j - 1, rot, n_blocks)) * kN;
        // (the turn's bar.sync follows, except where V is waited for inside the turn)
        if (p.kv_lens != nullptr && pv0 + kN > kv_len)
          zero_v_rows<T, T::kLateVWait || !kPingpong>(s.v[prev], kv_len - pv0, kN, cwg);
      }
    };
    if constexpr (!T::kLateVWait) {
      late.count(1, j == 1, [&] { return !ptx::mbarrier_ready(&s.v_full[prev], (v_phase >> prev) & 1); });
      ptx::mbarrier_wait(&s.v_full[prev], (v_phase >> prev) & 1);
      zero_prev_past_len();
    }
    waits.add(0, t_wait);
    k_phase ^= 1u << stage;
    const uint32_t v_parity = (v_phase >> prev) & 1;
    v_phase ^= 1u << prev;
    const int2 at = block_at<T>(blk_next, kv_first + kv_block<T::kKvRotate>(j, rot, n_blocks), cwg);
    blk_next = sparse_next<T::kSparse>(blk_row, j + 1, n_blocks);
    const int kv0 = at.x;
    const int qk_steps = sparse_steps<kN, T::kSparse>(at.y, block_steps<kN, T::kNarrowMax>(kv0, kv_len));
    t_wait = waits.start();
    sched_wait<kPingpong>(cwg);
    waits.add(1, t_wait);
    t_wait = waits.start();
    // The P V here is of a full block unless the key order is rotated (kKvRotate): only the last block is partial.
    issue_qk_block<kHeadDim, kWGs, kBN, kFp16, 1>(qk_steps, sacc, q, ptx::smem_addr(s.k[stage]), [&] {
      // VIDATTN_LATE_V_WAIT: V_{j-1} may still land while S_j runs
      if constexpr (T::kLateVWait) {
        late.count(1, j == 1, [&] { return !ptx::mbarrier_ready(&s.v_full[prev], v_parity); });
        ptx::mbarrier_wait(&s.v_full[prev], v_parity);
        zero_prev_past_len();
      }
      if constexpr (T::kSparse)  // (the previous block's own steps: one where this warpgroup skipped it)
        issue_pv_block<kHeadDim, kWGs, kBN, kFp16>(pv_steps, o, pa, ptx::smem_addr(s.v[prev]), j == 1);
      else
        issue_pv<kHeadDim, kWGs, kBN, kFp16>(o, pa, ptx::smem_addr(s.v[prev]), j == 1);
      sched_pass<kPingpong, T::kConsumerWGs>(cwg);
    });  // S_j done; P V may still run
    waits.add(3, t_wait);
    pv_steps = qk_steps;
    if (lane == 0) {
      arrive_pair<T::kPairs>(&s.k_empty[stage]);
      if constexpr (!T::kOInQ) {
        if (j == n_blocks - 1) ptx::mbarrier_arrive(&s.q_empty[qb]);
      }
    }
    if constexpr (kCausal) {
      if (kv0 + kN > min(kv_len, diag)) mask_keys_causal<kN>(sacc, kv0, kv_len, diag, col_in_group);
    } else {
      // (the fixed-reference blocks mask in the softmax's offsets: softmax_fixed_ref's kBits)
      if constexpr (T::kSparse && !kFixed) mask_sparse<kN>(sacc, at.y);
      if (kv0 + kN > kv_len) mask_keys<kN>(sacc, kv0, kv_len, col_in_group);
    }
    if constexpr (kFixed && T::kSparse) {
      // (no rescale of O: it is zero until the reference is set, and fixed after; the sum likewise)
      if (ref_set) {
        softmax_fixed_ref<kN, !kSumRounded, true>(sacc, row_max, row_sum, scale_log2, at.y);
      } else {
        mask_sparse<kN>(sacc, at.y);
        online_softmax<kN, !kSumRounded, false, true>(sacc, row_max, row_sum, alpha, scale_log2,
                                                      sparse_any(at.y));
      }
      ref_set = ref_set || at.y != 0;
    } else if constexpr (kFixed) {
      softmax_fixed_ref<kN, !kSumRounded>(sacc, row_max, row_sum, scale_log2);  // the first block's row_max, for good
    } else
      online_softmax<kN, true, false, T::kSparse>(sacc, row_max, row_sum, alpha, scale_log2, sparse_any(at.y));
    t_wait = waits.start();
    ptx::wgmma_wait<0>();  // P_{j-1} V_{j-1} done: O and P's registers are free again
    waits.add(2, t_wait);
    ptx::fence_regs(o);
    fence_frag(pa);
    if (lane == 0) arrive_pair<T::kPairs>(&s.v_empty[prev]);
    if constexpr (!kFixed) rescale_o<kHeadDim>(o, alpha);
    pack_p<kN, kFp16>(sacc, pa);
    if constexpr (kSumRounded) add_packed_row_sum<kN>(pa, row_sum);
  }

  tl.value(kTlKvWaitSum, waits.get(0));
  tl.value(kTlTurnWaitSum, waits.get(1));
  tl.value(kTlPvWaitSum, waits.get(2));
  tl.value(kTlSIssueWaitSum, waits.get(3));
  tl.value(kTlKLate, late.get(0));
  tl.value(kTlVLate, late.get(1));

  // Drain: the last P V.
  const int last = (kStart + n_blocks - 1) % T::kStages;
  ptx::mbarrier_wait(&s.v_full[last], (v_phase >> last) & 1);
  tl.stamp(kTlDrainStart);
  v_phase ^= 1u << last;
  // (block-sparse builds take no kv_lens, and their last block's first key is the list's, not this index's)
  if (!T::kSparse && p.kv_lens != nullptr) {  // (before the turn, whose bar.sync orders the stores before the wgmma)
    const int kv0 = (kv_first + kv_block<T::kKvRotate>(n_blocks - 1, rot, n_blocks)) * kN;
    if (kv0 + kN > kv_len) zero_v_rows<T, !kPingpong>(s.v[last], kv_len - kv0, pv_steps * 16, cwg);
  }
  sched_wait<kPingpong>(cwg);
  issue_pv_block<kHeadDim, kWGs, kBN, kFp16>(pv_steps, o, pa, ptx::smem_addr(s.v[last]), n_blocks == 1);
  sched_pass<kPingpong, T::kConsumerWGs>(cwg);
  ptx::wgmma_wait<0>();
  tl.stamp(kTlLastPvDone);
  ptx::fence_regs(o);
  fence_frag(pa);
  if (lane == 0) arrive_pair<T::kPairs>(&s.v_empty[last]);
}

template <int kHeadDim, int kWGs, int kBN, bool kFp16, bool kFixed, bool kCausal, int kStart, typename Flush>
__device__ __forceinline__ void mainloop_from(int start, const FwdParams& p, SharedStorage<kHeadDim, kWGs, kBN>& s,
                                              int cwg,
                                              const QOp<kHeadDim, kWGs, kBN>& q, int qb, int n_blocks,
                                              int kv_first, int rot,
                                              int kv_len, int col_in_group, int diag, int lane, uint32_t& k_phase,
                                              uint32_t& v_phase,
                                              float (&o)[kHeadDim / 2], float (&row_max)[2], float (&row_sum)[2],
                                              float (&sacc)[FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 2],
                                              uint32_t (&pa)[FwdTraits<kHeadDim, kWGs, kBN>::kBlockN / 16][4],
                                              const Timeline& tl, Flush&& flush, const int2* blk_row) {
  if constexpr (kStart + 1 < FwdTraits<kHeadDim, kWGs, kBN>::kStages) {
    if (start != kStart) {
      mainloop_from<kHeadDim, kWGs, kBN, kFp16, kFixed, kCausal, kStart + 1>(
          start, p, s, cwg, q, qb, n_blocks, kv_first, rot, kv_len, col_in_group, diag, lane, k_phase, v_phase, o,
          row_max, row_sum, sacc, pa, tl, flush, blk_row);
      return;
    }
  }
  mainloop<kHeadDim, kWGs, kBN, kFp16, kFixed, kCausal, kStart>(p, s, cwg, q, qb, n_blocks, kv_first, rot, kv_len,
                                                           col_in_group, diag, lane, k_phase, v_phase, o, row_max,
                                                           row_sum, sacc, pa, tl, flush, blk_row);
}

// After the first pass over its tiles, every consumer thread of a CTA meets here before the redo (kFixedRef).
enum class RedoBarrier : uint32_t { kId = 7 };  // 3..5: the ping-pong's

template <int kHeadDim, int kWGs, int kBN, bool kFp16, bool kFixedRef, bool kSplit, bool kCausal>
__device__ __forceinline__ void consumer(const FwdParams& p, SharedStorage<kHeadDim, kWGs, kBN>& s, int cwg) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  constexpr int kN = T::kBlockN;
  constexpr bool kPingpong = T::kPingpong;
  const float kNegInf = -__int_as_float(0x7f800000);

  const int tid = threadIdx.x - 128 * (cwg + 1);
  const int lane = tid % 32;
  const uint32_t q_smem0 = ptx::smem_addr(s.q[0]) + cwg * T::kRowsPerWG * kChunkBytes;

  uint32_t k_phase = 0, v_phase = 0;  // bit s: parity of stage s's next K / V "full" phase (see producer)
  int start = 0;                      // ring stage of this tile's K_0 (see producer)
  // Accumulators and row statistics live across the tile loop (reset per tile): this placement is the one the
  // validated build of bench/results/kernel_2026-11-30_520d1c0.json compiled to; declaring them inside the loop
  // compiles to differently scheduled SASS.
  float o[kHeadDim / 2];
  float row_max[2], row_sum[2];  // row sums: per-thread partials; the quad reduction waits for the epilogue
  float sacc[kN / 2];
  uint32_t pa[kN / 16][4];
  // kDeferOStore: a tile's O leaves packed in opk, and its stores are issued behind the next tile's S_0 (the
  // prologue's flush), so that they run while S_0 is on the tensor cores instead of between the two tiles.
  constexpr bool kDefer = T::kDeferOStore && !kSplit;
  uint32_t opk[kHeadDim / 4];
  TileCoord o_tc{};
  bool o_pending = false;
  // kDeferONormalise: O stays in its fp32 registers, unnormalised, until the flush (the next tile's first P V
  // overwrites it, issue_pv), and only 1 / row sum is kept; the packing moves under S_0 with the stores.
  constexpr bool kDeferNorm = kDefer && T::kDeferONormalise;
  float o_inv[2] = {0.f, 0.f};
  // kOReadLate: the last tile's O stores into a V stage are issued, their reads not yet waited for (o_done not given)
  constexpr bool kReadLate = T::kOReadLate && !kSplit;
  bool o_unread = false;
  auto flush_o = [&]() __attribute__((always_inline)) {
    if constexpr (kReadLate) {
      // The O-in-V epilogue's end, a tile late: this warp's stores have read its boxes, so the producer may refill
      // the stage (o_done). Given before this tile's q_empty and before this warpgroup passes its S_0 turn: o_done of
      // tile L - 1 is complete before q_empty of tile L, which every load of tile L + 1 waits behind; and where a
      // one-block tile or an odd block count hands this stage to the other warpgroup, that warpgroup writes its O
      // there only after its drain, whose turn waited for this pass (dev/NOTES.md, "The D=256 epilogue deferred").
      // CTA pairs: o_done counts the peer's warps too, which this CTA's q_empty does not order; what keeps the
      // producer's parity waits within a phase there is the producer's own loads (o_tiles, producer).
      if (o_unread) {
        if (ptx::lane_id() == 0) {
          ptx::bulk_wait_group_read<0>();
          arrive_pair<T::kPairs>(&s.o_done[cwg]);
        }
        o_unread = false;
      }
    }
    if constexpr (kDefer) {
      if (o_pending) {
        const int warp = ptx::warp_in_block() % 4;
        const int row0 = warp_first_row<kHeadDim, kWGs, kBN>(o_tc, cwg, warp);
        if constexpr (kDeferNorm)
          store_o_scaled<kHeadDim, kFp16, T::kOScratchSlots>(p, o_tc, row0, s.o_scratch[cwg * 4 + warp], o, o_inv);
        else
          store_packed_o<kHeadDim, T::kOScratchSlots>(p, o_tc, row0, s.o_scratch[cwg * 4 + warp], opk);
        o_pending = false;
      }
    }
  };
  // Warpgroup 0 takes the first turn (the last warpgroup passes it once up front). The last warpgroup's final pass
  // then has no matching wait; warpgroup 0 absorbs it with one extra wait after its last tile, so every barrier
  // ends balanced whatever the tile count.
  if (kPingpong && cwg == T::kConsumerWGs - 1) sched_pass<kPingpong, T::kConsumerWGs>(cwg);
  // always_inline (here and on the redo's lambda): with the narrow partial-block paths the inliner left the redo's
  // tile body out of line, a call with a 944-byte stack frame.
  auto consume = [&](int tile, int local, auto fixed) __attribute__((always_inline)) {
    constexpr bool kFixed = decltype(fixed)::value;
    // Lane-dependent values read afresh per tile: held across the loop they spilled (see ptx::lane_id).
    // Accumulator fragment (wgmma m64nN, fp32): this thread holds rows r and r+8 of its warp's 16, and for every
    // group i of 8 columns the pair at columns 8i + 2*(lane%4) + {0,1}: acc[4i+0..1] row r, acc[4i+2..3] row r+8.
    const int lane = ptx::lane_id(), warp = ptx::warp_in_block() % 4, col_in_group = 2 * (lane % 4);
    const TileWork w = tile_work<kN, kSplit, kCausal, T::kBlockM, T::kSparse>(p, tile);
    const int n_blocks = w.n_blocks;
    // causal: one past the last key this thread's first row sees (mask_keys_causal); rows past seqlen_q see more and
    // are never stored
    const int diag = kCausal ? warp_first_row<kHeadDim, kWGs, kBN>(w.tc, cwg, warp) + lane / 4 + w.shift + 1 : 0;

    const int qb = local % T::kQBuffers;
    QOp<kHeadDim, kWGs, kBN> q;
    q.smem = q_smem0 + qb * T::kQBytes;
    const Timeline tl(kSplit, local, cwg, tid == 0);
    tl.stamp(kTlTileStart);
    if constexpr (!kDeferNorm) {
#pragma unroll
      for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;
    }
    row_max[0] = row_max[1] = kNegInf;
    row_sum[0] = row_sum[1] = 0.f;
    // Q's buffer goes back to the producer right after this tile's last S = Q K^T (or at once with no keys); with
    // kQHalves each warpgroup waits for and releases its own half.
    const int qbar = T::kQHalves ? cwg : qb;
    ptx::mbarrier_wait(&s.q_full[qbar], (local / T::kQBuffers) & 1);
    load_q_regs<kHeadDim, kWGs, kBN>(q, warp, lane);
    tl.stamp(kTlQFull);
    if (n_blocks == 0) {
      flush_o();
      if constexpr (kDeferNorm) {
#pragma unroll
        for (int i = 0; i < kHeadDim / 2; ++i) o[i] = 0.f;  // no P V will overwrite it
      }
      if constexpr (!T::kOInQ) {
        if (lane == 0) ptx::mbarrier_arrive(&s.q_empty[qbar]);
      }
    } else {
      mainloop_from<kHeadDim, kWGs, kBN, kFp16, kFixed, kCausal, 0>(
          start, p, s, cwg, q, qbar, n_blocks, w.kv_first, kv_rotation<T::kKvRotate && !kCausal>(tile, n_blocks),
          w.kv_len, col_in_group, diag, lane, k_phase, v_phase, o, row_max, row_sum, sacc, pa, tl, flush_o,
          T::kSparse ? p.blk_list + static_cast<int64_t>(sparse_tile(p, w.tc)) * p.blk_stride : nullptr);
    }
    start = (start + n_blocks) % T::kStages;
    // Row sums were per-thread partials; every use below wants the whole row's.
#pragma unroll
    for (int r = 0; r < 2; ++r) row_sum[r] = quad_sum(row_sum[r]);
    if constexpr (kSplit) {
      store_partial<kHeadDim, kWGs, kBN>(p, tile, cwg, warp, lane, o, row_max, row_sum);
    } else if constexpr (kDefer) {
      if constexpr (kDeferNorm)
        inv_row_sums(row_sum, o_inv);
      else
        pack_o<kHeadDim, kFp16>(o, row_sum, opk);
      o_tc = w.tc;
      o_pending = true;
      write_lse(p, w.tc, warp_first_row<kHeadDim, kWGs, kBN>(w.tc, cwg, warp), lane, row_max, row_sum);
    } else if constexpr (T::kOInQ) {
      // This warp's boxes are its own 16 rows of Q's buffer, one per chunk: its warpgroup's last S = Q K^T has
      // completed (the wgmma waits before O was read), and the other warpgroup reads only its own rows.
      finish_tile<kHeadDim, kWGs, kBN, kFp16>(
          p, w.tc, cwg, warp, lane, s.q[qb] + (cwg * T::kRowsPerWG + warp * 16) * kChunkCols, o, row_max, row_sum);
    } else if constexpr (T::kORegs) {
      // Nothing staged: no stage to wait for, no o_done to signal (the producer does not wait for it).
      const int row0 = warp_first_row<kHeadDim, kWGs, kBN>(w.tc, cwg, warp);
      store_o_regs<kHeadDim, kFp16>(p, w.tc, row0, o, row_sum);
      write_lse(p, w.tc, row0, lane, row_max, row_sum);
    } else if constexpr (T::kOInV) {
      // Warpgroup 0 writes into the stage of the block before last (`start` now: the next tile's V_0 goes there),
      // warpgroup 1 into the last block's, each once both warpgroups have released the stage's last fill (v_empty,
      // the parity of the fill this thread last waited for). No later fill can be pending: the producer refills the
      // stage only after o_done. An earlier O in the same rows has been read: this warpgroup's own (it waited), or,
      // where an odd block count swapped the stages, the other warpgroup's of a tile ago, which that warpgroup stored
      // before its first turn of this tile, a turn this warpgroup's drain (warpgroup 1: its own first turn) waited for.
      // A tile without keys takes no turn and swaps nothing.
      if (T::kPairs && n_blocks == 0) {
        // CTA pairs: a tile without keys (kv_lens 0) stores its zeros from registers and takes no o_done phase (the
        // producer counts the tiles with keys). Through a V stage it would: its producer loads no V, so waits for no
        // o_done, and the peer's arrivals could then fall two phases behind the next V_0's wait, which reads o_done by
        // parity (dev/probes/pair_protocol_sim.py: a V fill landed in the peer's stage under its O).
        const int row0 = warp_first_row<kHeadDim, kWGs, kBN>(w.tc, cwg, warp);
        store_o_regs<kHeadDim, kFp16>(p, w.tc, row0, o, row_sum);
        write_lse(p, w.tc, row0, lane, row_max, row_sum);
      } else {
        const int ostage = cwg == 0 ? start : start ^ 1;
        ptx::mbarrier_wait(&s.v_empty[ostage], ((v_phase >> ostage) & 1) ^ 1);
        finish_tile<kHeadDim, kWGs, kBN, kFp16>(p, w.tc, cwg, warp, lane,
                                                s.v[ostage] + warp * T::kChunks * 16 * kChunkCols, o, row_max, row_sum);
        if constexpr (kReadLate) {
          o_unread = true;  // the read wait and o_done: flush_o, under the next tile's S_0
        } else if (lane == 0) {
          ptx::bulk_wait_group_read<0>();
          arrive_pair<T::kPairs>(&s.o_done[cwg]);
        }
      }
    } else {
      finish_tile<kHeadDim, kWGs, kBN, kFp16>(p, w.tc, cwg, warp, lane, s.o_scratch[cwg * 4 + warp], o, row_max,
                                         row_sum);
    }
    if constexpr (T::kOInQ) {
      // Q's buffer goes back to the producer (whose next Q load overwrites it) only once this warp's O stores have
      // read their boxes: one arrival per warp, as q_empty counts. The split build's partials go to global
      // memory, so there the wait finds nothing pending.
      if (lane == 0) {
        ptx::bulk_wait_group_read<0>();
        ptx::mbarrier_arrive(&s.q_empty[qb]);
      }
    }
    tl.stamp(kTlEpilogueDone);
    tl.value(kTlBlocks, static_cast<unsigned long long>(n_blocks));
    // (the comparison is false for NaN)
    if constexpr (kFixed) {
      if (!(row_sum[0] <= kFixedRefMaxSum && row_sum[1] <= kFixedRefMaxSum)) {
        atomicOr(&s.redo_bits[local >> 5], 1u << (local & 31));
        if constexpr (kCausal) {
          if (p.sched != nullptr) redo_tile_ids<T::kRedoWords>(p)[local] = tile;
        }
      }
    }
  };
  int local = 0;
  if constexpr (kCausal) {
    // The tiles come from the producer, one per Q fill; a tile past the list ends the loop (producer).
#pragma unroll 1
    for (;; ++local) {
      const int qb = local % T::kQBuffers;
      ptx::mbarrier_wait(&s.q_full[qb], (local / T::kQBuffers) & 1);
      const int tile = s.sched_tile[local % 4];
      __syncwarp();
      if (tile >= p.num_tiles) {
        if (lane == 0) ptx::mbarrier_arrive(&s.q_empty[qb]);
        break;
      }
      consume(tile, local, BoolTag<kFixedRef>{});
    }
    flush_o();
    if constexpr (kFixedRef) {
      ptx::named_barrier_sync(static_cast<uint32_t>(RedoBarrier::kId), 128 * T::kConsumerWGs);
      if (cwg == 0 && tid == 0) ptx::mbarrier_arrive(&s.redo_ready);
      if (lane == 0) ptx::bulk_wait_group<0>();
      redo_causal_tiles<T::kRedoWords>(p, s.redo_bits, local, [&](int tile, int l) __attribute__((always_inline)) {
        consume(tile, l, BoolTag<false>{});
      });
      flush_o();
    }
    if (kPingpong && cwg == 0) sched_wait<kPingpong>(cwg);
    if (lane == 0) ptx::bulk_wait_group<0>();
    return;
  } else {
    for (int tile = blockIdx.x; tile < p.num_tiles; tile += gridDim.x, ++local) {
      if (kSplit && piece_absent(p, tile)) break;  // (the producer stops there too)
      consume(tile, local, BoolTag<kFixedRef>{});
    }
  }
  flush_o();
  if constexpr (kFixedRef) {
    // Every consumer warpgroup's marks are in (bar.sync orders shared memory among its threads), then the producer
    // may read them. Marked tiles run again, exact, after this CTA's O stores of the first pass have landed.
    ptx::named_barrier_sync(static_cast<uint32_t>(RedoBarrier::kId), 128 * T::kConsumerWGs);
    if constexpr (T::kPairs) {
      // The pair's K/V loads are shared, so it redoes the union of its marks, tile pair by tile pair (both CTAs have
      // the same tile count, and their L-th tiles are partners). One thread copies this CTA's marks into the peer's
      // peer_bits and announces them with a release arrival; after the acquire wait for the peer's, it ors them in.
      if (cwg == 0 && tid == 0) {
        const uint32_t peer = ptx::cluster_ctarank() ^ 1u;
#pragma unroll 1
        for (int i = 0; i < T::kRedoWords && 32 * i < local; ++i)
          ptx::st_cluster_u32(&s.peer_bits[i], peer, s.redo_bits[i]);
        ptx::mbarrier_arrive_remote_cluster(&s.pair_bar[0], peer);
        ptx::mbarrier_wait_cluster(&s.pair_bar[0], 0);
#pragma unroll 1
        for (int i = 0; i < T::kRedoWords && 32 * i < local; ++i) s.redo_bits[i] |= s.peer_bits[i];
      }
      ptx::named_barrier_sync(static_cast<uint32_t>(RedoBarrier::kId), 128 * T::kConsumerWGs);
    }
    if (cwg == 0 && tid == 0) ptx::mbarrier_arrive(&s.redo_ready);
    if (lane == 0) ptx::bulk_wait_group<0>();
    redo_tiles<T::kRedoWords, kCausal>(s.redo_bits, local, [&](int tile, int l) __attribute__((always_inline)) {
      consume(tile, l, BoolTag<false>{});
    });
    flush_o();
  }
  if (kPingpong && cwg == 0) sched_wait<kPingpong>(cwg);
  // Shared memory must outlive the reads of the last TMA stores of O.
  if (lane == 0) ptx::bulk_wait_group<0>();
  if constexpr (T::kPairs) {
    // Nor may it go while the peer may still arrive on this CTA's barriers: each warp's last remote arrival (its last
    // stage release, its last o_done) comes before its arrival on the peer's pair_bar[1], and each CTA waits for all
    // of the peer's. (The peer's multicast writes into this CTA all landed: this CTA's consumers waited for them.)
    if (lane == 0) ptx::mbarrier_arrive_remote_cluster(&s.pair_bar[1], ptx::cluster_ctarank() ^ 1u);
    ptx::mbarrier_wait_cluster(&s.pair_bar[1], 0);
  }
}

// kSplit: the tail launch's build (work items are key ranges of tiles, O goes to the workspace unnormalised; capi.cu).
// kCausal: the causal mask (tile_work; FwdParams::causal_bottom_right picks the alignment), never with kSplit.
template <int kHeadDim, int kWGs, int kBN, bool kFp16, bool kSplit, bool kCausal = false>
__global__ void __launch_bounds__(FwdTraits<kHeadDim, kWGs, kBN>::kThreads, 1)
    flash_fwd_kernel(const __grid_constant__ FwdParams p) {
  using T = FwdTraits<kHeadDim, kWGs, kBN>;
  // Over the per-block opt-in maximum the launch's cudaFuncSetAttribute fails, which only a GPU would show.
  static_assert(dynamic_smem_bytes<kHeadDim, kWGs, kBN>() + kStaticSmemBytes <= kSmemBudget,
                "shared storage over the 227 KB a block can opt into");
  static_assert(!(T::kQHalves && kCausal), "Q per warpgroup: non-causal builds (the causal loop reads q_full[qb])");
  static_assert(!(T::kPairs && (kCausal || kSplit)), "CTA pairs: the non-causal main launch only");
  extern __shared__ uint8_t smem_raw[];
  // Dynamic shared memory is only 16-byte aligned by contract; the launcher over-allocates 1 KB for this.
  const uint32_t pad = (1024 - (ptx::smem_addr(smem_raw) & 1023)) & 1023;
  auto& s = *reinterpret_cast<SharedStorage<kHeadDim, kWGs, kBN>*>(smem_raw + pad);
  const int wg = threadIdx.x / 128;

  if (threadIdx.x == 0) {
    ptx::prefetch_tensormap(&p.tm_q);
    ptx::prefetch_tensormap(&p.tm_k);
    ptx::prefetch_tensormap(&p.tm_v);
#pragma unroll
    for (int b = 0; b < T::kQBarriers; ++b) {
      ptx::mbarrier_init(&s.q_full[b], 1);
      // one arrival per consumer warp of those that read the buffer: all, or the half's warpgroup (kQHalves)
      ptx::mbarrier_init(&s.q_empty[b], T::kQHalves ? 4 : 4 * T::kConsumerWGs);
    }
#pragma unroll
    for (int st = 0; st < T::kStages; ++st) {
      ptx::mbarrier_init(&s.k_full[st], 1);
      ptx::mbarrier_init(&s.v_full[st], 1);
      // one arrival per consumer warp: each warp releases a stage after its own wgmma_wait
      // (CTA pairs: and per peer consumer warp, arrive_pair)
      ptx::mbarrier_init(&s.k_empty[st], (T::kPairs ? 8 : 4) * T::kConsumerWGs);
      ptx::mbarrier_init(&s.v_empty[st], (T::kPairs ? 8 : 4) * T::kConsumerWGs);
    }
    ptx::mbarrier_init(&s.redo_ready, 1);
    if constexpr (T::kOInV) {
      ptx::mbarrier_init(&s.o_done[0], T::kPairs ? 8 : 4);
      ptx::mbarrier_init(&s.o_done[1], T::kPairs ? 8 : 4);
    }
    if constexpr (T::kPairs) {
      ptx::mbarrier_init(&s.pair_bar[0], 1);                     // the peer's marks (consumer)
      ptx::mbarrier_init(&s.pair_bar[1], 4 * T::kConsumerWGs);  // the peer's consumer warps are done
    }
    ptx::fence_barrier_init();
  }
  if (threadIdx.x < T::kRedoWords) s.redo_bits[threadIdx.x] = 0;
  // CTA pairs: the peer's multicast and remote arrivals reach this CTA's barriers, so both CTAs' inits come first.
  if constexpr (T::kPairs)
    ptx::cluster_sync();
  else
    __syncthreads();

  // Producer and consumers must agree on the redo pass (the producer waits for the consumers' marks): one decision.
  // The tail launch's items take it too (VIDATTN_SPLIT_FIXED_REF): the merge weighs each item's partial by its own
  // reference, whichever it was, and a marked item's redo overwrites its partial.
  // Block-sparse builds take each warpgroup's reference at its first block with a key (mainloop, ref_set), unless
  // VIDATTN_SPARSE_FIXED_REF=0 (the online softmax throughout; capi_sparse.cu then launches without a redo bound).
  constexpr bool kFixedRef = fixed_ref_softmax<kFp16>(T::kFixedRef) && (!kSplit || VIDATTN_SPLIT_FIXED_REF != 0) &&
                             (!T::kSparse || VIDATTN_SPARSE_FIXED_REF != 0);
  // The causal builds with one Q buffer (D=192, D=256 narrow) give the producer 32 registers and each consumer 232: at
  // 24 the producer's redo pass spilled (16-24 bytes in the bf16 builds). 32*128 + 232*256 = 63488 of the launch's
  // 64512. The O-in-V causal build (D=256, N=80) needs the consumers' 240 (at 232 they spill 116 bytes): its producer
  // keeps 24, its redo walk parked in shared memory (redo_causal_tiles).
  constexpr bool kWideProducer = kCausal && T::kQBuffers == 1 && !T::kOInV;
  constexpr uint32_t kProducerRegs = kWideProducer ? 32 : T::kProducerRegs;
  constexpr uint32_t kConsumerRegs = kWideProducer ? 232 : T::kConsumerRegs;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * T::kConsumerWGs <= T::kLaunchRegs * T::kThreads,
                "setmaxnreg.inc would wait forever: the CTA's registers are those of its launch");
  if (wg == 0) {
    ptx::setmaxnreg_dec<kProducerRegs>();
    if (threadIdx.x == 0) producer<kHeadDim, kWGs, kBN, kFixedRef, kSplit, kCausal>(p, s);
  } else {
    ptx::setmaxnreg_inc<kConsumerRegs>();
    consumer<kHeadDim, kWGs, kBN, kFp16, kFixedRef, kSplit, kCausal>(p, s, wg - 1);
  }
}

}  // namespace vidattn::sm90
