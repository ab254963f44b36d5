"""Fused rotary position embedding: `vidattn.rope`, bit-exact with diffusers' eager RoPE, one kernel instead of ~8.

diffusers applies RoPE to q and k as a chain of eager elementwise ops (~8 launches, ~36 bytes of traffic per element
of x); csrc/common/rope.cuh does it in one pass (~4 bytes: read x, write out; the tables once per position) with
the same fp32 operations in the same order, so every output bit is the one diffusers' code gives. Three formulas
(`mode`):

- ``"wan"``: diffusers' `WanAttnProcessor` (and SkyReels-V2's): interleaved pairs, ``cos[..., 0::2]`` and
  ``sin[..., 1::2]``; products in the dtype torch promotes x and the tables to (fp32 tables, as diffusers builds them:
  fp32; tables of x's own dtype: every op rounded to it).
- ``"pairs"``: ``diffusers.models.embeddings.apply_rotary_emb(use_real=True, use_real_unbind_dim=-1)`` (CogVideoX,
  HunyuanVideo, HunyuanVideo 1.5, EasyAnimate) and LTX-Video's `apply_rotary_emb`: interleaved pairs, all math in
  fp32.
- ``"halves"``: ``apply_rotary_emb(use_real=True, use_real_unbind_dim=-2)`` (Cosmos) and Allegro's per-axis RoPE:
  channel j pairs with j + D/2.

For the processors, `apply_rotary_emb`, `ltx_apply_rotary_emb` (LTX-Video, and LTX-2's interleaved RoPE: the same
code) and `allegro_apply_rotary_emb` take diffusers' signatures and route what the kernel takes to `rope`.

The kernel runs for CUDA bf16/fp16 x on Hopper (the library it ships in is built for sm_90a), fp32/bf16/fp16 tables
that do not vary over heads, head dims that are multiples of 8 (halves: 16) up to 4096, 16-byte aligned rows, no
autograd. Anything else runs `rope_reference` (the same torch
ops as diffusers): the same output, only slower; `rope_explain` says why. ``VIDATTN_ROPE_KERNEL=0`` turns the kernel
off (A/B timing).
"""
from __future__ import annotations

import ctypes
import os
import warnings
from typing import Optional

import torch

from . import _ext

MODES = {"wan": 0, "pairs": 1, "halves": 2}
LAYOUTS = ("bshd", "bhsd")
_X_DTYPES = {torch.bfloat16: 0, torch.float16: 1}
_TABLE_DTYPES = {torch.bfloat16: 0, torch.float16: 1, torch.float32: 2}
MAX_HEAD_DIM = 4096  # csrc/capi_rope.cuh: at most 512 threads per position, 8 channels each
ROPE_KERNEL_ENV = "VIDATTN_ROPE_KERNEL"


def kernel_from_env(environ=os.environ) -> bool:
    return environ.get(ROPE_KERNEL_ENV, "1").strip() != "0"


kernel_enabled = kernel_from_env()  # read once at import; tests and A/B runs may set it directly
_launch_error: Optional[str] = None  # the first failed launch: the kernel is not used again in this process


