// Kernel parameters: what the host side fills and the kernel reads. Pure CUDA, no torch.
#pragma once
#include <cstdint>
#include <cuda.h>
#include <vector_types.h>  // int2

namespace vidattn::sm90 {

struct FwdParams {
  // Tensor maps over (D, S, H, B) with the caller's strides, so BSHD and BHSD are both read in place.
  // The D extent is the caller's head dim, which may be below the build's (a multiple of 8): TMA fills the columns
  // past it with zeros on loads (0 in Q K^T, 0 in the padded O columns) and clips them on the O store.
  CUtensorMap tm_q;
  CUtensorMap tm_k;  // (D, Skv, kv heads, B)
  CUtensorMap tm_v;
  CUtensorMap tm_o;      // the output, in 16-row boxes: one TMA store per consumer warp and 64 columns
  float* lse;            // (B, H, Sq) fp32 natural-log LSE, or nullptr
  const int* kv_lens;    // (B,) valid keys per batch, or nullptr
  int seqlen_q;
  int seqlen_kv;
  int heads;
  int num_m_blocks;      // ceil(Sq / kBlockM)
  int num_tiles;         // tiles of this launch (of num_m_blocks * heads * batch): the persistent CTAs' work list
  float scale_log2;      // softmax scale * log2(e): the kernel works in base 2 (ex2) throughout
  int tile_base;         // this launch runs tiles tile_base .. tile_base + num_tiles - 1 (capi.cu: launch)
  // The tail launch only (flash_fwd_kernel<..., kSplit = true>; capi.cu, plan_tail): its work items are kv_splits
  // key ranges of each of num_tiles / kv_splits tiles, and write unnormalised O (fp32, kBlockM x D per item) and
  // per-row (max * scale_log2, sum) pairs to the workspace for combine_kernel.
  int kv_splits;
  float* ws_o;
  float* ws_ml;
  // Query heads per key/value head (1: equal counts). The producer loads K/V of head tc.head / kv_group, so a group's
  // K/V is read in place (and, the tile order being head-major, mostly from L2); nothing else sees it.
  int kv_group;
  // Causal builds only (flash_fwd_kernel<..., kCausal = true>): 0 aligns the mask top-left (query i sees keys
  // j <= i), 1 bottom-right (j <= i + kv_len - seqlen_q, kv_len being the batch's key count after kv_lens).
  int causal_bottom_right;
  // Causal builds only, the tile schedule (flash_fwd.cuh: tile_coord, next_causal_tile). sched: the launch's
  // workspace, where the CTAs take tiles from a counter tagged with sched_epoch (never 0), or nullptr for the static
  // order (every CTA's tiles fixed by its index). The list is ordered in groups of causal_group of the causal_pairs
  // (batch, head) pairs, heaviest Q block first across each group (1: head after head); causal_first_group > 0
  // opens the list with one group of that many pairs (the remainder, so that the last group is full).
  unsigned long long* sched;
  uint32_t sched_epoch;
  int causal_group;
  int causal_pairs;
  int causal_first_group;
  // The O-from-registers build only (FwdTraits::kORegs, store_o_regs): the output (B, Sq, H, D) with the caller's
  // (batch, seq, head) strides in elements (multiples of 8, the base 16-byte aligned: vidattn_sm90_fwd checks), and
  // the caller's head dim (a multiple of 8): the columns past it are not stored. Last in the struct, so that the
  // other builds' parameter offsets stay where they were.
  uint16_t* o;
  int64_t o_stride[3];
  int head_dim;
  // The balanced tail launch only (capi.cu plan_tail under VIDATTN_TAIL_ROUNDS=3; flash_fwd.cuh tile_work): the
  // tail's tail_tiles tiles of tail_blocks key blocks laid end to end and cut into one chunk of tail_chunk blocks per
  // CTA of a tail_ctas grid; item k * tail_ctas + g is CTA g's k-th piece (k = 0, 1). tail_chunk 0: the uniform
  // split, kv_splits ranges a tile.
  int tail_chunk;
  int tail_blocks;
  int tail_ctas;
  int tail_tiles;
  // The block-sparse builds only (FwdTraits::kSparse; capi.h, VidattnFwdArgs::blk_cnt): tile t = (batch * heads + head)
  // * num_m_blocks + m_block runs blk_cnt[t] key blocks of kSparseTileN keys; entry j = blk_list[t * blk_stride + j]
  // holds the j-th key block's first key in units of kSparseBlock (.x, ascending; a block starts at any multiple of 64
  // keys, so one whose first 64 keys no row needs starts 64 keys later, over the next one's first half) and the bits
  // of its 64 x 64 blocks to compute (.y): bit 2 w + c for consumer warpgroup w's 64 rows and the block's c-th 64
  // keys, no pair named by two entries. Null in every other build.
  const int32_t* blk_cnt;
  const int2* blk_list;
  int blk_stride;
};

}  // namespace vidattn::sm90
