"""The compiled half of vidattn: builds, caches and calls the sm_90a kernel library.

The kernel lives in `csrc/` as pure CUDA (no torch headers). It is compiled by `nvcc` into a small shared
library with a C ABI (`csrc/capi.cu`), cached on disk by a hash of its sources and flags, and called
through ctypes with raw pointers, strides and the caller's current CUDA stream. Keeping torch out of the
compiled part means the library builds in seconds, never breaks on a torch ABI change, and can be built
ahead of time (`python -m vidattn.build`).

Nothing here raises at import: a missing nvcc, a failed build or a GPU that is not Hopper each become a
reason string that `vidattn.explain` reports and the op answers by falling back to SDPA.
"""
from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import torch

CSRC = Path(__file__).resolve().parent.parent / "csrc"
if not CSRC.is_dir():  # installed as a wheel: sources shipped as package data
    CSRC = Path(__file__).resolve().parent / "csrc"

HEAD_DIMS = (64, 128)
DTYPES = {torch.bfloat16: 0, torch.float16: 1}
# TMA needs 16-byte aligned base addresses and strides (PTX ISA / CUDA driver API, cuTensorMapEncodeTiled).
TMA_ALIGN_BYTES = 16
NVCC_FLAGS = [
    "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo",
    # wgmma and setmaxnreg exist only on the arch-specific sm_90a target (plain sm_90 rejects them).
    "-gencode=arch=compute_90a,code=sm_90a",
    "-Xptxas=-v", "--expt-relaxed-constexpr",
    # ptxas on the kernels in parallel, one thread per CPU: the narrow partial-block copies made the serial build of
    # 16 kernels about 4 minutes on two cores; split, 2.5 minutes there, with identical SASS (dev/NOTES.md, sixth
    # session). With the short-key D=128 build (20 kernels) it takes about 4.5 minutes on two cores.
    "--split-compile=0",
]


class _Args(ctypes.Structure):
    """Mirror of `VidattnFwdArgs` in csrc/capi.h; field order and types must match exactly."""
    _fields_ = [
        ("q", ctypes.c_void_p), ("k", ctypes.c_void_p), ("v", ctypes.c_void_p), ("o", ctypes.c_void_p),
        ("lse", ctypes.c_void_p), ("kv_lens", ctypes.c_void_p),
        ("batch", ctypes.c_int64), ("heads", ctypes.c_int64), ("seqlen_q", ctypes.c_int64),
        ("seqlen_kv", ctypes.c_int64), ("head_dim", ctypes.c_int64),
        ("q_stride", ctypes.c_int64 * 3), ("k_stride", ctypes.c_int64 * 3),
        ("v_stride", ctypes.c_int64 * 3), ("o_stride", ctypes.c_int64 * 3),
        ("scale", ctypes.c_float), ("dtype", ctypes.c_int32),
        ("workspace", ctypes.c_void_p), ("workspace_bytes", ctypes.c_uint64),
    ]


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_build_error: str | None = None
_tried = False


def cache_dir() -> Path:
    root = os.environ.get("VIDATTN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME", os.path.expanduser("~/.cache")), "vidattn")
    return Path(root)


def find_nvcc() -> str | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def _sources() -> list[Path]:
    return sorted(p for p in CSRC.rglob("*") if p.suffix in (".cu", ".cuh", ".h") and "lineage" not in p.parts)


def _nvcc_version(nvcc: str) -> str:
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    return out.strip().splitlines()[-1] if out.strip() else "unknown"


def library_path(nvcc: str) -> Path:
    """Cached library path: a hash of every kernel source, the flags and the nvcc version."""
    h = hashlib.sha256()
    for p in _sources():
        h.update(p.relative_to(CSRC).as_posix().encode())
        h.update(p.read_bytes())
    h.update(" ".join(NVCC_FLAGS).encode())
    h.update(_nvcc_version(nvcc).encode())
    return cache_dir() / f"libvidattn_sm90-{h.hexdigest()[:16]}.so"


