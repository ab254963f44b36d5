"""Attention masks from diffusers processors -> the kernel's `kv_lens`, when the mask is plain key padding."""
import weakref
from typing import Callable, Optional

import torch


class LastMaskMemo:
    """A memo of the last few masks, keyed on a mask tensor's identity, version counter and the call's shape: a model
    hands the same mask object to every layer of a forward, so the host syncs of a mask test (each stalls the CPU
    until the GPU drains, and the next kernels then launch with the queue empty) run once per forward instead of once
    per layer. Measured on LTX-Video, 28 masked layers: the forward's wall time exceeded its kernels' device time by
    29 ms (bench/results/forward_ltx_20261130). Several entries, because a model may alternate masks layer by layer:
    LTX-2's video->text and audio->text attentions take two different text masks in every block, and a one-entry
    memo re-tested each of them in each of its 96 calls (a forward 0.86x SDPA's at 41 frames). A mask written in
    place bumps its version and is re-tested; inference-mode tensors have no version counter and are never
    memoised."""

    def __init__(self, size: int = 4):
        self._size = size
        self._entries: list = []  # most recent last

    def get(self, mask: torch.Tensor, key: tuple, compute: Callable):
        try:
            version = mask._version
        except RuntimeError:
            version = None
        # Copy on write: each update builds a new list and binds it in one step, never changing a list another
        # thread may be walking (pipelines served from threads share the memos); a lost update only costs a re-test.
        entries = self._entries
        if version is not None:
            for i, e in enumerate(entries):
                if e[0]() is mask and e[1] == version and e[2] == key:
                    if i != len(entries) - 1:
                        self._entries = entries[:i] + entries[i + 1:] + [e]
                    return e[3]
        result = compute()
        if version is not None:
            live = [e for e in entries if e[0]() is not None]
            keep = live[len(live) - self._size + 1:] if self._size > 1 else []
            self._entries = keep + [(weakref.ref(mask), version, key, result)]
        return result


def prefix_lengths(keep: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For a boolean (B, Skv) keep matrix: (lens, ok) where ok (a 0-d device tensor, read once by the caller) says
    that every row keeps a non-empty prefix of the keys."""
    lens = keep.sum(dim=1)
    prefix = torch.arange(keep.shape[1], device=keep.device)[None, :] < lens[:, None]
    return lens, (prefix == keep).all() & (lens.min() >= 1)


_MEMO = LastMaskMemo()


def mask_to_kv_lens(mask: torch.Tensor, batch: int, seqlen_kv: int) -> tuple[Optional[torch.Tensor], Optional[str]]:
    """`(kv_lens, None)` when `mask` is a boolean key-padding mask whose kept keys form a prefix of every row
    (shapes (B, Skv) or (B, 1, 1, Skv); True = attend), else `(None, reason)`. A (B, 1, Skv) mask is not
    converted: diffusers hands it to SDPA as is, which broadcasts it as (1, B, 1, Skv).

    The prefix test reads the mask's values (one device sync, memoised per mask object: LastMaskMemo), so while
    compiling every mask takes the fallback instead of breaking the graph.
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
    return _MEMO.get(mask, (batch, seqlen_kv), lambda: _bool_mask_to_kv_lens(mask, batch, seqlen_kv))


def _bool_mask_to_kv_lens(mask, batch, seqlen_kv):
    lens, ok = prefix_lengths(mask.reshape(batch, seqlen_kv))
    if not bool(ok):  # the one device sync
        return None, "attention_mask keeps keys that are not a non-empty prefix of each row"
    return lens.to(torch.int32), None
