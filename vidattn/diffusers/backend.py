"""vidattn as a registered diffusers attention backend named "vidattn".

    import vidattn.diffusers                          # registers the backend (also done by vidattn.apply)
    pipe.transformer.set_attention_backend("vidattn")
    # or, for one block of code and every model in it:
    from diffusers.models.attention_dispatch import attention_backend
    with attention_backend("vidattn"):
        video = pipe(...)

diffusers 0.42 keeps its backend names in a closed `AttentionBackendName` enum and its backends in the private
`_AttentionBackendRegistry`; there is no public hook, so `register_backend` adds the "vidattn" member to the enum
(once per process: the same member object on every call, across reloads) and registers `vidattn_attention`
with context-parallel support.

`vidattn_attention` carries diffusers' argument contract (BSHD tensors in and out, `return_lse` as (B, S, H) fp32).
It hands a call to `vidattn.attention` (the kernel inside its envelope, SDPA outside it, as `vidattn.explain`
says) when the call is plain attention with at most a key-padding mask, or a flex `BlockMask` of whole 64 x 64
blocks (`block_mask=`: Kandinsky 5's NABLA mask), and sends everything else to diffusers' native backend (for a
BlockMask: its flex backend, the only one that takes one) with the reason: `explain(...)` here says which way a call
goes, `route_counts()` what happened.
With `_parallel_config` set it runs diffusers' ring / Ulysses templates with the kernel as the per-shard op.

Nothing here imports diffusers at import time of `vidattn` itself: this module is imported by `vidattn.diffusers`.
"""
from __future__ import annotations

import collections
import enum
import inspect
import math
import os
import sys
import warnings
from typing import Optional

import torch
import torch.nn.functional as F

from .. import ops, sparse
from .sdpa_common import sdpa_mask_to_kv_lens

BACKEND_NAME = "vidattn"
_MEMBER_NAME = "VIDATTN"
_DISPATCH = "diffusers.models.attention_dispatch"
# Rows of the fp32 score matrix materialised at once where the native path must also return an LSE.
_LSE_CHUNK_ELEMENTS = 1 << 26


# ----------------------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------------------

def _diffusers_version() -> str:
    mod = sys.modules.get("diffusers")
    return getattr(mod, "__version__", "unknown")


def _dispatch_module():
    """diffusers' attention_dispatch module, checked for what registration needs; RuntimeError otherwise."""
    try:
        import importlib

        ad = importlib.import_module(_DISPATCH)
    except ValueError as exc:
        if os.environ.get("DIFFUSERS_ATTN_BACKEND", "").strip().lower() == BACKEND_NAME:
            raise RuntimeError(
                "DIFFUSERS_ATTN_BACKEND=vidattn: diffusers reads this variable while it is being imported, before "
                "vidattn can add its backend, and refuses the unknown name. Unset the variable and select vidattn "
                "in code after `import vidattn.diffusers`: model.set_attention_backend('vidattn'), or "
                "`with diffusers.models.attention_dispatch.attention_backend('vidattn'): ...`, or "
                "vidattn.diffusers.register_backend(default=True) for the whole process.") from exc
        raise
    except ImportError as exc:
        have = f"diffusers {_diffusers_version()} is installed" if sys.modules.get("diffusers") else "no diffusers"
        raise RuntimeError(f"the vidattn diffusers backend needs diffusers >= 0.42 with {_DISPATCH} ({have}): "
                           f"{exc}") from exc
    missing = [n for n in ("AttentionBackendName", "_AttentionBackendRegistry") if not hasattr(ad, n)]
    names, registry = getattr(ad, "AttentionBackendName", None), getattr(ad, "_AttentionBackendRegistry", None)
    if registry is not None:
        missing += [f"_AttentionBackendRegistry.{n}" for n in
                    ("register", "set_active_backend", "_backends", "_constraints", "_supported_arg_names",
                     "_active_backend") if not hasattr(registry, n)]
    if names is not None and not (isinstance(names, type) and issubclass(names, str) and issubclass(names, enum.Enum)
                                  and hasattr(names, "_value2member_map_") and hasattr(names, "_member_map_")):
        missing.append("AttentionBackendName as a str Enum")
    if missing:
        raise RuntimeError(f"the vidattn diffusers backend needs diffusers' attention backend registry "
                           f"({_DISPATCH}: AttentionBackendName and _AttentionBackendRegistry with register(), "
                           f"as in diffusers 0.35-0.42); diffusers {_diffusers_version()} lacks "
                           f"{', '.join(missing)}")
    return ad


