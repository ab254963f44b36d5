"""Shared by the processors whose stock diffusers version prepares an SDPA mask (CogVideoX, LTX-Video, Allegro):
the prepared `(B, H, Sq or 1, Skv)` mask -> the kernel's `kv_lens`, the stock SDPA call for everything the kernel
cannot express, and the stock processor that `vidattn.restore` hands back for processors set by hand.

Nothing here imports diffusers at import time (`import vidattn` must not import it).
"""
import importlib
from typing import Optional

import torch
import torch.nn.functional as F

from .. import ops
from .masks import LastMaskMemo, prefix_lengths

# An additive mask value at or below this drops its key. diffusers writes (1 - mask) * -10000 for text padding
# (LTX-Video, Allegro; -9984 once rounded to bf16). SDPA then weights a dropped key by exp(score - 10000 - max),
# which underflows to exactly 0 in fp32 unless that key's score beats the best kept score by more than ~9900:
# so leaving the key out (kv_lens) is the same softmax for any real scores.
DROP_BIAS = -9000.0

_MEMO = LastMaskMemo()

def kernel(query, key, value, precision: Optional[str] = None, **kwargs):
    """`vidattn.attention(query, key, value, **kwargs)` with the processor's precision (None: the context default,
    and no keyword passed). Looks `ops.attention` up per call, so a spy or a wrapper put there sees every processor
    call (one that takes **kwargs passes `precision` through)."""
    if precision is not None:
        kwargs["precision"] = precision
    return ops.attention(query, key, value, **kwargs)


class VidattnProcessor:
    """Base of every vidattn diffusers processor: `precision` (None = `vidattn.attention`'s current default,
    "exact" unless `vidattn.use_precision` changes it) and a repr that tells it from diffusers' own processor."""

    precision: Optional[str] = None

    def __init__(self, precision: Optional[str] = None):
        if precision is not None:
            self.precision = precision

    def __repr__(self) -> str:
        return f"vidattn.{type(self).__name__}(precision={self.precision!r})"


class VidattnModule:
    """Mixin of the vidattn subclasses that `vidattn.apply` swaps in for stock attention *modules* (attention that
    is no processor: the module's own `forward` calls `F.sdpa`). The subclass overrides `forward` only and names
    its stock class in `_vidattn_stock_class`, which `vidattn.restore` sets back. `precision` as for processors
    (set it on the instance after apply)."""

    precision: Optional[str] = None
    _vidattn_stock_class: type = None


def sdpa_mask_to_kv_lens(mask, batch: int, heads: int, seqlen_q: int, seqlen_kv: int,
                         source: Optional[torch.Tensor] = None) -> tuple[Optional[torch.Tensor], Optional[str]]:
    """`(kv_lens, None)` when `mask`, a mask as the stock processors hand it to SDPA (4-D, broadcastable to
    (B, H, Sq, Skv)), drops the same keys for every head and query and the kept keys are a non-empty prefix of
    each batch row; else `(None, reason)`.

    Boolean masks: True = attend. Float (additive) masks: 0 = attend, <= `DROP_BIAS` (or -inf) = drop; any
    other value is a real bias and is not converted. Reads the mask's values (one device sync), so under
    `torch.compile` every mask takes the SDPA path instead of breaking the graph. The answer is memoised on
    `source` (default: `mask`), the tensor the model hands every layer, when `mask` is prepared from it per layer
    (masks.LastMaskMemo).
    """
    if not isinstance(mask, torch.Tensor):
        return None, f"attention_mask of type {type(mask).__name__} is not a tensor"
    shape = tuple(mask.shape)
    if (mask.dim() != 4 or shape[0] != batch or shape[1] not in (1, heads) or shape[2] not in (1, seqlen_q)
            or shape[3] != seqlen_kv):
        return None, (f"attention_mask of shape {shape} is not a key-padding mask (batch={batch}, heads={heads}, "
                      f"queries={seqlen_q}, keys={seqlen_kv})")
    if torch.compiler.is_compiling():
        return None, "attention_mask under torch.compile: the key-padding test needs the mask's values"
    if mask.dtype != torch.bool and not mask.dtype.is_floating_point:
        return None, f"attention_mask has dtype {mask.dtype}; only boolean or additive float masks map to kv_lens"
    src = mask if source is None else source
    key = (shape, mask.dtype, batch, heads, seqlen_q, seqlen_kv)
    return _MEMO.get(src, key, lambda: _convert(mask, batch, seqlen_kv))


