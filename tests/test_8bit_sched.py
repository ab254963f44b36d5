"""CPU checks of the 8-bit kernel's turn schedules (dev/NOTES_8bit.md v8): the C ABI's selector reaches schedule 3
(D=128's default) where it is built and refuses the pruned schedule 2 and schedule 3 at D=64, schedule 3's barriers carry the data dependencies that keep ptxas from moving them past
the exponentials, and the device A/B's table (dev/q8_selector_ab.py's plan sched) computes its paired per-pass ratios. The kernels
themselves are checked on the GPU (tests/test_8bit_gpu.py: test_turn_schedules and the refusals)."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def _src(rel):
    return (REPO / rel).read_text()


def test_schedule_selector_reaches_the_turn_builds():
    src = _src("csrc/capi_8bit.cuh")
    assert 'extern "C" int vidattn_q8_set_sequential(int seq) {\n  if (seq < -1 || seq > 3) return 1;' in src
    # Schedule 3 at D=128 only; schedule 2 nowhere (call Q: both lost where pruned). VIDATTN_Q8_SEQ=3 or 2 leaves
    # D=64 on its default; a forced one is refused there.
    assert "if (seq == 3) return q8_dispatch<128, 3, true, 2>(*a, l, s);" in src
    assert "q8_dispatch<64, 3, true, 2>" not in src and "q8_dispatch<128, 3, true, 1>" not in src
    assert "return e >= 2 ? VIDATTN_Q8_SEQ_D64 : e;" in src
    assert src.count("turns around S (2) is no longer built") == 2
    assert "turns around the exponentials (3) is built at head dim \"\n                    \"128 only" in src
    # The defaults: schedule 3 at D=128 (it won call Q's A/B there), schedule 1 at D=64 (schedule 3 lost there).
    assert "#define VIDATTN_Q8_SEQ_D128 3" in src and "#define VIDATTN_Q8_SEQ_D64 1" in src
    # With the schedule left to the default, a forced conversion or mode other than schedule 3's names schedule 1.
    assert "if (seq < 0) seq = q8_cvt_asked<128>() == 2 && q8_mode_asked<128>() == 0 ? VIDATTN_Q8_SEQ_D128 : 1;" in src
    # The turn build: D=128's default conversion and mode only (2, mode 0).
    body = src[src.index("if constexpr (kTurns != 0) {"):src.index("// (Below: schedule 1 and the ping-pong")]
    assert "q8_launch<kD, 3, false, true, kSeq, kTurns, 2>(a, l, s)" in body
    assert "q8_launch<kD, 3, true, true, kSeq, 2, 1>(a, l, s)" not in body
    assert "static_assert(kSeq && kD == 128 && kTurns == 2" in body
    assert "return fail(\"8-bit path: schedule 3 is built with score conversion 2 and row-sum mode 0 only" in body
    assert "g_q8_last_seq = kSeq ? 1 + kTurns : 0;" in src
    assert ("q8_fwd_kernel<kD, kWGs, kSumMma, false, kFp16, kSeq, kPoly, kTurns == 1, kCvt, kTurns == 2, kLazy,\n"
            "                              kDescInc, kV12>") in src  # (v10's, 0 unless set_v10 asks; v12's likewise)


def test_exp_turns_barriers_carry_data_dependencies():
    """ptxas moves named barriers across register-only work (the first build passed the turn after 3 of 64
    MUFU.EX2 and, once held there, sank the wait below all of them): the exponents must read the wait through a
    shared-memory load, and the pass's barrier id must depend on P."""
    src = _src("csrc/sm90/q8_fwd.cuh")
    start = src.index("if constexpr (kExpTurns) {\n      float neg[2];")
    body = src[start:src.index("ptx::mbarrier_wait(&s.v_full[stage], par);", start)]
    wait = body.index("q8_turn_wait(cwg);")
    load = body.index("q8ptx::ld_shared_volatile(ptx::smem_addr(s.q))")
    use = body.index("neg[0] = __int_as_float(__float_as_int(neg[0]) + dep);")
    exp = body.index("q8_softmax_exp<kN, !kSumMma, kExp16, kPoly, (kV12 > 0)>(pf, ph, c, neg, row_sum, alpha);")
    assert wait < load < use < exp
    assert "word & opaque_zero" in body
    pack = body.index("else q8_pack_p<kN>(pf, pa);")
    passed = body.index("q8_turn_pass_dep<T::kConsumerWGs>(cwg, any & opaque_zero);")
    assert exp < pack < passed and "any |= pa[kk][0] | pa[kk][1] | pa[kk][2] | pa[kk][3];" in body
    assert "static_cast<uint32_t>(p.heads) >> 31" in src  # the opaque zero: heads >= 1
    assert re.search(r"asm volatile\(\"ld\.volatile\.shared\.u32 %0, \[%1\];\"", src)
    # Schedule 1 (the default) keeps the one-call softmax: its SASS did not change with the split.
    # (The tail launch's key offset j0 shifts the tile's first key.)
    assert "q8_softmax<kN, !kSumMma, kExp16, kPoly, kCvt>(sacc, pf, ph, c, row_max, row_sum, alpha, (j0 + j) * kN,\n" \
        in src


