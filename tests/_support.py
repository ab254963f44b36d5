"""Helpers the test modules share: importing a script by its path, the one-thread fixtures, the float64 attention
reference and the same-precision SDPA baseline the kernel's accuracy is measured against, and a stand-in for the
kernel library's 8-bit selectors with the checks every selector's Python setter gets, and a recorder standing in for a
library entry that takes one ctypes argument block.

The fixtures are plain pytest fixtures; a module takes one by importing it (`from _support import one_thread`),
and an autouse fixture imported into a module applies to every test of that module only."""
import ctypes
import importlib.util
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

ROOT = Path(__file__).resolve().parent.parent


def load_script(path, name=None, *, register=False, importable=False):
    """Execute the file at `path` as a fresh module named `name` (default: the file's stem) and return it.

    register: also put it in sys.modules under `name`, which dataclasses defined in it need (they look their module
    up there). importable: put the file's folder first on sys.path, so the script's imports of its siblings resolve
    as they do when it runs from the command line."""
    path = Path(path)
    name = name or path.stem
    if importable:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    if register:
        sys.modules[name] = mod
    spec.loader.exec_module(mod)
    return mod


@pytest.fixture(autouse=True)
def one_thread():
    """Tiny models run much faster single-threaded on small CI machines."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(n)


@pytest.fixture(autouse=True)
def cpu_one_thread(monkeypatch):
    """one_thread, and behave as on a machine without CUDA even where one exists (the scripts pick the CPU)."""
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    cpu_only(monkeypatch)
    yield
    torch.set_num_threads(n)


def cpu_only(monkeypatch):
    """Behave as on a machine without CUDA even where one exists."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)