class _RopeArgs(ctypes.Structure):
    """Mirror of `VidattnRopeArgs` in csrc/capi.h; field order and types must match exactly."""
    _fields_ = [
        ("x", ctypes.c_void_p), ("out", ctypes.c_void_p), ("cos", ctypes.c_void_p), ("sin", ctypes.c_void_p),
        ("batch", ctypes.c_int64), ("seqlen", ctypes.c_int64), ("heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("x_stride", ctypes.c_int64 * 3), ("out_stride", ctypes.c_int64 * 3),
        ("cos_stride", ctypes.c_int64 * 2), ("sin_stride", ctypes.c_int64 * 2),
        ("dtype", ctypes.c_int32), ("table_dtype", ctypes.c_int32), ("mode", ctypes.c_int32),
    ]


_declared: set = set()


def _declared_entry(lib, symbol: str, structure, declared: set):
    """The library's entry `symbol(structure*, stream)` (its types declared once per library, recorded in
    `declared`), or None when the build predates it."""
    fn = getattr(lib, symbol, None)
    if fn is None:
        return None
    if id(lib) not in declared:
        fn.argtypes = [ctypes.POINTER(structure), ctypes.c_void_p]
        fn.restype = ctypes.c_int
        lib.vidattn_sm90_last_error.restype = ctypes.c_char_p
        declared.add(id(lib))
    return fn


def _entry(lib):
    """The library's RoPE entry (declared once per library), or None when the build predates it."""
    return _declared_entry(lib, "vidattn_rope", _RopeArgs, _declared)


def _call(lib, fn, args, device) -> Optional[str]:
    """fn(&args, the current stream) under `device`'s guard: None, or the library's error message when it failed."""
    with _ext._device_guard(device):
        rc = fn(ctypes.byref(args), ctypes.c_void_p(_ext._current_stream(device)))
    return None if rc == 0 else lib.vidattn_sm90_last_error().decode(errors="replace")


# ----------------------------------------------------------------------------------------------------------
# the torch arithmetic (the fallback, and what the kernel must equal bit for bit)
# ----------------------------------------------------------------------------------------------------------

def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: str = "wan") -> torch.Tensor:
    """RoPE with diffusers' own torch ops, in their order; cos and sin broadcast against x as given (e.g. (1, S, 1, D)
    against (B, S, H, D)). Differentiable."""
    if mode == "wan":  # diffusers WanAttnProcessor's apply_rotary_emb
        x1, x2 = x.unflatten(-1, (-1, 2)).unbind(-1)
        c, s = cos[..., 0::2], sin[..., 1::2]
        out = torch.empty_like(x)
        out[..., 0::2] = x1 * c - x2 * s
        out[..., 1::2] = x1 * s + x2 * c
        return out.type_as(x)
    if mode == "pairs":  # diffusers.models.embeddings.apply_rotary_emb(use_real_unbind_dim=-1), after its reshapes
        x_real, x_imag = x.reshape(*x.shape[:-1], -1, 2).unbind(-1)
        x_rotated = torch.stack([-x_imag, x_real], dim=-1).flatten(-2)
        return (x.float() * cos + x_rotated.float() * sin).to(x.dtype)
    if mode == "halves":  # apply_rotary_emb(use_real_unbind_dim=-2)
        x_real, x_imag = x.reshape(*x.shape[:-1], 2, -1).unbind(-2)
        x_rotated = torch.cat([-x_imag, x_real], dim=-1)
        return (x.float() * cos + x_rotated.float() * sin).to(x.dtype)
    raise ValueError(f"vidattn.rope: mode must be one of {sorted(MODES)}, got {mode!r}")


# ----------------------------------------------------------------------------------------------------------
# dispatch
# ----------------------------------------------------------------------------------------------------------

def _bshd(t: torch.Tensor, layout: str) -> torch.Tensor:
    return t if layout == "bshd" else t.transpose(1, 2)


def _tables_4d(cos: torch.Tensor, layout: str) -> torch.Tensor:
    """cos as a 4-D tensor in the caller's layout: (S, D) tables get the leading and head dims diffusers adds."""
    if cos.dim() == 2:
        return cos[None, :, None, :] if layout == "bshd" else cos[None, None, :, :]
    while cos.dim() < 4:
        cos = cos[None]
    return cos


def _broadcasts_onto(shape, x_shape) -> bool:
    """Whether a tensor of `shape` broadcasts against x_shape to exactly x_shape (not to something larger)."""
    try:
        return torch.broadcast_shapes(shape, x_shape) == x_shape
    except RuntimeError:
        return False


def _table_view(t: torch.Tensor, x_shape) -> Optional[torch.Tensor]:
    """t (4-D, bshd) expanded to x's (B, S, H, D) shape, or None when it does not broadcast to exactly that."""
    return t.expand(x_shape) if _broadcasts_onto(t.shape, x_shape) else None


