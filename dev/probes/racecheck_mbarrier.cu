// Does compute-sanitizer's racecheck follow mbarrier-ordered shared-memory hand-offs? A minimal copy of the causal
// kernel's tile hand-off (flash_fwd.cuh: the producer writes SharedStorage::sched_tile[local % 4], then completes
// that tile's q_full phase; the consumer warps wait on q_full, read the slot, __syncwarp, and lane 0 of each warp
// arrives on q_empty; the producer waits on q_empty before it reuses a Q buffer), with the kernel's own PTX
// (csrc/sm90/ptx.cuh). The hand-off is correct by construction in every variant; what differs is the primitive that
// orders it, so a hazard that racecheck reports in one variant and not in another is the tool's, not the program's.
//
//   a  mbarrier: q_full completed by the producer's plain arrive (the kernel's end-of-list marker)
//   b  the same order through __syncthreads (lockstep: write, sync, read, sync)
//   c  the same order through named barriers (bar.arrive / bar.sync, a producer warp against the consumer warps)
//   d  mbarrier: q_full armed with arrive.expect_tx and completed by a bulk copy's complete_tx (the kernel's
//      per-tile path: Q arrives by TMA)
//
//   nvcc -std=c++17 -lineinfo -arch=sm_90a -I csrc -o racecheck_mbarrier dev/probes/racecheck_mbarrier.cu
//   compute-sanitizer --tool racecheck ./racecheck_mbarrier a 3     (variant, consumer warpgroups: 2 or 3)
// Prints "variant V: ok (N tiles)" when every consumer warp saw every tile in order, exit status 0; 1 otherwise.
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include "sm90/ptx.cuh"

namespace {

constexpr int kTiles = 37;       // not a multiple of the ring's 4 slots nor of the 2 buffers
constexpr int kBuffers = 2;      // Q buffers (T::kQBuffers of the causal builds)
constexpr int kPayloadInts = 64;  // 256 bytes per bulk copy (variant d)

struct Shared {
  alignas(128) int payload[kBuffers][kPayloadInts];
  uint64_t full[kBuffers];
  uint64_t empty[kBuffers];
  int slot[4];
};

__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], %2, [%3];" ::"r"(
          vidattn::ptx::smem_addr(dst)),
      "l"(src), "r"(bytes), "r"(vidattn::ptx::smem_addr(bar))
      : "memory");
}