def build(verbose: bool = True, force: bool = False) -> Path:
    """Compile csrc/capi.cu into the cached shared library; returns its path. Raises RuntimeError on failure."""
    if not (CSRC / "capi.cu").is_file():
        raise RuntimeError(f"kernel sources not found at {CSRC} (install from a source checkout: pip install -e .)")
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (set CUDA_HOME or put nvcc on PATH) - cannot build the vidattn kernel")
    out = library_path(nvcc)
    if out.is_file() and not force:
        return out
    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = out.with_suffix(f".tmp{os.getpid()}.so")
    cmd = [nvcc, *NVCC_FLAGS, "-I", str(CSRC), str(CSRC / "capi.cu"), "-o", str(tmp)]
    if verbose:
        print(f"[vidattn] building the sm_90a kernel library (one time, a few minutes; cached in {out.parent}) ...",
              file=sys.stderr, flush=True)
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        tmp.unlink(missing_ok=True)
        raise RuntimeError(f"nvcc failed ({dt:.0f} s): {' '.join(cmd)}\n{proc.stderr[-4000:]}")
    (out.with_suffix(".ptxas.log")).write_text(proc.stderr)
    os.replace(tmp, out)
    if verbose:
        print(f"[vidattn] built {out.name} in {dt:.1f} s", file=sys.stderr, flush=True)
    return out


def open_library(path: str | Path) -> ctypes.CDLL:
    """Load one kernel library and declare its C ABI (A/B scripts open several builds side by side)."""
    lib = ctypes.CDLL(str(path))
    lib.vidattn_sm90_fwd.argtypes = [ctypes.POINTER(_Args), ctypes.c_void_p]
    lib.vidattn_sm90_fwd.restype = ctypes.c_int
    lib.vidattn_sm90_last_error.argtypes = []
    lib.vidattn_sm90_last_error.restype = ctypes.c_char_p
    if hasattr(lib, "vidattn_sm90_workspace_bytes"):  # builds before the third session of 2026-11-30 lack it
        lib.vidattn_sm90_workspace_bytes.argtypes = []
        lib.vidattn_sm90_workspace_bytes.restype = ctypes.c_uint64
    if hasattr(lib, "vidattn_sm90_last_tail_splits"):  # builds before the fifth session of 2026-11-30 lack it
        lib.vidattn_sm90_last_tail_splits.argtypes = []
        lib.vidattn_sm90_last_tail_splits.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_d64_warpgroups"):  # builds before 2026-11-30 lack it
        lib.vidattn_sm90_set_d64_warpgroups.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_d64_warpgroups.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_d128_block_n"):  # builds before the seventh session of 2026-11-30 lack it
        lib.vidattn_sm90_set_d128_block_n.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_d128_block_n.restype = ctypes.c_int
        lib.vidattn_sm90_last_block_n.argtypes = []
        lib.vidattn_sm90_last_block_n.restype = ctypes.c_int
    for symbol, env, setter in _FORCED_BUILDS:
        if hasattr(lib, symbol) and os.environ.get(env):
            setter(int(os.environ[env]), lib)
    return lib


def _library(lib: ctypes.CDLL | None) -> ctypes.CDLL:
    """`lib`, or the library load() built or found; RuntimeError (the build's error) when there is none."""
    lib = lib or load()
    if lib is None:
        raise RuntimeError(build_error() or "vidattn kernel library not loaded")
    return lib


def _entry(lib: ctypes.CDLL | None, symbol: str, predates: str):
    """The C function `symbol` of `lib` (default: the loaded library); RuntimeError when the build predates it
    (`predates`: the feature it lacks)."""
    lib = _library(lib)
    if not hasattr(lib, symbol):
        raise RuntimeError(f"this kernel library predates {predates}")
    return getattr(lib, symbol)


def set_d64_warpgroups(warpgroups: int, lib: ctypes.CDLL | None = None) -> None:
    """Force the D=64 kernel's consumer warpgroups (2 or 3) for later launches, or 0 for the launcher's choice by
    shape. A testing and benchmarking knob (also read from VIDATTN_D64_WARPGROUPS when the library loads)."""
    if _entry(lib, "vidattn_sm90_set_d64_warpgroups", "the D=64 warpgroup switch")(int(warpgroups)) != 0:
        raise ValueError(f"D=64 warpgroups must be 0 (by shape), 2 or 3, got {warpgroups}")


def set_d128_block_n(block_n: int, lib: ctypes.CDLL | None = None) -> None:
    """Force the D=128 kernel's key-block width (176, or 128: the build for short keys) for later launches, or 0 for
    the launcher's choice by key count. A testing and benchmarking knob (also read from VIDATTN_D128_BLOCK_N when
    the library loads)."""
    if _entry(lib, "vidattn_sm90_set_d128_block_n", "the D=128 short-key build")(int(block_n)) != 0:
        raise ValueError(f"D=128 block width must be 0 (by key count) or one of the library's two D=128 builds "
                         f"(128 and 176 unless it was built with other VIDATTN_BLOCK_N_D128* widths), got {block_n}")


