"""Faults and bad input, on the CPU: a library that fails to load, a launch that fails, a read-only, shared or
foreign cache, a build killed halfway, processes building at once, and every argument's bad values. Each ends in a
stated fallback (SDPA's answer and one warning naming the reason) or a clear error; never a hang, a rebuild per call
or a wrong answer. The fake nvcc and stub library (tests/_fake_toolchain.py) make the build paths run in seconds.

The GPU half (threads, streams, CUDA graphs, launch edge cases) is tests/test_reliability_gpu.py."""
from __future__ import annotations

import contextlib
import importlib
import os
import signal
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import vidattn
from vidattn import _ext, ops
from _fake_toolchain import toolchain  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parent.parent


@pytest.fixture
def fresh_ext(monkeypatch, tmp_path):
    """A process state where the library has not been tried yet, a private cache, and no VIDATTN_* settings."""
    for name, value in (("_tried", False), ("_lib", None), ("_build_error", None), ("_launch_error", None),
                        ("_workspace_bytes", {})):
        monkeypatch.setattr(_ext, name, value)
    for env in ("VIDATTN_LIBRARY", "VIDATTN_D64_WARPGROUPS", "VIDATTN_D128_BLOCK_N", "VIDATTN_BUILD_TIMEOUT"):
        monkeypatch.delenv(env, raising=False)
    monkeypatch.setenv("VIDATTN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(_ext, "_per_user_dir", lambda: tmp_path / "per-user")
    saved = set(ops._warned)
    ops._warned.clear()
    yield tmp_path
    ops._warned.clear()
    ops._warned.update(saved)


@pytest.fixture
def as_if_on_hopper(monkeypatch):
    """CPU tensors take the kernel route as far as the library: the device check passes, the launch gets no CUDA
    stream or device guard. What the library then does is the test's business."""
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "_device_guard", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(_ext, "_current_stream", lambda device: 0)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "current_device", lambda: 0)


def qkv(b=2, s=16, h=2, d=64, dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(b, s, h, d, generator=g).to(dtype) for _ in range(3))


def sdpa_bshd(q, k, v, **kw):
    return F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), **kw).transpose(1, 2)


def fallback_warnings(fn):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = fn()
    return out, [str(w.message) for w in caught if issubclass(w.category, vidattn.VidattnFallbackWarning)]


# ------------------------------------------------------------------------------------------------ load failures
def test_library_that_fails_to_load_is_one_stated_fallback(fresh_ext, as_if_on_hopper, monkeypatch):
    bad = fresh_ext / "libgarbage.so"
    bad.write_bytes(b"not an ELF file")
    monkeypatch.setenv("VIDATTN_LIBRARY", str(bad))
    opened = []
    real_open = _ext.open_library
    monkeypatch.setattr(_ext, "open_library", lambda p: opened.append(p) or real_open(p))
    q, k, v = qkv()
    outs, msgs = fallback_warnings(lambda: [vidattn.attention(q, k, v) for _ in range(3)])
    for out in outs:
        torch.testing.assert_close(out, sdpa_bshd(q, k, v))
    assert len(opened) == 1  # tried once, not once per call
    assert len(msgs) == 1 and "kernel library unavailable" in msgs[0] and "libgarbage.so" in msgs[0], msgs
    assert vidattn.explain(q, k, v) == _ext.build_error()
    assert vidattn.kernel_available() is False


@pytest.mark.parametrize("failure", ["timeout", "compile error", "bad env", "decode"])
def test_build_and_setting_failures_fall_back_once(failure, fresh_ext, as_if_on_hopper, monkeypatch, toolchain):
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    if failure == "timeout":
        monkeypatch.setenv("FAKE_NVCC_SLEEP", "30")
        monkeypatch.setenv("VIDATTN_BUILD_TIMEOUT", "1")
        expect = "timed out"
    elif failure == "compile error":
        monkeypatch.setenv("FAKE_NVCC_FAIL", "1")
        expect = "fake nvcc: error"
    elif failure == "bad env":
        monkeypatch.setenv("VIDATTN_D128_BLOCK_N", "abc")
        expect = "VIDATTN_D128_BLOCK_N='abc'"
    else:  # any exception at all while loading, e.g. a source file that is not UTF-8 where text is expected
        monkeypatch.setattr(_ext, "open_library", lambda p: b"\xff".decode())
        expect = "codec can't decode"
    q, k, v = qkv()
    t0 = time.monotonic()
    outs, msgs = fallback_warnings(lambda: [vidattn.attention(q, k, v) for _ in range(3)])
    assert time.monotonic() - t0 < 20  # the timeout holds; nothing hangs
    for out in outs:
        torch.testing.assert_close(out, sdpa_bshd(q, k, v))
    assert len(msgs) == 1 and expect in msgs[0], msgs
    assert toolchain.runs() <= 1  # never rebuilt per call
    assert not list((fresh_ext / "cache").glob(".*.tmp-*"))  # no temporary file left behind


