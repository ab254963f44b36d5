// Tile sizes and register budgets, one place, per head dim. Each choice names the limit that set it.
#pragma once
#include <cstdint>

namespace vidattn::sm90 {

// Rows of one TMA box / one 128-byte swizzle row: 64 bf16/fp16 elements. TMA's 128B swizzle caps the box's inner
// extent at 128 bytes, so a head dim of 128 is loaded as two 64-column chunks.
constexpr int kChunkCols = 64;
constexpr int kChunkBytes = kChunkCols * 2;

template <int kHeadDim>
struct FwdTraits {
  static_assert(kHeadDim == 64 || kHeadDim == 128, "vidattn sm90 forward: head dim must be 64 or 128");
  static constexpr int kHeadDimV = kHeadDim;
  // wgmma's M is 64 per warpgroup; two consumer warpgroups share one 128-row Q tile so K/V tiles are read once
  // for 128 query rows.
  static constexpr int kConsumerWGs = 2;
  static constexpr int kRowsPerWG = 64;
  static constexpr int kBlockM = kConsumerWGs * kRowsPerWG;
  // KV tile: 128 keys. S (64 x 128 fp32) and O (64 x D fp32) both live in registers: 64 + 64 at D=128.
  static constexpr int kBlockN = 128;
  // Shared memory at D=128: Q 32 KB + stages x (K 32 KB + V 32 KB); 2 stages = 160 KB of the 227 KB a block may use.
  // At D=64 every tile is half as large, so 4 stages fit in the same 160 KB and hide more latency.
  static constexpr int kStages = kHeadDim == 128 ? 2 : 4;
  static constexpr int kChunks = kHeadDim / kChunkCols;

  static constexpr int kThreads = 128 * (1 + kConsumerWGs);
  // setmaxnreg budgets: the producer issues TMA from one thread and needs almost nothing; the consumers hold
  // S, O and P. 24*128 + 240*256 = 64512 <= 65536 registers per SM at one block per SM.
  static constexpr uint32_t kProducerRegs = 24;
  static constexpr uint32_t kConsumerRegs = 240;
  static_assert(kProducerRegs * 128 + kConsumerRegs * 128 * kConsumerWGs <= 65536, "register file overcommitted");
};

}  // namespace vidattn::sm90
