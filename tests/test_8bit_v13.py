"""v13 of the 8-bit kernel (csrc/sm90/q8_fwd.cuh kV13, quant8.set_v13; dev/NOTES_8bit.md "v13"), without a GPU: the
row-sum recurrence with the product one block late equals the online softmax's, block 0's product of zeros leaves 0
(not NaN), the kernel's pieces in the order the register argument needs (the product in S's group, its 4 registers
consumed at S's wait, P kept to then, the last block's product after the loop, no quad sum), the m64n8k32 wrapper,
the Python selector against a faked library, the C ABI's selector and builds as written, and the A/B driver's rule."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch
from _support import check_q8_selector, load_script

from vidattn import quant8

REPO = Path(__file__).resolve().parent.parent
SRC = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()
CAPI = (REPO / "csrc/capi_8bit.cuh").read_text()
OPS = (REPO / "csrc/sm90/wgmma8_ops.cuh").read_text()


def _seq_body():
    body = SRC[SRC.index("__device__ __forceinline__ void q8_consumer_seq("):]
    return body[:body.index("\ntemplate <int kD, int kWGs, bool kSumMma, bool kExp16, bool kFp16, bool kSeq")]


def test_lagged_row_sum_recurrence():
    """row_sum <- (row_sum + s_{j-1}) * alpha_j each block j (s_{j-1} the product that arrives at S_j's wait; zeros at
    j = 0) and + s_last after the loop is the online softmax's l_j = l_{j-1} alpha_j + s_j, for random maxes and sums;
    at j = 0 alpha = 2^(-inf - m) = 0 multiplies 0 + 0 (a product of zero bytes): 0, not NaN."""
    g = torch.Generator().manual_seed(5)
    for n in (1, 2, 7, 64):
        m = torch.cumsum(torch.rand(n, generator=g, dtype=torch.float64) * (torch.rand(n, generator=g) < 0.3), 0)
        alpha = torch.exp2(torch.cat([torch.tensor([-float("inf")], dtype=torch.float64), m[:-1]]) - m)
        s = torch.rand(n, generator=g, dtype=torch.float64) * 1000
        ref = torch.zeros((), dtype=torch.float64)
        for j in range(n):
            ref = ref * alpha[j] + s[j]
        lag = torch.zeros((), dtype=torch.float64)
        for j in range(n):
            lag = (lag + (s[j - 1] if j > 0 else 0.0)) * alpha[j]
        lag = lag + s[-1]
        torch.testing.assert_close(lag, ref, rtol=1e-12, atol=0)
    assert float(torch.tensor(0.0) * torch.exp2(torch.tensor(-float("inf")))) == 0.0


def test_m64n8k32_wrapper():
    assert "template <> struct WgmmaE4m3<8> {" in OPS
    assert "wgmma.mma_async.sync.aligned.m64n8k32.f32.e4m3.e4m3 " in OPS
    assert "PV_NS = (8, 64, 72, 128, 136)" in (REPO / "csrc/tools/gen_wgmma8.py").read_text()


def test_kernel_source_v13():
    assert re.search(r"static_assert\(kV13 >= 0 && kV13 <= 2 && \(kV13 == 0 \|\| kV12 == 1\),", SRC)
    assert ("ptx::WgmmaE4m3<8>::rs(rs, pa[kk], q8ptx::desc_pack(ob + 2 * kk, q8ptx::smem_desc_hi<128>()), kk > 0);"
            in SRC)
    assert "const uint32_t ones_smem = ptx::smem_addr(s.v[0]) + T::kVBytes;" in SRC
    assert "if constexpr (kSumMma || kV13 > 0) {\n    // The ones rows under every V stage" in SRC
    assert "if constexpr (kCommit) ptx::wgmma_commit();" in SRC
    body = _seq_body()
    # P starts as zero bytes (block 0's product) and no branch guards the product inside the loop.
    assert "for (int kk = 0; kk < kN / 32; ++kk) pa[kk][0] = pa[kk][1] = pa[kk][2] = pa[kk][3] = 0u;" in body
    s_issue = body.index("q8_issue_qk<kD, kCvt == 2, kDescInc, (kV13 == 0)>(sacc, q_smem, ptx::smem_addr(s.k[stage]));")
    ones = body.index("q8_issue_ones(rs, pa, ones_smem);  // P_{j-1}'s row sums", s_issue)
    commit = body.index("ptx::wgmma_commit();", ones)
    wait = body.index("ptx::wgmma_wait<0>();", commit)
    add = body.index("row_sum[0] += rs[0];", wait)
    fence = body.index("ptx::fence_regs(row_sum);", add)
    smax = body.index("q8_softmax_max<kN, kCvt, 0, (kV12 > 0), (kV13 > 0), (kV13 == 2)>(", fence)
    mul = body.index("row_sum[0] *= alpha[0];", smax)
    turn = body.index("q8_turn_wait(cwg);", mul)
    exp = body.index("q8_softmax_exp<kN, !kSumMma && kV13 == 0, kExp16, kPoly, (kV12 > 0)>(", turn)
    pv = body.index("q8_issue_pv<kNpv, kDescInc>(ot, pa, ptx::smem_addr(s.v[stage]));", exp)
    assert s_issue < ones < commit < wait < add < fence < smax < mul < turn < exp < pv
    assert "row_sum[1] += rs[2];" in body[add:fence]  # entries 0 and 2: rows r and r + 8
    # After the loop: the last block's product alone, fenced (rs was read in the loop), then the epilogue without
    # the quad sum (the sums are of whole rows).
    post = body[body.index("}  // kLazy == 0"):]
    order = [post.index(x) for x in ("ptx::wgmma_fence();", "q8_issue_ones(rs, pa, ones_smem);", "ptx::wgmma_commit();",
                                     "ptx::wgmma_wait<0>();", "row_sum[0] += rs[0];",
                                     "q8_epilogue<kD, kWGs, (kSumMma || kV13 > 0), kFp16>(")]
    assert order == sorted(order)
    # The registers that made room (dev/NOTES_8bit.md v13): no per-thread scale pointers, lane or column kept across
    # the loop.
    assert "if (kV13 > 0 ? q8ptx::elect_one() : lane == 0) ptx::mbarrier_arrive(&s.k_empty[stage]);" in body
    assert "if (kV13 > 0 ? q8ptx::elect_one() : lane == 0) ptx::mbarrier_arrive(&s.v_empty[stage]);" in body
    assert "const uint32_t t = static_cast<uint32_t>(q8ptx::tid_x_volatile());" in body
    assert "qsj = p.q_scale + (qs_wg + static_cast<int>(((t >> 1) & 0x30u) | ((t >> 2) & 7u)));" in body
    assert "if constexpr (kFreshCig) col_in_group = 2 * (q8ptx::tid_x_volatile() & 3);" in SRC


def test_row_index_from_tid():
    """((t >> 1) & 0x30) | ((t >> 2) & 7) is warp * 16 + lane / 4 of the thread's warpgroup, and t & 3 its lane % 4,
    for every consumer thread (tid.x = 128 * (cwg + 1) + 32 * warp + lane)."""
    for cwg in range(3):
        for warp in range(4):
            for lane in range(32):
                t = 128 * (cwg + 1) + 32 * warp + lane
                assert ((t >> 1) & 0x30) | ((t >> 2) & 7) == warp * 16 + lane // 4
                assert t & 3 == lane % 4


def test_set_v13_validates_and_reaches_the_library():
    check_q8_selector("v13", quant8.set_v13, quant8.last_v13)


def test_alpha_vote():
    """Mode 2 (kAlphaVote): the exponent m_old - m_new kept in alpha, the vote on it being nonzero in any lane for
    either row, 2^ it then; else 1. m_old - m_new is +0 exactly when the max stands (x - x = +0), and -inf on block 0
    (m_old = -inf): a vote, so 2^-inf = 0 there."""
    body = SRC[SRC.index("__device__ __forceinline__ void q8_softmax_max_int("):]
    body = body[:body.index("\n}\n")]
    assert "if constexpr (kAlphaVote) alpha[r] = row_max[r] - mx;" in body
    assert "if (__any_sync(0xffffffffu, alpha[0] != 0.f || alpha[1] != 0.f)) {" in body
    assert "alpha[0] = alpha[1] = 1.f;" in body
    assert "q8_softmax_max<kN, kCvt, 0, (kV12 > 0), (kV13 > 0), (kV13 == 2)>(" in _seq_body()
    x = torch.tensor([3.5, -7.25, 0.0, 1e30], dtype=torch.float32)
    assert torch.equal((x - x).view(torch.int32), torch.zeros(4, dtype=torch.int32))
    assert float(torch.tensor(-float("inf")) - torch.tensor(5.0)) == -float("inf")


def test_v13_selector_in_the_c_abi():
    """Off by default (not yet measured); the setter's range; the environment variable; exactly one build per mode and
    dtype, on v12 mode 1 (v10 mode 1 of D=128 schedule 3 with conversion 2); a forced mode 1 or 2 elsewhere refused
    (v10 mode 0, v12 mode 0, schedule 1, D=64)."""
    assert "#define VIDATTN_Q8_V13 0" in CAPI
    assert 'extern "C" int vidattn_q8_set_v13(int mode)' in CAPI
    setter = CAPI[CAPI.index('extern "C" int vidattn_q8_set_v13(int mode)'):]
    assert setter.index("if (mode < -1 || mode > 2) return 1;") < setter.index("g_q8_v13 = mode;")
    assert 'q8_env_default("VIDATTN_Q8_V13", VIDATTN_Q8_V13, 0, 2)' in CAPI
    for mode in (1, 2):
        assert CAPI.count(f"kSeq, kTurns, 2, 0, 0, 2, 1, {mode}>(a, l, s)") == 2
        assert len(re.findall(rf"q8_launch<(?:[^>,]*, ){{11}}{mode}>", CAPI)) == 2
        launch = CAPI.index(f"kSeq, kTurns, 2, 0, 0, 2, 1, {mode}>(a, l, s)")
        assert (CAPI.rindex(f"if (q8_v13_asked() == {mode})", 0, launch)
                > CAPI.rindex("if (q8_v12_asked() == 1) {", 0, launch))
    assert "if ((v10 != 1 || q8_v12_asked() != 1) && g_q8_v13 > 0)" in CAPI
    assert "if (g_q8_v13 > 0)\n    return fail(" in CAPI
    assert "g_q8_last_v13 = kV13;" in CAPI and "g_q8_last_v13 = -1;" in CAPI
    assert "kDescInc, kV12, kV13>;" in CAPI


def _timing(shape, ratio_synced, ratio_kernel, passes=6, rel=(3.8e-2, 3.8e-2)):
    a, b = "d128 v13 0 (v12 mode 1)", "d128 v13 1 (sums by MMA)"  # (mode 2's row is the same rule)
    return {"shape": shape, "flops": 1e12, "synced": {a: [900.0] * passes, b: [900.0 * x for x in ratio_synced]},
            "queued": {a: [900.0] * passes, b: [900.0] * passes},
            "kernel_ms": {a: [1.0] * passes, b: [1.0 / x for x in ratio_kernel]}, "rel_l2": {a: rel[0], b: rel[1]}}


def test_ab_driver_rule(capsys):
    """dev/q8_v13_ab.py's verdict: ADOPT only with the medians ahead on both shapes, >= 10 of 12 passes won, the
    kernel-only sign agreeing and the rel L2 against fp64 within the reference's + 1e-3; a failed check keeps it off."""
    mod = load_script(REPO / "dev/q8_v13_ab.py", "q8_v13_ab_under_test")
    win = [1.01, 1.02, 1.01, 0.99, 1.015, 1.01]
    res = {"checks": [{"variant": "x", "ok": True}],
           "timing": [_timing("Wan 1.3B self", win, [1.02] * 6), _timing("seed 8K", win, [1.01] * 6)]}
    mod.table(res)
    out = capsys.readouterr().out
    assert "== 8-bit v13 A/B" in out and "paired passes won 10/12" in out and out.rstrip().endswith("-> ADOPT")
    res["timing"][1] = _timing("seed 8K", [1.01, 0.99, 0.98, 1.01, 1.01, 0.99], [1.01] * 6)
    mod.table(res)
    assert capsys.readouterr().out.rstrip().endswith("-> keep v13 off")
    res["timing"][1] = _timing("seed 8K", win, [1.01] * 6, rel=(3.8e-2, 3.95e-2))
    mod.table(res)
    out = capsys.readouterr().out.rstrip()
    assert "rel L2 within the reference's + 1e-3 False" in out and out.endswith("-> keep v13 off")
    res["timing"][1] = _timing("seed 8K", win, [1.01] * 6)
    res["checks"][0]["ok"] = False
    mod.table(res)
    assert capsys.readouterr().out.rstrip().endswith("-> keep v13 off")