# ------------------------------------------------------------------------------------------------ launch failures
def test_failed_launch_is_one_stated_fallback_and_explain_agrees(fresh_ext, as_if_on_hopper, monkeypatch, toolchain):
    monkeypatch.setenv("VIDATTN_LIBRARY", str(toolchain.stub))  # its launch always fails
    q, k, v = qkv()
    assert vidattn.explain(q, k, v) is None and vidattn.kernel_available() is True  # loads; nothing ran yet
    launches = []
    lib = _ext.load()
    real = lib.vidattn_sm90_fwd
    lib.vidattn_sm90_fwd = lambda *a: launches.append(1) or real(*a)
    outs, msgs = fallback_warnings(lambda: [vidattn.attention(q, k, v) for _ in range(3)])
    for out in outs:
        torch.testing.assert_close(out, sdpa_bshd(q, k, v))
    assert len(launches) == 1  # the failing library is not launched again
    assert len(msgs) == 1 and "stub library: launch refused" in msgs[0], msgs
    # What the call does from now on, explain and kernel_available say.
    assert "launch refused" in vidattn.explain(q, k, v)
    assert vidattn.kernel_available() is False


def test_descriptor_refusal_falls_back_for_that_call_only(fresh_ext, as_if_on_hopper, monkeypatch, toolchain):
    """A TMA descriptor error is about these tensors, not the library: that call runs SDPA with the reason, and the
    kernel stays on for other calls."""
    monkeypatch.setenv("VIDATTN_LIBRARY", str(toolchain.stub))
    monkeypatch.setenv("STUB_LAUNCH_ERROR", "cuTensorMapEncodeTiled failed with CUresult 1")
    q, k, v = qkv()
    out, msgs = fallback_warnings(lambda: vidattn.attention(q, k, v))
    torch.testing.assert_close(out, sdpa_bshd(q, k, v))
    assert len(msgs) == 1 and "CUresult 1" in msgs[0]
    assert _ext._launch_error is None and vidattn.explain(q, k, v) is None


def test_a_library_given_explicitly_raises_instead(fresh_ext, as_if_on_hopper, toolchain):
    """Scripts that pass `lib=` (A/B timing) want the error, and the default library stays usable."""
    lib = _ext.open_library(toolchain.stub)
    q, k, v = qkv()
    out = torch.empty_like(q)
    with pytest.raises(_ext.KernelLaunchError, match="launch refused"):
        _ext.forward(q, k, v, out, None, None, 0.125, lib=lib)
    assert _ext._launch_error is None


@pytest.mark.parametrize("scale,runs", [(1e-46, False), (1e-40, False), (0.0, False), (-0.5, False), (3e38, False),
                                        (1e-30, True), (0.125, True), (65536.0, True), (65537.0, False),
                                        (1e30, False)])
def test_scale_envelope_matches_what_the_launch_accepts(scale, runs, monkeypatch):
    """csrc/capi.cu refuses a float32 scale that is not normal and positive, whose product with log2(e) overflows,
    or that is over MAX_SCALE (1e30 gave NaN rows on the GPU); the envelope says so first, so explain and the call agree (the GPU test checks the launch)."""
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    q, k, v = qkv()
    reason = vidattn.explain(q, k, v, scale=scale)
    assert (reason is None) is runs, reason
    if not runs:
        assert "scale" in reason


@pytest.mark.parametrize("scale", [float("inf"), float("-inf"), float("nan")])
def test_non_finite_scale_is_an_error_for_both(scale):
    q, k, v = qkv()
    for fn in (vidattn.attention, vidattn.explain):
        with pytest.raises(ValueError, match="finite"):
            fn(q, k, v, scale=scale)


# ------------------------------------------------------------------------------------------------ the cache
def built(tc, d: Path) -> list[Path]:
    return sorted(d.glob("libvidattn_sm90-*.so"))


def test_build_caches_and_reuses(fresh_ext, monkeypatch, toolchain, capsys):
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    path = _ext.build()
    err = capsys.readouterr().err
    assert path.parent == fresh_ext / "cache" and path.read_bytes() == toolchain.stub.read_bytes()
    assert str(toolchain.nvcc) in err and "release 99.0" in err and "built " in err  # where nvcc is, its version
    assert _ext.last_build_seconds is not None
    assert _ext.build() == path and toolchain.runs() == 1 and _ext.last_build_seconds is None
    assert _ext.build(force=True) == path and toolchain.runs() == 2
    assert (fresh_ext / "cache").stat().st_mode & 0o077 == 0  # created private


def test_read_only_cache_falls_back_to_a_per_user_folder(fresh_ext, monkeypatch, toolchain, capsys):
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    blocker = fresh_ext / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("VIDATTN_CACHE_DIR", str(blocker / "cache"))  # cannot be created, even by root
    path = _ext.build()
    assert path.parent == fresh_ext / "per-user"
    assert "not using the kernel cache" in capsys.readouterr().err


