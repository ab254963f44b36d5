// DIAGNOSTIC ONLY, never a default (VIDATTN_DIAG_TIMELINE=1 or 2): clock64 stamps at the phases of each tile, to see
// where a tile boundary's time goes (dev/probes/timeline_probe.py reads them back through vidattn_sm90_diag_timeline).
// One row of kTlEvents stamps per (CTA, local tile, consumer warpgroup), written by the warpgroup's first thread, and
// one row per (CTA, local tile) for the producer. clock64 is the SM's own cycle counter, so only differences within
// one CTA mean anything. The main launch only (the tail launch's CTAs would overwrite rows 0..). In a shipped build
// every stamp compiles to nothing.
// Level 1 also counts, per tile, the key iterations whose K or V load had not landed when the consumer came to wait
// for it (mbarrier.test_wait, no clock in the key loop). Level 2 adds the cycles each kind of wait took (TlWaits):
// those clock reads around the P V wait made ptxas move all of the softmax's exponentials above that wait, which
// releases V later and slowed the key loop ~15% (dev/NOTES.md, tenth session), so read level 2 for what waits, not
// for how long a plain build's iteration takes.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "ptx.cuh"

#ifndef VIDATTN_DIAG_TIMELINE
#define VIDATTN_DIAG_TIMELINE 0
#endif

