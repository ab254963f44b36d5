"""v13 of the 8-bit kernel on a Hopper GPU (csrc/sm90/q8_fwd.cuh kV13, quant8.set_v13; dev/NOTES_8bit.md "v13"):
mode 1 (the row sums from the tensor cores, P times 8 columns of ones issued with the next block's S) on v12 mode 1,
and mode 2 (the alphas' MUFU only where a row's max moved: a warp vote) against fp64 with test_8bit_gpu.py's bounds
and helpers (fresh random inputs, odd lengths: tail blocks at every offset,
kv_lens tails with LSE, fp16, poisoned outputs, the accuracy guards, long rows), against v12's own output (mode 0,
forced: whatever the build default then is), V = ones (the sums are now of P as rounded, P V's own numerator: the
row mass is the accumulator's truncation and the output's rounding only), that each launch reports the mode it ran,
that a plain call runs mode 0 (off by default until measured), that mode 2's output and LSE are mode 1's bit for bit
(its alpha = 1 where the max stands is 2^(+0): this checks that ex2.approx gives exactly 1 there), and that a forced
mode 1 or 2 where no v13 build exists is refused with an error.

v13 is not bit for bit v12: v12 divides by the fp32 sum of the unrounded p, v13 by the sum of P as rounded to e4m3.
The two differ per row by the weighted mean of e4m3's rounding errors (what v12's V = ones row mass measures), so
- output against v12's: dev/q8_emulate.py --sums puts the relative L2 at 2.3e-3 in bf16 (1.1e-3 before the output's
  rounding: its bf16 ulp flips on ~1/4 of the elements) and 1.2e-3 in fp16 on plain randn rows; bounds 4e-3 / 2.5e-3;
- LSE against v12's: |ln(sum_p8 / sum_p)| per row, within v12's V = ones row-mass bound (row_mass_bound, sums "p")
  plus the tensor-core sum's truncation (FP8_ACC_BLOCK_REL), elementwise.
"""
from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU", allow_module_level=True)

import test_8bit_gpu as base  # noqa: E402 - its helpers and bounds (check, randn, ref64, Q8E)
import vidattn  # noqa: E402
from vidattn import quant8  # noqa: E402

DEV = base.DEV
Q8E = base.Q8E
VS_V12 = {torch.bfloat16: 4e-3, torch.float16: 2.5e-3}  # rel L2 of v13's output against v12's (module docstring)


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    yield
    quant8.set_v13(-1)
    quant8.set_v12(-1)


def run_mode(mode, fn):
    """fn() under v12 mode 1 (forced: v13's base) and v13 `mode`; asserts the launch ran them."""
    quant8.set_v12(1)
    quant8.set_v13(mode)
    try:
        out = fn()
        torch.cuda.synchronize()
        assert (quant8.last_v13(), quant8.last_v12(), quant8.last_v10(), quant8.last_sequential()) == (mode, 1, 1, 3)
        return out
    finally:
        quant8.set_v13(-1)
        quant8.set_v12(-1)


def forward(q, k, v, kv_lens=None):
    out = torch.full_like(q, float("nan"))
    lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=DEV)
    quant8.forward_8bit(q, k, v, out, lse, kv_lens, 1 / math.sqrt(q.shape[-1]))
    return out, lse