@pytest.mark.skipif(os.getuid() == 0, reason="root writes read-only folders")
def test_read_only_cache_with_the_library_is_used_as_is(fresh_ext, monkeypatch, toolchain):
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    path = _ext.build()
    path.parent.chmod(0o555)
    try:
        assert _ext.build() == path and toolchain.runs() == 1
    finally:
        path.parent.chmod(0o700)


def test_a_read_only_cache_holding_the_library_is_used(fresh_ext, monkeypatch, toolchain):
    """As an administrator's shared, prebuilt cache: owned by root or us, writable by no one else, no writes needed."""
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    path = _ext.build()
    monkeypatch.setattr(os, "access", lambda p, mode: False)  # nothing writable from here on
    assert _ext.build() == path and toolchain.runs() == 1


@pytest.mark.parametrize("what", ["group-writable folder", "world-writable library", "foreign owner"])
def test_unsafe_cache_is_refused_and_rebuilt_elsewhere(what, fresh_ext, monkeypatch, toolchain, capsys):
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    path = _ext.build()
    planted = b"planted by someone else"
    path.write_bytes(planted)  # what another user who could write there would do
    if what == "group-writable folder":
        path.parent.chmod(0o770)
    elif what == "world-writable library":
        path.chmod(0o666)
    else:
        if os.getuid() != 0:
            pytest.skip("only root can hand a folder to another user")
        os.chown(path.parent, 65534, -1)
    new = _ext.build()
    assert new.read_bytes() == toolchain.stub.read_bytes()  # the planted file is never what build() returns
    err = capsys.readouterr().err
    if what == "world-writable library":  # a safe folder: rebuilt in place, atomically replacing the bad file
        assert new == path and (path.stat().st_mode & 0o022) == 0
    else:
        assert new.parent == fresh_ext / "per-user" and "not using the kernel cache" in err
        assert ("writable by group" in err) or ("owned by uid 65534" in err)


def test_leftover_temporary_file_of_a_killed_build_is_never_loaded(fresh_ext, monkeypatch, toolchain):
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    name = _ext.library_name(str(toolchain.nvcc))
    cache = fresh_ext / "cache"
    cache.mkdir(mode=0o700)
    leftover = cache / f".{name}.tmp-99999"
    leftover.write_bytes(b"half a library")
    path = _ext.build()
    assert path == cache / name and path.read_bytes() == toolchain.stub.read_bytes()
    assert not leftover.exists()


def _build_in_subprocess(tc, cache: Path, sleep: float) -> subprocess.Popen:
    env = dict(os.environ, CUDA_HOME=str(tc.cuda_home), VIDATTN_CACHE_DIR=str(cache), FAKE_NVCC_SLEEP=str(sleep),
               PYTHONPATH=str(REPO))
    env.pop("VIDATTN_LIBRARY", None)
    code = "from vidattn import _ext; print(_ext.build())"
    return subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)


def _slow_build_under_way(tc, cache: Path) -> subprocess.Popen:
    """A build whose nvcc sleeps a minute, returned once its temporary library is in the cache."""
    proc = _build_in_subprocess(tc, cache, sleep=60)
    deadline = time.monotonic() + 60
    while not list(cache.glob(".*.tmp-*")) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert list(cache.glob(".*.tmp-*")), "the first build never started"
    return proc


def test_build_killed_halfway_then_a_new_build_succeeds(fresh_ext, toolchain):
    cache = fresh_ext / "shared-cache"
    proc = _slow_build_under_way(toolchain, cache)
    os.killpg(proc.pid, signal.SIGKILL)  # as an OOM kill or a scheduler's SIGKILL would
    proc.wait()
    for pid in toolchain.count_file.read_text().split():  # and its nvcc (a session of its own), mid-write
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pid), signal.SIGKILL)
    assert not list(cache.glob("libvidattn_sm90-*.so"))  # the half-written file never took the library's name
    second = _build_in_subprocess(toolchain, cache, sleep=0)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 0, err
    path = Path(out.strip())
    assert path.read_bytes() == toolchain.stub.read_bytes() and not list(cache.glob(".*.tmp-*"))


def test_processes_building_at_once_build_once(fresh_ext, toolchain):
    """Ranks of one job starting together: one builds, the others wait on the lock and load its library."""
    cache = fresh_ext / "shared-cache"
    procs = [_build_in_subprocess(toolchain, cache, sleep=4) for _ in range(3)]
    results = [p.communicate(timeout=120) for p in procs]
    assert all(p.returncode == 0 for p in procs), [r[1] for r in results]
    paths = {r[0].strip() for r in results}
    assert len(paths) == 1 and Path(paths.pop()).read_bytes() == toolchain.stub.read_bytes()
    assert toolchain.runs() == 1  # whether the others waited on the lock or came after, none built again