def _rows_aligned(t: torch.Tensor, dims: int, elems: int) -> bool:
    return all(n == 1 or st % elems == 0 for n, st in zip(t.shape[:dims], t.stride()[:dims]))


def _shape_reason(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: str) -> Optional[str]:
    """Why the kernel cannot take these bshd views (cos and sin expanded to x's shape): dtypes, strides and alignment;
    None if it can. Never loads the library."""
    if x.dtype not in _X_DTYPES:
        return f"x is {x.dtype}; the kernel takes bf16 or fp16"
    if cos.dtype not in _TABLE_DTYPES or sin.dtype != cos.dtype:
        return f"cos/sin are {cos.dtype}/{sin.dtype}; the kernel takes fp32, bf16 or fp16 tables of one dtype"
    if cos.device != x.device or sin.device != x.device:
        return "cos/sin are not on x's device"
    if x.dim() != 4:
        return f"x must be 4-D, got shape {tuple(x.shape)}"
    b, s, h, d = x.shape
    step = 16 if mode == "halves" else 8
    if d % step or d > MAX_HEAD_DIM:
        return f"head dim {d} is not a multiple of {step} up to {MAX_HEAD_DIM}"
    if b > 65535:
        return "batch over 65535"
    if x.numel() == 0:
        return "x is empty"
    if x.stride(-1) != 1:
        return "x's last dim is not contiguous"
    if x.data_ptr() % 16 or not _rows_aligned(x, 3, 8):
        return "x is not 16-byte aligned with (batch, seq, head) strides multiples of 8 elements"
    elems = 16 // cos.element_size()
    for name, t in (("cos", cos), ("sin", sin)):
        if h > 1 and t.stride(2) != 0:
            return f"{name} varies over heads (the kernel broadcasts the tables over heads)"
        if t.stride(-1) != 1:
            return f"{name}'s last dim is not contiguous"
        if t.data_ptr() % 16 or not _rows_aligned(t, 2, elems):
            return f"{name} is not 16-byte aligned with (batch, seq) strides multiples of 16 bytes"
    return None


def _prepare(x, cos, sin, layout):
    """(x, cos, sin) as bshd views, the tables expanded to x's shape; None for the tables that do not broadcast."""
    xv = _bshd(x, layout)
    cv = _table_view(_bshd(_tables_4d(cos, layout), layout), xv.shape)
    sv = _table_view(_bshd(_tables_4d(sin, layout), layout), xv.shape)
    return xv, cv, sv


def _decide(x, cos, sin, mode: str, layout: str):
    """(reason, views): why the torch ops run (None: the kernel runs) and, when it runs, the bshd views (x, cos, sin)
    it takes; the body of rope_reason, kept apart so a call prepares its views once."""
    if not kernel_enabled:
        return f"the fused RoPE is off ({ROPE_KERNEL_ENV}=0)", None
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return "inputs require grad: the kernel is forward-only", None
    reason = _ext.device_reason(x.device)
    if reason is not None:
        return reason, None
    if x.dim() != 4 or cos.dim() not in (2, 4) or sin.dim() not in (2, 4):
        return "x must be 4-D and cos/sin 2-D (S, D) or 4-D", None
    views = _prepare(x, cos, sin, layout)
    if views[1] is None or views[2] is None:
        return "cos/sin do not broadcast to x's shape", None
    reason = _shape_reason(*views, mode)
    if reason is None and _launch_error is not None:
        reason = _launch_error
    if reason is None:
        reason = _ext.runtime_reason()
    if reason is None and _entry(_ext._lib) is None:
        reason = "this kernel library predates the fused RoPE"
    return reason, (views if reason is None else None)


def rope_reason(x, cos, sin, mode: str = "wan", layout: str = "bshd") -> Optional[str]:
    """Why `rope` with these arguments runs the torch ops instead of the kernel; None when the kernel runs. May build
    the kernel library (once per process, cached on disk)."""
    return _decide(x, cos, sin, mode, layout)[0]


