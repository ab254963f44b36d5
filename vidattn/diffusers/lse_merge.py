"""Attention over a union of disjoint key sets, from one attention per set: the log-sum-exp merge.

For a query row, attention over keys K = K_1 u K_2 u ... (disjoint) is

    out = sum_i exp(lse_i - lse) * out_i,    lse = logsumexp_i(lse_i),

where (out_i, lse_i) is the attention of that row over K_i alone. Sets may be empty for some rows (lse_i = -inf, out_i
anything finite). A set of n keys that all score 0 and carry value 0 (the zero padding some stock processors attend
to) has lse = log(n) and out = 0: `zero_keys` adds it without materialising it.
"""
from typing import Optional, Sequence

import torch


def merge_lse(parts: Sequence, zero_keys: Optional[torch.Tensor] = None):
    """(out, lse) of attention over the union of the key sets of `parts`.

    parts: [(out_i, lse_i), ...], out_i of shape (*rows, D), lse_i of shape (*rows), natural-log sum of exp of the
        scaled scores (fp32 or fp64); rows where a set is empty carry lse_i = -inf. Every part must have a finite
        lse on some part for every row (or `zero_keys` > 0 there).
    zero_keys: None, or the count of extra keys with score 0 and value 0 per row (broadcastable to `rows`).
    Returns out in the dtype of the lse (fp32 for the kernel's), and lse of shape `rows`."""
    if not parts:
        raise ValueError("merge_lse needs at least one (out, lse) part")
    lses = [lse for _, lse in parts]
    dtype = lses[0].dtype
    if zero_keys is not None:
        zero = torch.as_tensor(zero_keys, dtype=dtype, device=lses[0].device)
        lses = lses + [torch.log(zero).expand_as(lses[0])]  # log(0) = -inf: no zero keys in that row
    total = torch.logsumexp(torch.stack([torch.broadcast_to(x, lses[0].shape) for x in lses]), dim=0)
    out = None
    for o, lse in parts:
        w = torch.exp(lse - total).unsqueeze(-1)
        term = w * o.to(dtype)
        out = term if out is None else out + term
    return out, total
