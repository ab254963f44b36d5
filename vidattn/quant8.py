"""The 8-bit attention path (`precision="8bit"`): INT8 Q K^T and e4m3 P V on sm_90a, quantization included.

One call runs a pre-pass (csrc/sm90/q8_quant.cuh, two launches: K smoothing, per-row Q scales, per-block K scales,
per-channel V scales, V transposed to e4m3; with `set_prep(2)` Q's quantization moves into the kernel) and the kernel
(csrc/sm90/q8_fwd.cuh) on the caller's stream, through the same library `vidattn._ext` builds (csrc/capi_8bit.cuh).
Calls the 8-bit path cannot take run the exact path instead, with a warning naming the reason
(`vidattn.explain(..., precision="8bit")` says which).

As with the exact op, a `torch.library` custom op (`vidattn::attention_8bit`) with a fake implementation makes
the call one opaque node for `torch.compile`; its workspace comes from the caching allocator, so CUDA graphs
capture it like any other allocation.
"""
from __future__ import annotations

import ctypes
import os
import warnings
from typing import Optional

import torch

from . import _ext

HEAD_DIMS = (64, 128)
# Calls with at most this many keys run the exact kernel at precision="8bit", silently (explain says so): with few
# keys per query row the pre-pass and each tile's fixed costs outweigh the faster key blocks, and the exact kernel is
# both faster and exact. Per head dim, measured on the H200 with the GPU at its power limit as in a model's forward
# (dev/NOTES_8bit.md "Where precision="8bit" starts to pay" and "Call P26"; dev/probes/q8_crossover.py,
# self-attention, quantization included): D=64 (48 heads) exact / 8-bit 0.977 at 8192 keys, 1.009 at 12288,
# 1.04-1.11 from 13568; D=128 (24 heads) 0.64-0.98 up to 6912 keys, 1.01 at 7168, 0.96 at 7680, 1.035-1.09 at 8192,
# 1.21-1.31 from 12288 (with 32760 queries the 8-bit path leads from 3072 keys; the threshold follows
# self-attention, the later of the two). A head dim missing here uses 8192.
SHORT_KV_EXACT_MAX_BY_DIM = {64: 12288, 128: 7680}


def _short_kv_from_env() -> Optional[int]:
    """The variable's value; a malformed one is ignored with a warning naming it (a setting never makes a call raise:
    docs/install.md), and the measured per-head-dim thresholds apply."""
    text = os.environ.get("VIDATTN_Q8_SHORT_KV_EXACT_MAX", "").strip()
    if not text:
        return None
    try:
        return int(text)
    except ValueError:
        warnings.warn(f"vidattn: VIDATTN_Q8_SHORT_KV_EXACT_MAX must be an integer number of keys, got {text!r}; "
                      f"ignored (the measured thresholds per head dim apply)", RuntimeWarning, stacklevel=2)
        return None


# One threshold for every head dim when not None: the environment variable VIDATTN_Q8_SHORT_KV_EXACT_MAX sets it
# (0: the 8-bit kernel at every length, to measure it); tests and probes assign it.
SHORT_KV_EXACT_MAX: Optional[int] = _short_kv_from_env()


def short_kv_exact_max(head_dim: int) -> int:
    """The most keys at which precision="8bit" runs the exact kernel at this head dim (see SHORT_KV_EXACT_MAX_BY_DIM)."""
    if SHORT_KV_EXACT_MAX is not None:
        return SHORT_KV_EXACT_MAX
    return SHORT_KV_EXACT_MAX_BY_DIM.get(head_dim, 8192)


# Head dims at which precision="8bit" runs the exact kernel (where it would measure faster). Empty: the 8-bit kernel
# at both.
EXACT_HEAD_DIMS: tuple = ()
# Head dims at which precision="8bit" runs grouped-query K/V (fewer key/value heads than query heads) on the exact
# kernel: at D=64 the exact kernel was as fast on them, so the exact result costs nothing there (dev/NOTES_8bit.md
# "Grouped-query K/V at 8 bits", call P76 on an H100: 32 query heads on 8, 32K tokens, sustained palindrome rounds:
# the 8-bit kernel 0.984x the exact one, 3 of 8 rounds faster; at D=128 it was 1.20x, 8 of 8). Empty: the 8-bit
# kernel for grouped K/V at both head dims.
GROUPED_EXACT_HEAD_DIMS: tuple = (64,)
_declared: set = set()
# The first failed 8-bit launch of the loaded library (not a per-call descriptor refusal): the 8-bit kernel is not
# launched again in this process, and calls run the exact path with this reason.
_launch_error: Optional[str] = None


