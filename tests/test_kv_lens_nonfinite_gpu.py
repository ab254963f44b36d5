"""Keys past `kv_lens` that hold NaN or Inf (an unwritten key/value cache slot behind a batch's length) must not reach
the output, on every kernel build (runs on a Hopper GPU only).

The exact kernel masks a key past the length to a score of -inf, so P is 0 there; but P V multiplies those zeros by V's
rows up to the end of the partial block's last computed 16-key step, and the tensor cores' 0 * NaN is NaN. Each
consumer warpgroup now zeroes those rows of the stage before its P V (csrc/sm90/flash_fwd.cuh, zero_v_rows). The
8-bit path's pre-pass writes zeros past each length into its own K/V copies.

Method: the same call twice, once with K and V past each length poisoned (NaN, +Inf or -Inf) and once with them zeroed
(a key past the length is masked, so zeros there are the answer by definition); the two outputs and LSEs must be equal
bit for bit, and finite. Where the call is plain attention, the zeroed call is also checked against float64 attention
and cuDNN SDPA on the same inputs (relative L2 within 1.5x cuDNN's, max |err| within 2x plus FlashAttention's term).
The lengths end their last key block at many offsets, on every build's key-block width: narrowed partial blocks and
full-width ones. Every case draws fresh random inputs and names its seed."""
from __future__ import annotations

import contextlib
import math
import sys
from pathlib import Path

import pytest
import torch

from conftest import hopper_skip_reason

pytestmark = pytest.mark.gpu
if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
# the envelope suite's helpers: its accuracy bound against fp64 and cuDNN, the seeds, the layout copy
from test_envelope_gpu import DEV, as_layout, assert_accurate, cudnn, new_gen, reference  # noqa: E402

POISONS = {"nan": float("nan"), "inf": float("inf"), "-inf": float("-inf")}
# Ends of the last key block at many offsets for every key-block width the builds use (64, 80, 96, 112, 128, 176, ...):
# one key, a block and a bit, a few 16-key steps in, and the whole tensor (rows past it are TMA's zeros).
LENS = (777, 1, 100, 161, 250, 333, 0, 700)


def inputs(b, hq, hkv, sq, skv, d, g, dtype=torch.bfloat16):
    def r(s, h):
        return (torch.randn(b, s, h, d, device=DEV, generator=g) + 0.25).to(dtype)

    return r(sq, hq), r(skv, hkv), r(skv, hkv)


def past_lengths(t, lens, value):
    """A copy of BSHD t with every batch's keys from its length on set to value."""
    t = t.clone()
    for bi, n in enumerate(lens):
        t[bi, n:] = value
    return t


def check(q, k, v, lens, what, *, poison="nan", layout="bshd", causal=False, precision=None, ran=None):
    """q, k, v BSHD. The call with K/V poisoned past `lens` against the call with them zeroed: equal bit for bit,
    O and LSE, and finite where the batch has keys; `ran()` (if given) asserts the build each call took. The 8-bit
    path sums K's mean with atomics, so two of its calls may differ in the order of that sum: equal or within 1e-3
    relative L2 (as tests/test_8bit_gpu.py compares its repeated calls), the LSE within 1e-2."""
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    kp, vp = (as_layout(past_lengths(t, lens, POISONS[poison]), layout) for t in (k, v))
    kz, vz = (past_lengths(t, lens, 0.0) for t in (k, v))
    ql, kzl, vzl = as_layout(q, layout), as_layout(kz, layout), as_layout(vz, layout)
    kw = dict(layout=layout, kv_lens=kv_lens, causal=causal)
    if precision is not None:
        kw["precision"] = precision
    reason = vidattn.explain(ql, kp, vp, **kw)
    assert reason is None, f"{what}: fell back to SDPA: {reason}"
    out_p, lse_p = vidattn.attention(ql, kp, vp, return_lse=True, **kw)
    if ran is not None:
        ran()
    out_z, lse_z = vidattn.attention(ql, kzl, vzl, return_lse=True, **kw)
    if ran is not None:
        ran()
    what = f"{what}, {poison} past kv_lens {list(lens)}, {layout}"
    assert torch.isfinite(out_p).all(), f"{what}: non-finite output"
    if precision == "8bit":
        rel = ((out_p.double() - out_z.double()).norm() / out_z.double().norm().clamp_min(1e-300)).item()
        rows = torch.isfinite(lse_z)
        assert torch.equal(rows, torch.isfinite(lse_p)), f"{what}: the LSE's finite rows differ"
        lse_err = (lse_p[rows].double() - lse_z[rows].double()).abs().max().item() if rows.any() else 0.0
        assert rel < 1e-3 and lse_err < 1e-2, f"{what}: against zeros past the lengths rel-L2 {rel:.2e}, " \
            f"max |LSE diff| {lse_err:.2e}"
        return
    assert torch.equal(out_p, out_z), f"{what}: output differs from the call with zeros past the lengths"
    assert torch.equal(lse_p, lse_z), f"{what}: LSE differs from the call with zeros past the lengths"
    if not causal and precision is None:
        out = out_z if layout == "bshd" else out_z.transpose(1, 2)
        scale = 1.0 / math.sqrt(q.shape[-1])
        ref, _ = reference(q, kz, vz, scale, kv_lens)
        assert_accurate(out, ref, cudnn(q, kz, vz, scale, kv_lens), what)


