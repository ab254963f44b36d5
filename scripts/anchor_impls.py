"""The anchors vidattn is measured against, behind one interface: FlashAttention-3 (bf16 and e4m3) and
SageAttention2's sm90 kernel (INT8 QK, FP8 PV), each called on (B, S, H, D) bf16 CUDA tensors and returning the
(B, S, H, D) output.

Nothing of either project is in this repository: they are built from their public sources outside it (docs/anchors.md
says how) and put on the path on the GPU machine by `bash dev/device_anchors.sh install` (then
`source /tmp/anchors/env.sh`). Importing this module never fails and touches no GPU: `available()` says, per anchor,
None when it can be called or the reason it cannot.

    fa3(q, k, v, causal=False)                    FlashAttention-3, bf16 in and out
    fa3_fp8(q, k, v, causal=False)                FlashAttention-3 on e4m3 inputs, one scale per (batch, kv head),
                                                  the cast to e4m3 included in the call
    fa3_fp8(None, None, None, causal, prequantized=prequantize(q, k, v))
                                                  the same kernel on inputs cast beforehand: the kernel-only time
    sage2(q, k, v, causal=False)                  SageAttention2 sm90, its quantization (K smoothing, per-thread
                                                  INT8 Q/K, per-channel FP8 V) included in the call

All take `scale=` (the softmax scale; default 1/sqrt(D)). K/V may have fewer heads than Q (grouped-query).
"""
from __future__ import annotations

import json
import math
import os
import sys
from dataclasses import dataclass
from pathlib import Path

ANCHORS = ("fa3", "fa3_fp8", "sage2")
# Where dev/device_anchors.sh unpacks the built anchors; VIDATTN_ANCHORS_DIR overrides it.
DEFAULT_DIR = "/tmp/anchors"
E4M3_MAX = 448.0
FA3_HEAD_DIMS = (64, 96, 128, 192, 256)  # the builds compiled; FA3 rounds any other D <= 256 up to the next one
SAGE2_MAX_D = 128  # SageAttention2's sm90 kernel pads D < 64 to 64 and 64 < D < 128 to 128, and refuses D > 128

_loaded: dict[str, object] = {}
_errors: dict[str, str] = {}


def anchors_dir() -> Path:
    return Path(os.environ.get("VIDATTN_ANCHORS_DIR", DEFAULT_DIR))


def _ensure_path() -> None:
    """Put the unpacked anchors' site folder on sys.path, so that a process started without sourcing env.sh still
    finds them."""
    site = anchors_dir() / "site"
    if site.is_dir() and str(site) not in sys.path:
        sys.path.insert(0, str(site))


def _import(name: str):
    """The anchor's Python entry module, or None (the reason in _errors). Imported once."""
    if name in _loaded:
        return _loaded[name]
    if name in _errors:
        return None
    _ensure_path()
    try:
        if name == "fa3":
            import flash_attn_interface as mod  # FA3's own wrapper; registers torch.ops.flash_attn_3
        elif name == "sage2":
            from sageattention import core as mod
            if not getattr(mod, "SM90_ENABLED", False):
                raise ImportError("sageattention is importable but its sm90 module (_qattn_sm90) is not")
        else:
            raise KeyError(name)
    except Exception as exc:  # noqa: BLE001 - any failure is a reason, never an import error here
        _errors[name] = f"{type(exc).__name__}: {exc}"
        return None
    _loaded[name] = mod
    return mod


def available() -> dict[str, str | None]:
    """Per anchor: None when it can be called here, else why not (not installed, no CUDA, not a Hopper GPU)."""
    reasons: dict[str, str | None] = {}
    gpu = _gpu_reason()
    for name in ANCHORS:
        mod = _import("fa3" if name.startswith("fa3") else name)
        if mod is None:
            src = "fa3" if name.startswith("fa3") else name
            reasons[name] = (f"not installed ({_errors[src]}); on the GPU machine run `bash dev/device_anchors.sh "
                             f"install` and `source {anchors_dir()}/env.sh`")
        else:
            reasons[name] = gpu
    return reasons


def _gpu_reason() -> str | None:
    try:
        import torch
    except Exception as exc:  # noqa: BLE001
        return f"torch not importable: {exc}"
    if not torch.cuda.is_available():
        return "no CUDA device"
    major, minor = torch.cuda.get_device_capability()
    if (major, minor) != (9, 0):
        return f"built for sm_90a only; this GPU is sm_{major}{minor}"
    return None


def supports(name: str, d: int, h: int, h_kv: int) -> str | None:
    """None when anchor `name` runs this head dim and head grouping, else why not (checked before timing so a
    shape an anchor cannot take is reported, not an exception)."""
    if h % h_kv:
        return f"{h} query heads are not a multiple of {h_kv} key/value heads"
    if name in ("fa3", "fa3_fp8"):
        if d % 8 or d > max(FA3_HEAD_DIMS):
            return f"FlashAttention-3 takes D a multiple of 8 up to 256, not {d}"
        kernel = f"{fa3_build_dim(d)}_{'e4m3' if name == 'fa3_fp8' else 'bf16'}"
        missing = (versions().get("fa3") or {}).get("kernels_missing") or []
        if kernel in missing:
            return f"this FlashAttention-3 build has no hdim{kernel.replace('_', ' ')} kernel (not compiled)"
        return None
    if name == "sage2":
        if d > SAGE2_MAX_D:
            return f"SageAttention2's sm90 kernel takes D <= {SAGE2_MAX_D}, not {d}"
        return None
    raise KeyError(name)


