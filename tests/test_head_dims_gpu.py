"""The D=96, 192 and 256 builds and the head dims padded onto them, on a Hopper GPU: every case against float64
attention with fresh random inputs (the seed is in each failure message), the error within a multiple of cuDNN's
on the same inputs (tests/test_envelope_gpu.py's `check`: relative L2 within 1.5x, max |err| within 2x plus
FlashAttention's absolute term, LSE, a NaN-poisoned output buffer wider than D whose padding must stay NaN, and
that the kernel ran). Odd lengths, both layouts, strided views, kv_lens, grouped K/V, fp16, the tail launch (its
merge kernel writes 3 and 6 columns a lane at D=96 and 192), and the routing the library itself reports."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import hopper_skip_reason

pytestmark = pytest.mark.gpu
if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import vidattn  # noqa: E402
from vidattn import _ext, ops  # noqa: E402
from test_head_dims_variants import pick_hd_narrow  # noqa: E402
from test_envelope_gpu import (DEV, assert_accurate, bshd_inputs, check, climbing_inputs, cudnn, new_gen,  # noqa: E402
                              reference)
from bench.accuracy import shape_scores  # noqa: E402  (the repository root is on sys.path by now)

DIMS = (72, 80, 96, 112, 160, 192, 200, 256)
NEW_BUILDS = {96: 176, 192: 112, 256: 80}  # head dim -> key-block width (tile_config.cuh)
NARROW_BUILDS = {192: 96, 256: 64}  # bf16 with set_hd_narrow(1): the separate O scratch
LENGTHS = ((1, 1), (113, 1023), (1023, 113), (4224, 4224))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("sq,skv", LENGTHS, ids=lambda x: str(x))
@pytest.mark.parametrize("d", DIMS, ids=lambda d: f"d{d}")
def test_head_dims(d, sq, skv, layout):
    g, seed = new_gen()
    b, h = (1, 2) if sq >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g, shift=sq == 113)
    # 4224 x 4224 on 2 heads: 66 tiles, one partial round on 132 SMs, split along the keys (capi.cu, plan_tail)
    check(q, k, v, f"D={d} {sq}x{skv} {layout} seed={seed}", layout, expect_tail=True if sq == 4224 else None)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d", DIMS, ids=lambda d: f"d{d}")
def test_head_dims_kv_lens(d, layout):
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 777, 1023, d, g)
    kv_lens = torch.tensor([1023, 301], dtype=torch.int32, device=DEV)
    check(q, k, v, f"D={d} kv_lens {layout} seed={seed}", layout, kv_lens)


@pytest.mark.parametrize("d", DIMS, ids=lambda d: f"d{d}")
def test_head_dims_fp16(d):
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 1023, 777, d, g, dtype=torch.float16)
    check(q, k, v, f"D={d} fp16 seed={seed}")
    q, k, v = bshd_inputs(1, 2, 2, 4224, 4224, d, g, dtype=torch.float16)
    check(q, k, v, f"D={d} fp16 tail seed={seed}", expect_tail=True)


@pytest.mark.parametrize("d", (80, 96, 160, 256), ids=lambda d: f"d{d}")
def test_head_dims_strided_views(d):
    """q, k, v as slices of one packed (B, S, 3, H, D) projection."""
    g, seed = new_gen()
    qkv = torch.randn(2, 1023, 3, 3, d, device=DEV, generator=g).to(torch.bfloat16)
    q, k, v = qkv.unbind(2)
    check(q, k, v, f"D={d} strided seed={seed}")


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("hq,hkv,d", [(32, 8, 96), (24, 1, 96), (32, 8, 192), (8, 2, 256), (8, 1, 160)],
                         ids=lambda x: str(x))
def test_head_dims_grouped_query(hq, hkv, d, layout):
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, hq, hkv, 113, 1023, d, g, shift=True)
    kv_lens = torch.tensor([1023, 517], dtype=torch.int32, device=DEV)
    what = f"GQA {hq}q/{hkv}kv D={d} {layout} seed={seed}"
    check(q, k, v, what, layout)
    check(q, k, v, what + " kv_lens", layout, kv_lens)


@pytest.mark.parametrize("d", NEW_BUILDS, ids=lambda d: f"d{d}")
def test_new_builds_run_with_their_key_block(d):
    """Each head dim's build at its key-block width: 1000 keys run bf16 D=192 on its narrow build (at most
    VIDATTN_D192_NARROW_KV_MAX keys, capi.cu), 3000 on the wide width; D=96 and D=256 the same at both."""
    g, _ = new_gen()
    for skv in (1000, 3000):
        q, k, v = bshd_inputs(1, 2, 2, 300, skv, d, g)
        vidattn.attention(q, k, v)
        narrow = d in NARROW_BUILDS and pick_hd_narrow(d, skv)
        assert _ext.last_block_n() == (NARROW_BUILDS[d] if narrow else NEW_BUILDS[d]), skv


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=["bf16", "fp16"])
@pytest.mark.parametrize("d", (192, 256), ids=lambda d: f"d{d}")
def test_wide_builds_over_several_tiles_per_cta_and_the_tail(d, dtype):
    """The wide builds store O through Q's single buffer, which the next tile's Q then overwrites: 9 heads of 4224
    rows are 297 tiles, so each CTA runs two or three tiles back to back and the last partial round goes to the
    tail launch; odd key counts leave a partial last block. bf16 also on the narrow build (the A/B's other side)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 9, 9, 4224, 4224, d, g, dtype=dtype)
    check(q, k, v, f"D={d} wide 9x4224 {dtype} seed={seed}")
    assert _ext.last_block_n() == NEW_BUILDS[d]
    q2, k2, v2 = bshd_inputs(2, 5, 5, 1000, 3001, d, g, dtype=dtype)
    check(q2, k2, v2, f"D={d} wide 2x5x1000x3001 {dtype} seed={seed}")
    if dtype == torch.bfloat16:
        with _ext.hd_narrow(1):
            check(q, k, v, f"D={d} narrow 9x4224 seed={seed}")
            assert _ext.last_block_n() == NARROW_BUILDS[d]


@pytest.mark.parametrize("d", (96, 192, 256), ids=lambda d: f"d{d}")
def test_balanced_tail_on_the_new_builds(d):
    """The balanced tail (set_tail_rounds(3); csrc/tail_plan.h): 200 one-tile heads of 10000 keys leave a last round
    of 68 tiles, which one range a tile per SM does not split; the balanced plan cuts their key blocks into one chunk
    per SM, some tiles in three pieces (the plan's pieces as dev/stress/budget.py models them). Accuracy, LSE and a
    poisoned output (check); then with kv_lens, whose short batch leaves pieces without keys; then a key far above
    the rest in three of the last round's heads (the fixed-reference redo, where the split kernel has it)."""
    from dev.stress import budget
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    g, seed = new_gen()
    nb = math.ceil(10000 / NEW_BUILDS[d])
    want = budget.exact_tail_splits(200, nb, sms, 3)
    assert want >= 2 and budget.exact_tail_splits(200, nb, sms, 1) == 0
    _ext.set_tail_rounds(3)
    try:
        q, k, v = bshd_inputs(1, 200, 200, 128, 10000, d, g)
        check(q, k, v, f"D={d} balanced tail 1x200x128x10000 seed={seed}", expect_tail=True)
        assert _ext.last_block_n() == NEW_BUILDS[d] and _ext.last_tail_splits() == want
        q, k, v = bshd_inputs(2, 100, 100, 128, 10000, d, g)
        kv_lens = torch.tensor([10000, 3400], dtype=torch.int32, device=DEV)
        check(q, k, v, f"D={d} balanced tail kv_lens seed={seed}", "bhsd", kv_lens, expect_tail=True)
        assert _ext.last_tail_splits() == want
        # a key far above the rest in the last round's heads: with VIDATTN_SPLIT_FIXED_REF the pieces holding it past
        # their first block overflow the fixed reference and run again exact
        q, k, v = bshd_inputs(1, 200, 200, 128, 10000, d, g, shift=True)
        shape_scores(q, k, "spike", heads=[140, 170, 199])
        check(q, k, v, f"D={d} balanced tail, score spike seed={seed}", expect_tail=True)
        assert _ext.last_tail_splits() == want
    finally:
        _ext.set_tail_rounds(-1)


def test_d96_build_and_padded_d128_build_agree_with_the_reference():
    """Allegro's head dim on its own build and, forced, on the D=128 build with the columns padded (the A/B the
    benchmark times)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 4, 4, 1023, 2049, 96, g)
    check(q, k, v, f"D=96 on D=96 seed={seed}")
    assert _ext.last_block_n() == NEW_BUILDS[96]
    with _ext.d96_build(128):
        check(q, k, v, f"D=96 on D=128 seed={seed}")
        assert _ext.last_block_n() in (128, 176)


def test_library_routing_matches_python():
    lib = _ext.load()
    for causal in (_ext.CAUSAL_NONE, _ext.CAUSAL_TOP_LEFT, _ext.CAUSAL_BOTTOM_RIGHT):
        for d in range(0, 272, 8):
            assert _ext.lib_build_head_dim(d, causal, lib) == (_ext.build_head_dim(d, causal) or 0), (d, causal)
    with _ext.d96_build(128):
        assert [_ext.lib_build_head_dim(d) for d in (72, 96, 104)] == [128, 128, 128]
    assert ops.kernel_build(*bshd_inputs(1, 2, 2, 8, 8, 112, new_gen()[0])) == (
        "D=112 on the D=128 build, columns zero-filled by TMA")


@pytest.mark.parametrize("d", (72, 96), ids=lambda d: f"d{d}")
def test_causal_up_to_128_runs_on_the_d128_causal_build(d):
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 3, 3, 777, 777, d, g)
    assert vidattn.explain(q, k, v, causal=True) is None
    out = vidattn.attention(q, k, v, causal=True)
    scale = 1.0 / math.sqrt(d)
    s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) * scale
    s.masked_fill_(torch.ones(777, 777, dtype=torch.bool, device=DEV).triu(1), float("-inf"))
    ref = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, -1), v.double())
    base = torch.nn.functional.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)),
                                                            is_causal=True).transpose(1, 2)
    assert_accurate(out, ref, base, f"causal D={d} seed={seed}")


def test_causal_past_128_runs_the_wide_causal_builds():
    """Head dims 136..256 run causal on the D=192 and D=256 builds: D=192 on its narrow width (N=96, O through its
    scratch), bf16 D=200..256 on the O-in-V build (N=80, O through the V stages, read-late; capi.cu
    VIDATTN_CAUSAL_D256_OINV), fp16 there on the narrow N=64. The library takes them, and explain has nothing to say.
    Accuracy: tests/test_causal_gpu.py."""
    lib = _ext.load()
    assert lib.vidattn_sm90_causal_max_head_dim() == 256
    for d, dtype, want_n, want_o in ((192, torch.bfloat16, 96, 0), (200, torch.bfloat16, 80, 4),
                                     (256, torch.bfloat16, 80, 4), (256, torch.float16, 64, 0)):
        g, _ = new_gen()
        q, k, v = bshd_inputs(1, 2, 2, 300, 300, d, g, dtype=dtype)
        assert vidattn.explain(q, k, v, causal=True) is None
        _ext.forward(q, k, v, torch.empty_like(q), None, None, 0.1, lib=lib, causal=_ext.CAUSAL_TOP_LEFT)
        assert (_ext.last_block_n(), _ext.last_o_path()) == (want_n, want_o), (d, dtype)


def test_fixed_reference_redo_at_wide_head_dims():
    """Scores that climb along the keys (s_j ~ 12 sqrt(D) j / Skv), so every row's sum against its first key block's
    max leaves the fixed reference's safe range (2^64): the tiles run again with the exact softmax (flash_fwd.cuh,
    redo_tiles), at D=192 and 256 as at D=128. Its 6 tiles are all tail where a tile has the tail launch's 12 key
    blocks (D=256, N=80: the split kernel, exact by default, the redo its own under VIDATTN_SPLIT_FIXED_REF=1; D=192
    runs its narrow N=96 build at 1000 keys, 11 blocks: no tail); then the same under the plain schedule
    (set_tail_kv_lens(0) with kv_lens of the full length), where the main kernel redoes them."""
    from dev.stress import budget
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    for d in (192, 256):
        g, seed = new_gen()
        q, k, v = climbing_inputs(d, g)
        scale = 1.0 / math.sqrt(d)
        ref, _ = reference(q, k, v, scale)
        assert_accurate(vidattn.attention(q, k, v), ref, cudnn(q, k, v, scale), f"redo D={d} seed={seed}")
        want = budget.exact_tail_splits(2 * math.ceil(257 / 128), math.ceil(1000 / _ext.last_block_n()), sms)
        assert _ext.last_tail_splits() == want and (want >= 2) == (d == 256), (d, want)
        full = torch.tensor([k.shape[1]], dtype=torch.int32, device=DEV)
        _ext.set_tail_kv_lens(0)
        try:
            assert_accurate(vidattn.attention(q, k, v, kv_lens=full), ref, cudnn(q, k, v, scale),
                            f"redo D={d} plain seed={seed}")
            assert _ext.last_tail_splits() == 0, d
        finally:
            _ext.set_tail_kv_lens(-1)