def _enum_member(names):
    """The "vidattn" member of diffusers' closed `AttentionBackendName`, added on first use. The enum is found
    again by value on every later call (a reload of this module, a second import), so every caller shares one
    member object."""
    existing = names._value2member_map_.get(BACKEND_NAME)
    if existing is not None:
        return existing
    if _MEMBER_NAME in names._member_map_:
        raise RuntimeError(f"diffusers' AttentionBackendName already has a member {_MEMBER_NAME} with value "
                           f"{names._member_map_[_MEMBER_NAME].value!r}; vidattn cannot add its backend")
    member = str.__new__(names, BACKEND_NAME)
    member._name_ = _MEMBER_NAME
    member._value_ = BACKEND_NAME
    member.__objclass__ = names
    member._sort_order_ = len(names._member_names_)
    # The class attribute first (EnumType.__setattr__ refuses names already in _member_map_), then the three
    # lookups enum itself keeps: by name, the ordered names (iteration, __members__ order), by value.
    type.__setattr__(names, _MEMBER_NAME, member)
    names._member_map_[_MEMBER_NAME] = member
    names._member_names_.append(_MEMBER_NAME)
    names._value2member_map_[BACKEND_NAME] = member
    return member


def register_backend(*, default: bool = False):
    """Register the "vidattn" diffusers attention backend and return its `AttentionBackendName` member.

    Idempotent: every call returns the same member and registers this module's current `vidattn_attention`
    (so a reload of the module takes effect). With `default=True` it also becomes diffusers' global active
    backend, used by every `dispatch_attention_fn` call whose processor names no backend: the process-wide
    default that `DIFFUSERS_ATTN_BACKEND=vidattn` cannot give (diffusers reads that variable at its import).
    `unregister_backend()` undoes both. Raises RuntimeError, naming the diffusers version and what is missing,
    when diffusers has no backend registry."""
    ad = _dispatch_module()
    member = _enum_member(ad.AttentionBackendName)
    registry = ad._AttentionBackendRegistry
    # diffusers' own generic checks (device, shapes); they run only with DIFFUSERS_ATTN_CHECKS on.
    constraints = [c for c in (getattr(ad, "_check_device", None), getattr(ad, "_check_shape", None)) if c]
    kwargs = {}
    if "supports_context_parallel" in inspect.signature(registry.register).parameters:
        kwargs["supports_context_parallel"] = True
    registry.register(member, constraints=constraints, **kwargs)(vidattn_attention)
    if default:
        registry.set_active_backend(member)
    return member


def unregister_backend(*models) -> None:
    """Remove the "vidattn" backend from diffusers' registry. diffusers' global active backend goes back to its
    environment default if it is vidattn (`model.set_attention_backend("vidattn")` sets it, and diffusers'
    `reset_attention_backend` leaves it set), and the processors of `models` that point at vidattn are reset to
    no backend. Processors of other models that still point at vidattn fail at their next call: reset them
    first (`model.reset_attention_backend()`). The enum member stays, so a later `register_backend()` returns
    the same one. A no-op when diffusers or the backend was never loaded."""
    ad = sys.modules.get(_DISPATCH)
    if ad is None or not hasattr(ad, "AttentionBackendName"):
        return
    member = ad.AttentionBackendName._value2member_map_.get(BACKEND_NAME)
    if member is None:
        return
    for model in models:
        for module in model.modules():
            processor = getattr(module, "processor", None)
            if processor is not None and getattr(processor, "_attention_backend", None) == BACKEND_NAME:
                processor._attention_backend = None
    registry = ad._AttentionBackendRegistry
    if registry._active_backend == BACKEND_NAME:
        fallback = getattr(ad, "DIFFUSERS_ATTN_BACKEND", "native")
        registry.set_active_backend(ad.AttentionBackendName(fallback if fallback != BACKEND_NAME else "native"))
    for table in (registry._backends, registry._constraints, registry._supported_arg_names):
        table.pop(member, None)
    getattr(registry, "_supports_context_parallel", set()).discard(BACKEND_NAME)