def test_no_kernel_sources_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setattr(_ext, "CSRC", tmp_path / "nowhere")
    with pytest.raises(RuntimeError, match="kernel sources not found"):
        _ext.build()


def test_no_nvcc_is_a_clear_error(monkeypatch):
    monkeypatch.setattr(_ext, "find_nvcc", lambda: None)
    with pytest.raises(RuntimeError, match="nvcc not found"):
        _ext.build()


def test_build_module_cli(fresh_ext, toolchain):
    env = dict(os.environ, CUDA_HOME=str(toolchain.cuda_home), VIDATTN_CACHE_DIR=str(fresh_ext / "c"),
               PYTHONPATH=str(REPO))
    env.pop("VIDATTN_LIBRARY", None)
    run = lambda *a: subprocess.run([sys.executable, "-m", "vidattn.build", *a], env=env, capture_output=True,  # noqa
                                    text=True, timeout=120)
    first, again, forced = run("--verbose"), run(), run("--force")
    for r in (first, again, forced):
        assert r.returncode == 0, r.stderr
        assert "kernel library: " + str(fresh_ext / "c") in r.stdout
    assert "built in" in first.stdout and "already built" in again.stdout and "built in" in forced.stdout
    assert str(toolchain.nvcc) in first.stderr  # --verbose shows the command
    assert toolchain.runs() == 2


def test_vidattn_build_is_callable_after_the_module_is_imported(monkeypatch):
    import importlib

    importlib.import_module("vidattn.build")
    called = []
    monkeypatch.setattr(_ext, "build", lambda verbose=False, force=False: called.append((verbose, force)))
    vidattn.build(force=True)
    assert called == [(False, True)]


# ------------------------------------------------------------------------------------------------ bad input
def test_kv_lens_views_are_read_as_their_values(as_if_on_hopper, monkeypatch):
    """A column of a 2-D tensor and an expanded scalar reach the launch as contiguous int32 with the same values
    (the C side reads kv_lens with stride 1)."""
    seen = []
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)

    def fake_forward(q, k, v, out, lse, kv_lens, scale, lib=None, **kw):
        seen.append(kv_lens)
        out.copy_(sdpa_bshd(q, k, v, attn_mask=ops._key_mask(kv_lens, k.shape[1], q.device), scale=scale))

    monkeypatch.setattr(_ext, "forward", fake_forward)
    q, k, v = qkv(b=3)
    table = torch.tensor([[16, 0], [5, 0], [9, 0]], dtype=torch.int32)
    for lens in (table[:, 0], torch.tensor([7], dtype=torch.int32).expand(3),
                 table[:, 0].to(torch.int64)):
        assert vidattn.explain(q, k, v, kv_lens=lens) is None
        out = vidattn.attention(q, k, v, kv_lens=lens)
        assert seen[-1].is_contiguous() and seen[-1].dtype == torch.int32
        assert seen[-1].tolist() == lens.tolist()
        torch.testing.assert_close(out, vidattn.attention(q, k, v, kv_lens=lens.contiguous().clone()))


@pytest.mark.parametrize("case", ["nan q", "inf k", "huge v"])
def test_nan_and_inf_give_sdpa_answer(case):
    q, k, v = qkv(dtype=torch.float32)
    if case == "nan q":
        q[0, 3, 1, 5] = float("nan")
    elif case == "inf k":
        k[1, 2, 0, 0] = float("inf")
    else:
        v[0, 0, 0, 0] = 3e38
    torch.testing.assert_close(vidattn.attention(q, k, v), sdpa_bshd(q, k, v), equal_nan=True)


def _more_bad_calls():
    q, k, v = qkv(b=2, s=6, h=3, d=64, dtype=torch.float32)
    return [
        ((q[:, :0], k, v), {}, ValueError, ">= 1"),
        ((q[:0], k[:0], v[:0]), {}, ValueError, ">= 1"),
        ((q, k, v), {"kv_lens": torch.tensor([3, 4]).expand(2, 2)}, ValueError, "shape (batch,)"),
        ((q, k, v), {"kv_lens": torch.tensor([-1, 4])}, ValueError, "[1, 6]"),
        ((q, k, v), {"kv_lens": torch.tensor([True, False])}, TypeError, "int32 or int64"),
        ((q, k, v), {"scale": True}, TypeError, "scale must be a float"),
        ((q, k, v), {"scale": torch.tensor(0.1)}, TypeError, "scale must be a float"),
        ((q, k, v), {"return_lse": "yes"}, TypeError, "return_lse must be True or False"),
        ((q, k, v), {"return_lse": 1}, TypeError, "return_lse must be True or False"),
        ((q, k, v), {"layout": None}, ValueError, "layout must be"),
        ((q, k, v[..., None]), {}, ValueError, "v must be 4-D"),
        ((q, k, None), {}, TypeError, "v must be a torch.Tensor"),
        ((q.to(torch.complex64), k.to(torch.complex64), v.to(torch.complex64)), {}, TypeError, "complex64"),
    ]


