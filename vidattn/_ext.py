"""The compiled half of vidattn: builds, caches and calls the sm_90a kernel library.

The kernel lives in `csrc/` as pure CUDA (no torch headers). It is compiled by `nvcc` into a small shared
library with a C ABI (`csrc/capi.cu`), cached on disk by a hash of its sources and flags, and called
through ctypes with raw pointers, strides and the caller's current CUDA stream. Keeping torch out of the
compiled part means the library never breaks on a torch ABI change and can be built ahead of time
(`python3 -m vidattn.build`).

How it ships: the wheel carries the CUDA sources (vidattn/csrc/, copied there by setup.py) and the library is
built on first use, on the machine that runs it. A build at install time would make `pip install` need nvcc and
minutes, and fail on CPU-only machines that only import the package; a prebuilt library would tie the wheel to
one CUDA driver floor (a library from an nvcc newer than the driver cannot launch). docs/install.md has the rest.

Nothing here raises at import: a missing nvcc, a failed build or a GPU that is not Hopper each become a
reason string that `vidattn.explain` reports and the op answers by falling back to SDPA.
"""
from __future__ import annotations

import ctypes
import errno
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile
import threading
import time
import contextlib
from contextlib import contextmanager
from pathlib import Path

import torch

from ._csrc import ENTRIES, ENTRY, kernel_sources


def _find_csrc() -> Path:
    """The kernel sources: inside the package when installed from a wheel, else the checkout's csrc/ (an editable
    install or a source tree on sys.path)."""
    here = Path(__file__).resolve().parent
    for root in (here / "csrc", here.parent / "csrc"):
        if (root / ENTRY).is_file():
            return root
    return here / "csrc"


CSRC = _find_csrc()

# The kernel's builds; every multiple of 8 up to the widest runs on the next build up (TMA pads the columns on the
# fly: csrc/sm90/fwd_params.h; csrc/capi.cu, vidattn_sm90_build_head_dim, is the same rule).
HEAD_DIMS = (64, 96, 128, 192, 256)
MAX_HEAD_DIM = HEAD_DIMS[-1]
# Causal masks have builds at D=64, 128, 192 and 256 (the wider two since the thirteenth sitting: a library without
# them, lib_causal_max_head_dim 128, runs wider causal calls on SDPA).
MAX_CAUSAL_HEAD_DIM = 256


def build_head_dim(d: int, causal: int = 0, d96_build: bool = True) -> int | None:
    """The build (one of HEAD_DIMS) a call of head dim `d` runs on, or None when no build takes it: the smallest at
    least as wide (72..96 on D=96 unless `d96_build` is False, the A/B switch set_d96_build; causal calls on the
    D=64, 128, 192 and 256 causal builds, 72..96 on D=128's). Mirrors csrc/capi.cu's vidattn_sm90_build_head_dim."""
    if d < 8 or d > MAX_HEAD_DIM or d % 8:
        return None
    if causal != CAUSAL_NONE:
        if d > MAX_CAUSAL_HEAD_DIM:
            return None
        return next(b for b in (64, 128, 192, 256) if b >= d)
    if d > 64 and d <= 96 and not d96_build:
        return 128
    return next(b for b in HEAD_DIMS if b >= d)


def build_description(d: int, causal: int = 0, d96_build: bool = True) -> str | None:
    """How a call of head dim `d` runs on the kernel, in words ("D=96 build", "D=112 on the D=128 build, columns
    zero-filled by TMA"), or None when no build takes it."""
    return describe_build(d, build_head_dim(d, causal, d96_build))


def describe_build(d: int, b: int | None) -> str | None:
    """build_description's words for head dim `d` on build `b` (None or 0: no build)."""
    if not b:
        return None
    return f"D={b} build" if b == d else f"D={d} on the D={b} build, columns zero-filled by TMA"
DTYPES = {torch.bfloat16: 0, torch.float16: 1}
# TMA needs 16-byte aligned base addresses and strides (PTX ISA / CUDA driver API, cuTensorMapEncodeTiled).
TMA_ALIGN_BYTES = 16
NVCC_FLAGS = [
    "-O3", "-std=c++17", "-shared", "-Xcompiler", "-fPIC", "-lineinfo",
    # wgmma and setmaxnreg exist only on the arch-specific sm_90a target (plain sm_90 rejects them).
    "-gencode=arch=compute_90a,code=sm_90a",
    "-Xptxas=-v", "--expt-relaxed-constexpr",
    # ptxas on the kernels in parallel, one thread per CPU, with identical SASS (dev/NOTES.md, sixth session). The
    # build's time is measured and stated in docs/install.md.
    "--split-compile=0",
]
# An nvcc that never returns must not hang every process waiting on the build lock: the build is killed after this.
BUILD_TIMEOUT_S = 3600.0


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
        ("kv_heads", ctypes.c_int64),
        ("causal", ctypes.c_int32),
        # block-sparse tables (vidattn/sparse.py, Tables); NULL for dense calls. Libraries before them never read these.
        ("blk_cnt", ctypes.c_void_p), ("blk_list", ctypes.c_void_p), ("blk_stride", ctypes.c_int64),
        ("blk_wgs", ctypes.c_int32),
    ]


# VidattnFwdArgs::causal: the mask's alignment (vidattn.ops.attention's `causal` maps onto these).
CAUSAL_NONE, CAUSAL_TOP_LEFT, CAUSAL_BOTTOM_RIGHT = 0, 1, 2
# Causal calls run the kernel unless this is "0" (then SDPA with the same mask runs, and explain says so). Read once,
# at import; tests and A/B runs may set `causal_kernel_enabled` directly.
CAUSAL_KERNEL_ENV = "VIDATTN_CAUSAL_KERNEL"


def causal_kernel_from_env(environ=os.environ) -> bool:
    return environ.get(CAUSAL_KERNEL_ENV, "1").strip() != "0"


causal_kernel_enabled = causal_kernel_from_env()


class KernelLaunchError(RuntimeError):
    """The library refused or failed a launch (vidattn_sm90_last_error says why)."""


