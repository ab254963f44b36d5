"""v12 of the 8-bit kernel on a Hopper GPU (csrc/sm90/q8_fwd.cuh kV12, quant8.set_v12; dev/NOTES_8bit.md "v12"):
mode 1 (the warpgroup index uniform, the steady blocks' row max by one FADD, the row sums from their first groups, K's
scale pointer carried: the same arithmetic as mode 0, so the same output and LSE bit for bit) against mode 0 and
fp64 with test_8bit_gpu.py's bounds and helpers, on fresh random inputs with odd lengths (tail blocks at every
offset), kv_lens tails with LSE, fp16, poisoned outputs, sharpened rows and V = ones; that each launch reports the
mode it ran, that a plain call runs mode 1 (the default since call B of the seventh sitting), and that a forced mode 1 where no
v12 build exists is refused with an error.
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
    quant8.set_v12(-1)


def run_mode(mode, fn):
    quant8.set_v12(mode)
    try:
        out = fn()
        torch.cuda.synchronize()
        assert quant8.last_v12() == mode and quant8.last_v10() == 1 and quant8.last_sequential() == 3
        return out
    finally:
        quant8.set_v12(-1)


def same_as_mode_0(fn, seed):
    """Mode 1's result equals mode 0's element for element (or, where mode 0 is not reproducible bit for bit: the
    pre-pass's statistics by atomics, within twice its own run-to-run difference)."""
    b = run_mode(1, fn)
    a = run_mode(0, fn)
    a2 = run_mode(0, fn)
    for x, y, y2 in zip(b if isinstance(b, tuple) else (b,), a if isinstance(a, tuple) else (a,),
                        a2 if isinstance(a2, tuple) else (a2,)):
        if torch.equal(y, y2):
            assert torch.equal(x, y), f"seed {seed}"
        else:
            noise = float((y2.float() - y.float()).abs().max())
            assert float((x.float() - y.float()).abs().max()) <= 2 * noise, f"seed {seed}"


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


def test_mode_1_is_the_default():
    q, k, v = (base.randn(1, n, 2, 128, seed=i) for i, n in enumerate((129, 300, 300)))
    vidattn.attention(q, k, v, precision="8bit")
    torch.cuda.synchronize()
    assert quant8.last_v12() == 1 and quant8.last_v10() == 1


@pytest.mark.parametrize("skv", [128, 129, 255, 2049, 4096 + 77])
def test_mode_1_bit_for_bit(skv):
    """Output and LSE of mode 1 are mode 0's: full blocks (the steady path's FADD conversion) and tails at several
    offsets (the I2F path kept there), bf16 and fp16, kv_lens."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i) for i, n in enumerate((777, skv, skv)))
    # K on a grid of quarters: with plain normal K, call B's seed 27415 at 2049 keys drew equal mode-0 runs and a
    # mode-1 run with other K sums, and failed without a kernel difference.
    k = base.on_quarter_grid(k)
    scale = 1 / math.sqrt(128)

    def call(q=q, k=k, v=v, kv_lens=None):
        out = torch.full_like(q, float("nan"))
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=DEV)
        quant8.forward_8bit(q, k, v, out, lse, kv_lens, scale)
        return out, lse

    same_as_mode_0(call, seed)
    same_as_mode_0(lambda: call(q.half(), k.half(), v.half()), seed)
    lens = torch.tensor([skv, max(1, skv // 3)], dtype=torch.int32, device=DEV)
    same_as_mode_0(lambda: call(kv_lens=lens), seed)


@pytest.mark.parametrize("kind", ["plain", "key offset", "sharpened"])
def test_accuracy_guards(kind):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(1, 4096, 8, 128, seed=seed + i) for i in range(3))
    scale = None
    if kind == "key offset":
        k = (k.float() + 8 * torch.randn(128, device=DEV)).bfloat16()
    if kind == "sharpened":
        scale = 4 / math.sqrt(128)
    run_mode(1, lambda: base.check(q, k, v, scale=scale, seed=seed))


def test_row_mass():
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(3, n, 2, 128, seed=seed + i) for i, n in enumerate((300, 1000, 1000)))
    out = run_mode(1, lambda: vidattn.attention(q, k, torch.ones_like(v), precision="8bit"))
    base.assert_row_mass(out, q, k, seed=seed)


def test_poisoned_output():
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i) for i, n in enumerate((333, 999, 999)))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((2, 3, 333), float("nan"), device=DEV)
    run_mode(1, lambda: quant8.forward_8bit(q, k, v, out, lse, None, 1 / math.sqrt(128)))
    o_ref, lse_ref = base.ref64(q, k, v, 1 / math.sqrt(128))
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert base.rel_l2(out, o_ref) <= base.REL_L2
    assert float((lse.double() - lse_ref).abs().max()) <= base.lse_bound(q, k, 1 / math.sqrt(128))


def test_forced_mode_where_not_built_is_refused():
    """D=64, D=128 on schedule 1, and schedule 3 on v10 mode 0: a forced v12 mode 1 is an error naming it, not a
    silent fallback (nothing launched; the failed-launch mark a refusal leaves for the process is cleared)."""
    for d, seq, v10 in ((64, -1, -1), (128, 1, -1), (128, -1, 0)):
        q, k, v = (base.randn(1, 256, 2, d, seed=i) for i in range(3))
        out = torch.empty_like(q)
        quant8.set_v12(1)
        quant8.set_sequential(seq)
        quant8.set_v10(v10)
        try:
            with pytest.raises(RuntimeError, match="v12"):
                quant8.forward_8bit(q, k, v, out, None, None, 1 / math.sqrt(d))
        finally:
            quant8.set_v12(-1)
            quant8.set_v10(-1)
            quant8.set_sequential(-1)
            quant8._launch_error = None
