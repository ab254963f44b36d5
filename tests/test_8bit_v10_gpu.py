"""v10 of the 8-bit kernel on a Hopper GPU (csrc/sm90/q8_fwd.cuh kDescInc, quant8.set_v10; dev/NOTES_8bit.md "v10"):
mode 1, the default (wgmma descriptors by increments: the same arithmetic as mode 0, so the output equals mode 0's bit
for bit), against fp64 with test_8bit_gpu.py's bounds and helpers, on fresh random inputs with odd lengths, kv_lens
tails with LSE, fp16, poisoned outputs, climbing and sharpened rows and V = ones; that each launch reports the mode it
ran, that a plain call runs mode 1, and that mode 2 (the lazy reference max, which lost its A/B and is no longer
built) and a forced mode where no v10 build exists are refused with an error.
"""
from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU", allow_module_level=True)

import test_8bit_gpu as base  # noqa: E402 - its helpers and bounds (check, randn, ref64, assert_row_mass)
import vidattn  # noqa: E402
from vidattn import quant8  # noqa: E402

DEV = base.DEV


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    # The tail launch off (tests/test_8bit_tail_gpu.py has its own tests): only the default build has a split twin,
    # and its key ranges round P against each range's own running max, so the default and the older modes this file
    # compares bit for bit would part on any shape whose last round it splits.
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    quant8.set_tail(0)
    yield
    quant8.set_tail(-1)
    quant8.set_v10(-1)


def run_mode(mode, fn):
    quant8.set_v10(mode)
    try:
        out = fn()
        torch.cuda.synchronize()
        assert quant8.last_v10() == mode and quant8.last_sequential() == 3 and quant8.last_cvt() == 2
        return out
    finally:
        quant8.set_v10(-1)