def attention_fp64(q, k, v, scale=None, kv_lens=None, *, layout="bshd", causal=False, chunk_bytes=1 << 30):
    """float64 attention on the upcast inputs, on their device: (out in `layout`, lse (B, H, Sq)).

    K/V with fewer heads are repeated per group (query head i reads K/V head i // group). kv_lens (a tensor or a
    list): key j is kept for batch b when j < kv_lens[b]. causal (True / "top_left" or "bottom_right"): key j is kept
    for query i when j <= i, or j <= i + kv_len - Sq. A row left without a key is zeros, its LSE -inf. The score
    block is computed over query rows in pieces of at most chunk_bytes, so 32K-token references fit in memory."""
    qb, kb, vb = (t.double() if layout == "bhsd" else t.double().transpose(1, 2) for t in (q, k, v))
    b, h, sq, d = qb.shape
    skv = kb.shape[2]
    if kb.shape[1] != h:
        kb, vb = (t.repeat_interleave(h // kb.shape[1], dim=1) for t in (kb, vb))
    scale = 1.0 / math.sqrt(d) if scale is None else scale
    dev = qb.device
    lens = torch.as_tensor(kv_lens if kv_lens is not None else [skv] * b, device=dev).long()
    j = torch.arange(skv, device=dev)[None, None, :]
    keep = j < lens[:, None, None]  # (B, 1, Skv)
    shift = (lens - sq if causal == "bottom_right" else torch.zeros_like(lens))[:, None, None]
    rows = max(1, chunk_bytes // (b * h * skv * 8))
    out = torch.empty(b, h, sq, vb.shape[-1], dtype=torch.float64, device=dev)
    lse = torch.empty(b, h, sq, dtype=torch.float64, device=dev)
    kt = kb.transpose(-1, -2)
    for i in range(0, sq, rows):
        s = torch.matmul(qb[:, :, i:i + rows], kt).mul_(scale)
        mask = keep
        if causal:
            mask = keep & (j <= torch.arange(i, min(sq, i + rows), device=dev)[None, :, None] + shift)
        s.masked_fill_(~mask[:, None], float("-inf"))
        lse[:, :, i:i + rows] = torch.logsumexp(s, dim=-1)
        out[:, :, i:i + rows] = torch.matmul(torch.softmax(s, dim=-1).nan_to_num_(0.0), vb)
        del s
    return (out if layout == "bhsd" else out.transpose(1, 2)), lse


def sdpa_same_precision(q, k, v, scale=None, kv_lens=None, *, layout="bshd"):
    """The same-precision baseline, out in `layout`: cuDNN SDPA, default SDPA where cuDNN refuses the case; K/V with
    fewer heads repeated per group, kv_lens as a boolean key mask."""
    qb, kb, vb = (t if layout == "bhsd" else t.transpose(1, 2) for t in (q, k, v))
    if kb.shape[1] != qb.shape[1]:
        kb, vb = (t.repeat_interleave(qb.shape[1] // kb.shape[1], dim=1) for t in (kb, vb))
    mask = None
    if kv_lens is not None:
        mask = (torch.arange(kb.shape[2], device=kb.device)[None, :] < kv_lens.long()[:, None])[:, None, None, :]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale)
        except RuntimeError:
            o = F.scaled_dot_product_attention(qb, kb, vb, attn_mask=mask, scale=scale)
    return o if layout == "bhsd" else o.transpose(1, 2)


class FakeQ8Lib:
    """A stand-in for the kernel library's 8-bit entry points (no CUDA) with one selector: `vidattn_q8_set_<name>`
    records every value passed and refuses, as the C setters do, anything outside -1..top (returns 1);
    `vidattn_q8_last_<name>` reports the last value it accepted (-1 before any)."""

    def __init__(self, name: str = "cvt", top: int = 2):
        self.calls, self.last = [], -1

        def nop(*a):
            return 0

        def setter(v):
            self.calls.append(v)
            if v < -1 or v > top:
                return 1
            self.last = v
            return 0

        self.vidattn_q8_fwd = nop
        self.vidattn_q8_workspace_bytes = nop
        self.vidattn_sm90_last_error = nop
        setattr(self, f"vidattn_q8_set_{name}", setter)
        setattr(self, f"vidattn_q8_last_{name}", lambda: self.last)


def check_q8_selector(name: str, set_fn, last_fn, top: int = 2):
    """A quant8 setter (`set_fn`, e.g. quant8.set_cvt, modes -1..top) and its reader (`last_fn`) over a FakeQ8Lib:
    every valid mode reaches the library, invalid ones raise ValueError before it, and a library without the selector
    raises RuntimeError (its reader then says -1)."""
    lib = FakeQ8Lib(name, top)
    modes = list(range(1, top + 1)) + [0, -1]
    for mode in modes:
        set_fn(mode, lib=lib)
    assert lib.calls == modes and last_fn(lib=lib) == -1
    set_fn(top, lib=lib)
    assert last_fn(lib=lib) == top
    for bad in (top + 1, -2, 1.0, True, "1", None):
        with pytest.raises(ValueError, match=f"set_{name}: mode must be one of"):
            set_fn(bad, lib=lib)
    assert lib.calls == modes + [top]  # nothing invalid reached the library
    lib = FakeQ8Lib(name, top)
    delattr(lib, f"vidattn_q8_set_{name}")
    delattr(lib, f"vidattn_q8_last_{name}")
    with pytest.raises(RuntimeError, match=f"lacks vidattn_q8_set_{name}"):
        set_fn(1, lib=lib)
    assert last_fn(lib=lib) == -1


def args_recorder(structure, calls: list, rc=lambda: 0):
    """A stand-in for a library entry `fn(ctypes.byref(args), stream)`: appends the argument block's fields (arrays as
    lists) to `calls` and returns rc() (it computes nothing)."""
    def entry(ref, stream):
        a = ref._obj
        calls.append({name: (list(getattr(a, name)) if isinstance(getattr(a, name), ctypes.Array)
                             else getattr(a, name)) for name, _ in structure._fields_})
        return rc()
    return entry


def install_fake_library(monkeypatch, lib):
    """Make `lib` (a stand-in object) the loaded kernel library for vidattn's dispatch on any machine: the device and
    runtime checks pass, the stream is 0, no device guard. The caller sets the module switches it needs."""
    import contextlib

    from vidattn import _ext

    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    monkeypatch.setattr(_ext, "_lib", lib)
    monkeypatch.setattr(_ext, "_library", lambda lib_=None: lib)
    monkeypatch.setattr(_ext, "_device_guard", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(_ext, "_current_stream", lambda device: 0)
    return lib

