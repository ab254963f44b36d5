"""Block-sparse attention: a mask of 64 x 64 blocks of (query rows, keys), on the kernel's block-sparse builds.

A block mask says, for every 64 query rows, which 64-key blocks they attend to (whole blocks: no mask inside one).
That is what NABLA (Kandinsky 5, Kandinsky 6 SR) and block-causal cache passes give flex_attention. Two forms are
taken: a ``torch.nn.attention.flex_attention.BlockMask`` whose block sizes are multiples of 64 and which has no
``mask_mod`` (flex then computes its partial blocks whole, so they count as full), or a boolean tensor
``(B or 1, H or 1, ceil(Sq / 64), ceil(Skv / 64))``.

The kernel (csrc/sm90/flash_fwd.cuh, kSparse) runs tiles of 128 query rows (192 at head dim 64 with three
warpgroups: `D64_WARPGROUPS`) and key blocks of 128 keys. Each tile gets the list of the 128-key blocks any of its
64 x 64 blocks needs, with two bits per 64-row block for which of the key block's 64-key halves it computes (the
others are masked); a block only the second half of which is needed starts 64 keys later, so that the needed half
comes first, where the kernel runs a half block at half the tensor work. `tables` builds that list from the block
mask with torch ops (traceable by torch.compile); rows that see no key get O = 0 and LSE -inf, as flex_attention gives
them.
"""
from __future__ import annotations

import ctypes
import os
from typing import NamedTuple, Optional

import torch

BLOCK = 64        # the mask's granularity (csrc/sm90/tile_config.cuh, kSparseBlock)
TILE_M = 128      # query rows per kernel tile (kSparseTileM): two mask blocks (three with three warpgroups)
TILE_N = 128      # keys per kernel key block (kSparseTileN): two mask blocks
KEY_UNIT = 64     # an entry's first key is counted in these (a key block starts at any multiple of 64 keys)
HEAD_DIMS = (64, 128)
# Consumer warpgroups (64 rows each) of a block-sparse tile at head dim 64: 2 (128-row tiles) or 3 (192-row tiles,
# as the dense D=64 long build; csrc/capi.h VidattnFwdArgs::blk_wgs). Two unless VIDATTN_SPARSE_D64_WARPGROUPS says 3
# when vidattn is imported (or this attribute is set). A 192-row tile computes the union of three row blocks' key
# blocks: on NABLA's sliding-tile structure and on scattered masks that is 22-40% more work than 128-row tiles do, and
# they ran 1.08-1.28x faster there; on banded or full masks (the same work either way) 192-row tiles ran 1.20-1.27x
# faster (an H100, dev/NOTES.md "Call P92"). Head dim 128 always has 2.
D64_WARPGROUPS = 3 if os.environ.get("VIDATTN_SPARSE_D64_WARPGROUPS", "2").strip() == "3" else 2


class Tables(NamedTuple):
    """The kernel's block-sparse tables (csrc/capi.h, VidattnFwdArgs::blk_cnt): per tile t of 64 * wgs rows,
    ``count[t]`` entries ``entries[t, j] = (first key / 64, bits)`` of 128-key blocks, ascending."""
    count: torch.Tensor    # int32 (B, H, T)
    entries: torch.Tensor  # int32 (B, H, T, Kn, 2), contiguous
    wgs: int = 2           # the tile's consumer warpgroups (64 rows each; VidattnFwdArgs::blk_wgs)


def warpgroups(head_dim: int) -> int:
    """The consumer warpgroups of the block-sparse tile this head dim runs (the tables are built for it)."""
    return D64_WARPGROUPS if head_dim == 64 else 2


def _blocks(n: int) -> int:
    return (n + BLOCK - 1) // BLOCK


def is_block_mask(obj) -> bool:
    """Whether `obj` is a flex_attention BlockMask (without importing flex_attention where torch lacks it)."""
    cls = type(obj)
    return cls.__name__ == "BlockMask" and cls.__module__.startswith("torch.nn.attention")


def _noop_mask_mod(mask_mod) -> bool:
    if mask_mod is None:
        return True
    try:
        from torch.nn.attention.flex_attention import noop_mask
    except ImportError:  # pragma: no cover - torch without flex_attention has no BlockMask either
        return False
    return mask_mod is noop_mask or getattr(mask_mod, "__name__", "") == "noop_mask"


def block_mask_reason(block_mask) -> Optional[str]:
    """Why this flex BlockMask cannot be read as whole 64 x 64 blocks (None: it can)."""
    if not _noop_mask_mod(getattr(block_mask, "mask_mod", None)):
        return "the block mask has a mask_mod (a mask inside its blocks): only whole blocks run on the kernel"
    bq, bk = getattr(block_mask, "BLOCK_SIZE", (None, None))
    if not (isinstance(bq, int) and isinstance(bk, int) and bq % BLOCK == 0 and bk % BLOCK == 0 and bq > 0 and bk > 0):
        return f"the block mask's block size {(bq, bk)} is not a multiple of {BLOCK} in both dims"
    return None