def _entry(lib: ctypes.CDLL):
    """The library's 8-bit entry points (declared once per library), or None when the build predates them."""
    if not hasattr(lib, "vidattn_q8_fwd"):
        return None
    if id(lib) not in _declared:
        lib.vidattn_q8_fwd.argtypes = [ctypes.POINTER(_ext._Args), ctypes.c_void_p]
        lib.vidattn_q8_fwd.restype = ctypes.c_int
        lib.vidattn_q8_workspace_bytes.argtypes = [ctypes.c_int64] * 5
        lib.vidattn_q8_workspace_bytes.restype = ctypes.c_uint64
        if hasattr(lib, "vidattn_q8_workspace_bytes_kv"):  # builds before the 8-bit path's grouped-query attention
            lib.vidattn_q8_workspace_bytes_kv.argtypes = [ctypes.c_int64] * 6
            lib.vidattn_q8_workspace_bytes_kv.restype = ctypes.c_uint64
        lib.vidattn_sm90_last_error.restype = ctypes.c_char_p
        _declared.add(id(lib))
    return lib


def _reader(symbol: str, lib=None) -> int:
    """A `vidattn_q8_last_*` reader's value, or -1 for a library without it (or without the 8-bit path)."""
    fn = getattr(_entry(lib or _ext._library(None)), symbol, None)
    return int(fn()) if fn is not None else -1


def _setter(symbol: str, value: int, lib=None) -> None:
    lib = _entry(lib or _ext._library(None))
    fn = getattr(lib, symbol, None) if lib is not None else None
    if fn is None:
        raise RuntimeError(f"the kernel library lacks {symbol}")
    if fn(int(value)) != 0:
        raise ValueError(f"{symbol}: invalid value {value}")


def set_d64_warpgroups(warpgroups: int, lib=None) -> None:
    """Force the consumer warpgroups of later D=64 ping-pong 8-bit launches (2: row-sum mode 1 only, or 3), or 0 for
    the default. With the schedule left to its default (sequential at D=64), a forced count selects the ping-pong.
    For A/B timing and the sanitizer cases."""
    _setter("vidattn_q8_set_d64_warpgroups", warpgroups, lib)


def set_sum_mma(mode: int, lib=None) -> None:
    """Kernel variant of later 8-bit launches: row sums in the softmax (0), by the tensor cores (1: a column of ones
    beside V; head dim 64 only), or the default (-1). For A/B timing. Modes 2-5 (f16 or polynomial exponentials) are
    accepted and refused by the launch with an error: they measured slower everywhere and are no longer built."""
    _setter("vidattn_q8_set_sum_mma", mode, lib)


def set_sequential(seq: int, lib=None) -> None:
    """Schedule of later 8-bit launches: ping-pong (0: head dim 64 only), sequential with three consumer warpgroups
    (1: head dim 64's default), that with the exponentials taken in round-robin turns (3: one warpgroup at a time on
    MUFU while the others' S and P V run; head dim 128 only, its default, built with conversion 2 and row-sum mode 0
    only), or the default (-1). With the schedule left to the default, forcing another conversion or mode at head dim
    128 runs schedule 1. Schedule 2 (turns around the S issues) lost its A/B and is no longer built. For A/B timing; a
    launch of a schedule not built for its head dim is refused with an error."""
    _setter("vidattn_q8_set_sequential", seq, lib)


CVT_MODES = (-1, 0, 1, 2)


def set_cvt(mode: int, lib=None) -> None:
    """How later 8-bit launches turn the INT8 scores into floats (csrc/sm90/q8_fwd.cuh, kCvt): one I2F per score (0),
    the row max on the integers and each score as the float 1.5 * 2^23 + x by one integer add (1), that bias added by
    the tensor cores instead (2: S starts at it), or the build default (-1). 1 and 2 are built on the sequential
    schedules only, each at the head dim whose A/B it won (2 at 128, on schedules 1 and 3; 1 at 64 with row-sum mode
    1; they are the defaults there); a launch of another is refused with an error. Schedule 3, head dim 128's
    default, has conversion 2 only: with the schedule left to the default, 0 there runs schedule 1. The environment
    variable VIDATTN_Q8_CVT sets the same for a whole process (where it is not built, 0 runs). For A/B timing."""
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in CVT_MODES:
        raise ValueError(f"set_cvt: mode must be one of {CVT_MODES}, got {mode!r}")
    _setter("vidattn_q8_set_cvt", mode, lib)


