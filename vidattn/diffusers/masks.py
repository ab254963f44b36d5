"""Attention masks from diffusers processors -> the kernel's `kv_lens`, when the mask is plain key padding."""
from typing import Optional

import torch


def mask_to_kv_lens(mask: torch.Tensor, batch: int, seqlen_kv: int) -> tuple[Optional[torch.Tensor], Optional[str]]:
    """`(kv_lens, None)` when `mask` is a boolean key-padding mask whose kept keys form a prefix of every row
    (shapes (B, Skv) or (B, 1, 1, Skv); True = attend), else `(None, reason)`. A (B, 1, Skv) mask is not
    converted: diffusers hands it to SDPA as is, which broadcasts it as (1, B, 1, Skv).

    The prefix test reads the mask's values (one device sync), so while compiling every mask takes the
    fallback instead of breaking the graph.
    """
    if not isinstance(mask, torch.Tensor):
        return None, f"attention_mask of type {type(mask).__name__} is not a tensor"
    if mask.dtype != torch.bool:
        return None, f"attention_mask has dtype {mask.dtype}; only boolean key-padding masks map to kv_lens"
    shape = tuple(mask.shape)
    if shape not in ((batch, seqlen_kv), (batch, 1, 1, seqlen_kv)):
        return None, (f"attention_mask of shape {shape} is not a key-padding mask (batch={batch}, "
                      f"keys={seqlen_kv})")
    if torch.compiler.is_compiling():
        return None, "attention_mask under torch.compile: the key-padding test needs the mask's values"
    keep = mask.reshape(batch, seqlen_kv)
    lens = keep.sum(dim=1)
    prefix = torch.arange(seqlen_kv, device=mask.device)[None, :] < lens[:, None]
    if not bool(torch.equal(prefix, keep)) or int(lens.min()) < 1:
        return None, "attention_mask keeps keys that are not a non-empty prefix of each row"
    return lens.to(torch.int32), None