def dense_blocks(block_mask, batch: int, heads: int, sq: int, skv: int,
                 fn: str = "vidattn.attention") -> torch.Tensor:
    """The mask as a boolean (B, H, ceil(Sq / 64), ceil(Skv / 64)) tensor (a broadcast view where it came as one).
    Raises ValueError / TypeError for a mask that does not fit the call."""
    nq, nk = _blocks(sq), _blocks(skv)
    if is_block_mask(block_mask):
        reason = block_mask_reason(block_mask)
        if reason is not None:
            raise ValueError(f"{fn}: {reason}")
        lens = tuple(int(x) for x in getattr(block_mask, "seq_lengths", (sq, skv)))
        if lens != (sq, skv):
            raise ValueError(f"{fn}: the block mask is for {lens[0]} queries and {lens[1]} keys, the call has "
                             f"{sq} and {skv}")
        bq, bk = block_mask.BLOCK_SIZE
        dense = block_mask.to_dense() != 0  # (B|1, H|1, ceil(Sq / bq), ceil(Skv / bk)): partial and full blocks
        if bq != BLOCK:
            dense = dense.repeat_interleave(bq // BLOCK, dim=-2)
        if bk != BLOCK:
            dense = dense.repeat_interleave(bk // BLOCK, dim=-1)
        dense = dense[..., :nq, :nk]
    elif isinstance(block_mask, torch.Tensor):
        if block_mask.dtype != torch.bool:
            raise TypeError(f"{fn}: a block mask tensor must be torch.bool, got {block_mask.dtype}")
        dense = block_mask
    else:
        raise TypeError(f"{fn}: block_mask must be a flex_attention BlockMask or a bool tensor, got "
                        f"{type(block_mask).__name__}")
    if dense.dim() != 4 or dense.shape[0] not in (1, batch) or dense.shape[1] not in (1, heads) \
            or tuple(dense.shape[2:]) != (nq, nk):
        raise ValueError(f"{fn}: the block mask must be (B or 1, H or 1, ceil(Sq/{BLOCK}), ceil(Skv/{BLOCK})) = "
                         f"({batch} or 1, {heads} or 1, {nq}, {nk}), got {tuple(dense.shape)}")
    return dense.expand(batch, heads, nq, nk)


def tables(blocks: torch.Tensor, wgs: int = 2) -> Tables:
    """The kernel's tables from a boolean (B, H, ceil(Sq / 64), ceil(Skv / 64)) block mask (dense_blocks), for tiles
    of `wgs` 64-row blocks (warpgroups: 2, or 3 at head dim 64)."""
    if wgs not in (2, 3):
        raise ValueError(f"block-sparse tiles have 2 or 3 warpgroups, not {wgs}")
    b, h, nq, nk = blocks.shape
    t, kn = (nq + wgs - 1) // wgs, (nk + 1) // 2
    padded = torch.zeros((b, h, wgs * t, 2 * kn), dtype=torch.int32, device=blocks.device)
    padded[:, :, :nq, :nk] = blocks.to(torch.int32)
    r = padded.view(b, h, t, wgs, kn, 2)
    # bit 2 w + c: the tile's w-th 64 rows see the key block's c-th 64 keys
    bits = torch.zeros_like(r[:, :, :, 0, :, 0])
    for w in range(wgs):
        bits = bits | (r[:, :, :, w, :, 0] << (2 * w)) | (r[:, :, :, w, :, 1] << (2 * w + 1))
    used = bits != 0
    count = used.sum(-1, dtype=torch.int32)
    # A block whose first 64 keys no row of the tile sees starts 64 keys later instead: its keys then are the first
    # half's, for which the kernel runs half the tensor work (its exponentials still cover the whole block; its
    # second half, the next block's first, is masked by the bits). Entries count first keys in 64s.
    first_halves = sum(1 << (2 * w) for w in range(wgs))  # bit 2 w of each warpgroup w
    late = used & ((bits & first_halves) == 0)
    first = 2 * torch.arange(kn, dtype=torch.int32, device=blocks.device) + late.to(torch.int32)
    bits = torch.where(late, bits >> 1, bits)
    # the used blocks first, ascending (a stable sort of "unused")
    order = torch.sort((~used).to(torch.uint8), dim=-1, stable=True).indices
    entries = torch.stack((first.expand_as(bits).gather(-1, order), bits.gather(-1, order)), dim=-1).contiguous()
    return Tables(count.contiguous(), entries, wgs)


def density(blocks: torch.Tensor, sq: int, skv: int) -> float:
    """The share of the (query, key) pairs the mask computes (its 64 x 64 blocks, clipped to the lengths)."""
    nq, nk = blocks.shape[-2:]
    rows = torch.full((nq,), BLOCK, dtype=torch.float64)
    rows[-1] = sq - BLOCK * (nq - 1)
    cols = torch.full((nk,), BLOCK, dtype=torch.float64)
    cols[-1] = skv - BLOCK * (nk - 1)
    w = blocks.to(torch.float64).cpu() * rows[:, None] * cols[None, :]
    return float(w.sum() / (blocks.shape[0] * blocks.shape[1] * sq * skv))


def library_reason(lib, wgs: int = 2, head_dim: int = 64) -> Optional[str]:
    """Why this kernel library cannot run block-sparse calls (None: it can), with tiles of `wgs` warpgroups at this
    head dim."""
    if lib is None or not hasattr(lib, "vidattn_sm90_sparse_layout"):
        # (a library with only vidattn_sm90_sparse_tile counts an entry's key block in 128 keys, not 64)
        return ("the loaded kernel library predates this package's block-sparse tables (rebuild it: "
                "vidattn.build(force=True))")
    m, n, blk, unit = (ctypes.c_int32() for _ in range(4))
    lib.vidattn_sm90_sparse_layout(ctypes.byref(m), ctypes.byref(n), ctypes.byref(blk), ctypes.byref(unit))
    if (m.value, n.value, blk.value, unit.value) != (TILE_M, TILE_N, BLOCK, KEY_UNIT):
        return (f"the kernel library's block-sparse tiles ({m.value} x {n.value}, blocks of {blk.value}, first keys in "
                f"units of {unit.value}) are not this package's ({TILE_M} x {TILE_N}, blocks of {BLOCK}, units of "
                f"{KEY_UNIT}): rebuild it")
    if wgs != 2:
        has = lib.vidattn_sm90_sparse_warpgroups(head_dim) if hasattr(lib, "vidattn_sm90_sparse_warpgroups") else 0
        if not (has >> wgs) & 1:
            return (f"the loaded kernel library has no block-sparse build with {wgs} warpgroups at head dim "
                    f"{head_dim} (VIDATTN_SPARSE_D64_WARPGROUPS)")
    return None


def envelope_reason(q, k, v) -> Optional[str]:
    """Why these (B, S, H, D) views cannot take the block-sparse kernel, from shapes alone (None: they can)."""
    d = q.shape[-1]
    if d not in HEAD_DIMS or k.shape[-1] != d or v.shape[-1] != d:
        return f"block-sparse attention runs on the kernel at head dim 64 and 128 (head dim {d})"
    return None


def sdpa_blocks(qh, kh, vh, scale: float, blocks: torch.Tensor, return_lse: bool):
    """The reference path, (B, H, S, D) in and out: SDPA over each 64-row block of queries with its key mask expanded
    from the block mask (memory: one (B, H, 64 x chunk, Skv) mask at a time). Rows without keys get 0 and LSE -inf,
    as the kernel and flex_attention give them. Grouped K/V heads are repeated (a fallback)."""
    b, h, sq, d = qh.shape
    skv = kh.shape[2]
    if kh.shape[1] != h:
        kh = kh.repeat_interleave(h // kh.shape[1], dim=1)
        vh = vh.repeat_interleave(h // vh.shape[1], dim=1)
    out = torch.empty((b, h, sq, vh.shape[-1]), dtype=qh.dtype, device=qh.device)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=qh.device) if return_lse else None
    keys = blocks.repeat_interleave(BLOCK, dim=-1)[..., :skv]  # (B, H, nq, Skv)
    step = max(1, (1 << 26) // max(1, b * h * skv * BLOCK))  # query blocks a chunk (~64 M mask elements)
    for i in range(0, blocks.shape[2], step):
        r0, r1 = i * BLOCK, min(sq, (i + step) * BLOCK)
        mask = keys[:, :, i:i + step].repeat_interleave(BLOCK, dim=2)[:, :, :r1 - r0]
        s = torch.matmul(qh[:, :, r0:r1].float(), kh.float().transpose(-1, -2)) * scale
        s = s.masked_fill(~mask, float("-inf"))
        m = s.amax(-1, keepdim=True)
        empty = torch.isinf(m) & (m < 0)
        p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
        z = p.sum(-1, keepdim=True)
        o = torch.matmul(p, vh.float()) / torch.where(empty, torch.ones_like(z), z)
        out[:, :, r0:r1] = o.masked_fill(empty, 0.0).to(out.dtype)
        if lse is not None:
            lse[:, :, r0:r1] = torch.where(empty, m, m + torch.log(z)).squeeze(-1)
    return out, lse