PREP_MODES = (-1, 0, 1, 2)


def set_prep(mode: int, lib=None) -> None:
    """The pre-pass of later 8-bit launches (csrc/sm90/q8_quant.cuh): the K/V statistics and Q's quantization in one
    launch (1; calls that return the LSE run 0 regardless, since Q's LSE term reads the statistics), the three
    launches (0), no Q pass at all (2: the statistics and the K/V pass only; each attention CTA quantizes its own
    16-bit Q tile in its prologue, q8_fwd.cuh's q8_quantize_q_tile, with the pre-pass's row code, so the codes and
    scales are the same; calls with LSE take it too, the statistics being complete before the kernel starts), or the
    build default (-1). The environment variable VIDATTN_Q8_PREP sets the same for a whole process. A library that
    predates mode 2 refuses it (ValueError). For A/B timing."""
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in PREP_MODES:
        raise ValueError(f"set_prep: mode must be one of {PREP_MODES}, got {mode!r}")
    _setter("vidattn_q8_set_prep", mode, lib)


KV_PASS_MODES = (-1, 0, 1)


def set_kv_pass(mode: int, lib=None) -> None:
    """The K/V pass of later 8-bit launches (csrc/sm90/q8_quant.cuh): a thread per key with its whole K and V rows (0,
    q8_kv_kernel), or 16 lanes a row with whole-row loads and V's transpose in registers (1, q8_kv2_kernel; head dim
    128 only, D=64 runs 0; the build default since the ninth sitting), the same outputs bit for bit; or the build
    default (-1). The environment variable VIDATTN_Q8_KV_PASS sets the same for a whole process. A library that
    predates it raises RuntimeError. For A/B timing."""
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in KV_PASS_MODES:
        raise ValueError(f"set_kv_pass: mode must be one of {KV_PASS_MODES}, got {mode!r}")
    _setter("vidattn_q8_set_kv_pass", mode, lib)


def last_kv_pass(lib=None) -> int:
    """K/V pass of this thread's last 8-bit launch (as set_kv_pass's; -1: none, or a library without the choice)."""
    return _reader("vidattn_q8_last_kv_pass", lib)


V10_MODES = (-1, 0, 1, 2)


def set_v10(mode: int, lib=None) -> None:
    """v10 of later 8-bit launches (dev/NOTES_8bit.md "v10"; head dim 128 on schedule 3 with conversion 2 and
    row-sum mode 0, the default there): the wgmma descriptors built by increments (1, the build default: the same
    arithmetic as 0, fewer instructions per key block, 1.01x with quantization on the H200), rebuilt per wgmma (0, the
    earlier default, for A/B timing), or the build default (-1). Mode 2 (the lazy reference max) lost its A/B and is
    no longer built: a launch asked for it fails with an error saying so, as does a forced mode where no v10 build
    exists (other head dims, schedules, conversions, row-sum modes). The environment variable VIDATTN_Q8_V10 sets
    the same for a whole process. A library that predates it raises RuntimeError."""
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in V10_MODES:
        raise ValueError(f"set_v10: mode must be one of {V10_MODES}, got {mode!r}")
    _setter("vidattn_q8_set_v10", mode, lib)


def last_v10(lib=None) -> int:
    """v10 mode of this thread's last 8-bit launch (as set_v10's; -1: none, or a library without the choice)."""
    return _reader("vidattn_q8_last_v10", lib)


V12_MODES = (-1, 0, 1)


def set_v12(mode: int, lib=None) -> None:
    """v12 of later 8-bit launches (dev/NOTES_8bit.md "v12"; built on v10 mode 1 of schedule 3, head dim 128): the same
    arithmetic in fewer instructions per key block (1: the warpgroup index uniform, the steady blocks' row max by one
    FADD, the row sums from their first groups, K's scale pointer carried; the output bit for bit that of 0; the build
    default), v10 mode 1 as it was (0), or the build default (-1). A forced 1 where v10 mode 1 of schedule 3
    does not run fails with an error saying so. The environment variable VIDATTN_Q8_V12 sets the same for a whole
    process. A library that predates it raises RuntimeError. For A/B timing."""
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in V12_MODES:
        raise ValueError(f"set_v12: mode must be one of {V12_MODES}, got {mode!r}")
    _setter("vidattn_q8_set_v12", mode, lib)