def _launch(xv, cv, sv, out_v, mode: str) -> None:
    """The kernel on the current stream; all bshd views, checked by rope_reason."""
    global _launch_error
    lib = _ext._library(None)
    fn = _entry(lib)
    b, s, h, d = xv.shape
    args = _RopeArgs(
        xv.data_ptr(), out_v.data_ptr(), cv.data_ptr(), sv.data_ptr(), b, s, h, d,
        (ctypes.c_int64 * 3)(*xv.stride()[:3]), (ctypes.c_int64 * 3)(*out_v.stride()[:3]),
        (ctypes.c_int64 * 2)(*cv.stride()[:2]), (ctypes.c_int64 * 2)(*sv.stride()[:2]),
        _X_DTYPES[xv.dtype], _TABLE_DTYPES[cv.dtype], MODES[mode])
    msg = _call(lib, fn, args, xv.device)
    if msg is not None:
        _launch_error = f"fused RoPE launch failed ({msg}); it is not used again in this process"
        raise _ext.KernelLaunchError(_launch_error)


def _rope_impl(x, cos, sin, mode: str, layout: str) -> torch.Tensor:
    """The custom op's body: the kernel when rope_reason allows, else the torch ops. The output is always
    torch.empty_like(x)'s layout (the fake's), whichever runs."""
    out = torch.empty_like(x)
    reason, views = _decide(x, cos, sin, mode, layout)
    if reason is None:
        xv, cv, sv = views
        out_v = _bshd(out, layout)
        if out_v.data_ptr() % 16 == 0 and _rows_aligned(out_v, 3, 8):
            try:
                _launch(xv, cv, sv, out_v, mode)
                return out
            except _ext.KernelLaunchError:
                pass  # off for the process now; this call runs the torch ops
    ref = rope_reference(x, _tables_4d(cos, layout), _tables_4d(sin, layout), mode)
    if ref.shape != out.shape:
        raise ValueError(f"vidattn.rope: cos/sin of shapes {tuple(cos.shape)}, {tuple(sin.shape)} broadcast x "
                         f"{tuple(x.shape)} to {tuple(ref.shape)}; the tables must broadcast to x's shape")
    return ref if ref.stride() == out.stride() else out.copy_(ref)


@torch.library.custom_op("vidattn::rope", mutates_args=())
def _rope_op(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, mode: str, layout: str) -> torch.Tensor:
    return _rope_impl(x, cos, sin, mode, layout)


@_rope_op.register_fake
def _rope_fake(x, cos, sin, mode, layout):
    return torch.empty_like(x)


def _validate(x, cos, sin, mode, layout, fn):
    for name, t in (("x", x), ("cos", cos), ("sin", sin)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{fn}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if mode not in MODES:
        raise ValueError(f"{fn}: mode must be one of {sorted(MODES)}, got {mode!r}")
    if layout not in LAYOUTS:
        raise ValueError(f"{fn}: layout must be 'bshd' or 'bhsd', got {layout!r}")
    if x.dim() != 4:
        raise ValueError(f"{fn}: x must be 4-D ({layout}), got shape {tuple(x.shape)}")
    if x.shape[-1] % 2:
        raise ValueError(f"{fn}: the head dim must be even, got {x.shape[-1]}")
    if cos.shape != sin.shape:
        raise ValueError(f"{fn}: cos and sin must have one shape, got {tuple(cos.shape)} and {tuple(sin.shape)}")
    if cos.dim() not in (2, 4):
        raise ValueError(f"{fn}: cos/sin must be (S, D) or 4-D broadcastable to x, got {tuple(cos.shape)}")
    if not _broadcasts_onto(_tables_4d(cos, layout).shape, x.shape):
        raise ValueError(f"{fn}: cos/sin of shape {tuple(cos.shape)} must broadcast to x's shape {tuple(x.shape)} "
                         f"({layout})")


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, mode: str = "wan",
         layout: str = "bshd") -> torch.Tensor:
    """Rotary position embedding of x, bit for bit what diffusers' eager code gives (the module docstring lists the
    three `mode` formulas), in one kernel on Hopper.

    x: ``(B, S, H, D)`` (``layout="bshd"``) or ``(B, H, S, D)`` (``"bhsd"``), any strides. cos, sin: ``(S, D)``
    (diffusers' apply_rotary_emb tables; the batch and head dims are added as it does for the layout) or 4-D tensors
    that broadcast to x's shape in that layout, e.g. Wan's ``(1, S, 1, D)``. Returns a new tensor with x's shape and
    dtype, laid out as ``torch.empty_like(x)``. Differentiable (then it runs the torch ops)."""
    _validate(x, cos, sin, mode, layout, "vidattn.rope")
    if torch.is_grad_enabled() and (x.requires_grad or cos.requires_grad or sin.requires_grad):
        return rope_reference(x, _tables_4d(cos, layout), _tables_4d(sin, layout), mode)
    if (torch.compiler.is_compiling() or type(x) is not torch.Tensor or type(cos) is not torch.Tensor
            or type(sin) is not torch.Tensor or _ext_dispatch_mode() is not None):
        return torch.ops.vidattn.rope(x, cos, sin, mode, layout)
    return _rope_impl(x, cos, sin, mode, layout)  # plain eager call: skips the dispatcher's host time


