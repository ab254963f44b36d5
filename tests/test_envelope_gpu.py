"""The kernel's wider envelope on a Hopper GPU: head dims below 128 that are multiples of 8, run on the D=64 and D=128
builds with the columns padded by TMA on the fly, and grouped-/multi-query K/V read in place per group.

Method as tests/test_kernel_gpu.py: fresh random inputs (the seed is in every failure message), float64 attention on
the upcast inputs as the reference, and the kernel's error at most a multiple of cuDNN SDPA's on the same inputs
(relative L2 within 1.5x, max |err| within 2x plus FlashAttention's absolute term). Outputs are written into
NaN-poisoned buffers wider than the head dim, so a padded column written past the caller's D, or a real column
left unwritten, fails. Every case asserts that the kernel ran (explain is None); the long cases that the tail
launch splits along the keys assert that it did, since its merge kernel writes O with plain stores."""
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
from bench.accuracy import fa_atol  # noqa: E402
from _support import attention_fp64 as reference  # noqa: E402  (out BSHD, lse (B, H, Sq)), K/V repeated per group
from _support import sdpa_same_precision as cudnn  # noqa: E402  (cuDNN SDPA, default SDPA where it refuses)

DEV = "cuda"
K_ERR, K_ERR_MAX_ABS, FLOOR, REL_L2_CAP, LSE_ATOL = 1.5, 2.0, 1e-5, 2e-2, 1e-2
PADDED_DIMS = (8, 40, 72, 80, 96, 112)
LENGTHS = ((1, 1), (113, 1023), (1023, 113), (4224, 4224))


def new_gen():
    g = torch.Generator(device=DEV)
    return g, g.seed()


def bshd_inputs(b, hq, hkv, sq, skv, d, g, dtype=torch.bfloat16, shift=False):
    def r(s, h):
        x = torch.randn(b, s, h, d, device=DEV, generator=g)
        return (x + 0.5 if shift else x).to(dtype)

    return r(sq, hq), r(skv, hkv), r(skv, hkv)


def climbing_inputs(d, g):
    """(q, k, v) of 257 queries over 1000 keys, 2 heads, whose scores climb along the keys (s_j ~ 12 sqrt(D) j /
    Skv): every row's sum against its first key block's max leaves the fixed reference's safe range (2^64), so the
    tiles run again with the exact softmax (flash_fwd.cuh, redo_tiles)."""
    q, k, v = bshd_inputs(1, 2, 2, 257, 1000, d, g)
    ramp = torch.linspace(0, 12, 1000, device=DEV)[None, :, None, None]
    return (1 + 0.1 * q.float()).to(q.dtype), (ramp + 0.1 * k.float()).to(k.dtype), v


def check_keyless_batch(q, k, v, lens, setting, ran, what):
    """One batch of kv_lens 0 (O = 0, LSE = -inf) between batches with keys, through _ext.forward into NaN-poisoned
    O and LSE under VIDATTN_HD_NARROW=`setting` (`ran()` asserts the build it took); q, k, v BSHD, views allowed.
    The batches with keys against fp64 and cuDNN on their own keys."""
    b, sq, h, d = q.shape
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    out = torch.full(q.shape, float("nan"), dtype=q.dtype, device=DEV)
    lse = torch.full((b, h, sq), float("nan"), dtype=torch.float32, device=DEV)
    scale = 1.0 / math.sqrt(d)
    with _ext.hd_narrow(setting):
        _ext.forward(q, k, v, out, lse, kv_lens, scale)
        torch.cuda.synchronize()
        ran()
    for bi, n in enumerate(lens):
        if n == 0:
            assert torch.equal(out[bi], torch.zeros_like(out[bi])), f"{what}: O of the keyless batch {bi}"
            assert torch.isneginf(lse[bi]).all(), f"{what}: LSE of the keyless batch {bi}"
            continue
        qb, kb, vb = q[bi:bi + 1], k[bi:bi + 1, :n], v[bi:bi + 1, :n]
        ref, ref_lse = reference(qb, kb, vb, scale)
        assert_accurate(out[bi:bi + 1], ref, cudnn(qb, kb, vb, scale), f"{what} batch {bi}")
        assert (lse[bi:bi + 1].double() - ref_lse).abs().max().item() < LSE_ATOL, f"{what}: batch {bi} LSE"


def as_layout(t, layout):
    """A BSHD tensor as the caller's layout: BHSD is a packed copy in that order (not a view)."""
    return t if layout == "bshd" else t.transpose(1, 2).contiguous()


