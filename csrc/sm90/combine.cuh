// The tail launch's merge (capi.cu, plan_tail): the last, partial round of tiles runs as key ranges of each tile,
// one per SM, which leave unnormalised O and row statistics in the workspace (flash_fwd.cuh, store_partial); this
// kernel weighs the ranges of every row by 2^(m_s - max m), normalises, and writes O and the LSE. The ranges merge in
// a fixed order, so results repeat bitwise. Pure CUDA, no torch.
#pragma once
#include <cstdint>
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <type_traits>

#include "../tail_plan.h"  // the balanced tail's pieces
#include "flash_fwd.cuh"     // decode_tile, kLn2: the main kernel's tile order and LSE base

namespace vidattn::sm90 {

struct CombineParams {
  const float* ws_o;   // [item][block_m][head_dim] fp32, item = tile_in_tail * splits + range (or below)
  const float* ws_ml;  // [item][block_m][2]: row max * scale_log2 (-inf for a range without keys), row sum
  void* o;             // the output, (B, Sq, H, D) with o_stride (elements)
  int64_t o_stride[3];
  float* lse;          // (B, H, Sq) natural-log LSE, or nullptr
  int seqlen_q, heads, num_m_blocks;
  int tile_base;       // the first tail tile's global index (tile_coord's order)
  int block_m, splits, num_rows;  // num_rows = tail tiles x block_m
  int head_dim;        // the caller's head dim (at most kHeadDim): the workspace's padded columns are not written
  // The balanced tail (chunk > 0): tile t's pieces and their items as tail_plan.h's balanced_tail_pieces and
  // balanced_piece_item give them for chunk, tile_blocks and ctas. splits is then unused.
  int chunk, tile_blocks, ctas;
};

constexpr int kCombineThreads = 256;

// One warp per output row, kHeadDim / 32 consecutive columns per lane (3 at D=96).
template <int kHeadDim, bool kFp16>
__global__ void __launch_bounds__(kCombineThreads) combine_kernel(const __grid_constant__ CombineParams c) {
  constexpr int kCols = kHeadDim / 32;
  const int lane = threadIdx.x % 32;
  const int r = static_cast<int>((static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / 32);
  if (r >= c.num_rows) return;
  const int t = r / c.block_m, row_in_tile = r - t * c.block_m;
  const TileCoord tc = decode_tile(c.tile_base + t, c.num_m_blocks, c.heads);
  const int row = tc.m_block * c.block_m + row_in_tile, head = tc.head, batch = tc.batch;
  if (row >= c.seqlen_q) return;
  const float kNegInf = -__int_as_float(0x7f800000);
  const int pieces =
      c.chunk > 0 ? static_cast<int>(balanced_tail_pieces(t, c.tile_blocks, c.chunk)) : c.splits;
  // the workspace row of this row in the tile's s-th range (or piece)
  auto item_row = [&](int s) {
    const int64_t item = c.chunk > 0 ? balanced_piece_item(t, s, c.chunk, c.tile_blocks, c.ctas)
                                     : static_cast<int64_t>(t) * c.splits + s;
    return item * c.block_m + row_in_tile;
  };
  // A range whose row sum is NaN (a NaN score among its keys) stores that NaN and a max of -inf (its max dropped the
  // NaN): the row is NaN, as SDPA gives, even when every range's max is -inf and the weighing below is skipped.
  float m = kNegInf;
  bool nan = false;
  for (int s = 0; s < pieces; ++s) {
    const int64_t ir = item_row(s);
    m = fmaxf(m, c.ws_ml[2 * ir]);
    nan |= c.ws_ml[2 * ir + 1] != c.ws_ml[2 * ir + 1];
  }
  float l = 0.f, acc[kCols];
#pragma unroll
  for (int i = 0; i < kCols; ++i) acc[i] = 0.f;
  if (m != kNegInf) {
    for (int s = 0; s < pieces; ++s) {
      const int64_t ir = item_row(s);
      const float w = exp2f(c.ws_ml[2 * ir] - m);  // 0 for a range without keys (m_s = -inf)
      l += w * c.ws_ml[2 * ir + 1];
      const float* src = c.ws_o + ir * kHeadDim + lane * kCols;
#pragma unroll
      for (int i = 0; i < kCols; ++i) acc[i] += w * src[i];
    }
  }
  if (nan) l = __int_as_float(0x7fffffff);
  const float inv = row_has_sum(l) ? 1.f / l : 0.f;  // no valid key: O = 0, as the main kernel writes
  // Lanes whose columns lie past the caller's head dim hold the padding's zeros; the caller's row ends before them.
  // Where kCols divides 8 (D = 64, 128, 256) a lane's columns are all in or all out, the head dim being a multiple
  // of 8; at D = 96 and 192 (3 and 6 columns a lane) one lane can straddle it, and each column is checked.
  constexpr bool kStraddle = 8 % kCols != 0;
  if (lane * kCols >= c.head_dim) return;
  using Elem = typename std::conditional<kFp16, __half, __nv_bfloat16>::type;
  Elem* dst = static_cast<Elem*>(c.o) + batch * c.o_stride[0] + row * c.o_stride[1] + head * c.o_stride[2] +
              lane * kCols;
#pragma unroll
  for (int i = 0; i < kCols; ++i) {
    if (kStraddle && lane * kCols + i >= c.head_dim) break;
    if constexpr (kFp16)
      dst[i] = __float2half_rn(acc[i] * inv);
    else
      dst[i] = __float2bfloat16_rn(acc[i] * inv);
  }
  if (c.lse != nullptr && lane == 0)
    c.lse[(static_cast<int64_t>(batch) * c.heads + head) * c.seqlen_q + row] =
        row_has_sum(l) ? (m + __log2f(l)) * kLn2 : kNegInf;
}

}  // namespace vidattn::sm90