# Every build a head dim takes: (label, head dim, context manager factory, dtype)
BUILDS = [
    ("d64 2wg", 64, lambda: _ext.d64_warpgroups(2), torch.bfloat16),
    ("d64 3wg", 64, lambda: _ext.d64_warpgroups(3), torch.bfloat16),
    ("d72 (D=96 build)", 72, contextlib.nullcontext, torch.bfloat16),
    ("d96 2wg", 96, lambda: _ext.d96_warpgroups(2), torch.bfloat16),
    ("d96 3wg", 96, lambda: _ext.d96_warpgroups(3), torch.bfloat16),
    ("d96 on D=128", 96, lambda: _ext.d96_build(128), torch.bfloat16),
    ("d128 n128", 128, lambda: _ext.d128_block_n(128), torch.bfloat16),
    ("d128 n176", 128, lambda: _ext.d128_block_n(176), torch.bfloat16),
    ("d128 fp16", 128, contextlib.nullcontext, torch.float16),
    ("d112", 112, contextlib.nullcontext, torch.bfloat16),
    ("d160 (D=192 build)", 160, contextlib.nullcontext, torch.bfloat16),
    ("d256 fp16", 256, contextlib.nullcontext, torch.float16),
] + [(f"d192 hd{s}", 192, (lambda s=s: _ext.hd_narrow(s)), torch.bfloat16) for s in (0, 1, 2, 3)] \
  + [(f"d256 hd{s}", 256, (lambda s=s: _ext.hd_narrow(s)), torch.bfloat16) for s in range(9)]


def no_tail_launch():
    assert _ext.last_tail_splits() == 0, f"a tail launch ran ({_ext.last_tail_splits()} ranges), not the build's own"


@pytest.mark.usefixtures("tail_kv_lens_off")
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("build", BUILDS, ids=lambda b: b[0])
def test_every_build(build, layout):
    """Each build's own kernel: kv_lens calls on the plain schedule (a call of fewer tiles than SMs and 12 key blocks
    or more is otherwise all tail launch, which runs the split kernel instead: D=256 under setting 1, N = 64, has 13
    here); test_tail_launch runs the split kernels."""
    label, d, ctx, dtype = build
    g, seed = new_gen()
    q, k, v = inputs(len(LENS), 2, 2, 129, 777, d, g, dtype)
    with ctx():
        check(q, k, v, LENS, f"{label} seed={seed}", poison="nan" if layout == "bshd" else "inf", layout=layout,
              ran=no_tail_launch)