# ----------------------------------------------------------------------------------------------------------
# routing: which calls vidattn.attention takes, and why the others go to diffusers' native backend
# ----------------------------------------------------------------------------------------------------------

_routes: collections.Counter = collections.Counter()
_warned: set = set()
VIDATTN_ROUTE = "vidattn"


def route_counts() -> dict:
    """Calls since the last `reset_route_counts()`: {"vidattn": calls handed to vidattn.attention (the kernel
    inside its envelope), reason: calls sent to diffusers' native backend (a BlockMask: its flex backend) for that
    reason}. Not counted while torch.compile traces."""
    return dict(_routes)


def reset_route_counts() -> None:
    _routes.clear()


_NATIVE_RUNS, _FLEX_RUNS = "diffusers' native attention", "diffusers' flex attention"


def _note(route: str, runs: str = _NATIVE_RUNS) -> None:
    if torch.compiler.is_compiling():
        return
    _routes[route] += 1
    if route != VIDATTN_ROUTE and route not in _warned:
        _warned.add(route)
        warnings.warn(
            f"vidattn backend: {runs} runs this call instead of the vidattn kernel: {route}. "
            "vidattn.diffusers.backend.explain(query, key, value, attn_mask=...) checks a call; this warning is "
            "shown once per reason.", ops.VidattnFallbackWarning, stacklevel=3)


def _mask_4d(mask: torch.Tensor, batch: int, seqlen_kv: int) -> Optional[torch.Tensor]:
    """`mask` as the 4-D tensor SDPA broadcasts against (B, H, Sq, Skv), following diffusers' native backend
    (a (B, Skv) mask becomes (B, 1, 1, Skv); any other mask broadcasts from the right); None beyond 4-D."""
    if mask.dim() == 2 and tuple(mask.shape) == (batch, seqlen_kv):
        return mask[:, None, None, :]
    if mask.dim() > 4:
        return None
    return mask.reshape((1,) * (4 - mask.dim()) + tuple(mask.shape))


def _kv_lens(mask, batch: int, heads: int, seqlen_q: int, seqlen_kv: int):
    """(kv_lens, None) when `mask` only drops a suffix of each batch row's keys, the same for every head and
    query (boolean True = attend, or additive 0 / <= -9000); else (None, reason). Reads the mask's values once per
    mask object (memoised), never while compiling."""
    if not isinstance(mask, torch.Tensor):
        return None, f"attn_mask of type {type(mask).__name__} is not a tensor"
    m4 = _mask_4d(mask, batch, seqlen_kv)
    if m4 is None:
        return None, f"attn_mask of shape {tuple(mask.shape)} has more than 4 dimensions"
    if m4.shape[0] == 1 and batch > 1:
        m4 = m4.expand(batch, *m4.shape[1:])
    return sdpa_mask_to_kv_lens(m4, batch, heads, seqlen_q, seqlen_kv, source=mask)


def _shape_reason(query, key, value) -> Optional[str]:
    """Why these tensors are not plain (B, S, H, D) attention vidattn.attention accepts (diffusers' native
    backend may still accept them)."""
    ts = (query, key, value)
    if any(not isinstance(t, torch.Tensor) or t.dim() != 4 for t in ts):
        return "query, key and value are not all 4-D (B, S, H, D) tensors"
    if not (query.dtype == key.dtype == value.dtype) or not query.dtype.is_floating_point:
        return f"query, key and value dtypes {query.dtype}, {key.dtype}, {value.dtype} are not one float dtype"
    if not (query.device == key.device == value.device):
        return "query, key and value are on different devices"
    if not (query.shape[0] == key.shape[0] == value.shape[0]) or key.shape[1] != value.shape[1] \
            or key.shape[2] != value.shape[2]:
        return f"shapes q {tuple(query.shape)}, k {tuple(key.shape)}, v {tuple(value.shape)} do not match"
    if not (query.shape[3] == key.shape[3] == value.shape[3]):
        return f"head dims differ (q {query.shape[3]}, k {key.shape[3]}, v {value.shape[3]})"
    return None


