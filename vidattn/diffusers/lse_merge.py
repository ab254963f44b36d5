"""Attention over a union of disjoint key sets, from one attention per set: the log-sum-exp merge.

For a query row, attention over keys K = K_1 u K_2 u ... (disjoint) is

    out = sum_i exp(lse_i - lse) * out_i,    lse = logsumexp_i(lse_i),

where (out_i, lse_i) is the attention of that row over K_i alone. Sets may be empty for some rows (lse_i = -inf, out_i
anything finite). A set of n keys that all score 0 and carry value 0 (the zero padding some stock processors attend
to) has lse = log(n) and out = 0: `zero_keys` adds it without materialising it.
"""
from typing import Optional, Sequence

import torch


def merge_weights(lses: Sequence[torch.Tensor], zero_keys: Optional[torch.Tensor] = None):
    """([w_i], lse): the weight exp(lse_i - lse) of each part's output in the merged output, and the merged lse.

    lses: per part, the natural-log sum of exp of the scaled scores of each row over that part's keys (fp32 or
    fp64; -inf where the row has no key in the part), all broadcastable to one shape `rows`. zero_keys: None, or the
    count of extra keys with score 0 and value 0 per row (broadcastable to `rows`): they add to the denominator only.
    Every row needs a finite lse in some part, or zero keys."""
    if not lses:
        raise ValueError("merge_weights needs at least one part")
    shape = torch.broadcast_shapes(*(x.shape for x in lses))
    terms = [torch.broadcast_to(x, shape) for x in lses]
    if zero_keys is not None:
        zero = torch.as_tensor(zero_keys, dtype=terms[0].dtype, device=terms[0].device)
        terms.append(torch.broadcast_to(torch.log(zero), shape))  # log(0) = -inf: no zero keys in that row
    total = torch.logsumexp(torch.stack(terms), dim=0)
    return [torch.exp(x - total) for x in lses], total


def merge_lse(parts: Sequence, zero_keys: Optional[torch.Tensor] = None):
    """(out, lse) of attention over the union of the key sets of `parts`.

    parts: [(out_i, lse_i), ...], out_i of shape (*rows, D), lse_i of shape `rows` (as `merge_weights`); a part a
    row does not attend to has lse_i = -inf there (its out_i may hold anything finite). Returns out in the lse's
    dtype (fp32 for the kernel's) and the merged lse."""
    if not parts:
        raise ValueError("merge_lse needs at least one (out, lse) part")
    weights, total = merge_weights([lse for _, lse in parts], zero_keys)
    out = None
    for (o, _), w in zip(parts, weights):
        term = w.unsqueeze(-1) * o.to(w.dtype)
        out = term if out is None else out + term
    return out, total