def assert_accurate(out, ref, base, what):
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{what}: non-finite values in the output"
    k_abs = (out.double() - ref).abs().max().item()
    s_abs = (base.double() - ref).abs().max().item()
    norm = ref.norm().clamp_min(1e-300)
    k_rel, s_rel = ((out.double() - ref).norm() / norm).item(), ((base.double() - ref).norm() / norm).item()
    atol = fa_atol(ref, out.dtype)
    msg = f"{what}: kernel max|err| {k_abs:.3e} rel-L2 {k_rel:.3e}; cuDNN max|err| {s_abs:.3e} rel-L2 {s_rel:.3e}"
    assert k_abs <= K_ERR_MAX_ABS * s_abs + atol + FLOOR, msg
    assert k_rel <= K_ERR * s_rel + FLOOR and k_rel <= REL_L2_CAP, msg


def run_poisoned(q, k, v, layout, kv_lens=None, lse=False, pad=24):
    """The kernel through _ext.forward into a NaN-filled buffer `pad` columns wider than D (out is a strided view of
    its first D columns), in the caller's layout. Returns (out BSHD view, the padding columns, lse or None)."""
    qv, kv, vv = (t if layout == "bshd" else t.transpose(1, 2) for t in (q, k, v))
    b, sq, h, d = qv.shape
    shape = (b, sq, h, d + pad) if layout == "bshd" else (b, h, sq, d + pad)
    buf = torch.full(shape, float("nan"), dtype=q.dtype, device=DEV)
    out = buf[..., :d] if layout == "bshd" else buf[..., :d].transpose(1, 2)
    lse_t = torch.full((b, h, sq), float("nan"), dtype=torch.float32, device=DEV) if lse else None
    scale = 1.0 / math.sqrt(d)
    assert _ext.kernel_reason(qv, kv, vv, kv_lens, scale) is None
    _ext.forward(qv, kv, vv, out, lse_t, kv_lens, scale)
    pad_cols = buf[..., d:]
    return out, pad_cols, lse_t


def check(q, k, v, what, layout="bshd", kv_lens=None, expect_tail=None):
    """q, k, v: BSHD. Runs the kernel in `layout` (public op and poisoned buffer), checks both against fp64 and
    cuDNN, the LSE, the untouched padding, and (expect_tail) whether the tail launch ran."""
    d = q.shape[-1]
    ql, kl, vl = (as_layout(t, layout) for t in (q, k, v))
    assert vidattn.explain(ql, kl, vl, layout=layout, kv_lens=kv_lens) is None, what
    scale = 1.0 / math.sqrt(d)
    ref, ref_lse = reference(q, k, v, scale, kv_lens)
    base = cudnn(q, k, v, scale, kv_lens)
    out, lse = vidattn.attention(ql, kl, vl, layout=layout, kv_lens=kv_lens, return_lse=True)
    assert_accurate(out if layout == "bshd" else out.transpose(1, 2), ref, base, what)
    assert (lse.double() - ref_lse).abs().max().item() < LSE_ATOL, what
    pout, pad_cols, plse = run_poisoned(ql, kl, vl, layout, kv_lens, lse=True)
    if expect_tail is not None:
        assert (_ext.last_tail_splits() > 0) == expect_tail, f"{what}: tail launch {_ext.last_tail_splits()}"
    assert torch.isnan(pad_cols).all(), f"{what}: the kernel wrote past the head dim"
    assert_accurate(pout, ref, base, f"{what} (poisoned)")
    assert torch.equal(plse, lse), f"{what}: LSE differs between the two calls"


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("sq,skv", LENGTHS, ids=lambda x: str(x))
@pytest.mark.parametrize("d", PADDED_DIMS, ids=lambda d: f"d{d}")
def test_padded_head_dims(d, sq, skv, layout):
    g, seed = new_gen()
    b, h = (1, 2) if sq >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g, shift=sq == 113)
    # 4224 x 4224 on 2 heads: a last round of 44-66 tiles, split along >= 24 key blocks (csrc/capi.cu, plan_tail).
    check(q, k, v, f"D={d} {sq}x{skv} {layout} seed={seed}", layout, expect_tail=True if sq == 4224 else None)


