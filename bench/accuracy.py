"""The inputs and the error bound that the GPU suite (tests/test_kernel_gpu.py, tests/sanitizer_cases.py), the
lineage check (scripts/bench_lineage.py) and the accuracy probes (dev/probes/) share: score patterns that stress the
fixed-reference softmax, the random draws of the accuracy tail, and FlashAttention's absolute error term."""
from __future__ import annotations

import math

import torch

ULP_MANTISSA = {torch.bfloat16: (7, -126), torch.float16: (10, -14)}
INPUTS = ("randn", "shift", "sink")
# "sink": one key, two thirds of the way along, that every row attends to about as much as to all the others
# together (a shared query feature of 2 against that key's 3.6 sqrt(D): a score ~7 above the rest, about ln of the
# 777-key case's partition sum), with V's row for it offset by 1. The case where the fixed reference's rounding of
# a later key's weight shows most (csrc/NOTES.md, fourteenth session).
SINK_Q, SINK_K, SINK_V = 2.0, 3.6, 1.0


def make_inputs(kind: str, b: int, h: int, sq: int, skv: int, d: int, g, dev, dtype):
    """(q, k, v) as (B, S, H, D) in `dtype` for one draw: randn, randn + 0.5 ("shift"), or randn with a late
    attention sink ("sink", above)."""
    q, k, v = (torch.randn(b, s, h, d, device=dev, generator=g) for s in (sq, skv, skv))
    if kind == "shift":
        q, k, v = q + 0.5, k + 0.5, v + 0.5
    elif kind == "sink":
        j = (2 * skv) // 3
        q[..., 0] = SINK_Q
        k[:, j, :, 0] = SINK_K * d ** 0.5
        v[:, j] += SINK_V
    return q.to(dtype), k.to(dtype), v.to(dtype)


def ulp(ref: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """One unit in the last place of `dtype` at each element's magnitude (subnormals: the smallest normal's)."""
    mantissa, min_exp = ULP_MANTISSA[dtype]
    return torch.exp2(torch.floor(torch.log2(ref.abs().clamp_min(2.0 ** min_exp))) - mantissa)


def fa_atol(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """FlashAttention's absolute term, the GPU suite's since the fourteenth session (tests/test_kernel_gpu.py imports
    it from here): twice the largest rounding error of ref + 0.3 in `dtype`, the output's own rounding at the
    magnitudes attention outputs take."""
    return 2.0 * ((ref + 0.3).to(dtype).double() - 0.3 - ref).abs().max().item()



def shape_scores(q, k, pattern, heads=None):
    """Makes later keys outscore the first key block (the fixed-reference softmax's reference, csrc/sm90/flash_fwd.cuh),
    in place on k (B, S, H, D; views too), and returns it. With q shifted by +0.5 (rows summing to about D/2),
    adding c to every element of key j adds about c * D/2 * scale to its scores. "ramp": the last key ~40 log2 units
    higher on average, so p reaches ~2^40 and most row sums stay in range (rows of q with large sums get more and
    may reach the redo); "spike": in `heads` (default
    all) key min(1234, Skv - 1) ~500 log2 units above the rest, so p overflows and the tile must run again exactly.
    Shared by the smoke cases, tests/test_kernel_gpu.py, tests/sanitizer_cases.py and bench_lineage.py's check."""
    d, skv = q.shape[-1], k.shape[1]
    per_unit = 0.5 * d ** 0.5 * math.log2(math.e)  # log2 units of score per unit added to every element of a key
    if pattern == "ramp":
        ramp = torch.arange(skv, device=k.device, dtype=torch.float32) / skv * 40 / per_unit
        k += ramp.to(k.dtype)[None, :, None, None]
    elif pattern == "spike":
        k[:, min(1234, skv - 1), slice(None) if heads is None else heads] += 500 / per_unit
    else:
        raise ValueError(f"unknown score pattern {pattern!r}")
    return k