@pytest.mark.parametrize("case", range(len(_more_bad_calls())))
@pytest.mark.parametrize("fn", ["attention", "explain"])
def test_more_bad_inputs_raise_clear_errors(case, fn):
    args, kwargs, exc, fragment = _more_bad_calls()[case]
    with pytest.raises(exc) as info:
        getattr(vidattn, fn)(*args, **kwargs)
    assert fragment in str(info.value) and str(info.value).startswith(f"vidattn.{fn}: ")


@pytest.mark.parametrize("what", ["unaligned", "odd stride", "expanded batch", "last dim strided"])
def test_views_outside_the_envelope_give_sdpa_answer(what, monkeypatch):
    """Views the kernel cannot read are named by explain and answered by SDPA."""
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    base = torch.randn(2, 16, 2, 72 * 2, dtype=torch.bfloat16)
    q, k, v = qkv(dtype=torch.bfloat16)
    if what == "unaligned":
        q = torch.randn(2 * 16 * 2 * 64 + 1, dtype=torch.bfloat16)[1:].view(2, 16, 2, 64)
    elif what == "odd stride":
        q = torch.randn(2, 16, 2, 68, dtype=torch.bfloat16)[..., :64]  # head stride 136 bytes
    elif what == "expanded batch":
        k = k[:1].expand(2, -1, -1, -1)
        v = v[:1].expand(2, -1, -1, -1)
    else:
        q = base[..., ::2][..., :64]
    reason = vidattn.explain(q, k, v)
    assert reason is not None
    monkeypatch.setattr(_ext, "forward", lambda *a, **kw: pytest.fail("launched outside the envelope"))
    torch.testing.assert_close(vidattn.attention(q, k, v), sdpa_bshd(q, k, v))


# ------------------------------------------------------------------------------------------------ autocast
@pytest.mark.parametrize("fn", ["attention", "explain"])
def test_autocast_with_mixed_dtypes_behaves_as_sdpa(fn):
    """An fp32 norm's q/k beside a bf16 v: SDPA casts to the autocast dtype and runs; so does vidattn."""
    q, k, v = qkv(dtype=torch.float32)
    v = v.bfloat16()
    with torch.autocast("cpu", dtype=torch.bfloat16):
        expected = sdpa_bshd(q, k, v)
        if fn == "explain":
            assert isinstance(vidattn.explain(q, k, v), str)  # no TypeError: a reason (the CPU), as for the call
            return
        out = vidattn.attention(q, k, v)
    assert out.dtype == expected.dtype == torch.bfloat16
    torch.testing.assert_close(out, expected)
    with pytest.raises(TypeError, match="share a dtype"):  # outside autocast, mixed dtypes stay an error
        vidattn.attention(q, k, v)


def test_autocast_leaves_float64_alone_as_sdpa_does():
    q, k, v = qkv(dtype=torch.float64)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        out = vidattn.attention(q, k, v)
    assert out.dtype == torch.float64


# ------------------------------------------------------------------------------------------------ more faults
def test_threads_at_first_use_build_once_and_all_fall_back(fresh_ext, as_if_on_hopper, monkeypatch, toolchain):
    """A server's first requests arrive together while the library is still building: one build, every thread waits
    for it and gets an answer (here SDPA's: the stub's launch fails), none raises or hangs."""
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    monkeypatch.setenv("FAKE_NVCC_SLEEP", "2")
    q, k, v = qkv()
    expected = sdpa_bshd(q, k, v)
    outs, errors = {}, []

    def work(i):
        try:
            outs[i] = vidattn.attention(q, k, v)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(repr(exc))

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", vidattn.VidattnFallbackWarning)
        threads = [threading.Thread(target=work, args=(i,)) for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=60)
    assert not any(t.is_alive() for t in threads) and not errors, errors
    assert len(outs) == 4 and all(torch.equal(o, expected) for o in outs.values())
    assert toolchain.runs() == 1
    assert "launch refused" in _ext.runtime_reason()


