"""Shared attention-call plumbing for the vidattn processors of Wan, SkyReels-V2, HunyuanVideo and HunyuanVideo 1.5.

`ProcessorBase._attend` is the one place these processors call attention: no mask -> `vidattn.attention`;
a boolean key-padding mask -> `vidattn.attention(..., kv_lens=)`; context parallelism or any other mask ->
diffusers' own `dispatch_attention_fn` (with a fallback warning naming the reason). `_attend_row_prefix`
adds masks whose every query row keeps a prefix of the keys (block-causal masks): one kernel call per run of
rows with the same prefix.
"""
from typing import Optional

import torch

from .. import ops
from .masks import LastMaskMemo, mask_to_kv_lens
from .sdpa_common import VidattnProcessor, kernel, sdpa_mask_to_kv_lens

# At most this many distinct row-prefix runs are split into separate kernel calls; more runs fall back.
MAX_ROW_RUNS = 64
# Rows of a (Sq, Skv) mask checked at once for the row-prefix test (bounds the temporary boolean matrix).
_CHECK_ROWS = 4096


class ProcessorBase(VidattnProcessor):
    # Read and written by diffusers (set_attention_backend, enable_parallelism); used on the fallback path.
    _attention_backend = None
    _parallel_config = None

    def _dispatch(self, query, key, value, attention_mask, parallel_config, reason: Optional[str]):
        """diffusers' stock attention call, for what the kernel cannot express."""
        from diffusers.models.attention_dispatch import dispatch_attention_fn

        if reason is not None and not torch.compiler.is_compiling():
            ops.warn_fallback(reason)
        return dispatch_attention_fn(query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False,
                                     backend=self._attention_backend, parallel_config=parallel_config)

    def _attend(self, query, key, value, attention_mask=None, parallel_config=None):
        if parallel_config is not None:
            return self._dispatch(query, key, value, attention_mask, parallel_config,
                                  "context parallelism is configured: diffusers' dispatch runs the ring")
        if attention_mask is None:
            return kernel(query, key, value, self.precision, layout="bshd")
        kv_lens, reason = mask_to_kv_lens(attention_mask, query.shape[0], key.shape[1])
        if kv_lens is None:
            return self._dispatch(query, key, value, attention_mask, None, reason)
        return kernel(query, key, value, self.precision, layout="bshd", kv_lens=kv_lens)

    def _attend_sdpa_mask(self, query, key, value, attention_mask, mask_source=None, parallel_config=None):
        """`_attend` for a mask prepared the way the stock processors prepare it for SDPA ((B, H, Sq or 1, Skv),
        boolean or additive): key padding, whether boolean or 0 / <= -9000 (LTX's (1 - m) * -10000), becomes
        `kv_lens`; a real bias (LTX-2 IC-LoRA's dense mask) or anything else runs diffusers' dispatch."""
        if parallel_config is not None:
            return self._dispatch(query, key, value, attention_mask, parallel_config,
                                  "context parallelism is configured: diffusers' dispatch runs the ring")
        if attention_mask is None:
            return kernel(query, key, value, self.precision, layout="bshd")
        b, sq, h, _ = query.shape
        kv_lens, reason = sdpa_mask_to_kv_lens(attention_mask, b, h, sq, key.shape[1], source=mask_source)
        if kv_lens is None:
            return self._dispatch(query, key, value, attention_mask, None, reason)
        return kernel(query, key, value, self.precision, layout="bshd", kv_lens=kv_lens)

    def _attend_row_prefix(self, query, key, value, attention_mask, parallel_config=None):
        """`_attend`, plus (1, 1, Sq, Skv) boolean masks whose rows each keep a prefix of the keys (SkyReels-V2
        diffusion forcing's block-causal mask): the query rows are cut into runs with one prefix length and
        each run attends to its key prefix, `MAX_ROW_RUNS` kernel calls at most."""
        if parallel_config is not None or attention_mask is None or attention_mask.dim() != 4 \
                or tuple(attention_mask.shape[-2:]) != (query.shape[1], key.shape[1]):
            return self._attend(query, key, value, attention_mask, parallel_config)
        runs, reason = row_prefix_runs(attention_mask, query.shape[1], key.shape[1])
        if runs is None:
            return self._dispatch(query, key, value, attention_mask, None, reason)
        parts = []
        for start, stop, length in runs:
            q = query[:, start:stop]
            if length == 0:  # no key kept: SDPA's math path returns zeros for fully masked rows
                parts.append(q.new_zeros(q.shape[:-1] + (value.shape[-1],)))
            else:
                parts.append(kernel(q, key[:, :length], value[:, :length], self.precision, layout="bshd"))
        return parts[0] if len(parts) == 1 else torch.cat(parts, dim=1)


_RUNS_MEMO = LastMaskMemo()  # one mask per forward, handed to every layer


def row_prefix_runs(mask: torch.Tensor, seqlen_q: int, seqlen_kv: int):
    """`([(row_start, row_stop, keys_kept), ...], None)` when `mask` is a boolean (1, 1, Sq, Skv) mask whose
    every row keeps a prefix of the keys and whose rows form at most `MAX_ROW_RUNS` runs of one prefix length;
    else `(None, reason)`. The result of the last mask is cached (a model passes one mask to every layer)."""
    if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
        return None, "attention_mask is not a boolean tensor; only key-prefix masks map to the kernel"
    if tuple(mask.shape) != (1, 1, seqlen_q, seqlen_kv):
        return None, (f"attention_mask of shape {tuple(mask.shape)} is neither a key-padding mask nor a "
                      f"(1, 1, Sq, Skv) row-prefix mask")
    if torch.compiler.is_compiling():
        return None, "attention_mask under torch.compile: the row-prefix test needs the mask's values"
    return _RUNS_MEMO.get(mask, (seqlen_q, seqlen_kv), lambda: _row_prefix_runs_of(mask, seqlen_q, seqlen_kv))


def _row_prefix_runs_of(mask: torch.Tensor, seqlen_q: int, seqlen_kv: int):
    rows = mask[0, 0]
    lens = rows.sum(dim=1)
    arange = torch.arange(seqlen_kv, device=mask.device)
    ok = True
    for i in range(0, seqlen_q, _CHECK_ROWS):
        block = rows[i:i + _CHECK_ROWS]
        if not torch.equal(arange[None, :] < lens[i:i + _CHECK_ROWS, None], block):
            ok = False
            break
    if not ok:
        return None, "attention_mask keeps keys that are not a prefix of each query row"
    cuts = (torch.nonzero(lens[1:] != lens[:-1]).flatten() + 1).tolist()
    if len(cuts) + 1 > MAX_ROW_RUNS:
        return None, f"attention_mask has {len(cuts) + 1} distinct row-prefix runs (more than {MAX_ROW_RUNS})"
    starts = [0] + cuts
    stops = cuts + [seqlen_q]
    kept = lens[starts].tolist()
    return [(a, b, int(n)) for a, b, n in zip(starts, stops, kept)], None