@pytest.mark.parametrize("steps", range(1, 6))
def test_d256_pairs_every_step_count(steps):
    """The D=256 CTA-pair build (setting 8) and the routed one (6) with a last block of `steps` 16-key steps (N = 80:
    five steps a block), two batches so that each pair's two CTAs share one length; setting 6 narrows only 1-2 steps,
    so 3-5 steps run P V full width over the poisoned rows. 288 tiles: a call of fewer tiles than the grid is all
    tail launch, which runs without clusters."""
    g, seed = new_gen()
    n = 960 + 16 * steps - 5
    q, k, v = inputs(2, 36, 36, 512, 1040, 256, g)
    for setting in (6, 8):
        def ran(setting=setting):
            assert _ext.last_cluster_ctas() == (2 if setting == 8 else 1), f"setting {setting}: clusters of " \
                f"{_ext.last_cluster_ctas()} CTAs"

        with _ext.hd_narrow(setting):
            check(q, k, v, (n, n - 80), f"D=256 setting {setting}, {steps} steps seed={seed}", poison="-inf", ran=ran)


@pytest.mark.parametrize("causal", [True, "bottom_right"], ids=str)
@pytest.mark.parametrize("d", [64, 96, 128, 192, 256])
def test_causal(d, causal):
    g, seed = new_gen()
    lens = (700, 1, 161, 333)
    q, k, v = inputs(len(lens), 2, 2, 300, 700, d, g)
    check(q, k, v, lens, f"causal={causal} D{d} seed={seed}", causal=causal)


@pytest.mark.parametrize("hq,hkv,d", [(32, 8, 128), (8, 1, 64), (6, 2, 256)], ids=str)
def test_grouped_query(hq, hkv, d):
    g, seed = new_gen()
    lens = (333, 100, 1)
    q, k, v = inputs(len(lens), hq, hkv, 200, 333, d, g)
    check(q, k, v, lens, f"GQA {hq}/{hkv} D{d} seed={seed}", poison="inf")


@pytest.mark.parametrize("d", [64, 128, 256])
def test_tail_launch(d):
    """Every tile in the tail launch (the split kernel and its merge), batches of 4097, 1, 129 and 2500 keys (36 tiles,
    fewer than the SMs, of 33 to 52 key blocks)."""
    g, seed = new_gen()
    lens = (4097, 1, 129, 2500)
    q, k, v = inputs(len(lens), 3, 3, 300, 4097, d, g)
    def ran():
        assert _ext.last_tail_splits() >= 2, f"D{d}: no tail launch ({_ext.last_tail_splits()} ranges)"

    check(q, k, v, lens, f"tail launch D{d} seed={seed}", ran=ran)


@pytest.mark.usefixtures("tail_kv_lens_off")
@pytest.mark.parametrize("d", [64, 128, 192, 256])
def test_fixed_reference_redo(d):
    """Scores that climb along the keys leave the fixed reference's range, so the tiles run again with the exact
    softmax (the redo pass loads the partial block's V again, poisoned, and zeroes it again). On the plain schedule:
    at D=256 (13 key blocks of 80) the call would otherwise be all tail launch, whose split kernel runs the exact
    softmax from the start and redoes nothing."""
    g, seed = new_gen()
    q, k, v = inputs(2, 2, 2, 257, 1000, d, g)
    ramp = torch.linspace(0, 12, 1000, device=DEV)[None, :, None, None]
    q, k = (1 + 0.1 * q.float()).to(q.dtype), (ramp + 0.1 * k.float()).to(k.dtype)
    check(q, k, v, (963, 1000 - 37 - 160), f"redo D{d} seed={seed}", ran=no_tail_launch)


@pytest.mark.parametrize("d", [64, 128])
def test_8bit_path(d, monkeypatch):
    """precision='8bit' (the short-key route to the exact kernel off, as tests/test_8bit_kv_pass_gpu.py sets it): its
    pre-pass writes zeros past each length. That the 8-bit kernel ran shows in its output, which differs from the
    exact kernel's on the same inputs (its error is ~20x the exact kernel's)."""
    from vidattn import quant8

    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    g, seed = new_gen()
    lens = (16384, 9001)
    q, k, v = inputs(len(lens), 2, 2, 256, 16384, d, g)
    check(q, k, v, lens, f"8-bit D{d} seed={seed}", precision="8bit")
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    eight = vidattn.attention(q, k, v, kv_lens=kv_lens, precision="8bit")
    exact = vidattn.attention(q, k, v, kv_lens=kv_lens)
    assert not torch.equal(eight, exact), f"8-bit D{d} seed={seed}: precision='8bit' gave the exact kernel's output"