def last_v12(lib=None) -> int:
    """v12 mode of this thread's last 8-bit launch (as set_v12's; -1: none, or a library without the choice)."""
    return _reader("vidattn_q8_last_v12", lib)


TAIL_MODES = (-1, 0, 1, 2)


def set_tail(mode: int, lib=None) -> None:
    """The tail launch of later 8-bit launches (dev/NOTES_8bit.md "v18"): the last, partial round of 192-row tiles run
    as key ranges that a merge kernel combines, where the plan says it pays, for calls with or without kv_lens (2, the
    build default since call P32: dev/NOTES_8bit.md "v18b"), for calls without kv_lens only (1), never (0), or the
    build default (-1). The environment variable VIDATTN_Q8_TAIL sets the same for a whole process. A library that
    predates the setting raises RuntimeError, one that predates mode 2 ValueError from the library's refusal. For A/B
    timing."""
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in TAIL_MODES:
        raise ValueError(f"set_tail: mode must be one of {TAIL_MODES}, got {mode!r}")
    _setter("vidattn_q8_set_tail", mode, lib)


def last_tail_splits(lib=None) -> int:
    """Key ranges per tail tile of this thread's last 8-bit launch (0: no tail launch; -1: none, or a library without
    the tail launch)."""
    return _reader("vidattn_q8_last_tail_splits", lib)


def last_prep(lib=None) -> int:
    """Pre-pass of this thread's last 8-bit launch (1 fused, 0 three launches, 2 Q in the kernel; -1: none, or a
    library without the choice)."""
    return _reader("vidattn_q8_last_prep", lib)


def last_cvt(lib=None) -> int:
    """Score conversion of this thread's last 8-bit launch (as set_cvt's modes; -1: none, or a library without the
    choice)."""
    return _reader("vidattn_q8_last_cvt", lib)


def last_sequential(lib=None) -> int:
    """Schedule of this thread's last 8-bit launch (0 ping-pong, 1 sequential, 3 sequential with turns around the
    exponentials, head dim 128's default; 2, turns around S, from a library that still built it; -1: none, or a
    library without the sequential schedule)."""
    return _reader("vidattn_q8_last_sequential", lib)


def last_warpgroups(lib=None) -> int:
    """Consumer warpgroups of this thread's last 8-bit launch (0: none)."""
    return _reader("vidattn_q8_last_warpgroups", lib)


def last_variant(lib=None) -> tuple[int, int]:
    """(consumer warpgroups, variant as set_sum_mma's modes) of this thread's last 8-bit launch ((0, -1): none)."""
    lib = _entry(lib or _ext._library(None))
    return int(lib.vidattn_q8_last_warpgroups()), int(lib.vidattn_q8_last_sum_mma())


def envelope_reason_8bit(q, k, v, kv_lens, scale) -> Optional[str]:
    """Why these (B, S, H, D) views cannot take the 8-bit path, from shapes and dtypes alone (None: they can)."""
    if q.shape[-1] not in HEAD_DIMS or k.shape[-1] != q.shape[-1] or v.shape[-1] != q.shape[-1]:
        return f"head dim {q.shape[-1]} is not supported by the 8-bit kernel (64 or 128)"
    # Grouped-query K/V (fewer heads than Q, dividing them; ops.attention checked it) run as they are: the pre-pass
    # quantizes each key/value head once and query head h reads head h // (H / Hkv), as the exact kernel does.
    if k.shape[2] != v.shape[2] or k.shape[2] < 1 or q.shape[2] % k.shape[2] != 0:
        return (f"{q.shape[2]} query heads on {k.shape[2]} key and {v.shape[2]} value heads (the 8-bit kernel takes "
                f"key/value heads that are equal and divide the query heads)")
    if q.shape[0] * q.shape[2] > 65535:
        return "batch * heads over 65535 (the 8-bit kernel's grid)"
    if max(q.shape[1], k.shape[1]) > (1 << 30):
        return "sequence length over 2^30"
    return None


def reason_8bit(q, k, v, kv_lens, scale) -> Optional[str]:
    """Why the 8-bit kernel cannot run these (B, S, H, D) views (None: it runs). The exact kernel's envelope (device,
    dtype, strides) applies to it as well, since both read the same inputs and write the same output."""
    # The device first, as for the exact path (no GPU is the reason, before anything about head dims or shapes).
    reason = (_ext.device_reason(q.device) or envelope_reason_8bit(q, k, v, kv_lens, scale)
              or _ext.kernel_reason(q, k, v, kv_lens, scale))
    if reason is None:
        reason = library_reason_8bit(_ext.load(), q, k)
    return reason or _launch_error