def _load_ab():
    spec = importlib.util.spec_from_file_location("q8_selector_ab", REPO / "dev/q8_selector_ab.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ab_variants_and_paired_table(capsys):
    ab = _load_ab()
    plan = ab.PLANS["sched"]
    assert plan.checks is ab.checks_fp64 and (plan.passes, plan.budget) == (6, 60.0)
    by_d = {}
    for name, d, seq, mode, cvt, prep in plan.variants:
        by_d.setdefault(d, []).append((seq, mode, cvt, prep))
    # The first of each head dim is the default; the other forces schedule 1 (D=128's earlier default; at D=64 the
    # default itself, the passes' noise floor). Only built schedules: no 2, no 3 at D=64.
    assert by_d[128] == [(-1, -1, -1, -1), (1, -1, -1, -1)]
    assert by_d[64] == [(-1, -1, -1, -1), (1, -1, -1, -1)]
    res = {"checks": [{"variant": "v", "ok": True}], "timing": [{
        "shape": "Wan 1.3B self", "flops": 1e12,
        "synced": {"base": [800.0, 810.0, 805.0, 790.0], "new": [850.0, 800.0, 820.0, 830.0]},
        "queued": {"base": [1.0] * 4, "new": [1.0] * 4},
        "kernel_ms": {"base": [1.1] * 4, "new": [1.0, 1.2, 1.0, 1.0]},
        "prep_ms": {}, "rel_l2": {"base": 0.038, "new": 0.038}}]}
    plan.table(res)
    out = capsys.readouterr().out
    assert "synced x 1.062 0.988 1.019 1.051 (won 3/4)" in out
    assert "kernel x 1.100 0.917 1.100 1.100 (won 3/4)" in out
    assert out.rstrip().endswith("checks: all ok")


def test_selector_ab_stage_runs_every_plan(capsys):
    """dev/q8_selector_ab.sh knows each plan of dev/q8_selector_ab.py, and finds each plan's table in the log by the
    "== 8-bit " line it starts with (a table without it would leave the stage's output without its figures)."""
    ab = _load_ab()
    sh = _src("dev/q8_selector_ab.sh")
    res = {"checks": [], "timing": [{"shape": "s", "flops": 1e12, "synced": {"a": [1.0]}, "queued": {"a": [1.0]},
                                     "kernel_ms": {"a": [1.0]}, "prep_ms": {"a": [0.1]}, "rel_l2": {"a": 0.01}}]}
    assert "sed -n '/^== 8-bit /,$p'" in sh
    for name, plan in ab.PLANS.items():
        assert f"\n  {name})" in sh  # in the usage's case and the stage's
        assert sh.count(f"\n  {name})") == 2
        plan.table(res)
        out = capsys.readouterr().out.splitlines()
        assert out[0].startswith("== 8-bit ") and not any(line.startswith("== 8-bit ") for line in out[1:])
        assert out[-1] == "checks: all ok"
