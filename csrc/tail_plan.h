// Host-side arithmetic the two launchers share: the tail launch's split search (capi.cu plan_tail, capi_8bit.cuh
// q8_plan_tail), the exact plan's balanced chunk and its pieces (which the kernels share), the reader of the
// run-time switches' environment variables (both files' settings), and the key/value head count both forward
// entries take from VidattnFwdArgs (grouped_kv_heads). Plain C++, no torch and no CUDA beyond the
// host-device marks, so that tests/test_tail_plan_host.py can compile it with the host compiler and hold it to
// dev/stress/budget.py's models.
#pragma once

#include <cstdint>
#include <cstdlib>

// The balanced tail's arithmetic runs in the kernels too (flash_fwd.cuh, combine.cuh).
#if defined(__CUDACC__)
#define VIDATTN_HOST_DEVICE __host__ __device__
#else
#define VIDATTN_HOST_DEVICE
#endif

namespace vidattn {

// The last, partial round of r tiles of nb key blocks each, run as s key ranges a tile that take ceil(r s / SMs)
// short rounds: its cost in key-block times of one CTA is ceil(r s / SMs) rounds of ceil(nb / s) + 2 blocks (a
// range's start and end: pipeline fill, Q load, partial store) plus r s / 50 for the merge's reads of the partials.
// Returns the cheapest s of 2..max_splits with at least min_blocks blocks a range and at most max_items_per_sm x SMs
// ranges (the workspace), or 1 when none saves a tenth of the plain last round's nb.
inline int64_t cheapest_tail_split(int64_t r, int64_t nb, int64_t sms, int64_t min_blocks, int64_t max_splits,
                                   int64_t max_items_per_sm) {
  double best = static_cast<double>(nb);
  int64_t pick = 1;
  for (int64_t s = 2; s <= max_splits && nb / s >= min_blocks && r * s <= max_items_per_sm * sms; ++s) {
    const int64_t rounds = (r * s + sms - 1) / sms;
    const double cost = static_cast<double>(rounds * ((nb + s - 1) / s + 2)) + static_cast<double>(r * s) / 50.0;
    if (cost < best) {
      best = cost;
      pick = s;
    }
  }
  return best > 0.9 * static_cast<double>(nb) ? 1 : pick;
}

// The balanced tail (capi.cu plan_tail under VIDATTN_TAIL_ROUNDS=3; dev/NOTES.md "A balanced tail at D=256"): the
// last round's r tiles of nb key blocks laid end to end, r nb blocks, cut into one chunk of u = ceil(r nb / SMs)
// consecutive blocks per CTA, stream-K's layout for the tail alone. r < SMs gives u <= nb, so a chunk holds at most
// the end of one tile and the start of the next: two pieces. Its cost in key-block times of the main launch, as call
// P49 measured it (dev/probes/tail_probe.py): the split kernel's blocks at 1.12 of the main launch's (its exact online
// softmax), 4.2 for a CTA's start and its pieces' ends, and the merge at (r + SMs) / 20 (~10 blocks at D=256 for ~230
// pieces, 16 us). Returns u when that cost saves a tenth of nb with at least min_blocks blocks a chunk, else 0; 0 too
// where r nb would pass an int (the kernel's arithmetic). D=256 at 32K keys plans (u 212 of 410), at 8K not (79 of
// 103 would cost 104: P48 read it 1.3% slower).
inline int64_t balanced_tail_chunk(int64_t r, int64_t nb, int64_t sms, int64_t min_blocks) {
  if (r <= 0 || r >= sms || nb <= 0 || r * nb > 0x7fffffffll) return 0;
  const int64_t u = (r * nb + sms - 1) / sms;
  const double cost = 1.12 * static_cast<double>(u) + 4.2 + static_cast<double>(r + sms) / 20.0;
  return u >= min_blocks && cost <= 0.9 * static_cast<double>(nb) ? u : 0;
}

// Pieces of tail tile t (0 <= t < r) under a balanced chunk of u blocks: the CTAs floor(t nb / u) to
// floor(((t + 1) nb - 1) / u), each holding one piece of it (combine.cuh reads them in that order).
VIDATTN_HOST_DEVICE inline int64_t balanced_tail_pieces(int64_t t, int64_t nb, int64_t u) {
  return ((t + 1) * nb - 1) / u - t * nb / u + 1;
}

// The balanced tail's piece for item k x ctas + g (flash_fwd.cuh tile_work): CTA g's chunk
// [g u, min((g + 1) u, r nb)) of the r tiles' nb blocks laid end to end. u <= nb, so the chunk starts in tile
// t0 = floor(g u / nb) and ends there or in t0 + 1: piece 0 is its part of t0, piece 1 its part of t0 + 1, absent
// where the chunk ends inside t0 (or where the chunk is empty: the last CTAs when SMs x u passes r nb). The tail tile
// and its blocks [first, end). int arithmetic: balanced_tail_chunk refuses r nb past an int.
struct BalancedPiece {
  int tile, first, end;
  bool absent;
};
VIDATTN_HOST_DEVICE inline BalancedPiece balanced_piece(int item, int u, int nb, int ctas, int r) {
  const int k = item / ctas, g = item - k * ctas, total = r * nb;
  const int b0 = g * u < total ? g * u : total, b1 = b0 + u < total ? b0 + u : total;
  const int t0 = b0 / nb < r - 1 ? b0 / nb : r - 1;
  if (k == 0) {
    const int end = b1 < (t0 + 1) * nb ? b1 : (t0 + 1) * nb;
    return {t0, b0 - t0 * nb, end - t0 * nb, b0 >= total};
  }
  const int end = b1 - (t0 + 1) * nb;
  return {end > 0 ? t0 + 1 : t0, 0, end > 0 ? end : 0, end <= 0};
}

// The item holding tail tile t's s-th piece (s < balanced_tail_pieces): CTA g = floor(t nb / u) + s, its piece
// t - floor(g u / nb) (combine.cuh).
VIDATTN_HOST_DEVICE inline int64_t balanced_piece_item(int t, int s, int u, int nb, int ctas) {
  const int g = t * nb / u + s;
  return static_cast<int64_t>(t - g * u / nb) * ctas + g;
}

// The key/value heads a call runs with, from VidattnFwdArgs' `heads` and `kv_heads` (capi.h: 0 means as many as
// heads), or 0 when `kv_heads` is refused: negative, or not a divisor of heads (grouped-query attention maps query
// head h to key/value head h / (heads / kv_heads)). Both forward entries refuse such a call with kGroupedKvError;
// the 8-bit workspace size is 0 for it.
inline int64_t grouped_kv_heads(int64_t heads, int64_t kv_heads) {
  if (kv_heads == 0) return heads;
  return kv_heads > 0 && heads % kv_heads == 0 ? kv_heads : 0;
}
constexpr const char* kGroupedKvError =
    "kv_heads must divide heads (grouped-query attention), or be 0 for as many as heads";

// A build default, unless the environment variable `name` holds a value in [lo, hi] (an unset or empty variable, or
// another value, keeps the default). Callers keep it in a function-local static: read once, for A/B runs.
inline int env_default(const char* name, int build_default, int lo, int hi) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return build_default;
  const int v = std::atoi(e);
  return v >= lo && v <= hi ? v : build_default;
}

}  // namespace vidattn