def library_reason_8bit(lib, q, k) -> Optional[str]:
    """Why this kernel library cannot run these (B, S, H, D) views on the 8-bit path, being older than it or than its
    grouped-query attention (None: it can)."""
    if _entry(lib) is None:
        return "the loaded kernel library predates the 8-bit path (rebuild it: vidattn.build(force=True))"
    if k.shape[2] != q.shape[2] and not hasattr(lib, "vidattn_q8_workspace_bytes_kv"):
        return ("the loaded kernel library predates the 8-bit path's grouped-query attention (rebuild it: "
                "vidattn.build(force=True))")
    return None


def route_reason(q, k) -> Optional[str]:
    """Why a call the 8-bit kernel could run goes to the exact kernel by design, because that measured faster there,
    or as fast (None: the 8-bit kernel runs). Such calls do not warn; explain says so."""
    if q.shape[-1] in EXACT_HEAD_DIMS:
        return f"at head dim {q.shape[-1]} the exact kernel is faster (vidattn.quant8.EXACT_HEAD_DIMS)"
    if k.shape[2] != q.shape[2] and q.shape[-1] in GROUPED_EXACT_HEAD_DIMS:
        return (f"grouped-query K/V ({q.shape[2]} query heads on {k.shape[2]}) at head dim {q.shape[-1]}: the exact "
                f"kernel is as fast there (vidattn.quant8.GROUPED_EXACT_HEAD_DIMS)")
    limit = short_kv_exact_max(q.shape[-1])
    if k.shape[1] <= limit:
        return (f"{k.shape[1]} keys: up to {limit} keys at head dim {q.shape[-1]} the exact kernel is faster than the "
                f"8-bit path (vidattn.quant8.short_kv_exact_max)")
    return None


def workspace_bytes(b: int, h: int, sq: int, skv: int, d: int, lib: ctypes.CDLL | None = None,
                    h_kv: Optional[int] = None) -> int:
    """Bytes of workspace one 8-bit call of this shape takes (h_kv: key/value heads, default h)."""
    lib = _entry(lib or _ext._library(None))
    if lib is None:
        raise RuntimeError("the kernel library has no 8-bit path")
    if h_kv is None or h_kv == h:
        return int(lib.vidattn_q8_workspace_bytes(b, h, sq, skv, d))
    if not hasattr(lib, "vidattn_q8_workspace_bytes_kv"):
        raise RuntimeError("the kernel library predates the 8-bit path's grouped-query attention")
    return int(lib.vidattn_q8_workspace_bytes_kv(b, h, h_kv, sq, skv, d))


def forward_8bit(q, k, v, out, lse, kv_lens, scale: float, lib: ctypes.CDLL | None = None) -> None:
    """Launch the pre-pass and the 8-bit kernel on the current stream; arguments as `_ext.forward` (BSHD views).
    Call only when reason_8bit is None."""
    global _launch_error
    default = lib is None
    lib = _entry(lib or _ext._library(None))
    if lib is None:
        raise RuntimeError("the kernel library has no 8-bit path")
    b, sq, h, d = q.shape
    nbytes = workspace_bytes(b, h, sq, k.shape[1], d, lib, h_kv=k.shape[2])
    ws = torch.empty(nbytes, dtype=torch.uint8, device=q.device)  # the caching allocator's blocks are 512-byte aligned
    args = _ext.launch_args(q, k, v, out, lse, kv_lens, scale)  # kv_heads: k's heads (grouped-query attention)
    args.workspace, args.workspace_bytes = ws.data_ptr(), nbytes
    stream = torch.cuda.current_stream(q.device).cuda_stream
    with torch.cuda.device(q.device):
        rc = lib.vidattn_q8_fwd(ctypes.byref(args), ctypes.c_void_p(stream))
    if rc != 0:
        msg = lib.vidattn_sm90_last_error().decode(errors="replace")
        if default and not msg.startswith("cuTensorMapEncodeTiled"):
            _launch_error = f"8-bit kernel launch failed ({msg}); the 8-bit kernel is not used again in this process"
            raise _ext.KernelLaunchError(_launch_error)
        raise _ext.KernelLaunchError(f"vidattn 8-bit kernel launch failed: {msg}")