def test_a_process_waiting_on_the_lock_builds_when_the_builder_is_killed(fresh_ext, toolchain):
    """The lock is an flock: the kernel drops it with the dead builder, and the waiting process builds instead of
    waiting out BUILD_TIMEOUT_S."""
    cache = fresh_ext / "shared-cache"
    first = _slow_build_under_way(toolchain, cache)
    second = _build_in_subprocess(toolchain, cache, sleep=0)
    err_lines = []
    reader = threading.Thread(target=lambda: err_lines.extend(second.stderr), daemon=True)
    reader.start()
    deadline = time.monotonic() + 60
    while not any("waiting for another process" in ln for ln in err_lines) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert second.poll() is None and any("waiting" in ln for ln in err_lines), err_lines  # on the lock
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    for pid in toolchain.count_file.read_text().split()[:1]:  # the first build's nvcc, a session of its own
        with contextlib.suppress(ProcessLookupError):
            os.killpg(int(pid), signal.SIGKILL)
    t0 = time.monotonic()
    assert second.wait(timeout=60) == 0, err_lines
    reader.join(timeout=10)
    assert time.monotonic() - t0 < 30  # it took the lock at once, not after the dead builder's timeout
    out = second.stdout.read()
    assert Path(out.strip()).read_bytes() == toolchain.stub.read_bytes() and not list(cache.glob(".*.tmp-*"))
    assert toolchain.runs() == 2  # the dead build and the waiting process's own


def _compile_stub(tmp: Path, name: str, source: str) -> Path:
    import shutil

    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler for the stub library")
    src = tmp / f"{name}.c"
    src.write_text(source)
    lib = tmp / f"lib{name}.so"
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(lib), str(src)], check=True)
    return lib


def test_a_library_without_the_entry_points_is_one_stated_fallback(fresh_ext, as_if_on_hopper, monkeypatch):
    """A shared object that loads but is not the kernel library (an old build, a wrong VIDATTN_LIBRARY)."""
    lib = _compile_stub(fresh_ext, "empty", "int unrelated(void) { return 0; }\n")
    monkeypatch.setenv("VIDATTN_LIBRARY", str(lib))
    q, k, v = qkv()
    outs, msgs = fallback_warnings(lambda: [vidattn.attention(q, k, v) for _ in range(3)])
    for out in outs:
        torch.testing.assert_close(out, sdpa_bshd(q, k, v))
    assert len(msgs) == 1 and "kernel library unavailable" in msgs[0] and "vidattn_sm90_fwd" in msgs[0], msgs
    assert vidattn.kernel_available() is False


# A library whose 8-bit entry points exist and whose 8-bit launch fails (counted in q8_launches).
Q8_STUB_C = """
#include <stdint.h>
int vidattn_sm90_fwd(const void* a, void* s) { (void)a; (void)s; return 1; }
const char* vidattn_sm90_last_error(void) { return "stub library: launch refused"; }
uint64_t vidattn_sm90_workspace_bytes(void) { return 0; }
int q8_launches = 0;
int vidattn_q8_fwd(const void* a, void* s) { (void)a; (void)s; ++q8_launches; return 1; }
uint64_t vidattn_q8_workspace_bytes(int64_t b, int64_t h, int64_t sq, int64_t skv, int64_t d) {
  (void)b; (void)h; (void)sq; (void)skv; (void)d; return 1024;
}
"""


def test_failed_8bit_launch_is_one_stated_fallback_and_explain_agrees(fresh_ext, as_if_on_hopper, monkeypatch):
    import ctypes

    from vidattn import quant8

    lib_path = _compile_stub(fresh_ext, "q8stub", Q8_STUB_C)
    monkeypatch.setenv("VIDATTN_LIBRARY", str(lib_path))
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    monkeypatch.setattr(quant8, "_declared", set())
    monkeypatch.setattr(quant8, "_launch_error", None)  # the failure this test provokes must not outlive it
    # quant8 asks torch.cuda for the stream and the device guard itself (as_if_on_hopper covers _ext's).
    monkeypatch.setattr(torch.cuda, "current_stream", lambda device=None: type("S", (), {"cuda_stream": 0})())
    monkeypatch.setattr(torch.cuda, "device", lambda device: contextlib.nullcontext())
    # The exact kernel works (SDPA's answer written where the kernel would write): only the 8-bit launch fails.
    monkeypatch.setattr(_ext, "forward", lambda q, k, v, out, lse, lens, sc, lib=None, **kw: out.copy_(
        sdpa_bshd(q, k, v, scale=sc)))
    q, k, v = qkv()
    assert vidattn.explain(q, k, v, precision="8bit") is None
    outs, msgs = fallback_warnings(lambda: [vidattn.attention(q, k, v, precision="8bit") for _ in range(3)])
    for out in outs:  # the exact path ran instead
        torch.testing.assert_close(out, sdpa_bshd(q, k, v))
    launches = ctypes.c_int.in_dll(_ext.load(), "q8_launches").value
    assert launches == 1  # the failing 8-bit kernel is not launched again
    assert any("8-bit" in m and "launch refused" in m for m in msgs), msgs
    assert "launch refused" in vidattn.explain(q, k, v, precision="8bit")


# ------------------------------------------------------------------------------------------------ more bad input
@pytest.mark.parametrize("fn", ["attention", "explain"])
def test_float8_inputs_are_a_clear_error(fn):
    q, k, v = (t.to(torch.float8_e4m3fn) for t in qkv(dtype=torch.float32))
    with pytest.raises(TypeError, match=r"^vidattn\.\w+: .*float8_e4m3fn"):
        getattr(vidattn, fn)(q, k, v)