@pytest.mark.parametrize("d", [40, 96], ids=lambda d: f"d{d}")
def test_padded_head_dims_on_every_build(d):
    """The D=64 builds (two and three consumer warpgroups) and the D=128 builds (N=128 and N=176) each run a padded
    head dim, with key tails and kv_lens."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 1023, 777, d, g)
    kv_lens = torch.tensor([777, 301], dtype=torch.int32, device=DEV)
    builds = ((_ext.d64_warpgroups, (2, 3)) if d <= 64 else (_ext.d128_block_n, (128, 176)))
    force, values = builds
    for val in values:
        # D=96 has a build of its own since the wide head dims came; the D=128 builds still take it when forced
        with force(val), (_ext.d96_build(128) if d > 64 else contextlib.nullcontext()):
            check(q, k, v, f"D={d} build {val} seed={seed}", "bshd", kv_lens)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d", [72, 112])
def test_padded_head_dims_kv_lens(d, layout):
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 113, 1023, d, g)
    kv_lens = torch.tensor([1023, 300], dtype=torch.int32, device=DEV)
    check(q, k, v, f"D={d} kv_lens {layout} seed={seed}", layout, kv_lens)


@pytest.mark.parametrize("d", [40, 96])
def test_padded_head_dims_strided_views(d):
    """q, k, v as slices of one packed (B, S, 3, H, D) projection: head and sequence strides that are not D's."""
    g, seed = new_gen()
    qkv = torch.randn(2, 1023, 3, 3, d, device=DEV, generator=g).to(torch.bfloat16)
    q, k, v = qkv.unbind(2)
    check(q, k, v, f"D={d} strided seed={seed}")


GQA = ((32, 8, 128), (8, 1, 128), (8, 1, 64), (32, 8, 96), (6, 2, 40))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("hq,hkv,d", GQA, ids=lambda x: str(x))
def test_grouped_query(hq, hkv, d, layout):
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, hq, hkv, 113, 1023, d, g, shift=True)
    kv_lens = torch.tensor([1023, 517], dtype=torch.int32, device=DEV)
    what = f"GQA {hq}q/{hkv}kv D={d} {layout} seed={seed}"
    check(q, k, v, what, layout)
    check(q, k, v, what + " kv_lens", layout, kv_lens)


@pytest.mark.parametrize("hq,hkv,d,sq,wgs", [(32, 8, 128, 3199, 0), (8, 1, 64, 2176, 2), (32, 8, 96, 3199, 0)],
                         ids=lambda x: str(x))
def test_grouped_query_tail_launch(hq, hkv, d, sq, wgs):
    """Long keys with a last, partial round of tiles: the tail launch's key ranges read the group's K/V head too. At
    D=128 (N=176 for 4224 keys: 24 blocks) 3199 queries x 32 heads are 800 tiles, 8 past six rounds of 132 SMs; at
    D=64 on the two-warpgroup build 2176 x 8 are 136 tiles (the tail is asserted, so another SM count that leaves
    no partial round fails here rather than passing untested)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, hq, hkv, sq, 4224, d, g)
    with _ext.d64_warpgroups(wgs):
        check(q, k, v, f"GQA tail {hq}q/{hkv}kv D={d} seed={seed}", expect_tail=True)


def test_grouped_query_strided_kv():
    """K/V as slices of one packed (B, S, 2, Hkv, D) projection, Q of (B, S, Hq, D)."""
    g, seed = new_gen()
    q = torch.randn(1, 1023, 32, 128, device=DEV, generator=g).to(torch.bfloat16)
    kv = torch.randn(1, 1023, 2, 8, 128, device=DEV, generator=g).to(torch.bfloat16)
    check(q, kv[:, :, 0], kv[:, :, 1], f"GQA strided K/V seed={seed}")


def test_grouped_query_heads_differ_from_repeated_kv():
    """Each query head reads its group's K/V head, not its own index's: the answer equals the one with K/V repeated
    in memory (equal heads, the shipped path), bitwise, since both run the same tiles."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 8, 2, 1023, 1023, 128, g)
    out = vidattn.attention(q, k, v)
    rep = vidattn.attention(q, k.repeat_interleave(4, dim=2), v.repeat_interleave(4, dim=2))
    assert torch.equal(out, rep), f"seed={seed}"


def test_c_abi_refuses_what_the_envelope_refuses():
    """The library checks head dim and K/V heads itself (a caller of the C ABI that skips the Python envelope)."""
    lib = _ext.load()
    g, _ = new_gen()
    q, k, v = bshd_inputs(1, 8, 3, 64, 64, 64, g)
    out = torch.empty_like(q)
    with pytest.raises(_ext.KernelLaunchError, match="kv_heads must divide heads"):
        _ext.forward(q, k, v, out, None, None, 0.125, lib=lib)
    q, k, v = bshd_inputs(1, 2, 2, 64, 64, 264, g)
    with pytest.raises(_ext.KernelLaunchError, match="multiple of 8 from 8 to 256"):
        _ext.forward(q, k, v, torch.empty_like(q), None, None, 0.125, lib=lib)
    assert _ext.runtime_reason() is None  # a refusal through an explicit library does not disable the default one