namespace vidattn::sm90 {

constexpr int kTlMaxCtas = 160, kTlMaxLocal = 64, kTlWGs = 3, kTlEvents = 16, kTlProducerEvents = 6;
// Consumer events, in the order a tile passes them.
enum TlEvent : int {
  kTlTileStart = 0,  // consume() entered (the previous tile's epilogue issued)
  kTlQFull = 1,      // Q of this tile has landed
  kTlK0Full = 2,     // K_0 has landed (prologue)
  kTlS0Done = 3,     // S_0 = Q K_0^T retired (the turn waited for and the wgmma run)
  kTlDrainStart = 4, // last V landed, before the last P V waits for its turn
  kTlLastPvDone = 5, // the last P V retired
  kTlEpilogueDone = 6,  // O handed to the TMA store
  kTlBlocks = 7,     // not a time: the tile's key blocks
  // Inside the key loop (tiles of at least 3 and 4 key blocks): S_0's softmax and the first key iteration lie
  // between kTlS0Done and kTlIter2Start, the steady iterations between that and kTlLastIterStart.
  kTlIter2Start = 8,     // the third key block's iteration begins (before its waits)
  kTlLastIterStart = 9,  // the last key block's iteration begins
  // Not times but sums of cycles over the key loop's iterations 1..n-1 (TlWaits): what a steady iteration waits for.
  kTlKvWaitSum = 10,    // the K_j (and, without VIDATTN_LATE_V_WAIT, V_{j-1}) "full" waits: the ring late
  kTlTurnWaitSum = 11,  // the ping-pong turn (sched_wait): the other warpgroup has not issued yet
  kTlPvWaitSum = 12,    // the P V wait after the softmax: the tensor cores behind this warpgroup's softmax
  kTlSIssueWaitSum = 13,  // the turn's issue of S_j and P_{j-1} V_{j-1} (with the late V wait, V_{j-1}'s wait
                          // between them), then the wait for S_j to retire
  // Counts over the key iterations 1..n-1 (TlLate, level 1 and up): the load had not landed when waited for. Low
  // 32 bits: all iterations; high 32 bits: the first iteration (j = 1) alone, 0 or 1.
  kTlKLate = 14,  // K_j
  kTlVLate = 15,  // V_{j-1}
};
// Producer events: before waiting for Q's buffer to be released, and after Q's loads were issued; then the sums of
// cycles the producer waited over the tile for K and for V stages to be released (the ring full: consumer-bound);
// then clock64 and %globaltimer (ns) read back to back as the producer takes the tile up: over a CTA's tiles their
// two differences give the SM's clock, so the probe can state cycles as microseconds at the clock that ran.
enum TlProducerEvent : int {
  kTlQEmptyWait = 0,
  kTlQIssued = 1,
  kTlKEmptyWaitSum = 2,
  kTlVEmptyWaitSum = 3,
  kTlClockPair = 4,  // clock64
  kTlTimerNs = 5,    // %globaltimer, right after it
};

#if VIDATTN_DIAG_TIMELINE
// static: each translation unit's kernels stamp rows of their own (capi.cu's dense ones, capi_sparse.cu's block-sparse
// ones), read back by that unit's entry (vidattn_sm90_diag_timeline, vidattn_sm90_diag_timeline_sparse).
static __device__ unsigned long long g_tl_consumer[kTlMaxCtas * kTlMaxLocal * kTlWGs * kTlEvents];
static __device__ unsigned long long g_tl_producer[kTlMaxCtas * kTlMaxLocal * kTlProducerEvents];

// The C entries' body: copies this unit's stamps of the launches since the last reset into the two host buffers
// (null: not copied), then zeroes them if `reset`.
static inline cudaError_t tl_copy_rows(void* consumer, void* producer, bool reset) {
  cudaError_t e = cudaDeviceSynchronize();
  if (e == cudaSuccess && consumer != nullptr) e = cudaMemcpyFromSymbol(consumer, g_tl_consumer, sizeof(g_tl_consumer));
  if (e == cudaSuccess && producer != nullptr) e = cudaMemcpyFromSymbol(producer, g_tl_producer, sizeof(g_tl_producer));
  if (e == cudaSuccess && reset) {
    void* dev = nullptr;
    e = cudaGetSymbolAddress(&dev, g_tl_consumer);
    if (e == cudaSuccess) e = cudaMemset(dev, 0, sizeof(g_tl_consumer));
    if (e == cudaSuccess) e = cudaGetSymbolAddress(&dev, g_tl_producer);
    if (e == cudaSuccess) e = cudaMemset(dev, 0, sizeof(g_tl_producer));
    if (e == cudaSuccess) e = cudaDeviceSynchronize();
  }
  return e;
}
static constexpr uint64_t kTlConsumerBytes = sizeof(g_tl_consumer), kTlProducerBytes = sizeof(g_tl_producer);
#endif

// A consumer warpgroup's row for one tile; stamp() only in the warpgroup's first thread.
struct Timeline {
#if VIDATTN_DIAG_TIMELINE
  unsigned long long* row = nullptr;
  __device__ __forceinline__ Timeline(bool split, int local, int cwg, bool first_thread) {
    if (!split && first_thread && blockIdx.x < kTlMaxCtas && local < kTlMaxLocal)
      row = g_tl_consumer + ((blockIdx.x * kTlMaxLocal + local) * kTlWGs + cwg) * kTlEvents;
  }
  __device__ __forceinline__ void stamp(int e) const {
    if (row != nullptr) row[e] = clock64();
  }
  __device__ __forceinline__ void value(int e, unsigned long long v) const {
    if (row != nullptr) row[e] = v;
  }
#else
  __device__ __forceinline__ Timeline(bool, int, int, bool) {}
  __device__ __forceinline__ void stamp(int) const {}
  __device__ __forceinline__ void value(int, unsigned long long) const {}
#endif
};

__device__ __forceinline__ void tl_producer_value(bool split, int local, int e, unsigned long long v) {
#if VIDATTN_DIAG_TIMELINE
  if (!split && blockIdx.x < kTlMaxCtas && local < kTlMaxLocal)
    g_tl_producer[(blockIdx.x * kTlMaxLocal + local) * kTlProducerEvents + e] = v;
#endif
}
__device__ __forceinline__ void tl_producer_stamp(bool split, int local, int e) {
#if VIDATTN_DIAG_TIMELINE
  tl_producer_value(split, local, e, clock64());  // the producer is one thread: its clock read costs nothing else
#endif
}
__device__ __forceinline__ void tl_producer_clock_pair(bool split, int local) {
#if VIDATTN_DIAG_TIMELINE
  const unsigned long long c = clock64();
  tl_producer_value(split, local, kTlTimerNs, ptx::globaltimer_ns());
  tl_producer_value(split, local, kTlClockPair, c);
#endif
}

// Waits that would block, counted per tile (level 1 and up): count(kind, first, not_ready) calls not_ready() (a
// test_wait) only in a timeline build, so a shipped build emits no test_wait. Each count holds all iterations in its
// low 32 bits and the first iteration's (first = true) in its high 32 bits, as kTlKLate / kTlVLate are read back.
template <int kKinds>
struct TlLate {
#if VIDATTN_DIAG_TIMELINE
  unsigned long long n[kKinds] = {};
  template <typename F>
  __device__ __forceinline__ void count(int kind, bool first, F&& not_ready) {
    if (not_ready()) n[kind] += first ? (1ull << 32) + 1 : 1;
  }
  __device__ __forceinline__ unsigned long long get(int kind) const { return n[kind]; }
#else
  template <typename F>
  __device__ __forceinline__ void count(int, bool, F&&) {}
  __device__ __forceinline__ unsigned long long get(int) const { return 0; }
#endif
};

// Cycles spent in kinds of wait, summed in registers over a tile (32-bit clock: a tile is far below 2^32 cycles).
// Level 2 only; otherwise start() is 0 and add() nothing, so both compile away.
template <int kKinds>
struct TlWaits {
#if VIDATTN_DIAG_TIMELINE >= 2
  uint32_t sum[kKinds] = {};
  __device__ __forceinline__ uint32_t start() const { return static_cast<uint32_t>(clock()); }
  __device__ __forceinline__ void add(int kind, uint32_t t0) { sum[kind] += static_cast<uint32_t>(clock()) - t0; }
  __device__ __forceinline__ unsigned long long get(int kind) const { return sum[kind]; }
#else
  __device__ __forceinline__ uint32_t start() const { return 0; }
  __device__ __forceinline__ void add(int, uint32_t) {}
  __device__ __forceinline__ unsigned long long get(int) const { return 0; }
#endif
};

}  // namespace vidattn::sm90