def _bad_kv_lens():
    return [
        (torch.tensor(3, dtype=torch.int32), ValueError, "shape (batch,)"),  # a 0-d tensor
        (torch.tensor([[16], [5]], dtype=torch.int32), ValueError, "shape (batch,)"),
        (torch.tensor([16, 5], dtype=torch.int16), TypeError, "int32 or int64"),
        (torch.tensor([16, 5], dtype=torch.uint8), TypeError, "int32 or int64"),
        (torch.tensor([2 ** 32 + 3, 5]), ValueError, "[1, 16]"),  # int64 beyond int32 on the CPU: checked
        (torch.tensor([-(2 ** 32) + 3, 5]), ValueError, "[1, 16]"),
        ((16, 5), TypeError, "kv_lens must be a torch.Tensor"),
        (torch.tensor([16, 5], dtype=torch.int32).to("meta"), ValueError, "kv_lens is on meta"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_kv_lens())))
@pytest.mark.parametrize("fn", ["attention", "explain"])
def test_bad_kv_lens_raise_clear_errors(case, fn):
    lens, exc, fragment = _bad_kv_lens()[case]
    q, k, v = qkv()
    with pytest.raises(exc) as info:
        getattr(vidattn, fn)(q, k, v, kv_lens=lens)
    assert fragment in str(info.value) and str(info.value).startswith(f"vidattn.{fn}: ")


@pytest.mark.parametrize("what", ["float64", "float32", "head dim 60", "head dim 264", "expanded heads (GQA)",
                                  "expanded seq", "bhsd transposed views", "non-contiguous kv_lens"])
def test_inputs_outside_the_envelope_are_named_and_answered_by_sdpa(what, monkeypatch):
    """explain names the reason, the call returns SDPA's answer (the device check passed as on a Hopper GPU)."""
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    monkeypatch.setattr(_ext, "forward", lambda *a, **kw: pytest.fail("launched outside the envelope"))
    q, k, v = qkv(b=2, s=16, h=4, d=64)
    kw, expect = {}, None
    if what == "float64":
        q, k, v = (t.double() for t in (q, k, v))
        expect = "dtype"
    elif what == "float32":
        q, k, v = (t.float() for t in (q, k, v))
        expect = "dtype"
    elif what.startswith("head dim"):
        d = int(what.split()[-1])
        q, k, v = qkv(b=2, s=16, h=4, d=d)
        expect = "head dim"
    elif what == "expanded heads (GQA)":  # a common way to write grouped-query attention: K/V repeated by expand
        k, v = k[:, :, :1].expand(-1, -1, 4, -1), v[:, :, :1].expand(-1, -1, 4, -1)
        expect = "expanded along heads"
    elif what == "expanded seq":
        k, v = k[:, :1].expand(-1, 16, -1, -1), v[:, :1].expand(-1, 16, -1, -1)
        expect = "expanded along seq"
    elif what == "bhsd transposed views":  # a (B, H, S, D) tensor read as bshd is fine: no fallback, no error
        monkeypatch.setattr(_ext, "forward", lambda q, k, v, out, lse, lens, sc, lib=None, **kw: out.copy_(
            sdpa_bshd(q, k, v, scale=sc)))
        qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
        assert vidattn.explain(qh, kh, vh, layout="bhsd") is None
        torch.testing.assert_close(vidattn.attention(qh, kh, vh, layout="bhsd").transpose(1, 2), sdpa_bshd(q, k, v))
        return
    else:  # a column of a table: not int32 contiguous; still inside (it is read contiguous), so nothing to name
        monkeypatch.setattr(_ext, "forward", lambda q, k, v, out, lse, lens, sc, lib=None, **kw: out.copy_(
            sdpa_bshd(q, k, v, attn_mask=ops._key_mask(lens, k.shape[1], q.device), scale=sc)))
        lens = torch.tensor([[16, 0], [7, 0]])[:, 0]
        assert vidattn.explain(q, k, v, kv_lens=lens) is None
        torch.testing.assert_close(vidattn.attention(q, k, v, kv_lens=lens),
                                   sdpa_bshd(q, k, v, attn_mask=ops._key_mask(lens, 16, q.device)))
        return
    reason = vidattn.explain(q, k, v, **kw)
    assert reason is not None and expect in reason, reason
    torch.testing.assert_close(vidattn.attention(q, k, v, **kw), sdpa_bshd(q, k, v))


