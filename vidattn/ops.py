"""The public attention op: `vidattn.attention`, its `torch.library` custom op, the SDPA fallback, `explain`.

Layering: the public function validates arguments and handles nothing but shapes; the custom op
`vidattn::attention` makes the dispatch decision (kernel or SDPA) at run time, so `torch.compile` sees one
opaque node whose output shapes come from the fake implementation below.
"""
import importlib.util
import math
import numbers
import os
import sys
import warnings
from typing import Optional

import torch
import torch.nn.functional as F
from torch.utils.checkpoint import checkpoint

from . import _ext
from .precision import resolve_precision

LAYOUTS = ("bshd", "bhsd")
# `causal=` values and the C ABI's codes (vidattn/_ext.py, CAUSAL_*). True is SDPA's is_causal: top-left.
CAUSAL_MODES = {False: _ext.CAUSAL_NONE, None: _ext.CAUSAL_NONE, True: _ext.CAUSAL_TOP_LEFT,
                "top_left": _ext.CAUSAL_TOP_LEFT, "bottom_right": _ext.CAUSAL_BOTTOM_RIGHT}
_CAUSAL_NAMES = {_ext.CAUSAL_TOP_LEFT: "top_left", _ext.CAUSAL_BOTTOM_RIGHT: "bottom_right"}
# The fallback computes the LSE from fp32 scores; it materialises at most this many scores at once.
_LSE_CHUNK_ELEMENTS = 1 << 26


class VidattnFallbackWarning(UserWarning):
    """Issued once per distinct reason when a call runs PyTorch SDPA instead of the vidattn kernel."""


_warned: set = set()


def warn_fallback(reason: str, sdpa: bool = True) -> None:
    """Warn once per distinct reason that SDPA ran instead of the kernel (`sdpa` False: `reason` says itself what
    runs instead, as the 8-bit path's do, which may be the exact kernel)."""
    if reason in _warned:
        return
    _warned.add(reason)
    head = "running PyTorch SDPA instead of the vidattn kernel: " if sdpa else ""
    warnings.warn(
        f"vidattn: {head}{reason}. "
        "Call vidattn.explain(q, k, v, ...) with the call's arguments (layout, scale, kv_lens, causal, precision) "
        "to check a call; this warning is shown once per reason.",
        VidattnFallbackWarning, stacklevel=_caller_stacklevel())


def _diffusers_spec():
    """diffusers' module spec, found without importing it; None when it cannot be imported."""
    try:
        return importlib.util.find_spec("diffusers")
    except (ImportError, ValueError):  # (ValueError: sys.modules holds None or a module without a spec for it)
        return None


DIFFUSERS_SPEC = _diffusers_spec()  # looked up once, at import (the package's __all__ reads it too)


def _internal_dirs() -> tuple:
    """vidattn's, torch's and diffusers' folders (diffusers located without importing it): a fallback warning from a
    processor points past the model's code, at the user's call."""
    files = [__file__, torch.__file__]
    if DIFFUSERS_SPEC is not None and DIFFUSERS_SPEC.origin:
        files.append(DIFFUSERS_SPEC.origin)
    return tuple(os.path.dirname(os.path.abspath(f)) + os.sep for f in files)


_INTERNAL_DIRS = _internal_dirs()


def _caller_stacklevel() -> int:
    """Stack level of the first frame outside vidattn, torch and diffusers, so the warning points at user code."""
    level, frame = 1, sys._getframe(1)
    while frame is not None and os.path.abspath(frame.f_code.co_filename).startswith(_INTERNAL_DIRS):
        frame, level = frame.f_back, level + 1
    return level


def _is_compiling() -> bool:
    return torch.compiler.is_compiling()


try:
    from torch.utils._python_dispatch import _get_current_dispatch_mode
except ImportError:  # a torch without it: assume no mode (the op route then only loses its host-time saving)
    def _get_current_dispatch_mode():
        return None


def _eager_fast_path(q, k, v) -> bool:
    """Whether an eager call may run the op's body directly: plain tensors and no dispatch mode active. Tensor
    subclasses (FakeTensor, DTensor) and modes (FakeTensorMode, FlopCounterMode) take the custom op, whose fake
    implementation and dispatch they rely on (the body reads data pointers)."""
    return (type(q) is torch.Tensor and type(k) is torch.Tensor and type(v) is torch.Tensor
            and _get_current_dispatch_mode() is None)


def _host_values_readable(t) -> bool:
    """Whether a host tensor's values can be read now: eager, a plain tensor, no dispatch mode (under torch.compile,
    FakeTensorMode or make_fx they are not there to read)."""
    return not _is_compiling() and type(t) is torch.Tensor and _get_current_dispatch_mode() is None


def _profiler_on() -> bool:
    """Whether torch's profiler is recording (its module flag; True where a torch lacks it, which only costs the
    profiler range's few microseconds)."""
    return getattr(torch.autograd.profiler, "_is_profiler_enabled", True)


# ----------------------------------------------------------------------------------------------------------
# validation (runs before dispatch, eagerly or at trace time; never looks at tensor values while compiling)
# ----------------------------------------------------------------------------------------------------------