// seen[w * (kTiles + 1) + i]: the i-th tile index consumer warp w read (the end marker -1 last)
__global__ void mbarrier_handoff(char variant, int consumer_warps, const int* payload_src, int* seen) {
  namespace ptx = vidattn::ptx;
  __shared__ Shared s;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (threadIdx.x == 0) {
    for (int b = 0; b < kBuffers; ++b) {
      ptx::mbarrier_init(&s.full[b], 1);
      ptx::mbarrier_init(&s.empty[b], consumer_warps);
    }
    ptx::fence_barrier_init();
  }
  __syncthreads();
  const bool producer_wg = warp < 4;
  const int cw = warp - 4;  // consumer warp index

  if (variant == 'b') {  // lockstep, every thread of the block at every __syncthreads
    for (int local = 0; local <= kTiles; ++local) {
      if (threadIdx.x == 0) s.slot[local % 4] = local < kTiles ? local : -1;
      __syncthreads();
      if (!producer_wg) {
        const int tile = s.slot[local % 4];
        if (lane == 0) seen[cw * (kTiles + 1) + local] = tile;
      }
      __syncthreads();
    }
    return;
  }
  if (variant == 'c') {  // bar 1: slot written (producer warp arrives), bar 2: slot read (consumer warps arrive)
    const uint32_t n = 32 + 32 * consumer_warps;
    if (producer_wg) {
      if (warp != 0) return;
      for (int local = 0; local <= kTiles; ++local) {
        if (lane == 0) s.slot[local % 4] = local < kTiles ? local : -1;
        __syncwarp();
        ptx::named_barrier_arrive(1, n);
        ptx::named_barrier_sync(2, n);
      }
    } else {
      for (int local = 0; local <= kTiles; ++local) {
        ptx::named_barrier_sync(1, n);
        const int tile = s.slot[local % 4];
        if (lane == 0) seen[cw * (kTiles + 1) + local] = tile;
        ptx::named_barrier_arrive(2, n);
      }
    }
    return;
  }

  // a, d: one producer thread, as in flash_fwd_kernel (if (threadIdx.x == 0) producer(...))
  if (producer_wg) {
    if (threadIdx.x != 0) return;
    for (int local = 0; local <= kTiles; ++local) {
      const int qb = local % kBuffers;
      // the write precedes the wait for the buffer, as in produce() and the end-of-list marker: slot local % 4 was
      // last read at tile local - 4, before the consumers released tile local - 3's buffer
      s.slot[local % 4] = local < kTiles ? local : -1;
      ptx::mbarrier_wait(&s.empty[qb], ((local / kBuffers) & 1) ^ 1);
      if (variant == 'd' && local < kTiles) {
        ptx::mbarrier_arrive_expect_tx(&s.full[qb], kPayloadInts * sizeof(int));
        bulk_load(s.payload[qb], payload_src + local * kPayloadInts, kPayloadInts * sizeof(int), &s.full[qb]);
      } else {
        ptx::mbarrier_arrive(&s.full[qb]);
      }
    }
    return;
  }
  for (int local = 0;; ++local) {
    const int qb = local % kBuffers;
    ptx::mbarrier_wait(&s.full[qb], (local / kBuffers) & 1);
    const int tile = s.slot[local % 4];
    const bool data_ok = variant != 'd' || tile < 0 || s.payload[qb][lane] == tile * kPayloadInts + lane;
    const bool all_ok = __all_sync(0xffffffffu, data_ok);  // also the kernel's __syncwarp before the release
    if (lane == 0) seen[cw * (kTiles + 1) + local] = all_ok ? tile : -2;
    if (lane == 0) ptx::mbarrier_arrive(&s.empty[qb]);
    if (tile < 0) break;
  }
}

}  // namespace

int main(int argc, char** argv) {
  const char variant = argc > 1 ? argv[1][0] : 'a';
  const int wgs = argc > 2 ? std::atoi(argv[2]) : 3;
  if (std::strchr("abcd", variant) == nullptr || variant == 0 || (wgs != 2 && wgs != 3)) {
    std::fprintf(stderr, "usage: %s a|b|c|d [2|3]\n", argv[0]);
    return 2;
  }
  const int warps = 4 * wgs;
  int *src = nullptr, *seen = nullptr;
  cudaMalloc(&src, kTiles * kPayloadInts * sizeof(int));
  cudaMalloc(&seen, warps * (kTiles + 1) * sizeof(int));
  int host_src[kTiles * kPayloadInts];
  for (int i = 0; i < kTiles * kPayloadInts; ++i) host_src[i] = i;
  cudaMemcpy(src, host_src, sizeof(host_src), cudaMemcpyHostToDevice);
  cudaMemset(seen, 0xff, warps * (kTiles + 1) * sizeof(int));
  mbarrier_handoff<<<1, 128 + 32 * warps>>>(variant, warps, src, seen);
  const cudaError_t e = cudaDeviceSynchronize();
  if (e != cudaSuccess) {
    std::printf("variant %c: CUDA error %s\n", variant, cudaGetErrorString(e));
    return 1;
  }
  int host_seen[12 * (kTiles + 1)];
  cudaMemcpy(host_seen, seen, warps * (kTiles + 1) * sizeof(int), cudaMemcpyDeviceToHost);
  int bad = 0;
  for (int w = 0; w < warps; ++w)
    for (int i = 0; i <= kTiles; ++i) bad += host_seen[w * (kTiles + 1) + i] != (i < kTiles ? i : -1);
  std::printf("variant %c, %d consumer warpgroups: %s (%d tiles, %d wrong reads)\n", variant, wgs,
              bad ? "WRONG" : "ok", kTiles, bad);
  return bad ? 1 : 0;
}