# (C setter, environment variable read when a library loads, Python setter) of each build a test or A/B can force.
_FORCED_BUILDS = (("vidattn_sm90_set_d64_warpgroups", "VIDATTN_D64_WARPGROUPS", set_d64_warpgroups),
                  ("vidattn_sm90_set_d128_block_n", "VIDATTN_D128_BLOCK_N", set_d128_block_n))


def last_block_n(lib: ctypes.CDLL | None = None) -> int:
    """Key-block width of the kernel this thread's last kernel call launched (0: none; csrc/capi.cu,
    pick_d128_block_n). For tests, benchmarks and `vidattn.explain`-style questions."""
    return int(_entry(lib, "vidattn_sm90_last_block_n", "the D=128 short-key build")())


def last_tail_splits(lib: ctypes.CDLL | None = None) -> int:
    """Key ranges per tile of the tail launch of this thread's last kernel call (0: it had none): the last, partial
    round of tiles split along the keys (csrc/capi.cu, plan_tail). For tests and benchmarks."""
    return int(_entry(lib, "vidattn_sm90_last_tail_splits", "the tail launch")())


@contextmanager
def _forced(setter, env: str, value: int, lib: ctypes.CDLL | None):
    """setter(value) for the duration of a block; afterwards the setting the library loaded with (`env`, else 0:
    the launcher's choice) is back."""
    setter(value, lib)
    try:
        yield
    finally:
        setter(int(os.environ.get(env) or 0), lib)


def d64_warpgroups(warpgroups: int, lib: ctypes.CDLL | None = None):
    """`set_d64_warpgroups` for the duration of a block; afterwards the setting the library loaded with
    (VIDATTN_D64_WARPGROUPS, else 0: by shape) is back."""
    return _forced(set_d64_warpgroups, "VIDATTN_D64_WARPGROUPS", warpgroups, lib)


def d128_block_n(block_n: int, lib: ctypes.CDLL | None = None):
    """`set_d128_block_n` for the duration of a block; afterwards the setting the library loaded with
    (VIDATTN_D128_BLOCK_N, else 0: by key count) is back."""
    return _forced(set_d128_block_n, "VIDATTN_D128_BLOCK_N", block_n, lib)


def load() -> ctypes.CDLL | None:
    """The loaded kernel library, building it on first use; None (with `build_error()` set) if impossible."""
    global _lib, _build_error, _tried
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        try:
            prebuilt = os.environ.get("VIDATTN_LIBRARY")
            path = Path(prebuilt) if prebuilt else build(verbose=True)
            _lib = open_library(path)
        except (RuntimeError, OSError, AttributeError) as exc:
            _build_error = f"kernel library unavailable: {exc}"
        _tried = True
        return _lib


def build_error() -> str | None:
    return _build_error


_capabilities: dict[int, tuple[int, int]] = {}  # per device index: asked once (every launch looks here)


def device_reason(device: torch.device) -> str | None:
    """Why the kernel cannot run on this device at all (None if it can, given a working build)."""
    if device.type != "cuda":
        return f"tensors are on {device.type}, the kernel runs on CUDA only"
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = _capabilities.get(index)
    if cap is None:
        cap = _capabilities[index] = torch.cuda.get_device_capability(index)
    major, minor = cap
    if major != 9:
        return f"GPU is sm_{major}{minor}; the kernel is built for Hopper (sm_90a) only"
    return None