# ----------------------------------------------------------------------------------------------------------
# RMSNorm and the Wan RoPE in one pass (csrc/common/norm_rope.cuh)
# ----------------------------------------------------------------------------------------------------------

NORM_ROPE_ENV = "VIDATTN_NORM_ROPE"
MAX_NORM_WIDTH = 16384  # csrc/capi_rope.cuh: 512 threads of at most 4 vectors of 8 elements per row
NORM_ROPE_SCHEDULE_ENV = "VIDATTN_NORM_ROPE_SCHEDULE"  # A/B runs: the kernel's schedule (set_norm_rope_schedule)
# csrc/common/norm_rope.cuh NormRopeSchedule, 0 the library's (csrc/capi_rope.cuh vidattn_norm_rope_set_schedule)
NORM_ROPE_SCHEDULES = {0: "the library's", 1: "one row per CTA", 2: "CTAs looping over rows",
                       3: "one row per CTA, lean index math", 4: "one row per CTA, lean index math, 32 registers"}


def norm_rope_from_env(environ=os.environ) -> bool:
    return environ.get(NORM_ROPE_ENV, "1").strip() != "0"


norm_rope_enabled = norm_rope_from_env()  # read once at import; tests and A/B runs may set it directly
_schedule_from_env_applied = False
_norm_launch_error: Optional[str] = None  # the first failed launch: the fused norm is not used again in this process


class _NormRopeArgs(ctypes.Structure):
    """Mirror of `VidattnNormRopeArgs` in csrc/capi.h; field order and types must match exactly."""
    _fields_ = [
        ("x", ctypes.c_void_p), ("out", ctypes.c_void_p), ("weight", ctypes.c_void_p), ("cos", ctypes.c_void_p),
        ("sin", ctypes.c_void_p),
        ("batch", ctypes.c_int64), ("seqlen", ctypes.c_int64), ("heads", ctypes.c_int64),
        ("head_dim", ctypes.c_int64),
        ("x_stride", ctypes.c_int64 * 3), ("out_stride", ctypes.c_int64 * 3),
        ("cos_stride", ctypes.c_int64 * 2), ("sin_stride", ctypes.c_int64 * 2),
        ("eps", ctypes.c_float), ("dtype", ctypes.c_int32), ("table_dtype", ctypes.c_int32),
    ]


_norm_declared: set = set()


def _norm_entry(lib):
    """The library's fused norm + RoPE entry (declared once per library), or None when the build predates it."""
    return _declared_entry(lib, "vidattn_norm_rope", _NormRopeArgs, _norm_declared)


def _norm_eps(norm) -> float:
    """RMSNorm's eps as torch applies it: None means the machine epsilon of the type torch computes in, fp32 for bf16
    and fp16 inputs (ATen's opmath type; the module's docstring says x's dtype, which is not what runs: the device's
    tests caught it)."""
    return torch.finfo(torch.float32).eps if norm.eps is None else float(norm.eps)