def _convert(mask, batch, seqlen_kv):
    """The key-padding test in device ops, its three answers read back at once."""
    keep = mask if mask.dtype == torch.bool else mask == 0
    row = keep[:, :1, :1, :]
    lens, prefix_ok = prefix_lengths(row.reshape(batch, seqlen_kv))
    bias_ok = (keep | (mask <= DROP_BIAS)).all() if mask.dtype != torch.bool else torch.ones_like(prefix_ok)
    bias_ok, uniform, prefix_ok = torch.stack([bias_ok, (keep == row).all(), prefix_ok]).tolist()  # the one sync
    if not bias_ok:
        return None, (f"additive attention_mask has values other than 0 and <= {DROP_BIAS:g}: a bias, "
                      "not key padding")
    if not uniform:
        return None, "attention_mask differs between heads or query positions: not a key-padding mask"
    if not prefix_ok:
        return None, "attention_mask keeps keys that are not a non-empty prefix of each row"
    return lens.to(torch.int32), None


def prepare_sdpa_mask(attn, attention_mask, sequence_length: int, batch_size: int):
    """The stock processors' mask preparation (`attn.prepare_attention_mask`, viewed as (B, H, Sq or 1, Skv)),
    returning the prepared mask and the tensor it came from: the model hands that one tensor to every layer, so it
    keys the kv_lens memo while the prepared copy is new in each layer."""
    if attention_mask is None:
        return None, None
    prepared = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
    return prepared.view(batch_size, attn.heads, -1, prepared.shape[-1]), attention_mask


def stock_sdpa(query, key, value, attention_mask, reason: Optional[str]):
    """The stock processors' own call, `F.scaled_dot_product_attention` on (B, H, S, D), for what the kernel
    cannot express; warns once per reason."""
    if reason is not None and not torch.compiler.is_compiling():
        ops.warn_fallback(reason)
    return F.scaled_dot_product_attention(query, key, value, attn_mask=attention_mask, dropout_p=0.0,
                                          is_causal=False)


def attend_bhsd(query, key, value, attention_mask=None, mask_source=None, precision: Optional[str] = None):
    """Attention on (B, H, S, D) tensors as the stock processors' SDPA call computes it: `vidattn.attention`
    (key-padding masks as `kv_lens`), or the stock SDPA call for any other mask."""
    if attention_mask is None:
        return kernel(query, key, value, precision, layout="bhsd")
    b, h, sq, _ = query.shape
    kv_lens, reason = sdpa_mask_to_kv_lens(attention_mask, b, h, sq, key.shape[2], source=mask_source)
    if kv_lens is None:
        return stock_sdpa(query, key, value, attention_mask, reason)
    return kernel(query, key, value, precision, layout="bhsd", kv_lens=kv_lens)


class StockProcessor:
    """Class attribute `_vidattn_original` of a vidattn processor. `vidattn.apply` stores the replaced stock
    object on the instance, which wins over this (non-data) descriptor; a processor set by hand has none, and
    reads a new stock processor here, so `vidattn.restore` gives the module diffusers' own processor back even
    where the attention class has no `_default_processor_cls` (diffusers' `Attention`, `MochiAttention`)."""

    def __init__(self, module: str, name: str):
        self.module, self.name = module, name

    def __get__(self, obj, objtype=None):
        if obj is None:
            return self
        return getattr(importlib.import_module(self.module), self.name)()