def envelope_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_lens: torch.Tensor | None,
                    scale: float) -> str | None:
    """Why this call (q, k, v as BSHD views) is outside the kernel's envelope, or None when it is inside.

    Checks shapes and dtypes only; it never builds anything. `kernel_reason` adds device and build checks.
    """
    if q.dtype not in DTYPES:
        return f"dtype {q.dtype} is not supported by the kernel (bf16 or fp16 only)"
    if k.dtype != q.dtype or v.dtype != q.dtype:
        return "q, k and v have different dtypes"
    d = q.shape[-1]
    if d not in HEAD_DIMS:
        return f"head dim {d} is not supported by the kernel (64 or 128)"
    if k.shape[-1] != d or v.shape[-1] != d:
        return "k/v head dim differs from q's"
    if q.requires_grad or k.requires_grad or v.requires_grad:
        if torch.is_grad_enabled():
            return "inputs require grad: the kernel is forward-only"
    if not (scale > 0.0 and scale == scale and scale != float("inf")):
        return f"softmax scale {scale} must be a positive finite number for the kernel"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            return f"{name} has a non-contiguous last dim (stride {t.stride(-1)})"
        esize = t.element_size()
        if t.data_ptr() % TMA_ALIGN_BYTES:
            return f"{name}'s data pointer is not {TMA_ALIGN_BYTES}-byte aligned (TMA requirement)"
        for dim, size, st in zip(("batch", "seq", "heads"), t.shape[:3], t.stride()[:3]):
            if (st * esize) % TMA_ALIGN_BYTES and size > 1:
                return f"{name}'s {dim} stride ({st} elements) is not a multiple of {TMA_ALIGN_BYTES} bytes"
    if kv_lens is not None:
        if kv_lens.dtype != torch.int32 or kv_lens.device != q.device or kv_lens.dim() != 1 \
                or kv_lens.shape[0] != q.shape[0]:
            return "kv_lens must be an int32 tensor of shape (batch,) on q's device"
    return None


def kernel_reason(q, k, v, kv_lens, scale) -> str | None:
    """Full dispatch decision for BSHD views: envelope, device, then (only if all else passes) the build."""
    if k.device != q.device or v.device != q.device:
        return "q, k and v are on different devices"
    reason = envelope_reason(q, k, v, kv_lens, scale) or device_reason(q.device)
    if reason is None and load() is None:
        reason = build_error()
    return reason


# Per (library, device, stream): the scratch a build asks for (capi.h: the tail launch's; one launch at a time per
# workspace, so one per stream), or 0 where the build asks for none.
_workspaces: dict[tuple[int, str, int | None, int], "torch.Tensor | int"] = {}


def workspace(lib: ctypes.CDLL, device: torch.device, stream: int) -> "torch.Tensor | None":
    """The library's workspace for launches on `stream`, allocated (zeroed) on first use; None when the build needs
    none, or while a CUDA graph is being captured and none exists yet (that launch then runs without it)."""
    key = (id(lib), device.type, device.index, stream)  # every launch looks here: no string formatting
    ws = _workspaces.get(key)
    if ws is None:
        fn = getattr(lib, "vidattn_sm90_workspace_bytes", None)
        with torch.cuda.device(device):
            nbytes = int(fn()) if fn is not None else 0
        if nbytes and torch.cuda.is_current_stream_capturing():
            return None
        ws = torch.zeros(nbytes, dtype=torch.uint8, device=device) if nbytes else 0
        _workspaces[key] = ws
    return ws if isinstance(ws, torch.Tensor) else None


def forward(q, k, v, out, lse, kv_lens, scale: float, lib: ctypes.CDLL | None = None) -> None:
    """Launch the kernel on the current stream. q, k, v, out: (B, S, H, D) views (any strides, last dim 1; out's
    base 16-byte aligned and its strides multiples of 8 elements, as a fresh tensor's are: O is stored with TMA);
    lse: contiguous fp32 (B, H, Sq) or None; kv_lens: int32 (B,) or None. Call only when kernel_reason is None.
    `lib`: a library from open_library (A/B timing); default: the one load() built or found."""
    lib = _library(lib)
    b, sq, h, d = q.shape
    args = _Args(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        kv_lens.data_ptr() if kv_lens is not None else None,
        b, h, sq, k.shape[1], d,
        (ctypes.c_int64 * 3)(*q.stride()[:3]), (ctypes.c_int64 * 3)(*k.stride()[:3]),
        (ctypes.c_int64 * 3)(*v.stride()[:3]), (ctypes.c_int64 * 3)(*out.stride()[:3]),
        float(scale), DTYPES[q.dtype],
    )
    stream = torch.cuda.current_stream(q.device).cuda_stream
    ws = workspace(lib, q.device, stream)
    if ws is not None:
        args.workspace, args.workspace_bytes = ws.data_ptr(), ws.numel()
    with torch.cuda.device(q.device):
        rc = lib.vidattn_sm90_fwd(ctypes.byref(args), ctypes.c_void_p(stream))
    if rc != 0:
        raise RuntimeError(f"vidattn kernel launch failed: {lib.vidattn_sm90_last_error().decode()}")