def test_ab_driver_rule_per_mode(capsys):
    """With mode 2 in the A/B each mode gets its own verdict against the reference (here mode 1 wins, mode 2 loses
    its accuracy condition)."""
    mod = load_script(REPO / "dev/q8_v13_ab.py", "q8_v13_ab_under_test")
    win = [1.01, 1.02, 1.01, 0.99, 1.015, 1.01]
    res = {"checks": [{"variant": "x", "ok": True}], "timing": []}
    for shape in ("Wan 1.3B self", "seed 8K"):
        t = _timing(shape, win, [1.02] * 6)
        c = "d128 v13 2 (+ alpha vote)"
        t["synced"][c], t["queued"][c] = [900.0 * x for x in win], [900.0] * 6
        t["kernel_ms"][c], t["rel_l2"][c] = [1.0 / 1.02] * 6, 3.95e-2
        res["timing"].append(t)
    mod.table(res)
    rules = [x for x in capsys.readouterr().out.splitlines() if x.startswith("rule:")]
    assert len(rules) == 2
    assert rules[0].startswith("rule: d128 v13 1 (sums by MMA):") and rules[0].endswith("-> ADOPT")
    assert rules[1].startswith("rule: d128 v13 2 (+ alpha vote):") and rules[1].endswith("-> keep v13 off")
    assert "rel L2 within the reference's + 1e-3 False" in rules[1]