@pytest.mark.parametrize("precision", ["exact", "8bit"])
def test_huge_sizes_are_named_not_launched(precision, monkeypatch):
    """Shapes past the kernels' index ranges (2^31 query tiles; the 8-bit grid's 65535 batch x heads), as overlapping
    views of a small buffer: explain names the limit, nothing is allocated or launched."""
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    base = torch.zeros(1 << 21, dtype=torch.bfloat16)
    if precision == "exact":  # 2^16 batch x 2^16 queries x 2^10 heads: 2^35 tiles of 128 rows
        q = base.as_strided((1 << 16, 1 << 16, 1 << 10, 64), (8, 8, 8, 1))
        expect = "too many query tiles"
    else:  # 256 x 256 = 65536 batch x heads
        q = base.as_strided((256, 1024, 256, 64), (8, 8, 8, 1))
        expect = "batch * heads over 65535"
    reason = vidattn.explain(q, q, q, precision=precision)
    assert reason is not None and expect in reason, reason


def _live_in_group(group: int) -> list[int]:
    """The processes of process group `group` that are not zombies (a killed orphan stays a zombie until some init
    reaps it, which a container's PID 1 may never do)."""
    live = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            if int(fields[2]) == group and fields[0] != "Z":
                live.append(int(stat.parent.name))
    return live


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads process groups from /proc")
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_a_killed_builder_takes_its_compiler_down(sig, fresh_ext, toolchain):
    """`timeout`, Slurm, `docker stop` or the OOM killer end the process that runs the build with a signal its
    `finally` never sees; nvcc (its own session) and its children must not run on as orphans for minutes."""
    cache = fresh_ext / "shared-cache"
    builder = _slow_build_under_way(toolchain, cache)  # nvcc (a fake one, sleeping a minute in a child) under way
    nvcc = int(toolchain.count_file.read_text().split()[0])
    assert _live_in_group(nvcc), "the fake nvcc is not running"
    os.killpg(builder.pid, sig)  # the builder's whole group, as `timeout` signals it
    builder.wait(timeout=30)
    deadline = time.monotonic() + 15
    while _live_in_group(nvcc) and time.monotonic() < deadline:
        time.sleep(0.1)
    left = _live_in_group(nvcc)
    for pid in left:  # (a failure must not leave them either)
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    assert not left, f"nvcc's processes {left} outlived the builder"


def test_a_malformed_build_timeout_is_named(fresh_ext, toolchain, monkeypatch):
    for bad in ("abc", "0", "-5", "nan", "inf"):
        monkeypatch.setenv("VIDATTN_BUILD_TIMEOUT", bad)
        with pytest.raises(RuntimeError, match="VIDATTN_BUILD_TIMEOUT must be a number of seconds above 0"):
            _ext._build_in(str(toolchain.nvcc), fresh_ext, "x.so", False, False)
    assert toolchain.runs() == 0  # refused before nvcc runs
    monkeypatch.setenv("VIDATTN_BUILD_TIMEOUT", " 2.5 ")
    assert _ext._build_timeout() == 2.5
    monkeypatch.setenv("VIDATTN_BUILD_TIMEOUT", "")
    assert _ext._build_timeout() == _ext.BUILD_TIMEOUT_S


def test_the_build_command_names_a_malformed_setting(fresh_ext, toolchain, monkeypatch, capsys):
    build_cmd = importlib.import_module("vidattn.build")  # (the package's `build` attribute is the function)
    monkeypatch.setattr(_ext, "find_nvcc", lambda: str(toolchain.nvcc))
    monkeypatch.setenv("VIDATTN_BUILD_TIMEOUT", "abc")
    assert build_cmd.main([]) == 1
    err = capsys.readouterr().err
    assert err.startswith("vidattn.build: VIDATTN_BUILD_TIMEOUT must be") and "Traceback" not in err, err


def test_numpy_scalars_and_an_attention_calls_arguments_are_taken():
    """A NumPy scale is a real number as SDPA takes it; explain takes the arguments of an attention call as they are
    (return_lse included) and gives the same answer with and without it."""
    import numpy as np

    q, k, v = qkv(b=1, s=6, h=2, d=64, dtype=torch.float32)
    for scale in (np.float32(0.125), np.float64(0.125), np.int64(1)):
        out = vidattn.attention(q, k, v, scale=scale)
        torch.testing.assert_close(out, sdpa_bshd(q, k, v, scale=float(scale)))
    kwargs = {"scale": np.float32(0.125), "return_lse": True}
    out, lse = vidattn.attention(q, k, v, **kwargs)
    assert vidattn.explain(q, k, v, **kwargs) == vidattn.explain(q, k, v, scale=0.125)


def test_no_watcher_without_a_python_to_run_it(monkeypatch):
    """An application embedding Python may have itself as sys.executable: the build then runs without the watcher
    rather than starting that application with `-c`."""
    started = []
    monkeypatch.setattr(_ext.subprocess, "Popen", lambda *a, **k: started.append(a))
    monkeypatch.setattr(_ext.sys, "executable", "/opt/app/bin/renderer")
    assert _ext._watch_group(12345) is None and not started
    monkeypatch.setattr(_ext.sys, "executable", "")
    assert _ext._watch_group(12345) is None and not started
