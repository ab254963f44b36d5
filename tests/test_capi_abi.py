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


def header_fields() -> list[tuple[str, type, int]]:
    body = re.search(r"typedef struct VidattnFwdArgs \{(.*?)\} VidattnFwdArgs;", CAPI_H.read_text(), re.S).group(1)
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


def test_args_mirror_matches_capi_h():
    mirror = []
    for name, ctype in _ext._Args._fields_:
        if issubclass(ctype, ctypes.Array):
            mirror.append((name, ctype._type_, ctype._length_))
        else:
            mirror.append((name, ctype, 1))
    assert mirror == header_fields()


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