_lock = threading.Lock()
_lib: ctypes.CDLL | None = None
_build_error: str | None = None
_launch_error: str | None = None  # set by the first failed launch of the loaded library: it is not used again
_tried = False
last_build_seconds: float | None = None  # nvcc's time in this process's last build (None: nothing was compiled)


def _say(msg: str, end: str = "\n") -> None:
    print(f"[vidattn] {msg}", file=sys.stderr, end=end, flush=True)


# ----------------------------------------------------------------------------------------------------------
# the build and its cache
# ----------------------------------------------------------------------------------------------------------

def cache_dir() -> Path:
    """Where built libraries are kept: VIDATTN_CACHE_DIR, else $XDG_CACHE_HOME/vidattn, else ~/.cache/vidattn."""
    root = os.environ.get("VIDATTN_CACHE_DIR") or os.path.join(
        os.environ.get("XDG_CACHE_HOME") or os.path.expanduser("~/.cache"), "vidattn")
    return Path(root)


def _per_user_dir() -> Path:
    """The cache used when cache_dir() is unusable (read-only, shared, not ours): private to this user."""
    return Path(tempfile.gettempdir()) / f"vidattn-{os.getuid()}"


def find_nvcc() -> str | None:
    for home in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if home and (Path(home) / "bin" / "nvcc").is_file():
            return str(Path(home) / "bin" / "nvcc")
    return shutil.which("nvcc")


def _sources() -> list[Path]:
    return kernel_sources(CSRC)


def _nvcc_version(nvcc: str) -> str:
    """nvcc's release line ("Cuda compilation tools, release 13.0, V13.0.88"), else its last line."""
    out = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60).stdout
    lines = out.strip().splitlines()
    return next((line for line in lines if "release" in line), lines[-1] if lines else "unknown")


def library_name(nvcc: str) -> str:
    """File name of the library for the current sources: a hash of every kernel source, the flags and the nvcc
    version, so an edit, a flag change or another nvcc never loads a stale build."""
    h = hashlib.sha256()
    for p in _sources():
        h.update(p.relative_to(CSRC).as_posix().encode())
        h.update(p.read_bytes())
    h.update(" ".join(NVCC_FLAGS).encode())
    h.update(_nvcc_version(nvcc).encode())
    return f"libvidattn_sm90-{h.hexdigest()[:16]}.so"


def library_path(nvcc: str) -> Path:
    """The library's path in the configured cache (build() may fall back to another folder: its return value)."""
    return cache_dir() / library_name(nvcc)


def unsafe_reason(path: Path) -> str | None:
    """Why loading code from `path` (a file, or the folder holding it) could run someone else's code, or None.

    A library is code: whoever can write it, or the folder it sits in, runs code as the user who loads it. Only
    files and folders owned by this user or root, and writable by neither group nor others, pass."""
    try:
        st = os.stat(path)
    except OSError as exc:
        return f"cannot stat {path}: {exc.strerror}"
    uid = os.getuid()
    if st.st_uid not in (uid, 0):
        return f"{path} is owned by uid {st.st_uid}, not by you (uid {uid}) or root"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{path} is writable by group or others (mode {stat.S_IMODE(st.st_mode):03o})"
    return None


def _dir_problem(d: Path) -> str | None:
    """Why `d` cannot hold the cache (created private if missing), or None."""
    try:
        d.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        return f"cannot create {d}: {exc.strerror or exc}"
    if not d.is_dir():
        return f"{d} is not a directory"
    return unsafe_reason(d)