def _route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa):
    """(kv_lens, kv_groups, None) when vidattn.attention takes the call (kv_groups > 1: grouped-query K/V, which
    the kernel reads in place, at either precision), else (None, 1, reason for the native backend)."""
    if is_causal and attn_mask is not None:
        return None, 1, "is_causal=True with an attn_mask (SDPA takes one or the other)"
    if dropout_p:
        return None, 1, f"dropout_p={dropout_p}: the kernel has no dropout"
    reason = _shape_reason(query, key, value)
    if reason is not None:
        return None, 1, reason
    hq, hkv = query.shape[2], key.shape[2]
    groups = 1
    if hkv != hq:
        if not enable_gqa or hq % hkv:
            return None, 1, f"{hq} query heads and {hkv} key/value heads without enable_gqa (or not a multiple)"
        groups = hq // hkv
    if attn_mask is None:
        return None, groups, None
    kv_lens, reason = _kv_lens(attn_mask, query.shape[0], hq, query.shape[1], key.shape[1])
    if kv_lens is None:
        return None, 1, reason
    return kv_lens, groups, None


def _block_mask_fit(block_mask, batch: int, heads: int, seqlen_q: int, seqlen_kv: int) -> Optional[str]:
    """Why a flex BlockMask does not describe this call's (B, H, Sq, Skv) (None: it does)."""
    lens = tuple(int(n) for n in block_mask.seq_lengths)
    if lens != (seqlen_q, seqlen_kv):
        return (f"the block mask is for {lens[0]} queries and {lens[1]} keys, the call has {seqlen_q} and "
                f"{seqlen_kv}")
    mb, mh = block_mask.kv_num_blocks.shape[:2]
    if mb not in (1, batch) or mh not in (1, heads):
        return f"the block mask's batch and heads ({mb}, {mh}) do not broadcast to the call's ({batch}, {heads})"
    return None


def _block_mask_route(query, key, value, block_mask, dropout_p, is_causal, enable_gqa) -> Optional[str]:
    """None when vidattn.attention takes this call with a flex BlockMask (`block_mask=`: whole 64 x 64 blocks,
    grouped K/V read in place), else why diffusers' flex backend runs it as stock does. Reads no mask values (its
    block size and mask_mod only), so it decides the same way under torch.compile."""
    if is_causal:
        return "is_causal=True with a block mask (flex applies the block mask alone)"
    if dropout_p:
        return f"dropout_p={dropout_p}: the kernel has no dropout"
    reason = _shape_reason(query, key, value)
    if reason is not None:
        return reason
    hq, hkv = query.shape[2], key.shape[2]
    if hkv != hq and (not enable_gqa or hq % hkv):
        return f"{hq} query heads and {hkv} key/value heads without enable_gqa (or not a multiple)"
    return sparse.block_mask_reason(block_mask) or _block_mask_fit(block_mask, query.shape[0], hq, query.shape[1],
                                                                   key.shape[1])


def explain(query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
            scale: Optional[float] = None, enable_gqa: bool = False) -> Optional[str]:
    """Why the "vidattn" backend would not run the kernel for this call (diffusers' argument contract, BSHD);
    None when the kernel runs. A reason is either why the call goes to diffusers' native backend (a flex
    BlockMask: its flex backend) or, for a call handed to vidattn.attention, why that runs SDPA (what
    `vidattn.explain` says). Reads the mask's values."""
    if sparse.is_block_mask(attn_mask):
        reason = _block_mask_route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        if reason is not None:
            return f"diffusers' flex backend: {reason}"
        return ops.explain(query, key, value, layout="bshd", scale=scale, block_mask=attn_mask)
    kv_lens, groups, reason = _route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if reason is not None:
        return f"diffusers' native backend: {reason}"
    return ops.explain(query, key, value, layout="bshd", scale=scale, kv_lens=kv_lens, causal=bool(is_causal))


# ----------------------------------------------------------------------------------------------------------
# the backend
# ----------------------------------------------------------------------------------------------------------

def _native_backend():
    ad = sys.modules[_DISPATCH]  # loaded: diffusers is the caller
    registry, member = ad._AttentionBackendRegistry, ad.AttentionBackendName.NATIVE
    return registry._backends[member], registry._supported_arg_names[member]


