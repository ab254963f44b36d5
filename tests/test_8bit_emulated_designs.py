"""Three 8-bit designs dev/q8_emulate.py evaluates on the CPU, none the kernel's arithmetic (dev/NOTES_8bit.md, "P's
codes without MUFU", "P as u8 and V as s8" and "S from an e4m3 Q K^T"). The checks that their numbers mean what the
notes say.
- The linear bit trick for P's e4m3 codes (lin_e4m3, emulate's lin_share): exact at powers of two, the piecewise-linear
  1 + f inside a binade, share 0 the present emulation bit for bit, and the error it adds on the plain case.
- u8 P x s8 V (emulate's pv="u8s8"): half the error on the plain case, and lost where small weights sit under a sink.
- Q and K in e4m3 (emulate's qk="e4m3"): the INT8 default unchanged, and the error e4m3 operands add to S."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch
from _support import load_script

REPO = Path(__file__).resolve().parents[1]
emu = load_script(REPO / "dev/q8_emulate.py", "q8_emulate_lin_under_test")


def test_powers_of_two_are_exact_and_the_range_is_e4m3s():
    x = torch.arange(-6, 9, dtype=torch.float64)  # 2^-6 (the smallest normal) .. 2^8
    assert torch.equal(emu.lin_e4m3(x, c=0.0), torch.exp2(x))
    assert torch.equal(emu.lin_e4m3(x, c=-0.5), torch.exp2(x))  # 8k - 0.5 rounds half to even: back to 8k
    big = emu.lin_e4m3(torch.tensor([9.0, 20.0]), c=0.0)
    assert torch.equal(big, torch.tensor([448.0, 448.0], dtype=torch.float64))  # saturates at e4m3's largest
    assert emu.lin_e4m3(torch.tensor([-math.inf, -40.0]), c=-0.5).eq(0).all()  # clamped to code 0: p = 0


def test_inside_a_binade_it_is_the_linear_exponential_on_e4m3s_grid():
    f = torch.linspace(0, 0.99, 100, dtype=torch.float64)
    got = emu.lin_e4m3(f, c=0.0)
    want = 1 + torch.round(8 * f) / 8  # 1 + f rounded to 3 mantissa bits, not 2^f
    assert torch.equal(got, want)
    # the largest gap to the exact value: the linear exponential's +6.1% and a rounding step, at most 2^-3
    assert (got / torch.exp2(f) - 1).abs().max() <= 2.0 ** -3


def test_share_zero_is_the_present_emulation_and_a_share_costs_accuracy():
    name, q, k, v, sc = emu.lazy_cases(n=512)[0]
    assert name == "plain"
    base = emu.emulate(q, k, v, sc)
    assert torch.equal(emu.emulate(q, k, v, sc, lin_share=0.0), base)
    r = emu.ref(q, k, v, sc)
    e0 = emu.rel(base, r)
    e_round = emu.rel(emu.emulate(q, k, v, sc, lin_share=0.5, lin_c=0.0), r)
    e_floor = emu.rel(emu.emulate(q, k, v, sc, lin_share=0.5, lin_c=-0.5), r)
    # the notes' reading: the trick adds error on the plain case, and the downward offset takes most of it back
    assert e_round > e_floor > e0
    assert e_round > 1.1 * e0


def test_u8_p_s8_v_halves_the_plain_error_and_drops_small_weights_under_a_sink():
    name, q, k, v, sc = emu.lazy_cases(n=512)[0]
    r = emu.ref(q, k, v, sc)
    assert emu.rel(emu.emulate(q, k, v, sc, pv="u8s8"), r) < 0.6 * emu.rel(emu.emulate(q, k, v, sc), r)
    q, k, v, sc = emu.sink_case(n=8192, rows=16)
    r = emu.ref(q, k, v, sc)
    assert emu.rel(emu.emulate(q, k, v, sc), r) < 0.05  # e4m3 keeps the small weights (its exponent)
    assert emu.rel(emu.emulate(q, k, v, sc, pv="u8s8"), r) > 0.2  # u8 rounds every one of them to 0


def test_e4m3_q_and_k_cost_more_than_the_accuracy_bar_allows():
    name, q, k, v, sc = emu.lazy_cases(n=512)[0]
    base = emu.emulate(q, k, v, sc)
    assert torch.equal(emu.emulate(q, k, v, sc, qk="int8"), base)  # the default is the kernel's INT8 Q K^T
    with pytest.raises(ValueError):
        emu.emulate(q, k, v, sc, qk="e5m2")
    for d in (128, 64):
        cases = {c[0]: c[1:] for c in emu.lazy_cases(d=d, n=512)}
        for case, factor in (("plain", 1.3), ("sharpened x4", 2.0)):
            q, k, v, sc = cases[case]
            r = emu.ref(q, k, v, sc)
            # e4m3's 3 mantissa bits on both operands of every score: 1.4x the plain error, 2.4-2.6x a sharpened row's
            # (the score's error scales with the score), where the bar allows none
            assert emu.rel(emu.emulate(q, k, v, sc, qk="e4m3"), r) > factor * emu.rel(emu.emulate(q, k, v, sc), r)