def _validate(q, k, v, layout, scale, kv_lens, fn="vidattn.attention"):
    """Raises TypeError/ValueError naming `fn` (the public function the caller called) for invalid arguments."""
    for name, t in (("q", q), ("k", k), ("v", v)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if not isinstance(layout, str) or layout not in LAYOUTS:
        raise ValueError(f"{fn}: layout must be 'bshd' (batch, seq, heads, dim) or 'bhsd' "
                         f"(batch, heads, seq, dim), got {layout!r}")
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dim() != 4:
            raise ValueError(f"{fn}: {name} must be 4-D ({layout}), got shape {tuple(t.shape)}")
        if not t.dtype.is_floating_point:
            raise TypeError(f"{fn}: {name} must be a floating-point tensor, got {t.dtype}")
        if t.element_size() == 1:  # float8: SDPA has no such path and fails deep inside with an unrelated message
            raise TypeError(f"{fn}: {name} is {t.dtype}; attention takes float16, bfloat16, float32 or float64 "
                            f"(for 8-bit attention pass bf16/fp16 tensors with precision='8bit')")
    if not (q.dtype == k.dtype == v.dtype):
        raise TypeError(f"{fn}: q, k and v must share a dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if not (q.device == k.device == v.device):
        raise ValueError(f"{fn}: q, k and v must be on one device, got {q.device}, {k.device}, "
                         f"{v.device}")
    s_ax, h_ax = (1, 2) if layout == "bshd" else (2, 1)
    names = f"({'B, S, H, D' if layout == 'bshd' else 'B, H, S, D'})"
    qs, ks, vs = tuple(q.shape), tuple(k.shape), tuple(v.shape)
    if not (qs[0] == ks[0] == vs[0]):
        raise ValueError(f"{fn}: batch sizes differ: q {qs}, k {ks}, v {vs} {names}")
    if ks[h_ax] != vs[h_ax]:
        raise ValueError(f"{fn}: k and v must have the same number of heads: k {ks}, v {vs} {names}")
    if ks[h_ax] < 1:
        raise ValueError(f"{fn}: every dimension must be >= 1: q {qs}, k {ks} {names}")
    if qs[h_ax] % ks[h_ax]:
        raise ValueError(f"{fn}: q's head count must be a multiple of k/v's (grouped-query attention): "
                         f"q {qs}, k {ks}, v {vs} {names}")
    if not (qs[3] == ks[3] == vs[3]):
        raise ValueError(f"{fn}: head dims differ: q {qs}, k {ks}, v {vs} {names}")
    if ks[s_ax] != vs[s_ax]:
        raise ValueError(f"{fn}: k and v must have the same sequence length: k {ks}, v {vs} {names}")
    if min(qs) < 1 or ks[s_ax] < 1:
        raise ValueError(f"{fn}: every dimension must be >= 1: q {qs}, k {ks} {names}")
    if scale is not None:
        if isinstance(scale, bool) or not isinstance(scale, numbers.Real):  # (NumPy's scalars are Real too)
            raise TypeError(f"{fn}: scale must be a float or None, got {type(scale).__name__}")
        try:
            finite = math.isfinite(scale)
        except OverflowError:  # an int past float's range
            finite = False
        if not finite:
            raise ValueError(f"{fn}: scale must be finite, got {scale}")
    if kv_lens is not None:
        skv = ks[s_ax]
        if not isinstance(kv_lens, torch.Tensor):
            raise TypeError(f"{fn}: kv_lens must be a torch.Tensor of shape (batch,) or None, "
                            f"got {type(kv_lens).__name__}")
        if kv_lens.dtype not in (torch.int32, torch.int64):
            raise TypeError(f"{fn}: kv_lens must be int32 or int64, got {kv_lens.dtype}")
        if tuple(kv_lens.shape) != (qs[0],):
            raise ValueError(f"{fn}: kv_lens must have shape (batch,) = ({qs[0]},), "
                             f"got {tuple(kv_lens.shape)}")
        if kv_lens.device != q.device and kv_lens.device.type != "cpu":
            raise ValueError(f"{fn}: kv_lens is on {kv_lens.device}, q on {q.device}")
        # Value checks cost a device sync on GPU tensors, so only host-side lengths are checked (always
        # worth it: they are about to be copied anyway); never while tracing, under a dispatch mode or for a tensor
        # subclass (FakeTensorMode, make_fx: the values are not there to read). Unchecked lengths are clamped to
        # [0, Skv] (_prepare_kv_lens) and read as GPU lengths are.
        if kv_lens.device.type == "cpu" and _host_values_readable(kv_lens):
            lo, hi = int(kv_lens.min()), int(kv_lens.max())
            if lo < 1 or hi > skv:
                raise ValueError(f"{fn}: kv_lens values must lie in [1, {skv}] (the key length), "
                                 f"got min {lo}, max {hi}")


def _causal_code(causal, fn="vidattn.attention") -> int:
    """The C ABI's code for a `causal=` argument (CAUSAL_MODES); TypeError/ValueError naming `fn` otherwise."""
    if isinstance(causal, (bool, str)) or causal is None:
        code = CAUSAL_MODES.get(causal)
        if code is not None:
            return code
    if isinstance(causal, str):
        raise ValueError(f"{fn}: causal must be False, True, 'top_left' or 'bottom_right', got {causal!r}")
    raise TypeError(f"{fn}: causal must be False, True, 'top_left' or 'bottom_right', got {type(causal).__name__}")


def _prepare_kv_lens(kv_lens, device, skv=None):
    """int32 on q's device and contiguous: the kernel reads kv_lens with stride 1, and `.to` returns a strided view (a
    column of a 2-D tensor, an expanded scalar) unchanged when it is already int32 on that device. An int64 GPU
    tensor and a traced host tensor (their values unchecked: a GPU one because that costs a sync) are clamped to [0,
    skv] first, so a value past int32 cannot wrap in the cast (2^32 + 7 would read as 7 keys, where SDPA's mask
    keeps them all) and a traced host length reads as a GPU one does. An int32 GPU tensor is passed as it is (the
    kernel clamps; no launch for it): the fallback's masks clamp it (_key_mask, _causal_mask)."""
    if kv_lens is None:
        return None
    if skv is not None and (kv_lens.dtype == torch.int64 and kv_lens.device.type != "cpu"
                            or kv_lens.device.type == "cpu" and not _host_values_readable(kv_lens)):
        kv_lens = kv_lens.clamp(0, skv)
    return kv_lens.to(device=device, dtype=torch.int32, non_blocking=True).contiguous()


def _autocast_inputs(q, k, v):
    """q, k, v as SDPA sees them under torch.autocast: SDPA is on autocast's lower-precision list, so every
    floating-point input other than float64 on the autocast device is cast to the autocast dtype (an fp32 norm's q/k
    beside a bf16 v then run together, as they do with SDPA)."""
    if not isinstance(q, torch.Tensor):
        return q, k, v  # _validate says what is wrong
    dev = q.device.type
    try:
        if not torch.is_autocast_enabled(dev):
            return q, k, v
        dtype = torch.get_autocast_dtype(dev)
    except (RuntimeError, TypeError):  # a device type autocast does not know
        return q, k, v

    def cast(t):
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64 \
                and t.device.type == dev and t.dtype != dtype:
            return t.to(dtype)
        return t

    return cast(q), cast(k), cast(v)


def _bshd(t: torch.Tensor, layout: str) -> torch.Tensor:
    """A (B, S, H, D) view of t (no copy)."""
    return t if layout == "bshd" else t.transpose(1, 2)


def _default_scale(scale, head_dim: int) -> float:
    return float(scale) if scale is not None else 1.0 / math.sqrt(head_dim)


# ----------------------------------------------------------------------------------------------------------
# SDPA fallback (differentiable; also the reference the tests compare against)
# ----------------------------------------------------------------------------------------------------------

def _key_mask(kv_lens, skv, device):
    """Boolean (B, 1, 1, Skv) mask, True where the key is kept."""
    return (torch.arange(skv, device=device)[None, :] < kv_lens[:, None].to(device))[:, None, None, :]


def _causal_mask(causal: int, sq: int, skv: int, kv_lens, device, rows: slice = slice(None)):
    """Boolean (B or 1, 1, rows, Skv) mask, True where query i (of `rows`) sees key j: the kernel's semantics
    (csrc/capi.h, VidattnFwdArgs::causal). kv_lens shortens the keys first (j < kv_len), then j <= i + shift, shift = 0
    (top-left) or kv_len - Sq (bottom-right)."""
    i = torch.arange(sq, device=device)[rows][:, None]
    j = torch.arange(skv, device=device)[None, :]
    if kv_lens is None:
        shift = skv - sq if causal == _ext.CAUSAL_BOTTOM_RIGHT else 0
        return (j <= i + shift)[None, None]
    kvl = kv_lens.to(device=device, dtype=torch.int64).clamp(0, skv)[:, None, None]  # an unchecked GPU length
    shift = kvl - sq if causal == _ext.CAUSAL_BOTTOM_RIGHT else 0
    return ((j < kvl) & (j <= i + shift))[:, None]


def _sdpa_safe_view(t: torch.Tensor) -> torch.Tensor:
    """t, or a packed copy when a stride is not a multiple of 16 bytes: measured on the H200 (torch 2.11, cuDNN
    9.19), SDPA read such a CUDA view as if it were packed, a silent wrong answer
    (tests/test_kernel_gpu.py::test_fallback_outside_envelope_is_still_right)."""
    esize = t.element_size()
    if t.is_cuda and any((st * esize) % 16 for st, n in zip(t.stride()[:-1], t.shape[:-1]) if n > 1):
        return t.contiguous()
    return t


def sdpa_fallback(qh, kh, vh, scale: float, kv_lens, return_lse: bool, causal: int = 0):
    """Attention on (B, H, S, D) tensors with PyTorch SDPA; LSE (B, H, Sq) fp32 from fp32 scores, chunked
    over the query length so at most `_LSE_CHUNK_ELEMENTS` scores exist at a time. causal: the kernel's mask
    (_causal_mask): SDPA's is_causal where that is the same (top-left, no kv_lens), else an explicit mask; rows that
    see no key give 0 and an LSE of -inf, as the kernel's."""
    qh, kh, vh = _sdpa_safe_view(qh), _sdpa_safe_view(kh), _sdpa_safe_view(vh)
    sq, skv = qh.shape[2], kh.shape[2]
    if kv_lens is not None:
        # Keys past a length are ignored, non-finite ones too (an unwritten cache slot): SDPA's mask gives them
        # weight 0, but 0 * NaN is NaN in P V, and a NaN score leaks through a boolean mask.
        keep = _key_mask(kv_lens, skv, kh.device).transpose(-1, -2)  # (B, 1, Skv, 1)
        kh, vh = torch.where(keep, kh, kh.new_zeros(())), torch.where(keep, vh, vh.new_zeros(()))
    if causal == _ext.CAUSAL_BOTTOM_RIGHT and kv_lens is None and sq == skv:
        causal = _ext.CAUSAL_TOP_LEFT  # the same mask, without materialising it
    if causal == _ext.CAUSAL_NONE:
        mask = _key_mask(kv_lens, skv, qh.device) if kv_lens is not None else None
    elif causal == _ext.CAUSAL_TOP_LEFT and kv_lens is None:
        mask = None  # is_causal below: SDPA's fused kernels take it
    else:
        mask = _causal_mask(causal, sq, skv, kv_lens, qh.device)
    is_causal = causal == _ext.CAUSAL_TOP_LEFT and kv_lens is None
    gqa = kh.shape[1] != qh.shape[1]
    # enable_gqa only where the heads differ: equal-head calls stay the call they always were.
    out = F.scaled_dot_product_attention(qh, kh, vh, attn_mask=mask, scale=scale,
                                         **({"is_causal": True} if is_causal else {}),
                                         **({"enable_gqa": True} if gqa else {}))
    # A NaN query makes its row NaN (float64 math, the kernel); PyTorch's CPU flash kernel gives a row of zeros.
    out = out.masked_fill(qh.isnan().any(dim=-1, keepdim=True), float("nan"))
    if mask is not None and causal != _ext.CAUSAL_NONE:
        # SDPA's backends disagree on a fully masked row (the math one gives 0, others NaN): 0 here, as the kernel.
        out = torch.where(mask.any(dim=-1, keepdim=True), out, out.new_zeros(()))
    if not return_lse:
        return out, None
    b, h, sq, d = qh.shape
    hk, skv = kh.shape[1], kh.shape[2]
    # With autograd on, the LSE is differentiable too (a ring or tail merge of partial results trains through it);
    # each chunk's scores are then recomputed in the backward instead of kept (checkpoint), so memory stays a chunk's.
    grad = torch.is_grad_enabled() and (qh.requires_grad or kh.requires_grad)

    def rows_lse(qc, kf, i):
        s = (torch.matmul(qc.reshape(b, hk, h // hk, qc.shape[2], d), kf) * scale).reshape(b, h, qc.shape[2], skv)
        if causal != _ext.CAUSAL_NONE:
            s = s.masked_fill(~_causal_mask(causal, sq, skv, kv_lens, qh.device, slice(i, i + rows)), float("-inf"))
        elif mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        return torch.logsumexp(s, dim=-1)

    # (B, Hkv, 1, D, Skv): each key/value head broadcast over its group of query heads, without a copy of K.
    kf = (kh if grad else kh.detach()).float().transpose(-1, -2)[:, :, None]
    rows = max(1, _LSE_CHUNK_ELEMENTS // max(1, b * h * skv))
    parts = []
    for i in range(0, sq, rows):
        qc = (qh if grad else qh.detach())[:, :, i:i + rows].float()
        parts.append(checkpoint(rows_lse, qc, kf, i, use_reentrant=False) if grad else rows_lse(qc, kf, i))
    return out, torch.cat(parts, dim=2)


# ----------------------------------------------------------------------------------------------------------
# the custom op
# ----------------------------------------------------------------------------------------------------------

def _empty_lse(q):
    return torch.empty((0,), dtype=torch.float32, device=q.device)


def _kernel_outputs(q, vv, layout: str, return_lse: bool):
    """(out in the caller's layout, its (B, S, H, D) view for the kernel, fp32 LSE (B, H, S) or None) for a call whose
    (B, S, H, D) value view is `vv`."""
    if layout == "bshd":
        b, sq, h, _ = q.shape
        out = torch.empty((b, sq, h, vv.shape[3]), dtype=q.dtype, device=q.device)
        out_view = out
    else:
        b, h, sq, _ = q.shape
        out = torch.empty((b, h, sq, vv.shape[3]), dtype=q.dtype, device=q.device)
        out_view = out.transpose(1, 2)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device) if return_lse else None
    return out, out_view, lse


def _attention_impl(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, scale: Optional[float],
                    kv_lens: Optional[torch.Tensor], return_lse: bool, causal: int = 0):
    """(out, lse or None): the kernel, or SDPA with a warning naming the reason. The custom op's body, and what an
    eager `attention` call runs directly. causal: a C ABI code (_causal_code)."""
    qv, kv, vv = _bshd(q, layout), _bshd(k, layout), _bshd(v, layout)
    sc = _default_scale(scale, qv.shape[3])
    # Non-causal calls keep the argument lists that stand-ins for these two functions (tests, probes) were written for.
    ckw = {"causal": causal} if causal else {}
    reason = _ext.kernel_reason(qv, kv, vv, kv_lens, sc, **ckw)
    if reason is None:
        out, out_view, lse = _kernel_outputs(q, vv, layout, return_lse)
        try:
            _ext.forward(qv, kv, vv, out_view, lse, kv_lens, sc, **ckw)
            return out, lse
        except _ext.KernelLaunchError as exc:  # the library is now off for the process: this and later calls fall back
            reason = str(exc)
    warn_fallback(reason)
    out, lse = sdpa_fallback(qv.transpose(1, 2), kv.transpose(1, 2), vv.transpose(1, 2), sc, kv_lens, return_lse,
                             **ckw)
    # Same strides as the kernel path (and the fake): contiguous in the caller's layout.
    out = out.contiguous() if layout == "bhsd" else out.transpose(1, 2).contiguous()
    return out, lse


@torch.library.custom_op("vidattn::attention", mutates_args=())
def _attention_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, scale: Optional[float],
                  kv_lens: Optional[torch.Tensor], return_lse: bool,
                  causal: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _attention_impl(q, k, v, layout, scale, kv_lens, return_lse, causal)
    return out, (lse if lse is not None else _empty_lse(q))


@_attention_op.register_fake
def _attention_fake(q, k, v, layout, scale, kv_lens, return_lse, causal=0):
    if layout == "bshd":
        b, sq, h, _ = q.shape
        out = q.new_empty((b, sq, h, v.shape[3]))
    else:
        b, h, sq, _ = q.shape
        out = q.new_empty((b, h, sq, v.shape[3]))
    lse = q.new_empty((b, h, sq), dtype=torch.float32) if return_lse else q.new_empty((0,), dtype=torch.float32)
    return out, lse


# ----------------------------------------------------------------------------------------------------------
# block-sparse attention (vidattn/sparse.py): its own op, whose tables are built outside it (traceable)
# ----------------------------------------------------------------------------------------------------------

def _sparse_reason(qv, kv, vv, sc: float, wgs: int = 2) -> Optional[str]:
    """Why the block-sparse kernel cannot run these (B, S, H, D) views with tables for `wgs` warpgroups (None: it
    runs)."""
    from . import sparse
    reason = (_ext.device_reason(qv.device) or sparse.envelope_reason(qv, kv, vv)
              or _ext.kernel_reason(qv, kv, vv, None, sc))
    if reason is None:
        reason = sparse.library_reason(_ext.load(), wgs, qv.shape[3])
    return reason


def _sparse_impl(q, k, v, layout: str, scale: Optional[float], count, entries, blocks, return_lse: bool,
                 wgs: int = 2):
    from . import sparse
    qv, kv, vv = _bshd(q, layout), _bshd(k, layout), _bshd(v, layout)
    tiles = -(-sparse._blocks(qv.shape[1]) // wgs)
    # Tables built for another tile than `wgs` says would be misread by the kernel. Their tile count tells them apart
    # for every query length but 193-256 (four row blocks: two tiles either way; one or two row blocks give the same
    # tables for both). The check reads shapes only (no sync: CUDA graphs); the entries must come from
    # sparse.tables(blocks, wgs) with this call's `wgs`, as vidattn.attention builds them.
    if count.shape[-1] != tiles:
        raise ValueError(f"block-sparse tables for {count.shape[-1]} tiles of queries, {tiles} expected for "
                         f"{qv.shape[1]} queries in tiles of {wgs} x {sparse.BLOCK} rows (sparse.tables(blocks, wgs))")
    sc = _default_scale(scale, qv.shape[3])
    reason = _sparse_reason(qv, kv, vv, sc, wgs)
    if reason is None:
        out, out_view, lse = _kernel_outputs(q, vv, layout, return_lse)
        try:
            _ext.forward(qv, kv, vv, out_view, lse, None, sc, sparse=sparse.Tables(count, entries, wgs))
            return out, lse
        except _ext.KernelLaunchError as exc:
            reason = str(exc)
    warn_fallback(f"{reason} (block mask: SDPA runs it block by block)")
    out, lse = sparse.sdpa_blocks(qv.transpose(1, 2), kv.transpose(1, 2), vv.transpose(1, 2), sc, blocks, return_lse)
    out = out.contiguous() if layout == "bhsd" else out.transpose(1, 2).contiguous()
    return out, lse


@torch.library.custom_op("vidattn::sparse_attention", mutates_args=())
def _sparse_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, scale: Optional[float],
               count: torch.Tensor, entries: torch.Tensor, blocks: torch.Tensor,
               return_lse: bool, wgs: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _sparse_impl(q, k, v, layout, scale, count, entries, blocks, return_lse, wgs)
    return out, (lse if lse is not None else _empty_lse(q))


@_sparse_op.register_fake
def _sparse_fake(q, k, v, layout, scale, count, entries, blocks, return_lse, wgs=2):
    return _attention_fake(q, k, v, layout, scale, None, return_lse)


def _sparse_call(q, k, v, layout, scale, block_mask, return_lse, fn="vidattn.attention"):
    from . import sparse
    qv = _bshd(q, layout)
    b, sq, h, _ = qv.shape
    skv = k.shape[1 if layout == "bshd" else 2]
    blocks = sparse.dense_blocks(block_mask, b, h, sq, skv, fn=fn).to(q.device)
    if _grad_reason(q, k, v) is not None:
        if not _is_compiling():
            warn_fallback(f"{_grad_fallback_reason(q, k, v)} (block mask: SDPA runs it block by block)")
        kv, vv = _bshd(k, layout), _bshd(v, layout)
        out, lse = sparse.sdpa_blocks(qv.transpose(1, 2), kv.transpose(1, 2), vv.transpose(1, 2),
                                      _default_scale(scale, q.shape[-1]), blocks, return_lse)
        out = out if layout == "bhsd" else out.transpose(1, 2)
        return (out, lse) if return_lse else out
    tab = sparse.tables(blocks, sparse.warpgroups(q.shape[-1]))
    if _is_compiling():
        out, lse = torch.ops.vidattn.sparse_attention(q, k, v, layout, scale, tab.count, tab.entries, blocks,
                                                      return_lse, tab.wgs)
    else:
        out, lse = _sparse_impl(q, k, v, layout, scale, tab.count, tab.entries, blocks, return_lse, tab.wgs)
    return (out, lse) if return_lse else out


# ----------------------------------------------------------------------------------------------------------
# public API
# ----------------------------------------------------------------------------------------------------------

def _grad_reason(q, k, v) -> Optional[str]:
    if torch.is_grad_enabled() and (q.requires_grad or k.requires_grad or v.requires_grad):
        return "inputs require grad: the kernel is forward-only"
    return None


def _grad_fallback_reason(q, k, v) -> Optional[str]:
    """The reason a differentiable call runs SDPA: no GPU (or a device the kernel cannot use) is said first, as
    for every other call; then autograd."""
    if _grad_reason(q, k, v) is None:
        return None
    return _ext.device_reason(q.device) or _grad_reason(q, k, v)


def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, layout: str = "bshd",
              scale: Optional[float] = None, kv_lens: Optional[torch.Tensor] = None, return_lse: bool = False,
              precision: Optional[str] = None, causal=False, block_mask=None):
    """Exact attention ``softmax(q @ k^T * scale) @ v``, the numerics contract of PyTorch SDPA, optionally causal.

    Args:
        q: queries, ``(B, Sq, H, D)`` for ``layout="bshd"`` (what diffusers processors hold) or
            ``(B, H, Sq, D)`` for ``layout="bhsd"`` (what ``F.scaled_dot_product_attention`` takes).
        k, v: keys and values, ``(B, Skv, Hkv, D)`` / ``(B, Hkv, Skv, D)``; ``Skv`` may differ from ``Sq``.
            ``Hkv`` may be smaller than q's ``H`` when it divides it (grouped-query attention; ``Hkv = 1``:
            multi-query): query head ``h`` attends to key/value head ``h // (H // Hkv)``, as SDPA's
            ``enable_gqa=True``. The kernel reads each key/value head in place for its whole group (no repeat).
            Any strides work; the kernel reads them as given (no copies) when the last dim is contiguous.
        layout: ``"bshd"`` or ``"bhsd"``; the output has the same layout.
        scale: softmax scale; ``None`` means ``1 / sqrt(D)``.
        kv_lens: optional int32/int64 tensor of shape ``(B,)``: keys at positions ``>= kv_lens[b]`` are
            ignored for batch element ``b`` (text padding). Values must lie in ``[1, Skv]`` (checked when the
            tensor is on the CPU in an eager call; it is then copied to q's device). A GPU tensor is not checked
            (that would cost a device sync), nor a traced one (torch.compile, FakeTensorMode): values above ``Skv``
            read as ``Skv`` (as SDPA's mask does) and values ``<= 0`` give zero rows and an LSE of ``-inf`` (SDPA:
            NaN). Any view works (a column, an expanded scalar): it is read contiguous. Keys past a length never
            reach the output on any path, NaN and Inf included (an unwritten cache slot; docs/reliability.md).
        return_lse: also return the fp32 log-sum-exp of the scaled scores, shape ``(B, H, Sq)``
            (natural log), e.g. to merge partial results in ring attention (differentiable when grad is on).
        causal: ``False`` (default), ``True`` or ``"top_left"`` (query ``i`` sees keys ``j <= i``: SDPA's
            ``is_causal``, also when ``Sq != Skv``), or ``"bottom_right"`` (``j <= i + Skv - Sq``: the last query sees
            every key; FlashAttention's convention when the lengths differ; the same as top-left when they are
            equal). With ``kv_lens`` the keys are shortened first and the mask aligns to them (bottom-right:
            ``Skv`` above is ``kv_lens[b]``). A query that sees no key (bottom-right with fewer keys than queries)
            gets a zero row and an LSE of ``-inf``. The kernel skips the key blocks past each query tile's diagonal
            (docs/guide/causal.md); ``VIDATTN_CAUSAL_KERNEL=0`` runs causal calls on SDPA with the same mask.

    Returns:
        ``out`` with q's dtype and the caller's layout, or ``(out, lse)`` when ``return_lse``.

    precision: ``None`` (the current default: ``"exact"`` unless set by ``vidattn.use_precision``), ``"exact"``, or
        ``"8bit"``: INT8 ``q @ k^T`` and e4m3 ``P @ v`` (vidattn.quant8; not exact: about 4e-2 relative L2 on random
        inputs, SageAttention2's level), for D in {64, 128} on Hopper; other calls run the exact path and warn.
        Causal and block-mask calls run the exact path (the 8-bit kernel has no mask; explain says so). Calls with
        at most ``vidattn.quant8.short_kv_exact_max(D)`` keys (7680 at D=128, 12288 at D=64) run the exact kernel, which
        measured faster there, and so do grouped K/V at D=64 (``vidattn.quant8.GROUPED_EXACT_HEAD_DIMS``: as fast
        there); at D=128 the 8-bit kernel quantizes each key/value head once for its group (explain says which).

    The sm_90a kernel runs for CUDA tensors on Hopper, bf16/fp16, D a multiple of 8 up to 256 (64, 96, 128, 192 and
    256 have builds of their own; every other D runs on the next build up, the columns padded with zeros on the fly,
    so it costs what that build costs: 8..56 on D=64, 72..88 on D=96, 104..120 on D=128, 136..184 on D=192,
    200..248 on D=256; causal masks at each, 72..96 on the D=128 build), equal or grouped K/V heads, 16-byte
    aligned strides and no autograd; any other call (D over 256 among them) runs PyTorch SDPA and warns once per
    reason.
    ``vidattn.explain`` says which, ``vidattn.ops.kernel_build`` which build runs a call.
    """
    q, k, v = _autocast_inputs(q, k, v)
    _validate(q, k, v, layout, scale, kv_lens)
    _check_return_lse(return_lse, "vidattn.attention")
    causal = _causal_code(causal)
    mode = resolve_precision(precision)  # (checked before the block-mask path, which runs exact at any precision)
    if block_mask is not None:
        _check_block_mask_args(kv_lens, causal, "vidattn.attention")
        return _sparse_call(q, k, v, layout, None if scale is None else float(scale), block_mask, return_lse)
    eight_bit = mode == "8bit" and causal == _ext.CAUSAL_NONE
    kv_lens = _prepare_kv_lens(kv_lens, q.device, k.shape[1 if layout == "bshd" else 2])
    scale = None if scale is None else float(scale)
    if _grad_reason(q, k, v) is not None:
        # The custom op has no backward; the differentiable SDPA path keeps training and grad checks working.
        if not _is_compiling():
            warn_fallback(_grad_fallback_reason(q, k, v))
        qv, kv, vv = _bshd(q, layout), _bshd(k, layout), _bshd(v, layout)
        out, lse = sdpa_fallback(qv.transpose(1, 2), kv.transpose(1, 2), vv.transpose(1, 2),
                                 _default_scale(scale, q.shape[-1]), kv_lens, return_lse,
                                 **({"causal": causal} if causal else {}))
        out = out if layout == "bhsd" else out.transpose(1, 2)
        return (out, lse) if return_lse else out
    if eight_bit:
        from .quant8 import attention_8bit
        out, lse = attention_8bit(q, k, v, layout, scale, kv_lens, return_lse)
        return (out, lse) if return_lse else out
    ckw = {"causal": causal} if causal else {}  # see _attention_impl
    if _is_compiling() or not _eager_fast_path(q, k, v):
        # torch.compile traces the custom op (its fake gives the output's metadata); plain eager calls skip its
        # dispatch layers, which cost more host time than a short kernel takes (dev/probes/call_overhead.py), under a
        # profiler range of the op's name so traces read the same either way.
        out, lse = torch.ops.vidattn.attention(q, k, v, layout, scale, kv_lens, return_lse, causal)
    elif _profiler_on():
        with torch.profiler.record_function("vidattn::attention"):
            out, lse = _attention_impl(q, k, v, layout, scale, kv_lens, return_lse, **ckw)
    else:
        out, lse = _attention_impl(q, k, v, layout, scale, kv_lens, return_lse, **ckw)
    return (out, lse) if return_lse else out


def _check_block_mask_args(kv_lens, causal: int, fn: str) -> None:
    # A block mask says every key a row sees; padding and causal rows are blocks of it (vidattn/sparse.py).
    if kv_lens is not None:
        raise ValueError(f"{fn}: block_mask and kv_lens together: leave the padded keys' blocks out of the block mask")
    if causal != _ext.CAUSAL_NONE:
        raise ValueError(f"{fn}: block_mask and causal together: give the causal blocks in the block mask")


def _check_return_lse(return_lse, fn: str) -> None:
    if not isinstance(return_lse, bool):
        raise TypeError(f"{fn}: return_lse must be True or False, got {type(return_lse).__name__}")


def explain(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, layout: str = "bshd",
            scale: Optional[float] = None, kv_lens: Optional[torch.Tensor] = None,
            precision: Optional[str] = None, causal=False, return_lse: bool = False,
            block_mask=None) -> Optional[str]:
    """Why ``vidattn.attention`` with these arguments would run PyTorch SDPA instead of the kernel; ``None``
    when the kernel runs. Raises the same errors as ``attention`` for invalid arguments. On a Hopper GPU the
    first call may compile the kernel library (cached on disk). With ``precision="8bit"`` (or that default): ``None``
    when the 8-bit kernel runs, else why not and what runs instead. A causal call's reason names its mask
    (``causal='top_left'`` or ``'bottom_right'``); with 8-bit precision it says the exact path runs it.
    ``return_lse`` is taken so that the arguments of an ``attention`` call can be passed as they are; it changes no
    route."""
    q, k, v = _autocast_inputs(q, k, v)
    _validate(q, k, v, layout, scale, kv_lens, fn="vidattn.explain")
    _check_return_lse(return_lse, "vidattn.explain")
    causal = _causal_code(causal, fn="vidattn.explain")
    if block_mask is not None:
        _check_block_mask_args(kv_lens, causal, "vidattn.explain")
        from . import sparse
        qv, kv, vv = _bshd(q, layout), _bshd(k, layout), _bshd(v, layout)
        sparse.dense_blocks(block_mask, qv.shape[0], qv.shape[2], qv.shape[1], kv.shape[1], fn="vidattn.explain")
        reason = _grad_fallback_reason(q, k, v) or _sparse_reason(qv, kv, vv, _default_scale(scale, q.shape[-1]),
                                                                  sparse.warpgroups(q.shape[-1]))
        note = "" if resolve_precision(precision) != "8bit" else "8-bit path not used: it has no block mask; "
        if reason is None:
            return note + "the exact block-sparse kernel runs instead" if note else None
        return f"{note}{reason} (block mask: SDPA runs it block by block)"
    eight_bit = resolve_precision(precision) == "8bit"
    kv_lens = _prepare_kv_lens(kv_lens, q.device, k.shape[1 if layout == "bshd" else 2])
    if eight_bit and causal == _ext.CAUSAL_NONE:
        from .quant8 import explain_8bit
        return explain_8bit(q, k, v, layout, None if scale is None else float(scale), kv_lens)
    reason = _grad_fallback_reason(q, k, v)
    if reason is None:
        qv, kv, vv = _bshd(q, layout), _bshd(k, layout), _bshd(v, layout)
        ckw = {"causal": causal} if causal else {}  # as in _attention_impl
        reason = _ext.kernel_reason(qv, kv, vv, kv_lens, _default_scale(scale, q.shape[-1]), **ckw)
    if causal == _ext.CAUSAL_NONE:
        return reason
    mask = f"causal={_CAUSAL_NAMES[causal]!r}"
    if eight_bit:
        instead = "the exact kernel runs instead" if reason is None else f"PyTorch SDPA runs instead ({reason})"
        return f"8-bit path not used: it has no causal mask ({mask}); {instead}"
    return None if reason is None else f"{reason} ({mask}: SDPA runs it with the same mask)"


def kernel_build(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, layout: str = "bshd",
                 scale: Optional[float] = None, kv_lens: Optional[torch.Tensor] = None, causal=False) -> Optional[str]:
    """Which kernel build an exact ``vidattn.attention`` call with these arguments runs on, in words: ``"D=96
    build"``, ``"D=112 on the D=128 build, columns zero-filled by TMA"``; ``None`` when it runs PyTorch SDPA
    (``explain`` then says why). Raises the same errors as ``attention`` for invalid arguments."""
    if explain(q, k, v, layout=layout, scale=scale, kv_lens=kv_lens, precision="exact", causal=causal) is not None:
        return None
    d, code = q.shape[-1], _causal_code(causal, fn="vidattn.ops.kernel_build")
    lib = _ext.load()
    if lib is not None and hasattr(lib, "vidattn_sm90_build_head_dim"):
        return _ext.describe_build(d, _ext.lib_build_head_dim(d, code, lib))
    return _ext.build_description(d, code)


def kernel_available() -> bool:
    """True when the current CUDA device is Hopper, the kernel library is built and loaded, and no launch of it has
    failed in this process: what `explain` says for a call inside the envelope. Never raises; may compile the
    kernel library on first call."""
    try:
        if not torch.cuda.is_available():
            return False
        if _ext.device_reason(torch.device("cuda", torch.cuda.current_device())) is not None:
            return False
        return _ext.runtime_reason() is None
    except Exception:  # noqa: BLE001 - an availability probe must not raise
        return False