def _native(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse):
    """diffusers' native backend (SDPA on BHSD) for the call; with return_lse, which that backend refuses, the LSE
    is computed here from fp32 scores with the same mask."""
    fn, accepted = _native_backend()
    kwargs = dict(query=query, key=key, value=value, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal,
                  scale=scale, enable_gqa=enable_gqa)
    out = fn(**{k: v for k, v in kwargs.items() if k in accepted})
    if not return_lse:
        return out
    if dropout_p:
        raise ValueError("vidattn backend: return_lse=True with dropout_p > 0 is not defined (the LSE of a "
                         "dropped-out softmax); diffusers' native backend refuses return_lse altogether")
    return out, _reference_lse(query, key, attn_mask, is_causal, scale, enable_gqa)


def _flex(query, key, value, block_mask, is_causal, scale, enable_gqa, return_lse):
    """What stock diffusers runs for a flex BlockMask: its flex backend, (B, S, H, D) in and out. With return_lse,
    which that backend's function does not return intact (it permutes the (out, lse) pair as one tensor), flex
    attention is called here, lse (B, S, H) fp32."""
    ad = sys.modules[_DISPATCH]
    if not return_lse:
        registry, member = ad._AttentionBackendRegistry, ad.AttentionBackendName.FLEX
        fn, accepted = registry._backends[member], registry._supported_arg_names[member]
        kwargs = dict(query=query, key=key, value=value, attn_mask=block_mask, is_causal=is_causal, scale=scale,
                      enable_gqa=enable_gqa)
        return fn(**{k: v for k, v in kwargs.items() if k in accepted})
    fa = ad.flex_attention  # diffusers' handle on the module, as its backend calls it
    qh, kh, vh = (x.permute(0, 2, 1, 3) for x in (query, key, value))
    if hasattr(fa, "AuxRequest"):
        out, aux = fa.flex_attention(qh, kh, vh, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa,
                                     return_aux=fa.AuxRequest(lse=True))
        lse = aux.lse
    else:  # torch before AuxRequest
        out, lse = fa.flex_attention(qh, kh, vh, block_mask=block_mask, scale=scale, enable_gqa=enable_gqa,
                                     return_lse=True)
    return out.permute(0, 2, 1, 3), lse.float().transpose(1, 2)


