"""The ctypes mirror of the C ABI (vidattn/_ext.py `_Args`) against csrc/capi.h: same fields, same order, same
widths. A mismatch would not crash; it would hand the kernel wrong pointers."""
from __future__ import annotations

import ctypes
import re
from pathlib import Path

from vidattn import _ext

CAPI_H = Path(__file__).resolve().parent.parent / "csrc" / "capi.h"
CAPI_CU = CAPI_H.with_name("capi.cu")
C_TYPES = {"const void*": ctypes.c_void_p, "void*": ctypes.c_void_p, "float*": ctypes.c_void_p,
           "const int32_t*": ctypes.c_void_p, "int64_t": ctypes.c_int64, "float": ctypes.c_float,
           "int32_t": ctypes.c_int32, "uint64_t": ctypes.c_uint64}


def header_fields(struct: str = "VidattnFwdArgs") -> list[tuple[str, type, int]]:
    body = re.search(rf"typedef struct {struct} \{{(.*?)\}} {struct};", CAPI_H.read_text(), re.S).group(1)
    fields = []
    for line in body.splitlines():
        line = line.split("//")[0].strip()
        if not line:
            continue
        m = re.match(r"((?:const )?\w+\*?)\s+(.+);$", line)
        assert m, f"unparsed line in capi.h: {line!r}"
        ctype = C_TYPES[m.group(1)]
        for name in (n.strip() for n in m.group(2).split(",")):
            arr = re.match(r"(\w+)\[(\d+)\]$", name)
            fields.append((arr.group(1), ctype, int(arr.group(2))) if arr else (name, ctype, 1))
    return fields


def mirror_fields(structure) -> list[tuple[str, type, int]]:
    return [(name, ctype._type_, ctype._length_) if issubclass(ctype, ctypes.Array) else (name, ctype, 1)
            for name, ctype in structure._fields_]


def test_args_mirror_matches_capi_h():
    assert mirror_fields(_ext._Args) == header_fields()


def test_rope_args_mirror_matches_capi_h():
    """vidattn/rotary.py's `_RopeArgs` against `VidattnRopeArgs` (the fused RoPE's entry, csrc/capi_rope.cuh)."""
    from vidattn import rotary
    assert mirror_fields(rotary._RopeArgs) == header_fields("VidattnRopeArgs")


def test_rope_entry_is_declared_and_included():
    """capi.h declares the RoPE entry points, capi.cu includes their definitions, and vidattn/rotary.py declares the
    argtypes of the one it calls (a missing declaration would let ctypes pass the struct by value)."""
    h = CAPI_H.read_text()
    assert "int vidattn_rope(const VidattnRopeArgs* args, void* stream);" in h
    assert "int vidattn_rope_version(void);" in h
    assert '#include "capi_rope.cuh"' in CAPI_CU.read_text()
    src = (CAPI_H.parent / "capi_rope.cuh").read_text()
    assert 'extern "C" int vidattn_rope(const VidattnRopeArgs* a, void* stream)' in src

    class Fn:
        argtypes = restype = None

    class Lib:
        vidattn_rope = Fn()
        vidattn_sm90_last_error = Fn()

    from vidattn import rotary
    lib = Lib()
    assert rotary._entry(lib) is lib.vidattn_rope
    assert lib.vidattn_rope.argtypes[0]._type_ is rotary._RopeArgs and lib.vidattn_rope.restype is ctypes.c_int
    assert rotary._entry(object()) is None  # a library that predates the fused RoPE


class _FakeLib:
    def __init__(self, nbytes):
        self.nbytes, self.calls = nbytes, 0

    def vidattn_sm90_workspace_bytes(self):
        self.calls += 1
        return self.nbytes


def test_workspace_is_fresh_per_call_and_only_when_asked(monkeypatch):
    """One buffer per launch from torch's caching allocator (two calls on one stream, from two threads or inside
    CUDA graphs, never share one); the size is asked of the library once per device."""
    import contextlib

    import torch
    monkeypatch.setattr(_ext, "_device_guard", lambda d: contextlib.nullcontext())
    monkeypatch.setattr(_ext, "_workspace_bytes", {})
    cpu = torch.device("cpu")
    none = _FakeLib(0)
    assert _ext.workspace(none, cpu) is None and _ext.workspace(none, cpu) is None
    assert none.calls == 1  # "needs none" is remembered too
    lib = _FakeLib(4096 + 64)
    ws = _ext.workspace(lib, cpu)
    assert ws.numel() == 4096 + 64 and ws.dtype == torch.uint8
    assert _ext.workspace(lib, cpu) is not ws and lib.calls == 1
    # A library without the entry point (an older build) needs none.
    assert _ext.workspace(object(), cpu) is None


def test_max_scale_is_the_one_capi_cu_enforces():
    """_ext.MAX_SCALE (the envelope, so explain answers first) and the launch's own refusal in csrc/capi.cu are two
    copies of one limit: a drift would let explain say yes to a call the launch refuses, or the other way round."""
    src = CAPI_CU.read_text()
    checks = re.findall(r"if \(a->scale > ([0-9.e+]+)f\) return fail\(\"softmax scale must be at most ([0-9.e+]+)\"\)", src)
    assert len(checks) == 1, "csrc/capi.cu: the scale's upper bound check not found once (update this test's pattern)"
    bound, message = checks[0]
    assert float(bound) == float(message) == _ext.MAX_SCALE
    assert "MAX_SCALE" in src  # its comment points back at the Python copy


