"""v12 of the 8-bit kernel (csrc/sm90/q8_fwd.cuh kV12, quant8.set_v12; dev/NOTES_8bit.md "v12"), without a GPU: the
two arithmetic rewrites it rests on are exact (the steady blocks' row max by subtracting 1.5 * 2^23 from the biased
accumulator's float equals the I2F of the unbiased integer for every score the kernel can produce; a row-sum chain
started at its first pair sum equals 0 + it for every p the exponentials give), the Python selector against a faked
library, and the C ABI's selector and builds as written."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from _support import check_q8_selector
from vidattn import quant8

REPO = Path(__file__).resolve().parent.parent
SRC = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()
CAPI = (REPO / "csrc/capi_8bit.cuh").read_text()
MAGIC_BITS = 0x4B400000


def test_steady_max_conversion_is_the_i2f_bit_for_bit():
    """Every x with |x| <= 128 * 127 * 128 (D=128's largest |q . k| in INT8, under 2^21): the float whose bits are
    0x4B400000 + x, minus 1.5 * 2^23 in fp32, is float(x) exactly, and so is its product with any scale c."""
    lim = 128 * 127 * 128
    x = torch.arange(-lim, lim + 1, dtype=torch.int32)
    f = (x + MAGIC_BITS).view(torch.float32)
    got = f - torch.tensor(12582912.0, dtype=torch.float32)
    assert torch.equal(got, x.float())
    c = torch.tensor(0.0123457, dtype=torch.float32)
    assert torch.equal(got * c, x.float() * c)
    # and the claim fails where it should: outside the binade (|x| >= 2^22) the bits are no longer 1.5 * 2^23 + x
    far = torch.tensor([1 << 22, -(1 << 22) - 1], dtype=torch.int32)
    assert not torch.equal((far + MAGIC_BITS).view(torch.float32) - 12582912.0, far.float())


def test_row_sum_chain_start_is_bit_for_bit():
    """0 + s is s bit for bit for every s >= +0 (the pair sums of exponentials, +0 included), not for -0: the kernel's
    claim rests on p never being -0 (ex2 of any input, -inf included, is >= +0)."""
    g = torch.Generator().manual_seed(int(torch.randint(0, 1 << 30, ()).item()))
    s = torch.cat([torch.rand(100000, generator=g) * 512, torch.tensor([0.0, 2.0 ** -149, 448.0])]).float()
    assert torch.equal((torch.zeros_like(s) + s).view(torch.int32), s.view(torch.int32))
    assert torch.exp2(torch.tensor([-float("inf"), -200.0])).ge(0).all()
    assert (torch.tensor(0.0) + torch.tensor(-0.0)).view(torch.int32) != torch.tensor(-0.0).view(torch.int32)


def test_kernel_source_v12():
    assert "if constexpr (kV12 > 0) cwg = __shfl_sync(0xffffffffu, cwg, 0);" in SRC
    assert "if (kSteady && kCvt == 2 && !tail) mx = (__int_as_float(im) - kQ8Magic) * c[r];" in SRC
    assert "else mx = im == INT32_MIN ? kNegInf : q8ptx::i2f(im - kBias) * c[r];" in SRC
    assert "if (kSumFirst && i < 2) {" in SRC
    assert re.search(r"static_assert\(kV12 == 0 \|\| \(kDescInc == 2 && kLazy == 0 && kExpTurns && kCvt == 2", SRC)


def test_set_v12_validates_reaches_the_library_and_needs_it():
    check_q8_selector("v12", quant8.set_v12, quant8.last_v12, top=1)


def test_v12_selector_in_the_c_abi():
    """Off by default (not yet measured); the setter's range; the environment variable; exactly one v12 build per
    dtype, on v10 mode 1 (kLazy 0, kDescInc 2) of D=128 schedule 3 with conversion 2; a forced mode 1 elsewhere
    refused, on schedule 3 with v10 mode 0 too."""
    assert "#define VIDATTN_Q8_V12 1" in CAPI
    assert 'extern "C" int vidattn_q8_set_v12(int mode)' in CAPI and "if (mode < -1 || mode > 1) return 1;" in CAPI
    assert 'env_default("VIDATTN_Q8_V12", VIDATTN_Q8_V12, 0, 1)' in CAPI
    assert CAPI.count("kSeq, kTurns, 2, 0, 0, 2, 1>(a, l, s)") == 2
    assert len(re.findall(r"q8_launch<[^>]*, \d+, \d+, \d+, \d+, 1>", CAPI)) == 2
    assert "if (v10 != 1 && g_q8_v12 > 0)" in CAPI
    assert "if (g_q8_v12 > 0)\n    return fail(" in CAPI
    assert "g_q8_last_v12 = kV12;" in CAPI and "g_q8_last_v12 = -1;" in CAPI


def _timing(shape, ratio_synced, ratio_kernel, passes=6):
    a, b = "d128 v12 0 (default)", "d128 v12 1 (fewer instr.)"
    return {"shape": shape, "flops": 1e12, "synced": {a: [900.0] * passes, b: [900.0 * x for x in ratio_synced]},
            "queued": {a: [900.0] * passes, b: [900.0] * passes},
            "kernel_ms": {a: [1.0] * passes, b: [1.0 / x for x in ratio_kernel]}, "rel_l2": {a: 3.8e-2, b: 3.8e-2}}


def test_ab_driver_rule(capsys):
    """dev/q8_v12_ab.py's verdict: ADOPT only with the medians ahead on both shapes, >= 10 of 12 passes won and the
    kernel-only sign agreeing; a failed check keeps it off."""
    from _support import load_script

    mod = load_script(REPO / "dev/q8_v12_ab.py", "q8_v12_ab_under_test")
    win = [1.01, 1.02, 1.01, 0.99, 1.015, 1.01]
    res = {"checks": [{"variant": "x", "ok": True}],
           "timing": [_timing("Wan 1.3B self", win, [1.02] * 6), _timing("seed 8K", win, [1.01] * 6)]}
    mod.table(res)
    out = capsys.readouterr().out
    assert "== 8-bit v12 A/B" in out and "paired passes won 10/12" in out and out.rstrip().endswith("-> ADOPT")
    res["timing"][1] = _timing("seed 8K", [1.01, 0.99, 0.98, 1.01, 1.01, 0.99], [1.01] * 6)
    mod.table(res)
    assert capsys.readouterr().out.rstrip().endswith("-> keep v12 off")
    res["timing"][1] = _timing("seed 8K", win, [1.01] * 6)
    res["checks"][0]["ok"] = False
    mod.table(res)
    assert capsys.readouterr().out.rstrip().endswith("-> keep v12 off")


def test_three_chain_row_max_covers_each_value_once():
    """q8_int_part_max3's literal chain bounds (0-10, 11-21, 22-31 with the last value added alone) as written in the
    source: every one of a row's 32 values enters exactly one chain."""
    body = SRC[SRC.index("__device__ __forceinline__ void q8_int_part_max3("):]
    body = body[:body.index("\n}\n")]
    assert "int32_t m0 = val(0, r), m1 = val(11, r), m2 = val(22, r);" in body
    assert "for (int k = 1; k < 11; k += 2) {" in body and "for (int k = 23; k < 31; k += 2)" in body
    assert "part[r][2] = max(m2, val(31, r));" in body
    seen = [0, 11, 22] + [x for k in range(1, 11, 2) for x in (k, k + 1, 11 + k, 12 + k)]
    seen += [x for k in range(23, 31, 2) for x in (k, k + 1)] + [31]
    assert sorted(seen) == list(range(32))