@pytest.mark.parametrize("mode", [1, 2])
def test_lengths_kv_lens_lse(mode):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    for sq, skv in [(1, 77), (113, 113), (1023, 517), (300, 4097)]:
        q, k, v = (base.randn(1, n, 2, 128, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
        run_mode(mode, lambda: base.check(q, k, v, seed=seed, lse=True, bound=base.REL_L2_LOOSE))
    q, k, v = (base.randn(3, n, 2, 128, seed=seed + 7 + i) for i, n in enumerate((300, 1000, 1000)))
    lens = torch.tensor(base.KV_LENS, dtype=torch.int32, device=DEV)
    run_mode(mode, lambda: base.check(q, k, v, kv_lens=lens, lse=True, seed=seed))
    run_mode(mode, lambda: base.check(q.half(), k.half(), v.half(), kv_lens=lens, lse=True, seed=seed))


def test_mode_0_is_the_default():
    q, k, v = (base.randn(1, n, 2, 128, seed=i) for i, n in enumerate((129, 300, 300)))
    vidattn.attention(q, k, v, precision="8bit")
    torch.cuda.synchronize()
    assert quant8.last_v13() == 0 and quant8.last_v10() == 1


@pytest.mark.parametrize("skv", [128, 129, 255, 2049, 4096 + 77])
def test_close_to_v12(skv):
    """Output within VS_V12 of v12's (relative L2) and LSE within the row-mass bound of v12's, row by row: full
    blocks, tails at several offsets (the last block's product is the one issued after the loop), bf16 and fp16,
    kv_lens (one row of a single block: its only product is the post-loop one)."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i) for i, n in enumerate((777, skv, skv)))
    lens = torch.tensor([skv, max(1, skv // 3)], dtype=torch.int32, device=DEV)
    for qq, kk, vv, kl in ((q, k, v, None), (q.half(), k.half(), v.half(), None), (q, k, v, lens)):
        o13, l13 = run_mode(1, lambda: forward(qq, kk, vv, kl))
        o12, l12 = run_mode(0, lambda: forward(qq, kk, vv, kl))
        assert not torch.isnan(o13).any() and not torch.isnan(l13).any()
        r = base.rel_l2(o13, o12.double())
        assert r <= VS_V12[qq.dtype], f"seed {seed} skv {skv} {qq.dtype} kv_lens {kl is not None}: rel L2 {r:.3e}"
        bound = Q8E.row_mass_bound(qq, kk, None, kl, out_dtype=None, sums="p") + Q8E.FP8_ACC_BLOCK_REL
        dl = (l13.double() - l12.double()).abs().permute(0, 2, 1)  # (B, Sq, H) as the bound
        worst = float((dl / bound).max())
        assert worst <= 1.0, f"seed {seed} skv {skv}: |lse13 - lse12| / bound {worst:.3f}"


@pytest.mark.parametrize("skv", [129, 2049, 4096 + 77])
def test_mode_2_bit_for_bit(skv):
    """Mode 2's output and LSE are mode 1's (or, where mode 1 is not reproducible bit for bit: the pre-pass's
    statistics by atomics, within twice its own run-to-run difference): bf16, fp16, kv_lens, and sharpened rows
    (maxes that move often)."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i) for i, n in enumerate((777, skv, skv)))
    lens = torch.tensor([skv, max(1, skv // 3)], dtype=torch.int32, device=DEV)
    sharp = (q.float() * 4).bfloat16()
    for qq, kk, vv, kl in ((q, k, v, None), (q.half(), k.half(), v.half(), None), (q, k, v, lens), (sharp, k, v, None)):
        b = run_mode(2, lambda: forward(qq, kk, vv, kl))
        a = run_mode(1, lambda: forward(qq, kk, vv, kl))
        a2 = run_mode(1, lambda: forward(qq, kk, vv, kl))
        for x, y, y2 in zip(b, a, a2):
            if torch.equal(y, y2):
                assert torch.equal(x, y), f"seed {seed} skv {skv}"
            else:
                noise = float((y2.float() - y.float()).abs().max())
                assert float((x.float() - y.float()).abs().max()) <= 2 * noise, f"seed {seed} skv {skv}"


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


def assert_row_mass_p8(out, q, k, *, kv_lens=None, seed=None):
    """attention(q, k, ones) under v13: every row within row_mass_bound's mode-1 bound (sums of P as rounded: the
    output's rounding near 1, twice the accumulator's truncation, fp32 slack)."""
    bound = Q8E.row_mass_bound(q, k, None, kv_lens, out_dtype=out.dtype, sums="p8")
    err = (out.double() - 1).abs().amax(-1)
    worst = float((err / bound).max())
    print(f"ROWMASS v13 seed {seed} {str(out.dtype)[6:]} {tuple(q.shape)}x{k.shape[1]} max_err {float(err.max()):.4e} "
          f"max_err/bound {worst:.3f}")
    assert worst <= 1.0, f"seed {seed}: max |o - 1| / bound {worst:.3f}"


def test_row_mass():
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k = (base.randn(3, n, 2, 128, seed=seed + i) for i, n in enumerate((300, 1000)))
    lens = torch.tensor(base.KV_LENS, dtype=torch.int32, device=DEV)
    for kl in (None, lens):
        out = run_mode(1, lambda: vidattn.attention(q, k, torch.ones_like(k), kv_lens=kl, precision="8bit"))
        assert_row_mass_p8(out, q, k, kv_lens=kl, seed=seed)


def test_long_rows():
    """64K keys (512 blocks): each block's tensor-core sum is a fresh accumulator joined in fp32, so no drift: V = ones
    within the mode-1 bound in bf16 and fp16 (output ulp 2^-10), and randn V against fp64."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(1, n, 2, 128, seed=seed + i) for i, n in enumerate((256, 65536, 65536)))
    run_mode(1, lambda: base.check(q, k, v, lse=True, seed=seed, bound=base.REL_L2_LOOSE))
    for qq, kk in ((q, k), (q.half(), k.half())):
        out = run_mode(1, lambda: vidattn.attention(qq, kk, torch.ones_like(kk), precision="8bit"))
        assert_row_mass_p8(out, qq, kk, seed=seed)


def test_poisoned_output():
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i) for i, n in enumerate((333, 999, 999)))
    out, lse = run_mode(1, lambda: forward(q, k, v))
    o_ref, lse_ref = base.ref64(q, k, v, 1 / math.sqrt(128))
    assert not torch.isnan(out).any() and not torch.isnan(lse).any()
    assert base.rel_l2(out, o_ref) <= base.REL_L2
    assert float((lse.double() - lse_ref).abs().max()) <= base.lse_bound(q, k, 1 / math.sqrt(128))


@pytest.mark.parametrize("mode", [1, 2])
def test_forced_mode_where_not_built_is_refused(mode):
    """D=64, D=128 on schedule 1, schedule 3 on v10 mode 0, and v12 mode 0: a forced v13 mode 1 or 2 is an error
    naming it, not a silent fallback (nothing launched; the failed-launch mark a refusal leaves is cleared)."""
    for d, seq, v10, v12 in ((64, -1, -1, -1), (128, 1, -1, -1), (128, -1, 0, -1), (128, -1, -1, 0)):
        q, k, v = (base.randn(1, 256, 2, d, seed=i) for i in range(3))
        out = torch.empty_like(q)
        quant8.set_v13(mode)
        quant8.set_v12(v12)
        quant8.set_sequential(seq)
        quant8.set_v10(v10)
        try:
            with pytest.raises(RuntimeError, match="v13"):
                quant8.forward_8bit(q, k, v, out, None, None, 1 / math.sqrt(d))
        finally:
            quant8.set_v13(-1)
            quant8.set_v12(-1)
            quant8.set_v10(-1)
            quant8.set_sequential(-1)
            quant8._launch_error = None
