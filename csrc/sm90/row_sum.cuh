// The test a softmax row's sum passes to be normalised by it, shared by both kernels' epilogues (flash_fwd.cuh,
// q8_fwd.cuh) and the tail launch's merge (combine.cuh). Pure CUDA, no torch.
#pragma once

namespace vidattn::sm90 {

// A row is normalised by its sum (O / sum, LSE = max + log sum) unless it has no key at all (sum 0: O = 0, LSE -inf).
// A NaN sum (a NaN score reached the row) counts as normalised, so that O and the LSE come out NaN, as SDPA's do:
// hence !(sum <= 0), not sum > 0, which is false for NaN (dev/NOTES.md "NaN through a tail merge").
__device__ __forceinline__ bool row_has_sum(float sum) { return !(sum <= 0.f); }

}  // namespace vidattn::sm90