def fa3_build_dim(d: int) -> int:
    """The FA3 head-dim build a call with head dim d runs on (FA3 pads up to it)."""
    for b in FA3_HEAD_DIMS:
        if d <= b:
            return b
    raise ValueError(f"D={d} is past FlashAttention-3's largest head dim, {FA3_HEAD_DIMS[-1]}")


def _require(name: str):
    mod = _import(name)
    if mod is None:
        raise RuntimeError(f"anchor {name} unavailable: {_errors[name]}")
    return mod


def _out(res):
    # FA3's wrapper returns out, or (out, lse) in some versions: the output is the first.
    return res[0] if isinstance(res, (tuple, list)) else res


def fa3(q, k, v, causal: bool = False, scale: float | None = None):
    """FlashAttention-3 forward, bf16 (B, S, H, D) in and out."""
    mod = _require("fa3")
    return _out(mod.flash_attn_func(q, k, v, softmax_scale=scale, causal=causal))


@dataclass
class Prequantized:
    """Q, K, V cast to e4m3 with one scale per (batch, kv head), and the descales FA3 multiplies back:
    x ≈ x8.float() * descale[b, h_kv]. Q's scale is shared by the query heads of one kv head (FA3's q_descale is
    indexed (batch, kv head) too)."""
    q: object
    k: object
    v: object
    q_descale: object
    k_descale: object
    v_descale: object


def _e4m3_per_batch_kvhead(x, h_kv: int):
    """(B, S, H, D) -> (e4m3 (B, S, H, D), descale (B, h_kv) fp32) with amax taken over each (batch, kv head)
    group's tokens, query heads of the group and channels."""
    import torch
    b, s, h, d = x.shape
    g = h // h_kv
    amax = x.detach().abs().view(b, s, h_kv, g, d).amax(dim=(1, 3, 4)).float()  # (B, h_kv)
    scale = (amax / E4M3_MAX).clamp_min(1e-12)
    per_head = scale.repeat_interleave(g, dim=1)  # (B, H)
    x8 = (x.float() / per_head[:, None, :, None]).clamp_(-E4M3_MAX, E4M3_MAX).to(torch.float8_e4m3fn)
    return x8, scale.contiguous()


def prequantize(q, k, v) -> Prequantized:
    """Cast bf16 (B, S, H, D) q, k, v to e4m3 the way fa3_fp8 does, so a timing of the kernel alone can leave the
    cast out (FA3 FP8's "kernel only" column)."""
    h_kv = k.shape[2]
    q8, qd = _e4m3_per_batch_kvhead(q, h_kv)
    k8, kd = _e4m3_per_batch_kvhead(k, h_kv)
    v8, vd = _e4m3_per_batch_kvhead(v, h_kv)
    return Prequantized(q8, k8, v8, qd, kd, vd)


def fa3_fp8(q, k, v, causal: bool = False, scale: float | None = None, *, prequantized: Prequantized | None = None):
    """FlashAttention-3 on e4m3 inputs with per-(batch, kv head) descales; bf16 output (B, S, H, D). With
    `prequantized` (from prequantize()) q, k, v are ignored and only the kernel runs; without it the cast is part
    of the call. The softmax scale defaults to 1/sqrt(D) of the unquantized inputs (the descales carry the rest)."""
    mod = _require("fa3")
    p = prequantized if prequantized is not None else prequantize(q, k, v)
    d = p.q.shape[-1]
    sc = scale if scale is not None else 1.0 / math.sqrt(d)
    return _out(mod.flash_attn_func(p.q, p.k, p.v, softmax_scale=sc, causal=causal,
                                    q_descale=p.q_descale, k_descale=p.k_descale, v_descale=p.v_descale))


def sage2(q, k, v, causal: bool = False, scale: float | None = None):
    """SageAttention2 on sm90 (INT8 QK with K smoothing and per-thread scales, FP8 PV with fp32+fp32 accumulation),
    its quantization included; (B, S, H, D) in and out."""
    mod = _require("sage2")
    return mod.sageattn_qk_int8_pv_fp8_cuda_sm90(q, k, v, tensor_layout="NHD", is_causal=causal, sm_scale=scale,
                                                 qk_quant_gran="per_thread", pv_accum_dtype="fp32+fp32")


IMPLS = {"fa3": fa3, "fa3_fp8": fa3_fp8, "sage2": sage2}


def versions() -> dict:
    """What the unpacked anchors were built from (anchors.json written when they were packed): source commits,
    compiled features, compiler; plus the installed package versions. Empty dict when not unpacked."""
    info: dict = {}
    path = anchors_dir() / "anchors.json"
    if path.is_file():
        try:
            info = json.loads(path.read_text())
        except ValueError as exc:
            info = {"error": f"unreadable {path}: {exc}"}
    try:
        from importlib.metadata import version
        for dist in ("flash_attn_3", "sageattention"):
            try:
                info.setdefault("packages", {})[dist] = version(dist)
            except Exception:  # noqa: BLE001 - not installed as a distribution
                pass
    except Exception:  # noqa: BLE001
        pass
    return info
