// Host-side arithmetic the two launchers share: the tail launch's split search (capi.cu plan_tail, capi_8bit.cuh
// q8_plan_tail) and the reader of the run-time switches' environment variables (both files' settings). Plain C++, no
// CUDA and no torch, so that tests/test_tail_plan_host.py can compile it with the host compiler and hold it to
// dev/stress/budget.py's models.
#pragma once

#include <cstdint>
#include <cstdlib>

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

// A build default, unless the environment variable `name` holds a value in [lo, hi] (an unset or empty variable, or
// another value, keeps the default). Callers keep it in a function-local static: read once, for A/B runs.
inline int env_default(const char* name, int build_default, int lo, int hi) {
  const char* e = std::getenv(name);
  if (e == nullptr || *e == 0) return build_default;
  const int v = std::atoi(e);
  return v >= lo && v <= hi ? v : build_default;
}

}  // namespace vidattn