def _attention_8bit_impl(q, k, v, layout: str, scale: Optional[float], kv_lens, return_lse: bool):
    """(out, lse or None): the 8-bit kernel, or the exact path with a warning naming the reason."""
    from . import ops

    qv, kv, vv = ops._bshd(q, layout), ops._bshd(k, layout), ops._bshd(v, layout)
    b, sq, h, d = qv.shape
    sc = ops._default_scale(scale, d)
    reason = reason_8bit(qv, kv, vv, kv_lens, sc)
    if reason is not None:
        ops.warn_fallback(_unavailable(reason, qv, kv, vv, kv_lens, sc), sdpa=False)
        return ops._attention_impl(q, k, v, layout, scale, kv_lens, return_lse)
    if route_reason(qv, kv) is not None:
        return ops._attention_impl(q, k, v, layout, scale, kv_lens, return_lse)
    if layout == "bshd":
        out = torch.empty((b, sq, h, d), dtype=q.dtype, device=q.device)
        out_view = out
    else:
        out = torch.empty((b, h, sq, d), dtype=q.dtype, device=q.device)
        out_view = out.transpose(1, 2)
    lse = torch.empty((b, h, sq), dtype=torch.float32, device=q.device) if return_lse else None
    try:
        forward_8bit(qv, kv, vv, out_view, lse, kv_lens, sc)
    except _ext.KernelLaunchError as exc:
        ops.warn_fallback(_unavailable(str(exc), qv, kv, vv, kv_lens, sc), sdpa=False)
        return ops._attention_impl(q, k, v, layout, scale, kv_lens, return_lse)
    return out, lse


@torch.library.custom_op("vidattn::attention_8bit", mutates_args=())
def _attention_8bit_op(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, layout: str, scale: Optional[float],
                       kv_lens: Optional[torch.Tensor], return_lse: bool) -> tuple[torch.Tensor, torch.Tensor]:
    out, lse = _attention_8bit_impl(q, k, v, layout, scale, kv_lens, return_lse)
    return out, (lse if lse is not None else torch.empty((0,), dtype=torch.float32, device=q.device))


@_attention_8bit_op.register_fake
def _attention_8bit_fake(q, k, v, layout, scale, kv_lens, return_lse):
    from . import ops

    return ops._attention_fake(q, k, v, layout, scale, kv_lens, return_lse)


def attention_8bit(q, k, v, layout: str, scale: Optional[float], kv_lens, return_lse: bool):
    """(out, lse or None) of a validated call (ops.attention did the checks); the custom op when tracing or for
    tensor subclasses, the body directly for plain eager tensors (as ops.attention does for the exact op)."""
    from . import ops

    if ops._is_compiling() or not ops._eager_fast_path(q, k, v):
        out, lse = torch.ops.vidattn.attention_8bit(q, k, v, layout, scale, kv_lens, return_lse)
        return out, (lse if return_lse else None)
    return _attention_8bit_impl(q, k, v, layout, scale, kv_lens, return_lse)


def _unavailable(reason: str, qv, kv, vv, kv_lens, sc) -> str:
    """The text of a call the 8-bit path does not take (no autograd), for explain and the warning alike: why, and what
    runs instead: the exact kernel, or SDPA and why (unless that is `reason` itself, already given)."""
    exact = _ext.kernel_reason(qv, kv, vv, kv_lens, sc)
    if exact is None:
        instead = "the exact kernel runs instead"
    else:
        instead = "PyTorch SDPA runs instead" if exact == reason else f"PyTorch SDPA runs instead ({exact})"
    return f"8-bit path unavailable: {reason}; {instead}"


def explain_8bit(q, k, v, layout: str, scale: Optional[float], kv_lens) -> Optional[str]:
    """None when the 8-bit kernel would run; else why not and what runs instead (the reason the call warns with)."""
    from . import ops

    qv, kv, vv = ops._bshd(q, layout), ops._bshd(k, layout), ops._bshd(v, layout)
    sc = ops._default_scale(scale, q.shape[-1])
    grad = ops._grad_fallback_reason(q, k, v)  # what ops.attention warns with for a differentiable call
    if grad is not None:
        return f"8-bit path unavailable: {grad}; PyTorch SDPA runs instead"
    reason = reason_8bit(qv, kv, vv, kv_lens, sc)
    if reason is None:
        routed = route_reason(qv, kv)
        return None if routed is None else f"8-bit path not used: {routed}; the exact kernel runs instead"
    return _unavailable(reason, qv, kv, vv, kv_lens, sc)