def test_rope_head_dim_bound_is_the_one_capi_rope_enforces():
    """rotary.MAX_HEAD_DIM (the Python check, so rope_explain answers first) and csrc/capi_rope.cuh's refusal."""
    from vidattn import rotary
    src = (CAPI_H.parent / "capi_rope.cuh").read_text()
    bounds = re.findall(r"a->head_dim > (\d+) \|\|", src)
    assert bounds == [str(rotary.MAX_HEAD_DIM)]


def test_tail_kv_lens_switch():
    """kv_lens calls in the bf16 tail launch (csrc/capi.cu, tail_kv_lens): on by default, a run-time setter that takes
    -1..1 and refuses the rest, the environment variable read once, and the plan's gate; _ext's wrapper validates
    before it calls and names a library that predates the switch."""
    import pytest

    src, h = CAPI_CU.read_text(), CAPI_H.read_text()
    assert "#define VIDATTN_TAIL_KV_LENS 1" in src
    assert 'vidattn::env_default("VIDATTN_TAIL_KV_LENS", VIDATTN_TAIL_KV_LENS, 0, 1)' in src
    assert "(a.kv_lens != nullptr && !tail_kv_lens())" in src
    assert 'extern "C" int vidattn_sm90_set_tail_kv_lens(int mode) {\n  if (mode < -1 || mode > 1) return 1;' in src
    assert "int vidattn_sm90_set_tail_kv_lens(int mode);" in h and "int vidattn_sm90_tail_kv_lens(void);" in h

    class Lib:
        def __init__(self):
            self.mode = -1

        def vidattn_sm90_set_tail_kv_lens(self, mode):
            if mode < -1 or mode > 1:
                return 1
            self.mode = mode
            return 0

        def vidattn_sm90_tail_kv_lens(self):
            return 1 if self.mode != 0 else 0

    lib = Lib()
    _ext.set_tail_kv_lens(0, lib)
    assert lib.mode == 0 and _ext.tail_kv_lens(lib) == 0
    _ext.set_tail_kv_lens(-1, lib)
    assert _ext.tail_kv_lens(lib) == 1
    for bad in (2, -2, True, 1.0, "1"):
        with pytest.raises(ValueError, match="set_tail_kv_lens"):
            _ext.set_tail_kv_lens(bad, lib)
    assert lib.mode == -1
    with pytest.raises(RuntimeError, match="predates the tail launch with kv_lens"):
        _ext.set_tail_kv_lens(1, object())


def test_tail_rounds_switch():
    """The tail launch in two short rounds or balanced (csrc/capi.cu, plan_tail): off by default (call P36), only
    where one range a tile per SM splits nothing, the 8-bit plan's cost model or tail_plan.h's balanced chunk, at most
    two items per SM (the workspace follows the setting, and _ext asks its size again after a switch); the setter
    takes -1, 1, 2, 3; _ext's wrapper validates first."""
    import pytest

    src, h = CAPI_CU.read_text(), CAPI_H.read_text()
    assert "#define VIDATTN_TAIL_ROUNDS 1" in src
    assert 'vidattn::env_default("VIDATTN_TAIL_ROUNDS", VIDATTN_TAIL_ROUNDS, 1, 3)' in src
    # the search is tail_plan.h's, shared with the 8-bit plan (tests/test_tail_plan_host.py compiles and checks it)
    assert ("  if (splits < 2 && tail_rounds() == 2)\n    splits = vidattn::cheapest_tail_split(r, blocks, sms, "
            "VIDATTN_TAIL_MIN_BLOCKS, kTailMaxSplits, kTailMaxItemsPerSm);") in src
    assert ("  if (splits < 2 && tail_rounds() == 3)\n    chunk = vidattn::balanced_tail_chunk(r, blocks, sms, "
            "VIDATTN_TAIL_MIN_BLOCKS);") in src
    assert "int vidattn_sm90_set_tail_rounds(int rounds);" in h and "int vidattn_sm90_tail_rounds(void);" in h

    class Lib:
        rounds = 1

        def vidattn_sm90_set_tail_rounds(self, rounds):
            if rounds not in (-1, 1, 2, 3):
                return 1
            self.rounds = 1 if rounds == -1 else rounds
            return 0

        def vidattn_sm90_tail_rounds(self):
            return self.rounds

    lib = Lib()
    _ext._workspace_bytes[(12345, 0)] = 1  # a size asked before the switch
    _ext.set_tail_rounds(2, lib)
    assert _ext.tail_rounds(lib) == 2 and not _ext._workspace_bytes
    _ext._workspace_bytes[(12345, 0)] = 1
    _ext.set_tail_rounds(3, lib)
    assert _ext.tail_rounds(lib) == 3 and not _ext._workspace_bytes
    _ext.set_tail_rounds(-1, lib)
    assert _ext.tail_rounds(lib) == 1
    for bad in (0, 4, True, 2.0):
        with pytest.raises(ValueError, match="set_tail_rounds"):
            _ext.set_tail_rounds(bad, lib)
    with pytest.raises(RuntimeError, match="predates the tail launch in two rounds"):
        _ext.set_tail_rounds(2, object())