@contextmanager
def _build_lock(d: Path, name: str, timeout: float):
    """An exclusive lock on building `name` in `d`, across processes (flock: the kernel drops it when a holder dies,
    so a killed build never blocks the next one). A wait gives up a minute past the build's own `timeout`."""
    try:
        import fcntl
    except ImportError:  # not POSIX: no lock; the atomic rename still keeps half-written files from being loaded
        yield
        return
    fd = os.open(d / f".{name}.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            _say(f"waiting for another process that is building the kernel library in {d} ...")
            deadline = time.monotonic() + timeout + 60
            while True:
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    break
                except OSError as exc2:
                    if exc2.errno not in (errno.EAGAIN, errno.EACCES):
                        raise
                if time.monotonic() > deadline:
                    raise RuntimeError(f"gave up waiting for the build lock {d / f'.{name}.lock'}") from None
                time.sleep(0.2)
        yield
    finally:
        os.close(fd)  # releases the lock


def _build_timeout() -> float:
    """VIDATTN_BUILD_TIMEOUT in seconds (default BUILD_TIMEOUT_S); a value that is not a positive number is an error
    that names the variable, so that the build command says what to fix and a first-use build falls back with it."""
    raw = os.environ.get("VIDATTN_BUILD_TIMEOUT")
    if raw is None or not raw.strip():
        return BUILD_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise RuntimeError(f"VIDATTN_BUILD_TIMEOUT must be a number of seconds above 0, got {raw!r}")
    return value


# Run beside nvcc: nvcc sits in a session of its own (below), so a signal that ends the process running the build
# (SIGTERM from `timeout`, Slurm or `docker stop`, or SIGKILL) would leave nvcc, cicc and ptxas running, orphaned,
# for minutes, while the released lock lets the next process start a second build. This watcher sees its parent
# change (the builder died: it was re-parented) and kills nvcc's process group; it exits once that group is gone.
# It has a session of its own too, so that a signal sent to the builder's whole group (`timeout` does that) ends
# the builder but not the watcher.
_WATCHER = """
import os, signal, sys, time
parent, group = int(sys.argv[1]), int(sys.argv[2])
while True:
    try:
        os.killpg(group, 0)
    except OSError:
        sys.exit(0)
    if os.getppid() != parent:
        try:
            os.killpg(group, signal.SIGKILL)
        except OSError:
            pass
        sys.exit(0)
    time.sleep(0.25)
"""


def _watch_group(group: int):
    """Starts _WATCHER over process group `group`; returns its Popen, or None where there are no process groups or no
    Python interpreter to run it (an embedding application's sys.executable may be the application itself)."""
    if not hasattr(os, "killpg") or "python" not in os.path.basename(sys.executable or "").lower():
        return None
    try:
        return subprocess.Popen([sys.executable, "-c", _WATCHER, str(os.getpid()), str(group)],
                                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
    except OSError:  # (no interpreter to run it: the build still runs, as before the watcher)
        return None


def _compile(nvcc: str, out: Path, verbose: bool, timeout: float) -> float:
    """Runs nvcc into `out`, killed past `timeout` seconds; returns the seconds it took. Prints a progress line while
    it runs (every second on a terminal, every 30 s otherwise) and, with `verbose`, the command and the compiler's
    output."""
    cmd = [nvcc, *NVCC_FLAGS, "-I", str(CSRC), *(str(CSRC / e) for e in ENTRIES), "-o", str(out)]
    if verbose:
        _say(" ".join(cmd))
    t0 = time.perf_counter()
    # Its own process group: nvcc runs cicc and ptxas as children, which a timeout or Ctrl-C must take down too (they
    # hold the output pipe open, so killing nvcc alone would leave this reading until they finish).
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace",
                            start_new_session=True)
    watcher = _watch_group(proc.pid)

    def kill():
        try:
            os.killpg(proc.pid, 9)
        except OSError:
            pass

    lines: list[str] = []
    timer = threading.Timer(timeout, kill)
    timer.daemon = True
    timer.start()
    tty = sys.stderr.isatty()
    stop = threading.Event()

    def progress():  # a thread: nvcc may print nothing for minutes
        every = 1.0 if tty else 30.0
        while not stop.wait(every):  # ptxas reports its kernels only at the end: elapsed time is the progress
            el = time.perf_counter() - t0
            _say(f"building ... {int(el // 60)}:{int(el % 60):02d} elapsed", end="\r" if tty else "\n")

    ticker = threading.Thread(target=progress, daemon=True)
    ticker.start()
    try:
        for line in proc.stdout:
            lines.append(line)
            if verbose:
                sys.stderr.write(line)
        rc = proc.wait()
    finally:
        stop.set()
        timer.cancel()
        if proc.poll() is None:  # interrupted (Ctrl-C): take nvcc down with us
            kill()
            proc.wait()
        if watcher is not None:
            watcher.kill()
            watcher.wait()
    dt = time.perf_counter() - t0
    if tty:
        sys.stderr.write("\n")
    log = "".join(lines)
    if rc != 0:
        out.unlink(missing_ok=True)
        why = f"timed out after {timeout:.0f} s (VIDATTN_BUILD_TIMEOUT)" if dt >= timeout else f"exit code {rc}"
        raise RuntimeError(f"nvcc failed ({why}, {dt:.0f} s): {' '.join(cmd)}\n{log[-4000:]}")
    if not out.is_file():
        raise RuntimeError(f"nvcc reported success but wrote no {out}")
    out.with_name(out.name + ".log").write_text(log)
    return dt


def _build_in(nvcc: str, d: Path, name: str, verbose: bool, force: bool) -> Path:
    """The library `name` in the cache folder `d`, built under the lock unless present (and safe) already."""
    lib = d / name
    timeout = _build_timeout()  # read once; a malformed value is said before anything is waited for or built
    with _build_lock(d, name, timeout):
        if lib.is_file() and not force and unsafe_reason(lib) is None:
            return lib  # another process built it while we waited
        # Holding the lock, any temporary file of this library is a build that died halfway (killed, power loss).
        for stale in d.glob(f".{name}.tmp-*"):
            stale.unlink(missing_ok=True)
        tmp = d / f".{name}.tmp-{os.getpid()}"
        _say(f"building the sm_90a kernel library (once per kernel version; see docs/install.md) with {nvcc} "
             f"({_nvcc_version(nvcc)}) into {d} ...")
        try:
            dt = _compile(nvcc, tmp, verbose, timeout)
            os.chmod(tmp, 0o755)
            os.replace(tmp, lib)  # atomic: a reader sees no library or the whole one
            with contextlib.suppress(OSError):  # the compiler's log is a convenience; the library is built
                (d / f".{name}.tmp-{os.getpid()}.log").replace(d / f"{name}.log")
        finally:
            tmp.unlink(missing_ok=True)
        global last_build_seconds
        last_build_seconds = dt
        _say(f"built {lib} in {dt:.1f} s")
        return lib


def build(verbose: bool = False, force: bool = False) -> Path:
    """Compile csrc/capi.cu into the cached shared library (unless it is cached already, or `force`); returns its
    path. Raises RuntimeError on failure.

    Safe for many processes at once (one builds, the others wait and load its result), and never loads a
    half-written file. The cache folder must be owned by this user (or root) and writable by no one else; a folder
    that is not, or is read-only without the library, is passed over for a per-user one, and as a last resort the
    library is built in a private temporary folder for this process alone. Each such step is said on stderr."""
    if not (CSRC / ENTRY).is_file():
        raise RuntimeError(f"kernel sources not found at {CSRC} (a wheel holds them in vidattn/csrc/; reinstall "
                           f"vidattn, or use a source checkout: pip install -e .)")
    nvcc = find_nvcc()
    if nvcc is None:
        raise RuntimeError("nvcc not found (set CUDA_HOME or put nvcc on PATH) - cannot build the vidattn kernel")
    global last_build_seconds
    last_build_seconds = None
    name = library_name(nvcc)
    candidates = [cache_dir()]
    if _per_user_dir() != candidates[0]:
        candidates.append(_per_user_dir())
    for d in candidates:
        problem = _dir_problem(d)
        if problem is None:
            lib = d / name
            if lib.is_file() and not force:
                problem = unsafe_reason(lib)
                if problem is None:
                    return lib
            if not os.access(d, os.W_OK | os.X_OK):
                problem = problem or f"{d} is read-only and holds no library for these sources"
            else:
                try:
                    return _build_in(nvcc, d, name, verbose, force)
                except OSError as exc:  # e.g. a read-only file system under a writable-looking folder
                    problem = f"cannot write in {d}: {exc.strerror or exc}"
        _say(f"not using the kernel cache {d}: {problem}")
    d = Path(tempfile.mkdtemp(prefix="vidattn-build-"))
    _say(f"building in a private temporary folder {d}, for this process only (every new process builds again; "
         f"set VIDATTN_CACHE_DIR to a folder of your own to keep the build)")
    return _build_in(nvcc, d, name, verbose, force=True)


def open_library(path: str | Path) -> ctypes.CDLL:
    """Load one kernel library and declare its C ABI (A/B scripts open several builds side by side)."""
    lib = ctypes.CDLL(str(path))
    lib.vidattn_sm90_fwd.argtypes = [ctypes.POINTER(_Args), ctypes.c_void_p]
    lib.vidattn_sm90_fwd.restype = ctypes.c_int
    lib.vidattn_sm90_last_error.argtypes = []
    lib.vidattn_sm90_last_error.restype = ctypes.c_char_p
    if hasattr(lib, "vidattn_sm90_sparse_layout"):  # libraries before the 64-key entries lack it
        lib.vidattn_sm90_sparse_layout.argtypes = [ctypes.POINTER(ctypes.c_int32)] * 4
        lib.vidattn_sm90_sparse_layout.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_sparse_warpgroups"):  # libraries before D=64's three-warpgroup tiles lack it
        lib.vidattn_sm90_sparse_warpgroups.argtypes = [ctypes.c_int32]
        lib.vidattn_sm90_sparse_warpgroups.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_workspace_bytes"):  # builds before the third session of 2026-11-30 lack it
        lib.vidattn_sm90_workspace_bytes.argtypes = []
        lib.vidattn_sm90_workspace_bytes.restype = ctypes.c_uint64
    if hasattr(lib, "vidattn_sm90_last_tail_splits"):  # builds before the fifth session of 2026-11-30 lack it
        lib.vidattn_sm90_last_tail_splits.argtypes = []
        lib.vidattn_sm90_last_tail_splits.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_tail_rounds"):  # builds before the twentieth sitting (2026-12-04) lack it
        lib.vidattn_sm90_set_tail_rounds.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_tail_rounds.restype = ctypes.c_int
        lib.vidattn_sm90_tail_rounds.argtypes = []
        lib.vidattn_sm90_tail_rounds.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_tail_kv_lens"):  # builds before the twentieth sitting (2026-12-04) lack it
        lib.vidattn_sm90_set_tail_kv_lens.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_tail_kv_lens.restype = ctypes.c_int
        lib.vidattn_sm90_tail_kv_lens.argtypes = []
        lib.vidattn_sm90_tail_kv_lens.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_d64_warpgroups"):  # builds before 2026-11-30 lack it
        lib.vidattn_sm90_set_d64_warpgroups.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_d64_warpgroups.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_d128_block_n"):  # builds before the seventh session of 2026-11-30 lack it
        lib.vidattn_sm90_set_d128_block_n.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_d128_block_n.restype = ctypes.c_int
        lib.vidattn_sm90_last_block_n.argtypes = []
        lib.vidattn_sm90_last_block_n.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_d96_build"):  # libraries before the D=96/192/256 builds lack it
        lib.vidattn_sm90_set_d96_build.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_d96_build.restype = ctypes.c_int
        lib.vidattn_sm90_build_head_dim.argtypes = [ctypes.c_int, ctypes.c_int]
        lib.vidattn_sm90_build_head_dim.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_hd_narrow"):  # libraries before the wide D=192/256 builds lack it
        lib.vidattn_sm90_set_hd_narrow.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_hd_narrow.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_last_o_path"):  # libraries before the O-in-V D=192/256 builds lack it
        lib.vidattn_sm90_last_o_path.argtypes = []
        lib.vidattn_sm90_last_o_path.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_last_q_box_rows"):  # libraries before the Q-halves D=256 variant lack it
        lib.vidattn_sm90_last_q_box_rows.argtypes = []
        lib.vidattn_sm90_last_q_box_rows.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_last_cluster_ctas"):  # libraries before the CTA-pair D=256 variant lack it
        lib.vidattn_sm90_last_cluster_ctas.argtypes = []
        lib.vidattn_sm90_last_cluster_ctas.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_set_d96_warpgroups"):  # libraries before the three-warpgroup D=96 build lack it
        lib.vidattn_sm90_set_d96_warpgroups.argtypes = [ctypes.c_int]
        lib.vidattn_sm90_set_d96_warpgroups.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_causal_modes"):  # libraries before the causal mask lack it (and the struct's field)
        lib.vidattn_sm90_causal_modes.argtypes = []
        lib.vidattn_sm90_causal_modes.restype = ctypes.c_int
    if hasattr(lib, "vidattn_sm90_causal_max_head_dim"):  # libraries before the D=192/256 causal builds lack it
        lib.vidattn_sm90_causal_max_head_dim.argtypes = []
        lib.vidattn_sm90_causal_max_head_dim.restype = ctypes.c_int
    for symbol, env, setter in _FORCED_BUILDS:
        if hasattr(lib, symbol) and os.environ.get(env):
            try:
                setter(int(os.environ[env]), lib)
            except ValueError as exc:
                raise RuntimeError(f"{env}={os.environ[env]!r}: {exc}") from None
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


def set_d96_build(build: int, lib: ctypes.CDLL | None = None) -> None:
    """Run head dims 72..96 on the D=128 build with the columns padded (128) or on the D=96 build (96, or 0: the
    default) in later launches. A testing and benchmarking knob (also read from VIDATTN_D96_BUILD when the library
    loads)."""
    if _entry(lib, "vidattn_sm90_set_d96_build", "the D=96 build")(int(build)) != 0:
        raise ValueError(f"D=96 build must be 0 (the default), 96 or 128, got {build}")


def set_hd_narrow(narrow: int, lib: ctypes.CDLL | None = None) -> None:
    """Run bf16 head dims 136..256 on the narrow D=192 (N=96) / D=256 (N=64) builds with the separate O scratch (1),
    on the wide ones, O stored through Q's buffer (2), on the O-in-V ones, the wide widths with O stored through the
    V stages (3), head dims 200..256 on the D=256 O-in-V build's variant that stores O from registers (4: an A/B
    build; bf16 head dims 136..192 are refused under it, fp16 runs wide as under 3), on its variant whose Q is loaded
    per warpgroup (5: an A/B build, refused and routed as 4), on its variant that waits for its O stores' reads under
    the next tile's S_0 (6: the build a routed D=256 O-in-V call runs; refused and routed as 4), on that build with
    every partial key block narrowed, by as little as one 16-key step (7: an A/B build, refused and routed as 4), on
    that build run by CTA pairs that share each K/V block (8: an A/B build, refused and routed as 4; a call whose Q
    tiles do not pair up runs the routed build, see `last_cluster_ctas`), or on the launcher's choice by key count
    (0: the default; libraries before that choice read 0 as wide and refuse 2, libraries before the O-in-V builds
    refuse 3, before the register variant 4, before the Q-halves variant 5, before the read-late variant 6, before the
    narrowed read-late variant 7, before the CTA-pair variant 8) in later launches.
    A testing and benchmarking knob (also read from VIDATTN_HD_NARROW when the library loads)."""
    if _entry(lib, "vidattn_sm90_set_hd_narrow", "the wide D=192/256 builds")(int(narrow)) != 0:
        raise ValueError(f"VIDATTN_HD_NARROW must be 0 (by key count, the default), 1 (narrow), 2 (wide), 3 "
                         f"(O in V), 4 (D=256 O from registers), 5 (D=256 Q per warpgroup), 6 (D=256 O read wait "
                         f"late), 7 (6 with every partial block narrowed) or 8 (6 in CTA pairs sharing K/V; libraries "
                         f"from before them refuse 3 / 4 / 5 / 6 / 7 / 8), got {narrow}")


def set_d96_warpgroups(warpgroups: int, lib: ctypes.CDLL | None = None) -> None:
    """Run bf16 head dims 72..96 (on the D=96 build) on three consumer warpgroups, 192-row tiles at N=96 (3), on two
    at N=176 (2), or on the launcher's choice by shape (0: the default; libraries before that choice read 0 as two)
    in later launches. A testing and benchmarking knob (also read from VIDATTN_D96_WARPGROUPS when the library
    loads)."""
    if _entry(lib, "vidattn_sm90_set_d96_warpgroups", "the three-warpgroup D=96 build")(int(warpgroups)) != 0:
        raise ValueError(f"D=96 warpgroups must be 0 (by shape, the default), 2 or 3, got {warpgroups}")


def lib_build_head_dim(d: int, causal: int = CAUSAL_NONE, lib: ctypes.CDLL | None = None) -> int:
    """The build the library runs a call of head dim `d` on (0: it refuses it): csrc/capi.cu's own answer, which
    build_head_dim mirrors. For tests."""
    return int(_entry(lib, "vidattn_sm90_build_head_dim", "the D=96/192/256 builds")(int(d), int(causal)))


# (C setter, environment variable read when a library loads, Python setter) of each build a test or A/B can force.
_FORCED_BUILDS = (("vidattn_sm90_set_d64_warpgroups", "VIDATTN_D64_WARPGROUPS", set_d64_warpgroups),
                  ("vidattn_sm90_set_d128_block_n", "VIDATTN_D128_BLOCK_N", set_d128_block_n),
                  ("vidattn_sm90_set_d96_build", "VIDATTN_D96_BUILD", set_d96_build),
                  ("vidattn_sm90_set_hd_narrow", "VIDATTN_HD_NARROW", set_hd_narrow),
                  ("vidattn_sm90_set_d96_warpgroups", "VIDATTN_D96_WARPGROUPS", set_d96_warpgroups))


def last_block_n(lib: ctypes.CDLL | None = None) -> int:
    """Key-block width of the kernel this thread's last kernel call launched (0: none; csrc/capi.cu,
    pick_d128_block_n). For tests, benchmarks and `vidattn.explain`-style questions."""
    return int(_entry(lib, "vidattn_sm90_last_block_n", "the D=128 short-key build")())


def last_o_path(lib: ctypes.CDLL | None = None) -> int:
    """Where the epilogue of this thread's last kernel call staged O: 0 a scratch of its own (or no launch), 1 Q's
    buffer (the wide D=192/256 builds), 2 the V stages (the O-in-V builds), 3 nowhere, stored from registers (the
    D=256 O-in-V build's variant, VIDATTN_HD_NARROW=4), 4 the V stages with the stores' reads waited for under the
    next tile's S_0 (a routed bf16 D=256 O-in-V call, VIDATTN_HD_NARROW=6, and 7, which narrows every partial
    block). For tests and benchmarks: the O-in-V and wide builds share their key-block widths."""
    return int(_entry(lib, "vidattn_sm90_last_o_path", "the O-in-V D=192/256 builds")())


def last_q_box_rows(lib: ctypes.CDLL | None = None) -> int:
    """Rows of the Q box of this thread's last kernel call: 128 (the tile's), 64 (a warpgroup's half: the D=256 O-in-V
    build's variant, VIDATTN_HD_NARROW=5), 0 (no launch). For tests and benchmarks: the variant shares its width and O
    path with the O-in-V build."""
    return int(_entry(lib, "vidattn_sm90_last_q_box_rows", "the Q-halves D=256 variant")())


def last_cluster_ctas(lib: ctypes.CDLL | None = None) -> int:
    """CTAs per cluster of the main launch of this thread's last kernel call: 2 where CTA pairs shared its K/V blocks
    (VIDATTN_HD_NARROW=8, on a call whose Q blocks pair up: an even count a (batch, head), one launch), 1 for every
    other launch, 0 for none. For tests and benchmarks: the pair build shares its width, O path and Q box with the
    routed D=256 build it falls back to."""
    return int(_entry(lib, "vidattn_sm90_last_cluster_ctas", "the CTA-pair D=256 variant")())


def last_tail_splits(lib: ctypes.CDLL | None = None) -> int:
    """Key ranges per tile of the tail launch of this thread's last kernel call (0: it had none): the last, partial
    round of tiles split along the keys (csrc/capi.cu, plan_tail). For tests and benchmarks."""
    return int(_entry(lib, "vidattn_sm90_last_tail_splits", "the tail launch")())


def set_tail_kv_lens(mode: int, lib: ctypes.CDLL | None = None) -> None:
    """Whether later kernel calls with kv_lens may take the tail launch (1, the build's default: each key range takes
    its blocks from its batch's kv_len, a range without keys weighs nothing in the merge), keep the plain schedule
    (0), or the build's default (-1; the environment variable VIDATTN_TAIL_KV_LENS sets the same for a process).
    A testing and benchmarking knob (dev/NOTES.md "The tail launch with kv_lens")."""
    if isinstance(mode, bool) or not isinstance(mode, int) or mode not in (-1, 0, 1):
        raise ValueError(f"set_tail_kv_lens: mode must be -1, 0 or 1, got {mode!r}")
    if _entry(lib, "vidattn_sm90_set_tail_kv_lens", "the tail launch with kv_lens")(mode) != 0:
        raise ValueError(f"the kernel library refused tail kv_lens mode {mode}")


def set_tail_rounds(rounds: int, lib: ctypes.CDLL | None = None) -> None:
    """The tail launch's plans in later kernel calls: ranges in up to two short rounds where one range a tile per SM
    splits nothing (2), the last round's key blocks cut into one equal chunk per SM there instead (3, the balanced
    tail), the one-round plan only (1, the build's default), or the build's default (-1; the environment variable
    VIDATTN_TAIL_ROUNDS sets the same for a process). The workspace each call takes follows the setting (two items per
    SM under 2 and 3), so the cached size is asked again. A testing and benchmarking knob (dev/NOTES.md "The tail
    launch in two rounds", "A balanced tail at D=256"). Libraries built before the balanced tail refuse 3."""
    if isinstance(rounds, bool) or not isinstance(rounds, int) or rounds not in (-1, 1, 2, 3):
        raise ValueError(f"set_tail_rounds: rounds must be -1, 1, 2 or 3, got {rounds!r}")
    if _entry(lib, "vidattn_sm90_set_tail_rounds", "the tail launch in two rounds")(rounds) != 0:
        raise ValueError(f"the kernel library refused tail rounds {rounds}")
    _workspace_bytes.clear()


def tail_rounds(lib: ctypes.CDLL | None = None) -> int:
    """The tail launch's rounds setting in force: 3 (the balanced tail), 2 (up to two short rounds) or 1 (one)."""
    return int(_entry(lib, "vidattn_sm90_tail_rounds", "the tail launch in two rounds")())


def tail_kv_lens(lib: ctypes.CDLL | None = None) -> int:
    """1 when kernel calls with kv_lens may take the tail launch, 0 when they keep the plain schedule."""
    return int(_entry(lib, "vidattn_sm90_tail_kv_lens", "the tail launch with kv_lens")())


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


def d96_build(build: int, lib: ctypes.CDLL | None = None):
    """`set_d96_build` for the duration of a block; afterwards the setting the library loaded with
    (VIDATTN_D96_BUILD, else 0: the D=96 build) is back."""
    return _forced(set_d96_build, "VIDATTN_D96_BUILD", build, lib)


def hd_narrow(narrow: int, lib: ctypes.CDLL | None = None):
    """`set_hd_narrow` for the duration of a block; afterwards the setting the library loaded with
    (VIDATTN_HD_NARROW, else 0: by key count) is back."""
    return _forced(set_hd_narrow, "VIDATTN_HD_NARROW", narrow, lib)


def d96_warpgroups(warpgroups: int, lib: ctypes.CDLL | None = None):
    """`set_d96_warpgroups` for the duration of a block; afterwards the setting the library loaded with
    (VIDATTN_D96_WARPGROUPS, else 0: by shape) is back."""
    return _forced(set_d96_warpgroups, "VIDATTN_D96_WARPGROUPS", warpgroups, lib)


def load() -> ctypes.CDLL | None:
    """The loaded kernel library, building it on first use; None (with `build_error()` set) if impossible.

    Tried once per process: whatever goes wrong (no nvcc, a failed or timed-out build, a library that does not
    load, a malformed VIDATTN_* setting) becomes the reason every later call states once and answers with SDPA,
    never an exception per call or a rebuild per call."""
    global _lib, _build_error, _tried
    if _tried:
        return _lib
    with _lock:
        if _tried:
            return _lib
        try:
            prebuilt = os.environ.get("VIDATTN_LIBRARY")
            path = Path(prebuilt) if prebuilt else build(verbose=False)
            _lib = open_library(path)
        except Exception as exc:  # noqa: BLE001 - any failure is a stated fallback, see the docstring
            _lib = None
            _build_error = f"kernel library unavailable: {exc}"
        _tried = True
        return _lib


def build_error() -> str | None:
    return _build_error


def runtime_reason() -> str | None:
    """Why the kernel library cannot run at all in this process (no build, or a launch that failed), or None.
    May build the library."""
    if _launch_error is not None:
        return _launch_error
    if load() is None:
        return build_error()
    return _launch_error


_capabilities: dict[int, tuple[int, int]] = {}  # per device index: asked once (every launch looks here)


def device_reason(device: torch.device) -> str | None:
    """Why the kernel cannot run on this device at all (None if it can, given a working build). Checked before
    anything about the call's dtypes or shapes: on a machine without a GPU that is the one thing to know."""
    if device.type != "cuda":
        if not torch.cuda.is_available():
            return "no CUDA GPU (torch.cuda.is_available() is False); the kernel runs on Hopper GPUs only"
        return f"tensors are on {device.type}; the kernel runs on CUDA tensors only"
    index = device.index if device.index is not None else torch.cuda.current_device()
    cap = _capabilities.get(index)
    if cap is None:
        cap = _capabilities[index] = torch.cuda.get_device_capability(index)
    major, minor = cap
    if major != 9:
        return f"GPU is sm_{major}{minor}; the kernel is built for Hopper (sm_90a) only"
    return None


_FLT_MIN = 1.1754943508222875e-38  # smallest normal float32
_LOG2E = 1.4426950408889634
# Largest softmax scale the kernel takes (csrc/capi.cu checks the same). The scores times scale * log2(e) are formed in
# fp32 registers and compared, summed and subtracted there: at 1e30 they overflow to inf and the rows turn NaN (GPU
# suite, tests/test_reliability_gpu.py), where SDPA's math still gives a one-hot row. Real models use 1 / sqrt(D).
MAX_SCALE = 65536.0
_INT32_MAX = (1 << 31) - 1
_MIN_BLOCK_M = 128  # the smallest query tile of any build (FwdTraits): the most tiles a launch can have


def _as_float32(x: float) -> float:
    return ctypes.c_float(x).value


def envelope_reason(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, kv_lens: torch.Tensor | None,
                    scale: float) -> str | None:
    """Why this call (q, k, v as BSHD views) is outside the kernel's envelope, or None when it is inside.

    Checks shapes, dtypes, strides and the scale only; it never builds anything. `kernel_reason` adds device and
    build checks. Everything csrc/capi.cu would refuse for these arguments is refused here first, so a call this
    passes launches."""
    if q.dtype not in DTYPES:
        return f"dtype {q.dtype} is not supported by the kernel (bf16 or fp16 only)"
    if k.dtype != q.dtype or v.dtype != q.dtype:
        return "q, k and v have different dtypes"
    d = q.shape[-1]
    if d > MAX_HEAD_DIM:
        return (f"head dim {d} is over {MAX_HEAD_DIM}: the kernel has builds for head dims up to {MAX_HEAD_DIM} "
                f"(64, 96, 128, 192, 256; the others run on the next one up)")
    if d % 8:
        return f"head dim {d} is not a multiple of 8 (the kernel runs multiples of 8 up to {MAX_HEAD_DIM})"
    if k.shape[-1] != d or v.shape[-1] != d:
        return "k/v head dim differs from q's"
    if k.shape[2] != v.shape[2] or q.shape[2] % k.shape[2]:
        return "k and v must have one head count that divides q's (grouped-query attention)"
    if q.requires_grad or k.requires_grad or v.requires_grad:
        if torch.is_grad_enabled():
            return "inputs require grad: the kernel is forward-only"
    # The kernel takes the scale as a float32 and works with scale * log2(e): it must stay a normal, finite float32
    # (1e-46 rounds to 0, 1e-40 is denormal and flushed to 0 on the GPU, 3e38 * log2(e) overflows).
    s32 = _as_float32(scale) if scale == scale else scale
    if not (s32 >= _FLT_MIN and abs(_as_float32(s32 * _LOG2E)) != float("inf")):
        return f"softmax scale {scale} is not a positive, normal float32 the kernel can use"
    if s32 > MAX_SCALE:
        return f"softmax scale {scale} is over {MAX_SCALE:g}, the largest the kernel takes"
    b, sq, h, _ = q.shape
    skv = k.shape[1]
    if sq > _INT32_MAX or skv > _INT32_MAX:
        return "sequence length over 2^31 - 1"
    if b * h * -(-sq // _MIN_BLOCK_M) > _INT32_MAX:
        return "too many query tiles (batch * heads * ceil(Sq / 128) over 2^31 - 1)"
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.stride(-1) != 1:
            return f"{name} has a non-contiguous last dim (stride {t.stride(-1)})"
        esize = t.element_size()
        if t.data_ptr() % TMA_ALIGN_BYTES:
            return f"{name}'s data pointer is not {TMA_ALIGN_BYTES}-byte aligned (TMA requirement)"
        for dim, size, st in zip(("batch", "seq", "heads"), t.shape[:3], t.stride()[:3]):
            if size > 1 and ((st * esize) % TMA_ALIGN_BYTES or st * esize >= 1 << 40):
                return f"{name}'s {dim} stride ({st} elements) is not a multiple of {TMA_ALIGN_BYTES} bytes below 2^40"
            if size > 1 and st == 0:  # an expanded view: TMA descriptors are not known to take a zero stride
                return f"{name} is expanded along {dim} (stride 0); pass .contiguous() to run the kernel"
    if kv_lens is not None:
        if kv_lens.dtype != torch.int32 or kv_lens.device != q.device or kv_lens.dim() != 1 \
                or kv_lens.shape[0] != q.shape[0]:
            return "kv_lens must be an int32 tensor of shape (batch,) on q's device"
    return None


def lib_causal_max_head_dim(lib: ctypes.CDLL | None) -> int:
    """The widest head dim the library's causal builds take: 128 for libraries that predate the D=192/256 ones."""
    fn = getattr(lib, "vidattn_sm90_causal_max_head_dim", None)
    return 128 if fn is None else int(fn())


def causal_reason(causal: int, lib: ctypes.CDLL | None, head_dim: int = 0) -> str | None:
    """Why a call with this causal mode (CAUSAL_*) and head dim cannot run on the kernel library `lib`, or None."""
    if causal == CAUSAL_NONE:
        return None
    if not causal_kernel_enabled:
        return f"causal masks run on SDPA ({CAUSAL_KERNEL_ENV}=0)"
    fn = getattr(lib, "vidattn_sm90_causal_modes", None)
    if fn is None or int(fn()) < causal:
        return "this kernel library predates causal masks"
    widest = lib_causal_max_head_dim(lib)
    if head_dim > widest:
        return (f"causal masks run on this kernel library up to head dim {widest} (head dim {head_dim}): it was "
                f"built before the D=192 and D=256 causal builds; rebuild it (python3 -m vidattn.build)")
    return None


def kernel_reason(q, k, v, kv_lens, scale, causal: int = CAUSAL_NONE) -> str | None:
    """Full dispatch decision for BSHD views: the device first, then the envelope, then (only if all else passes)
    the build and any earlier launch failure, then whether the build takes the causal mode."""
    if k.device != q.device or v.device != q.device:
        return "q, k and v are on different devices"
    reason = device_reason(q.device) or envelope_reason(q, k, v, kv_lens, scale)
    if reason is None:
        reason = runtime_reason()
    if reason is None and causal != CAUSAL_NONE:
        reason = causal_reason(causal, _lib, q.shape[-1])
    return reason


# Per (library, device index): the bytes of scratch a build asks for (capi.h: the tail launch's), 0 for none.
_workspace_bytes: dict[tuple[int, int | None], int] = {}


def workspace(lib: ctypes.CDLL, device: torch.device) -> "torch.Tensor | None":
    """A fresh workspace for one launch, from torch's caching allocator on the current stream; None when the build
    needs none.

    One per call, not one per stream: two threads launching on one stream would otherwise interleave their tail and
    merge launches on one buffer. The caching allocator hands a freed block only to work ordered after the launches
    that used it (same stream), so this is safe and costs no allocation in steady state; under CUDA graph capture
    the block comes from the graph's private pool, so each graph owns its scratch."""
    key = (id(lib), device.index)  # every launch looks here: no string formatting
    nbytes = _workspace_bytes.get(key)
    if nbytes is None:
        fn = getattr(lib, "vidattn_sm90_workspace_bytes", None)
        with _device_guard(device):
            nbytes = _workspace_bytes[key] = int(fn()) if fn is not None else 0
    return torch.empty(nbytes, dtype=torch.uint8, device=device) if nbytes else None


def _device_guard(device: torch.device):
    return torch.cuda.device(device)


def _current_stream(device: torch.device) -> int:
    return torch.cuda.current_stream(device).cuda_stream


def launch_args(q, k, v, out, lse, kv_lens, scale: float, causal: int = CAUSAL_NONE) -> _Args:
    """The C ABI's argument struct for (B, S, H, D) views (workspace unset), for every launch of the library (the
    exact kernel here, the 8-bit path in quant8). kv_lens must be contiguous int32 (the C side reads stride 1).
    causal: CAUSAL_NONE, CAUSAL_TOP_LEFT or CAUSAL_BOTTOM_RIGHT (the 8-bit entry refuses all but the first)."""
    b, sq, h, d = q.shape
    return _Args(
        q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
        lse.data_ptr() if lse is not None else None,
        kv_lens.data_ptr() if kv_lens is not None else None,
        b, h, sq, k.shape[1], d,
        (ctypes.c_int64 * 3)(*q.stride()[:3]), (ctypes.c_int64 * 3)(*k.stride()[:3]),
        (ctypes.c_int64 * 3)(*v.stride()[:3]), (ctypes.c_int64 * 3)(*out.stride()[:3]),
        float(scale), DTYPES[q.dtype], None, 0, k.shape[2], int(causal),
    )


def forward(q, k, v, out, lse, kv_lens, scale: float, lib: ctypes.CDLL | None = None,
            causal: int = CAUSAL_NONE, sparse=None) -> None:
    """Launch the kernel on the current stream. q, k, v, out: (B, S, H, D) views (any strides, last dim 1; out's
    base 16-byte aligned and its strides multiples of 8 elements, as a fresh tensor's are: O is stored with TMA);
    lse: contiguous fp32 (B, H, Sq) or None; kv_lens: int32 (B,) or None (any view; read contiguous); causal: the
    mask (CAUSAL_*; csrc/capi.h states its semantics); sparse: block-sparse tables (vidattn/sparse.py, Tables) or None.
    Call only when kernel_reason is None. `lib`: a library from open_library (A/B timing); default: the one load() built or
    found. Raises KernelLaunchError when the library refuses or fails the launch; for the default library that
    also disables it for the rest of the process (runtime_reason then says why), so the op falls back once."""
    global _launch_error
    default = lib is None
    lib = _library(lib)
    if kv_lens is not None and kv_lens.stride(0) != 1:
        kv_lens = kv_lens.contiguous()
    args = launch_args(q, k, v, out, lse, kv_lens, scale, causal)
    if sparse is not None:
        # block-sparse (vidattn/sparse.py, Tables): only a library with the entry's tables reads them, laid out as the
        # tables are (the rule explain applies: sparse.library_reason)
        from .sparse import library_reason
        reason = library_reason(lib, sparse.wgs, q.shape[-1])
        if reason is not None:
            raise KernelLaunchError(reason)
        args.blk_cnt, args.blk_list = sparse.count.data_ptr(), sparse.entries.data_ptr()
        args.blk_stride = sparse.entries.shape[-2]
        args.blk_wgs = sparse.wgs
    # The guard makes q's device current; the library then makes its context current in this thread (a worker
    # thread's first CUDA work may be this call: csrc/capi.cu, vidattn_sm90_fwd).
    with _device_guard(q.device):
        stream = _current_stream(q.device)
        ws = workspace(lib, q.device)
        if ws is not None:
            args.workspace, args.workspace_bytes = ws.data_ptr(), ws.numel()
        rc = lib.vidattn_sm90_fwd(ctypes.byref(args), ctypes.c_void_p(stream))
    if rc != 0:
        msg = lib.vidattn_sm90_last_error().decode(errors="replace")
        if msg.startswith("cuTensorMapEncodeTiled failed"):
            # These arguments' descriptors (a view the envelope let through): this call falls back, later calls
            # with other tensors still run the kernel.
            raise KernelLaunchError(f"the kernel's TMA descriptors refused these tensors ({msg})")
        if default:
            _launch_error = f"kernel launch failed ({msg}); the kernel is not used again in this process"
            raise KernelLaunchError(_launch_error)
        raise KernelLaunchError(f"vidattn kernel launch failed: {msg}")