@pytest.mark.parametrize("mode", [0, 1])
def test_lengths_kv_lens_lse(mode):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    for sq, skv in [(1, 77), (113, 113), (1023, 517), (300, 4097)]:
        q, k, v = (base.randn(1, n, 2, 128, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
        run_mode(mode, lambda: base.check(q, k, v, seed=seed, lse=True, bound=base.REL_L2_LOOSE))
    q, k, v = (base.randn(3, n, 2, 128, seed=seed + 7 + i) for i, n in enumerate((300, 1000, 1000)))
    lens = torch.tensor(base.KV_LENS, dtype=torch.int32, device=DEV)
    run_mode(mode, lambda: base.check(q, k, v, kv_lens=lens, lse=True, seed=seed))
    run_mode(mode, lambda: base.check(q.half(), k.half(), v.half(), kv_lens=lens, lse=True, seed=seed))


def test_mode_1_is_the_default_and_mode_0_bit_for_bit():
    """A plain call runs mode 1; descriptor increments change no arithmetic: mode 0's output, element for element.
    K on the quarter grid (base.on_quarter_grid): with plain normal K the pre-pass's fp32 atomic K sums vary in their
    last bits from run to run, and the seventeenth sitting drew (seed 198320) two equal mode-0 runs beside a mode-1
    run that differed by that noise alone, failing the comparison the old fallback made."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i) for i, n in enumerate((777, 2049, 2049)))
    k = base.on_quarter_grid(k)
    b = vidattn.attention(q, k, v, precision="8bit")
    torch.cuda.synchronize()
    assert quant8.last_v10() == 1
    a = run_mode(0, lambda: vidattn.attention(q, k, v, precision="8bit"))
    a2 = run_mode(0, lambda: vidattn.attention(q, k, v, precision="8bit"))
    assert torch.equal(a, a2), f"seed {seed}: mode 0 not reproducible with exact K sums"
    assert torch.equal(a, b), f"seed {seed}"


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("kind", ["plain", "key offset", "sharpened"])
def test_accuracy_guards(mode, kind):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(1, 4096, 8, 128, seed=seed + i) for i in range(3))
    scale = None
    if kind == "key offset":
        k = (k.float() + 8 * torch.randn(128, device=DEV)).bfloat16()
    if kind == "sharpened":
        scale = 4 / math.sqrt(128)
    run_mode(mode, lambda: base.check(q, k, v, scale=scale, seed=seed))


def climbing(seed, d=128, sq=300, skv=4096, slope=24.0):
    q, k, v = (base.randn(1, n, 2, d, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
    g = torch.Generator(device=DEV)
    g.manual_seed(seed + 11)
    e = torch.randn(d, device=DEV, generator=g)
    e = e / e.norm()
    ramp = torch.linspace(0, 1, skv, device=DEV)[None, :, None, None]
    return (q.float() + 4 * e).bfloat16(), (k.float() + slope * ramp * e).bfloat16(), v


def test_climbing_rows():
    """Rows whose max rises through the keys (what the lazy reference had to redo), against fp64 and mode 0."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = climbing(seed)
    err = run_mode(1, lambda: base.check(q, k, v, lse=True, seed=seed, bound=base.REL_L2_LOOSE))
    ref_err = run_mode(0, lambda: base.check(q, k, v, lse=True, seed=seed, bound=base.REL_L2_LOOSE))
    assert err <= 1.1 * ref_err + 2e-3, (err, ref_err, seed)


def test_mode_2_is_refused():
    """The lazy reference max lost its A/B and is no longer built: asking for it is an error saying so (nothing
    launched; the failed-launch mark the refusal leaves for the process is cleared)."""
    q, k, v = (base.randn(1, 256, 2, 128, seed=i) for i in range(3))
    out = torch.empty_like(q)
    quant8.set_v10(2)
    try:
        with pytest.raises(RuntimeError, match="v10 mode 2 .* no longer built"):
            quant8.forward_8bit(q, k, v, out, None, None, 1 / math.sqrt(128))
    finally:
        quant8.set_v10(-1)
        quant8._launch_error = None


@pytest.mark.parametrize("mode", [0, 1])
def test_row_mass(mode):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(3, n, 2, 128, seed=seed + i) for i, n in enumerate((300, 1000, 1000)))
    out = run_mode(mode, lambda: vidattn.attention(q, k, torch.ones_like(v), precision="8bit"))
    base.assert_row_mass(out, q, k, seed=seed)
    qc, kc, _ = climbing(seed + 3)
    out = run_mode(mode, lambda: vidattn.attention(qc, kc, torch.ones_like(kc), precision="8bit"))
    assert float((out.double() - 1).abs().max()) <= 2e-2, f"seed {seed}"


@pytest.mark.parametrize("mode", [0, 1])
def test_poisoned_output(mode):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i) for i, n in enumerate((333, 999, 999)))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((2, 3, 333), float("nan"), device=DEV)
    run_mode(mode, lambda: quant8.forward_8bit(q, k, v, out, lse, None, 1 / math.sqrt(128)))
    o_ref, lse_ref = base.ref64(q, k, v, 1 / math.sqrt(128))
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert base.rel_l2(out, o_ref) <= base.REL_L2
    assert float((lse.double() - lse_ref).abs().max()) <= base.lse_bound(q, k, 1 / math.sqrt(128))


def test_forced_mode_where_not_built_is_refused():
    """D=64, and D=128 on schedule 1: a forced v10 mode is an error naming it, not a silent fallback (nothing
    launched; the failed-launch mark a refusal leaves for the process is cleared)."""
    for d, seq in ((64, -1), (128, 1)):
        q, k, v = (base.randn(1, 256, 2, d, seed=i) for i in range(3))
        out = torch.empty_like(q)
        quant8.set_v10(1)
        quant8.set_sequential(seq)
        try:
            with pytest.raises(RuntimeError, match="v10"):
                quant8.forward_8bit(q, k, v, out, None, None, 1 / math.sqrt(d))
        finally:
            quant8.set_v10(-1)
            quant8.set_sequential(-1)
            quant8._launch_error = None