def _reference_lse(query, key, attn_mask, is_causal, scale, enable_gqa) -> torch.Tensor:
    """(B, Sq, H) fp32 natural-log LSE of the scaled, masked scores, chunked over queries."""
    qh, kh = query.detach().transpose(1, 2).float(), key.detach().transpose(1, 2).float()
    if kh.shape[1] != qh.shape[1] and enable_gqa:
        kh = kh.repeat_interleave(qh.shape[1] // kh.shape[1], dim=1)
    b, h, sq, d = qh.shape
    skv = kh.shape[2]
    sc = 1.0 / math.sqrt(d) if scale is None else float(scale)
    mask = None if attn_mask is None else _mask_4d(attn_mask, b, skv)
    rows = max(1, _LSE_CHUNK_ELEMENTS // max(1, b * h * skv))
    parts = []
    for i in range(0, sq, rows):
        s = torch.matmul(qh[:, :, i:i + rows], kh.transpose(-1, -2)) * sc
        if is_causal:  # SDPA's is_causal: the top-left aligned lower triangle
            r = torch.arange(i, i + s.shape[2], device=s.device)[:, None]
            s = s.masked_fill(torch.arange(skv, device=s.device)[None, :] > r, float("-inf"))
        if mask is not None:
            m = mask[:, :, i:i + rows] if mask.shape[2] > 1 else mask
            s = s.masked_fill(~m, float("-inf")) if m.dtype == torch.bool else s + m.float()
        parts.append(torch.logsumexp(s, dim=-1))
    return torch.cat(parts, dim=2).transpose(1, 2)


def _kernel(query, key, value, scale, kv_lens, return_lse, causal: bool = False, block_mask=None):
    # ops.attention is looked up per call, so a spy on it (the tests) sees every call this backend makes.
    # causal: diffusers' is_causal, SDPA's top-left aligned mask (vidattn.attention's causal=True).
    # block_mask: a flex BlockMask of whole 64 x 64 blocks (_block_mask_route), passed only when there is one.
    kw = {} if block_mask is None else {"block_mask": block_mask}
    if not return_lse:
        return ops.attention(query, key, value, layout="bshd", scale=scale, kv_lens=kv_lens, causal=causal, **kw)
    out, lse = ops.attention(query, key, value, layout="bshd", scale=scale, kv_lens=kv_lens, return_lse=True,
                             causal=causal, **kw)
    return out, lse.transpose(1, 2)  # the kernel's (B, H, S) -> diffusers' (B, S, H)


def vidattn_attention(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      attn_mask: Optional[torch.Tensor] = None, dropout_p: float = 0.0, is_causal: bool = False,
                      scale: Optional[float] = None, enable_gqa: bool = False, return_lse: bool = False,
                      _parallel_config=None):
    """The "vidattn" diffusers backend: (B, S, H, D) in, (B, S, H, D) out, or (out, lse) with lse (B, S, H) fp32.

    vidattn.attention runs plain attention, with a key-padding `attn_mask` (boolean (B, Skv), (B, 1, 1, Skv),
    (B, H, 1, Skv) whose kept keys are a prefix of each row, or the additive 0 / <= -9000 equivalent) as
    `kv_lens`, `enable_gqa` with K/V read in place per group, and `is_causal` (top-left, as SDPA) without a mask.
    A flex `BlockMask` without a mask_mod and with block sizes that are multiples of 64 (Kandinsky 5's NABLA mask)
    runs as `vidattn.attention(..., block_mask=)`, the kernel's block-sparse path; any other BlockMask (a mask_mod,
    other block sizes, lengths that differ from the call's) goes to diffusers' flex backend, as stock runs it.
    `is_causal` with a mask, `dropout_p > 0`, any other mask (a dense bias, per-query masks), and tensor masks under
    torch.compile (their values cannot be read) go to diffusers' native backend; `explain` gives the reason.
    `scale` passes through. `_parallel_config` (context parallelism) runs diffusers' ring / Ulysses templates with
    the kernel on each shard."""
    if _parallel_config is not None:
        return _context_parallel(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
                                 _parallel_config)
    if sparse.is_block_mask(attn_mask):
        reason = _block_mask_route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
        if reason is not None:
            _note(reason, _FLEX_RUNS)
            return _flex(query, key, value, attn_mask, is_causal, scale, enable_gqa, return_lse)
        _note(VIDATTN_ROUTE)
        return _kernel(query, key, value, scale, None, return_lse, block_mask=attn_mask)
    kv_lens, groups, reason = _route(query, key, value, attn_mask, dropout_p, is_causal, enable_gqa)
    if reason is not None:
        _note(reason)
        return _native(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse)
    _note(VIDATTN_ROUTE)
    # Grouped-query K/V as SDPA's enable_gqa defines them (query head i reads key/value head i // groups) go to
    # vidattn.attention as they are: both precisions read each key/value head in place for its group.
    return _kernel(query, key, value, scale, kv_lens, return_lse, causal=bool(is_causal))


# ----------------------------------------------------------------------------------------------------------
# context parallelism: diffusers' templates with the kernel as the per-shard op
# ----------------------------------------------------------------------------------------------------------

def _context_parallel(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
                      parallel_config):
    ad = sys.modules[_DISPATCH]
    template = getattr(ad, "_templated_context_parallel_attention", None)
    if template is None:
        raise RuntimeError(f"vidattn backend: context parallelism needs diffusers' "
                           f"_templated_context_parallel_attention, which diffusers {_diffusers_version()} lacks")
    if enable_gqa and key.dim() == 4 and key.shape[2] != query.shape[2] and query.shape[2] % key.shape[2] == 0:
        # The templates refuse enable_gqa (and split heads and fall back on their own); with K/V heads repeated the
        # call is plain attention, whatever the precision.
        groups = query.shape[2] // key.shape[2]
        key, value = key.repeat_interleave(groups, dim=2), value.repeat_interleave(groups, dim=2)
        enable_gqa = False
    elif enable_gqa and key.dim() == 4 and key.shape[2] == query.shape[2]:
        enable_gqa = False
    if is_causal:
        # The same bool on every rank: all of them raise here, before any collective.
        raise ValueError(_CP_CAUSAL_ERROR)
    if sparse.is_block_mask(attn_mask):
        # Every rank's processor builds its own BlockMask, so every rank raises here alike, before any collective.
        if _ring_degree(parallel_config) > 1:
            raise ValueError(_RING_MASK_ERROR + " (a flex BlockMask)")
        if attn_mask.shape[-1] == key.shape[1]:
            raise ValueError(_CP_LOCAL_BLOCK_MASK_ERROR)
    if attn_mask is not None and _ring_degree(parallel_config) > 1:
        attn_mask = _ring_mask(query, key, attn_mask, parallel_config)
    return template(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse,
                    forward_op=_cp_forward_op, backward_op=_cp_backward_op, _parallel_config=parallel_config)


def _ring_degree(parallel_config) -> int:
    cp = getattr(parallel_config, "context_parallel_config", None)
    return int(getattr(cp, "ring_degree", 1) or 1)


_RING_MASK_ERROR = ("vidattn backend: ring attention (ContextParallelConfig(ring_degree > 1)) with an attention mask "
                    "that drops keys: diffusers' ring template applies one mask to every rotated key chunk, which "
                    "would drop the wrong keys. Use ulysses_degree instead, or no mask")


_CP_CAUSAL_ERROR = ("vidattn backend: is_causal=True under context parallelism: diffusers' templated ring and "
                    "Ulysses attention refuse causal calls (and a ring would need each key chunk's own diagonal "
                    "offset); run causal layers without a parallel config")


_CP_LOCAL_BLOCK_MASK_ERROR = (
    "vidattn backend: a flex BlockMask over this rank's shard of the keys under Ulysses attention: the template "
    "gathers every key for a slice of the heads (and gathers masks as tensors, which a BlockMask is not), so a block "
    "mask built from the local shard describes no call it makes; build the block mask for the whole sequence with "
    "one head (H = 1), or run without a parallel config")


def _ring_mask(query, key, attn_mask, parallel_config):
    """None when `attn_mask` keeps every key on every rank of the context-parallel group (it changes nothing and
    is dropped); else ValueError. The ring template hands one unsliced mask to every key chunk, so no other mask
    can be right. The decision is all-reduced over the group: a mask may keep every local key on one rank and not
    on another, and every rank must then raise, rather than one raising while the rest wait in the next
    collective (or silently use a mask the user meant for other keys)."""
    if torch.compiler.is_compiling():
        raise ValueError(_RING_MASK_ERROR + " (under torch.compile the mask's values cannot be read)")
    b, sq, h, _ = query.shape
    kv_lens, reason = _kv_lens(attn_mask, b, h, sq, key.shape[1])
    keeps = (kv_lens == key.shape[1]).all() if kv_lens is not None else torch.tensor(False)
    flag = keeps.to(device=query.device, dtype=torch.int32).reshape(1)
    group = _cp_group(parallel_config)
    if group is not None:
        torch.distributed.all_reduce(flag, op=torch.distributed.ReduceOp.MIN, group=group)
    if not bool(flag):
        raise ValueError(_RING_MASK_ERROR + (f" ({reason})" if reason else ""))
    return None


def _cp_group(parallel_config):
    """The process group of all context-parallel ranks (ring x Ulysses), None without torch.distributed."""
    if not (torch.distributed.is_available() and torch.distributed.is_initialized()):
        return None
    cp = parallel_config.context_parallel_config
    mesh = getattr(cp, "_flattened_mesh", None) or getattr(cp, "_ring_mesh", None)
    return None if mesh is None else mesh.get_group()


def _cp_forward_op(ctx, query, key, value, attn_mask=None, dropout_p: float = 0.0, is_causal: bool = False,
                   scale: Optional[float] = None, enable_gqa: bool = False, return_lse: bool = False,
                   _save_ctx: bool = True, _parallel_config=None):
    """One shard's attention, as diffusers' templates call it: ring once per key chunk with return_lse=True,
    Ulysses once on all keys for a slice of the heads. Forward only (`_save_ctx` is ignored)."""
    if dropout_p:
        raise ValueError(f"vidattn backend: dropout_p={dropout_p} under context parallelism; the kernel has no "
                         "dropout (inference passes 0)")
    b, sq, h, _ = query.shape
    kv_lens = None
    if attn_mask is not None:
        if _ring_degree(_parallel_config) > 1:
            # vidattn_attention drops masks that keep every key before the template and refuses the rest
            # (_ring_mask); a mask here came another way and cannot be applied per chunk.
            raise ValueError(_RING_MASK_ERROR)
        if sparse.is_block_mask(attn_mask):
            return _cp_block_mask_op(query, key, value, attn_mask, scale, enable_gqa, return_lse)
        # Ulysses: the mask covers all keys (the template gathers a local one).
        kv_lens, reason = _kv_lens(attn_mask, b, h, sq, key.shape[1])
        if kv_lens is None:
            _note(reason)
            return _native_op(query, key, value, attn_mask, scale, return_lse)
    _note(VIDATTN_ROUTE)
    # Only Ulysses can get here causal (a diffusers whose template passes it): every key of the head slice is here,
    # so SDPA's top-left causal mask is the kernel's.
    return _kernel(query, key, value, scale, kv_lens, return_lse, causal=bool(is_causal))


def _cp_block_mask_op(query, key, value, block_mask, scale, enable_gqa, return_lse):
    """One Ulysses shard with a flex BlockMask: every key, a slice of the heads. A mask of one head (H = 1) for
    the whole sequence applies to any slice: the kernel's block-sparse path where it reads the mask as whole
    64 x 64 blocks, else flex on the shard with the reason (what stock would run). A per-head mask cannot be matched
    to the slice, nor a mask of other lengths: ValueError."""
    if block_mask.kv_num_blocks.shape[1] != 1:
        raise ValueError(f"vidattn backend: a flex BlockMask with {block_mask.kv_num_blocks.shape[1]} heads under "
                         "Ulysses attention, whose shards hold a slice of the heads: give the block mask one head "
                         "(H = 1), or run without a parallel config")
    fit = _block_mask_fit(block_mask, query.shape[0], query.shape[2], query.shape[1], key.shape[1])
    if fit is not None:
        raise ValueError(f"vidattn backend: under Ulysses attention {fit} (the shard holds every key)")
    reason = _block_mask_route(query, key, value, block_mask, 0.0, False, enable_gqa)
    if reason is not None:
        _note(reason, _FLEX_RUNS)
        return _flex(query, key, value, block_mask, False, scale, enable_gqa, return_lse)
    _note(VIDATTN_ROUTE)
    return _kernel(query, key, value, scale, None, return_lse, block_mask=block_mask)


def _native_op(query, key, value, attn_mask, scale, return_lse):
    """What diffusers' native forward op computes (SDPA on BHSD), plus the LSE the ring merge needs."""
    mask = None if attn_mask is None else _mask_4d(attn_mask, query.shape[0], key.shape[1])
    out = F.scaled_dot_product_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                         attn_mask=mask, scale=scale).transpose(1, 2)
    if not return_lse:
        return out
    return out, _reference_lse(query, key, attn_mask, False, scale, False)


def _cp_backward_op(ctx, grad_out, *args, **kwargs):
    raise NotImplementedError("vidattn backend: no backward pass under context parallelism (the kernel is "
                              "forward-only); run inference under torch.no_grad(), or train with another backend")


def _register_at_import() -> None:
    # A diffusers without the registry still gets the processors (vidattn.apply); the backend's own entry point
    # (register_backend) raises the clear error, and this warns once so `set_attention_backend("vidattn")`
    # failing later is not a surprise. DIFFUSERS_ATTN_BACKEND=vidattn is different: no diffusers model can run in
    # this process, so the import fails with the explanation instead of diffusers' bare ValueError later.
    try:
        register_backend()
    except RuntimeError as exc:
        if isinstance(exc.__cause__, ValueError):
            raise
        warnings.warn(f"vidattn: the 'vidattn' diffusers attention backend is not registered: {exc}",
                      RuntimeWarning, stacklevel=2)


_register_at_import()