def norm_rope_reference(norm, x: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """What diffusers' Wan attention does, step by step: `norm(x)` over the (B, S, heads * D) row, the head split,
    then the Wan RoPE (`rope`: bit for bit diffusers' own ops, fused where it can run). (B, S, heads, D)."""
    return rope(norm(x).unflatten(-1, (heads, -1)), cos, sin, mode="wan")


def _norm_decide(norm, x, heads, cos, sin):
    """(reason, views): why norm_rope runs the two steps (None: the fused kernel runs) and, when it runs, the bshd
    views (x split into heads, cos, sin) it takes."""
    if not norm_rope_enabled:
        return f"the fused RMSNorm + RoPE is off ({NORM_ROPE_ENV}=0)", None
    if not isinstance(norm, torch.nn.RMSNorm):
        return f"the norm is {type(norm).__name__}, not torch.nn.RMSNorm", None
    w = norm.weight
    if w is None:
        return "the RMSNorm has no weight (elementwise_affine=False)", None
    if x.dim() != 3 or tuple(norm.normalized_shape) != (x.shape[-1],):
        return "the RMSNorm does not normalize the last dim of a (B, S, C) x", None
    if x.shape[-1] % heads:
        return f"{x.shape[-1]} channels do not split into {heads} heads", None
    if x.shape[-1] > MAX_NORM_WIDTH:
        return f"{x.shape[-1]} channels per row; the fused kernel takes at most {MAX_NORM_WIDTH}", None
    if torch.is_grad_enabled() and (x.requires_grad or w.requires_grad or cos.requires_grad or sin.requires_grad):
        return "inputs require grad: the kernel is forward-only", None
    if torch.is_autocast_enabled(x.device.type):
        return "autocast is on (the norm's dtype would follow it)", None
    if w.dtype != x.dtype or w.device != x.device:
        return f"the RMSNorm weight is {w.dtype} on {w.device}; the fused kernel takes x's dtype and device", None
    if not w.is_contiguous() or w.data_ptr() % 16:
        return "the RMSNorm weight is not contiguous and 16-byte aligned", None
    if cos.dtype not in (torch.float32, x.dtype):
        return f"cos/sin are {cos.dtype}; the fused kernel takes fp32 tables or tables of x's dtype", None
    reason, views = _decide(x.unflatten(-1, (heads, -1)), cos, sin, "wan", "bshd")
    if reason is None and _norm_launch_error is not None:
        reason, views = _norm_launch_error, None
    if reason is None and _norm_entry(_ext._lib) is None:
        reason, views = "this kernel library predates the fused RMSNorm + RoPE", None
    return reason, views


def norm_rope_reason(norm, x: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> Optional[str]:
    """Why `norm_rope` with these arguments runs the two steps (the norm module, then `rope`) instead of the fused
    kernel; None when the kernel runs. May build the kernel library (once per process, cached on disk)."""
    return _norm_decide(norm, x, heads, cos, sin)[0]


def _norm_launch(norm, xv, cv, sv, out) -> None:
    global _norm_launch_error, _schedule_from_env_applied
    lib = _ext._library(None)
    fn = _norm_entry(lib)
    if not _schedule_from_env_applied:
        _schedule_from_env_applied = True
        text = os.environ.get(NORM_ROPE_SCHEDULE_ENV, "").strip()
        if text:
            try:
                set_norm_rope_schedule(int(text))
            except ValueError as exc:  # a setting never makes a call raise (docs/install.md): named, then ignored
                warnings.warn(f"vidattn: {NORM_ROPE_SCHEDULE_ENV}={text!r} ignored ({exc}); the library's schedule "
                              f"runs", RuntimeWarning, stacklevel=2)
    b, s, h, d = xv.shape
    args = _NormRopeArgs(
        xv.data_ptr(), out.data_ptr(), norm.weight.data_ptr(), cv.data_ptr(), sv.data_ptr(), b, s, h, d,
        (ctypes.c_int64 * 3)(*xv.stride()[:3]), (ctypes.c_int64 * 3)(*out.stride()[:3]),
        (ctypes.c_int64 * 2)(*cv.stride()[:2]), (ctypes.c_int64 * 2)(*sv.stride()[:2]),
        _norm_eps(norm), _X_DTYPES[xv.dtype], _TABLE_DTYPES[cv.dtype])
    msg = _call(lib, fn, args, xv.device)
    if msg is not None:
        _norm_launch_error = f"fused RMSNorm + RoPE launch failed ({msg}); it is not used again in this process"
        raise _ext.KernelLaunchError(_norm_launch_error)


def set_norm_rope_schedule(schedule: int) -> None:
    """The fused norm + RoPE kernel's schedule (csrc/common/norm_rope.cuh): 0, the library's; 1 one row per CTA, 2 CTAs
    looping over rows, 3 one row per CTA with lean index math (NORM_ROPE_SCHEDULES; the library's since the ninth
    sitting), 4 that held to 32 registers (rows of up to 8192 channels; wider ones run the default; the library's at
    two vectors a thread, 4104-8192 channels, with bf16 x and fp32 tables since the eleventh sitting: Wan 14B's rows),
    for dev/norm_rope_ab.py (bf16 x with fp32 tables; other calls keep the default, and schedules 3 and 4 run
    schedule 1 where the row's offsets do not fit 32 bits). Process-wide. A value out of range raises ValueError
    before the library is loaded. `last_norm_rope_schedule` reports what ran."""
    if schedule not in NORM_ROPE_SCHEDULES:
        raise ValueError(f"norm_rope: schedule must be one of {NORM_ROPE_SCHEDULES}, got {schedule!r}")
    lib = _ext._library(None)
    if lib.vidattn_norm_rope_set_schedule(int(schedule)) != 0:
        raise ValueError(lib.vidattn_sm90_last_error().decode(errors="replace"))


def last_norm_rope_schedule() -> int:
    """The schedule (1-4, as NORM_ROPE_SCHEDULES) of this thread's last fused norm + RoPE launch; 0 before any. A
    library that predates the reader raises RuntimeError."""
    fn = getattr(_ext._library(None), "vidattn_norm_rope_last_schedule", None)
    if fn is None:
        raise RuntimeError("the kernel library lacks vidattn_norm_rope_last_schedule")
    return int(fn())


def norm_rope(norm, x: torch.Tensor, heads: int, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """`rope(norm(x).unflatten(-1, (heads, -1)), cos, sin, mode="wan")` (diffusers' Wan attention: its RMSNorm over
    the whole (B, S, heads * D) row of q or k, then its RoPE) in one pass where `norm_rope_reason` allows, else those
    two steps. Returns a new contiguous (B, S, heads, D) tensor.

    The fused kernel's RoPE is bit for bit `rope`'s on the normalized values; the norm's sum of squares runs in
    another order than torch's, which can move the last bit of a row's 1/rms and flip the rounding of a few
    normalized elements by one unit in the last place (tests/test_norm_rope_gpu.py measures and bounds it: 99.998% of
    the elements bit for bit on Wan 14B's rows). ``VIDATTN_NORM_ROPE=0`` (or `norm_rope_enabled = False`) turns it
    off; eager calls only (under torch.compile the two steps run)."""
    if torch.compiler.is_compiling() or type(x) is not torch.Tensor or _ext_dispatch_mode() is not None:
        return norm_rope_reference(norm, x, heads, cos, sin)
    reason, views = _norm_decide(norm, x, heads, cos, sin)
    if reason is None:
        xv, cv, sv = views
        out = torch.empty(xv.shape, dtype=x.dtype, device=x.device)
        try:
            _norm_launch(norm, xv, cv, sv, out)
            return out
        except _ext.KernelLaunchError:
            pass  # off for the process now; this call runs the two steps
    return norm_rope_reference(norm, x, heads, cos, sin)


def _ext_dispatch_mode():
    from .ops import _get_current_dispatch_mode
    return _get_current_dispatch_mode()


def rope_explain(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, *, mode: str = "wan",
                 layout: str = "bshd") -> Optional[str]:
    """Why `vidattn.rope` with these arguments runs diffusers' torch ops instead of the fused kernel (the same
    output, slower); None when the kernel runs."""
    _validate(x, cos, sin, mode, layout, "vidattn.rope_explain")
    return rope_reason(x, cos, sin, mode, layout)


def apply_rotary_emb(x: torch.Tensor, freqs_cis, use_real: bool = True, use_real_unbind_dim: int = -1,
                     sequence_dim: int = 2) -> torch.Tensor:
    """`diffusers.models.embeddings.apply_rotary_emb`, same signature and output bits, through `rope` where it can:
    real (cos, sin) tables of shape (S, D) on a 4-D x. Anything else (complex tables, other shapes) calls diffusers'
    own function. For the processors (vidattn/diffusers/)."""
    if (use_real and isinstance(freqs_cis, (tuple, list)) and len(freqs_cis) == 2 and x.dim() == 4
            and use_real_unbind_dim in (-1, -2) and sequence_dim in (1, 2)
            and all(isinstance(t, torch.Tensor) and t.dim() == 2 for t in freqs_cis)):
        cos, sin = (t.to(x.device) for t in freqs_cis)  # as diffusers does
        if cos.shape == sin.shape:
            return rope(x, cos, sin, mode="pairs" if use_real_unbind_dim == -1 else "halves",
                        layout="bshd" if sequence_dim == 1 else "bhsd")
    from diffusers.models.embeddings import apply_rotary_emb as stock
    return stock(x, freqs_cis, use_real=use_real, use_real_unbind_dim=use_real_unbind_dim, sequence_dim=sequence_dim)


def ltx_apply_rotary_emb(x: torch.Tensor, freqs) -> torch.Tensor:
    """`diffusers.models.transformers.transformer_ltx.apply_rotary_emb` (and LTX-2's `apply_interleaved_rotary_emb`,
    the same code), same output bits: x (B, S, C) before the head split, per-batch tables (B, S, C); the
    interleaved-pairs formula over the whole row, run as one "head" of C channels (`rope` mode "pairs"; C up to
    4096). Other shapes (and tables that would broadcast x larger, which `rope` refuses) call diffusers' own
    function."""
    cos, sin = freqs
    if x.dim() == 3 and cos.dim() == 3 and cos.shape == sin.shape and _broadcasts_onto(cos.shape, x.shape):
        return rope(x[:, :, None, :], cos[:, :, None, :], sin[:, :, None, :], mode="pairs")[:, :, 0, :]
    from diffusers.models.transformers.transformer_ltx import apply_rotary_emb as stock
    return stock(x, freqs)


def allegro_apply_rotary_emb(x: torch.Tensor, freqs_cis, positions) -> torch.Tensor:
    """`diffusers.models.embeddings.apply_rotary_emb_allegro`, same output bits: x (B, H, S, D) in three channel
    chunks (t, h, w), each rotated in halves (`rope` mode "halves") with tables gathered at its positions, then
    concatenated, as diffusers does. Other shapes call diffusers' own function."""
    if x.dim() == 4 and x.shape[-1] % 3 == 0 and len(freqs_cis) == 3 and len(positions) == 3:
        import torch.nn.functional as F
        parts = []
        for chunk, pos, (cos, sin) in zip(x.chunk(3, dim=-1), positions, freqs_cis):
            cos, sin = F.embedding(pos, cos)[:, None, :, :], F.embedding(pos, sin)[:, None, :, :]
            parts.append(rope(chunk, cos, sin, mode="halves", layout="bhsd"))
        return torch.cat(parts, dim=-1)
    from diffusers.models.embeddings import apply_rotary_emb_allegro as stock
    return stock(x, freqs_cis, positions)
