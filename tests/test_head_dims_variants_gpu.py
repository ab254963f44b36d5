"""The head-dim builds' routing on a Hopper GPU: D=96 (and 72, 80 padded onto it) on three consumer warpgroups
(tile_config.cuh, VIDATTN_BLOCK_N_D96_3WG) and on two, each forced (capi.cu, vidattn_sm90_set_d96_warpgroups) and
against float64 attention and cuDNN with fresh random inputs (tests/test_envelope_gpu.py's `check`: odd lengths,
both layouts, kv_lens, LSE, a NaN-poisoned output), several tiles per CTA (the second Q buffer and the deferred O
store cross tile boundaries), the tail launch and its merge, the fixed-reference redo, and that the forced build, not
the other, ran (its key-block width); the default picks (pick_d96_three_wgs, pick_hd_narrow) against their Python
mirrors in tests/test_head_dims_variants.py at this GPU's SM count; and the O-in-V D=192/256 builds
(set_hd_narrow(3)) over the same checks, several tiles per CTA of 1, 2, odd and even key-block counts, a batch
without keys, grouped K/V and the redo."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import hopper_skip_reason

pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("launch_refusal_fails_its_test")]
if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402
from test_envelope_gpu import (DEV, LSE_ATOL, assert_accurate, bshd_inputs, check, climbing_inputs, cudnn,  # noqa: E402
                              new_gen, reference)

from test_head_dims_variants import pick_d96_three_wgs, pick_hd_narrow, pick_hd_o_in_v  # noqa: E402



# (head dim, warpgroups) -> (the context manager that forces the build, its key-block width, the other's width)
VARIANTS = {(d, w): (lambda w=w: _ext.d96_warpgroups(w), {3: 96, 2: 176}[w], {3: 176, 2: 96}[w])
            for d in (72, 80, 96) for w in (3, 2)}
VARIANTS.pop((80, 2))  # 72 and 96 cover the two-warpgroup build's padding
LENGTHS = ((1, 1), (113, 1023), (1023, 113), (4224, 4224))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("sq,skv", LENGTHS, ids=lambda x: str(x))
@pytest.mark.parametrize("d,w", VARIANTS, ids=[f"d{d}_{w}wg" for d, w in VARIANTS])
def test_variant(d, w, sq, skv, layout):
    force, n, _ = VARIANTS[d, w]
    g, seed = new_gen()
    b, h = (1, 2) if sq >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g, shift=sq == 113)
    with force():
        # 4224 x 4224 on 2 heads: 44 (192-row) or 66 (128-row) tiles, one partial round: the tail launch
        check(q, k, v, f"D={d} variant {sq}x{skv} {layout} seed={seed}", layout,
              expect_tail=True if sq == 4224 else None)
        assert _ext.last_block_n() == n


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d,w", VARIANTS, ids=[f"d{d}_{w}wg" for d, w in VARIANTS])
def test_variant_kv_lens(d, w, layout):
    force, n, _ = VARIANTS[d, w]
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 777, 1023, d, g)
    kv_lens = torch.tensor([1023, 301], dtype=torch.int32, device=DEV)
    with force():
        check(q, k, v, f"D={d} variant kv_lens {layout} seed={seed}", layout, kv_lens)
        assert _ext.last_block_n() == n


@pytest.mark.parametrize("d,w", ((96, 3), (96, 2)), ids=["d96_3wg", "d96_2wg"])
def test_variant_many_tiles_per_cta_grouped_and_fp16(d, w):
    """Several tiles back to back per CTA (the second Q buffer loads a tile early, O's store waits under the next
    tile's S_0); grouped K/V; fp16 runs on two warpgroups whatever the setting (three are bf16 only)."""
    force, n, _ = VARIANTS[d, w]
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 9, 9, 4224, 2049, d, g)
    q2, k2, v2 = bshd_inputs(2, 8, 2, 1000, 3001, d, g, shift=True)
    h16 = [t.half() for t in bshd_inputs(1, 3, 3, 1023, 777, d, g)]
    with force():
        check(q, k, v, f"D={d} variant 9x4224x2049 seed={seed}")
        assert _ext.last_block_n() == n
        check(q2, k2, v2, f"D={d} variant GQA 8q/2kv seed={seed}")
        check(*h16, f"D={d} variant fp16 seed={seed}")
        assert _ext.last_block_n() == 176
    vidattn.attention(q, k, v)  # 4224 rows x 9 heads: the default picks by shape again once the block ends
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    assert _ext.last_block_n() == (96 if pick_d96_three_wgs(4224, 9, sms) else 176)


@pytest.mark.parametrize("d,w", ((96, 3), (72, 3)), ids=["d96_3wg", "d72_3wg"])
def test_variant_fixed_reference_redo(d, w):
    """Scores that climb along the keys, so each row's sum leaves the fixed reference's safe range: the variant's
    tiles run again with the exact online softmax (flash_fwd.cuh, redo_tiles)."""
    force, _, _ = VARIANTS[d, w]
    g, seed = new_gen()
    q, k, v = climbing_inputs(d, g)
    scale = 1.0 / math.sqrt(d)
    ref, _ = reference(q, k, v, scale)
    with force():
        assert_accurate(vidattn.attention(q, k, v), ref, cudnn(q, k, v, scale), f"redo D={d} variant seed={seed}")


def test_variant_switches_refuse_other_values():
    # (4 to 8 are D=256 variants the library builds: set_hd_narrow takes 0..8; a value it took would stay set for the
    # tests after this one, as 8 did once the CTA-pair build came: the D=192 cases after it were refused)
    with pytest.raises(ValueError):
        _ext.set_d96_warpgroups(4)
    for bad in (9, -1):
        with pytest.raises(ValueError):
            _ext.set_hd_narrow(bad)


# (batch, heads, query rows, head dim): the A/B's rows, shortened where the pick does not depend on the rest
ROUTED = [(1, 24, 79200, 96), (2, 28, 8192, 72), (2, 21, 8192, 96), (2, 25, 8192, 80), (16, 21, 1024, 96),
          (1, 2, 130, 88), (1, 40, 4224, 96)]


@pytest.mark.parametrize("b,h,sq,d", ROUTED, ids=lambda x: str(x))
def test_default_d96_pick_follows_the_estimate(b, h, sq, d):
    """bf16 calls of head dims 72..96 run on the build pick_d96_three_wgs names for this GPU's SM count (few keys:
    the pick depends on the query rows only), fp16 on two warpgroups; the output agrees with the forced build's."""
    g, _ = new_gen()
    q = torch.randn(b, sq, h, d, device=DEV, dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(b, 64, h, d, device=DEV, dtype=torch.bfloat16, generator=g) for _ in range(2))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    three = pick_d96_three_wgs(sq, b * h, sms)
    out = vidattn.attention(q, k, v, layout="bshd")
    assert _ext.last_block_n() == (96 if three else 176)
    with _ext.d96_warpgroups(3 if three else 2):
        assert torch.equal(vidattn.attention(q, k, v, layout="bshd"), out)
    vidattn.attention(q.half(), k.half(), v.half(), layout="bshd")
    assert _ext.last_block_n() == 176


@pytest.mark.parametrize("d,skv", [(192, 1024), (192, 8192), (160, 300), (256, 1024), (256, 32768)],
                         ids=lambda x: str(x))
def test_default_narrow_pick_follows_the_key_count(d, skv):
    """bf16 D=192/256 calls run narrow exactly where pick_hd_narrow says; forcing either side overrides it."""
    g, _ = new_gen()
    q = torch.randn(1, 128, 2, d, device=DEV, dtype=torch.bfloat16, generator=g)
    k, v = (torch.randn(1, skv, 2, d, device=DEV, dtype=torch.bfloat16, generator=g) for _ in range(2))
    wide, narrow = {192: (112, 96), 256: (80, 64)}[d if d > 192 else 192]
    assert vidattn.explain(q, k, v, layout="bshd") is None
    vidattn.attention(q, k, v, layout="bshd")
    assert _ext.last_block_n() == (narrow if pick_hd_narrow(d, skv) else wide)
    # (a routed D=256 O-in-V call runs the read-late build: O path 4; capi.cu VIDATTN_D256_O_READ_LATE)
    o_in_v_path = 4 if d > 192 else 2
    assert _ext.last_o_path() == (0 if pick_hd_narrow(d, skv) else o_in_v_path if pick_hd_o_in_v(d, skv) else 1)
    for setting, n, o_path in ((1, narrow, 0), (2, wide, 1), (3, wide, 2)):
        with _ext.hd_narrow(setting):
            vidattn.attention(q, k, v, layout="bshd")
            torch.cuda.synchronize()
            assert _ext._launch_error is None, f"setting {setting}: {_ext._launch_error}"
            assert (_ext.last_block_n(), _ext.last_o_path()) == (n, o_path)


# bf16 D=192/256 on the O-in-V builds (set_hd_narrow(3); tile_config.cuh kOInV): the wide key-block widths, each
# warpgroup's O staged in a V stage, Q released after the last S. head dim -> key-block width
OV_BUILDS = {160: 112, 192: 112, 200: 80, 256: 80}


def assert_ran_o_in_v(d):
    assert (_ext.last_block_n(), _ext.last_o_path()) == (OV_BUILDS[d], 2)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("sq,skv", LENGTHS + ((4224, 77),), ids=lambda x: str(x))
@pytest.mark.parametrize("d", (192, 256, 160, 200), ids=lambda d: f"d{d}")
def test_o_in_v(d, sq, skv, layout):
    g, seed = new_gen()
    b, h = (1, 2) if sq >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g, shift=sq == 113)
    with _ext.hd_narrow(3):
        # 4224 x 4224 on 2 heads: 66 tiles, one partial round, the tail launch (its split build keeps O out of V)
        check(q, k, v, f"D={d} O-in-V {sq}x{skv} {layout} seed={seed}", layout,
              expect_tail=True if sq == skv == 4224 else None)
        assert_ran_o_in_v(d)


@pytest.mark.parametrize("skv", (77, 160, 1023, 2049), ids=lambda x: f"kv{x}")
@pytest.mark.parametrize("d", (192, 256), ids=lambda d: f"d{d}")
def test_o_in_v_several_tiles_per_cta(d, skv):
    """2-3 tiles per CTA (9 heads x 33 tiles on 132 SMs) with 1, 2, an odd and an even number of key blocks: the
    warpgroups' O stages swap between tiles when the count is odd (consumer: warpgroup 0 takes the block before
    last's), and with one block the producer's V_0 waits for the O stored a tile before in that stage."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 9, 9, 4224, skv, d, g)
    with _ext.hd_narrow(3):
        check(q, k, v, f"D={d} O-in-V 9x4224x{skv} seed={seed}")
        assert_ran_o_in_v(d)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d", (192, 256), ids=lambda d: f"d{d}")
def test_o_in_v_kv_lens_and_grouped(d, layout):
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 777, 1023, d, g)
    kv_lens = torch.tensor([1023, 301], dtype=torch.int32, device=DEV)
    q2, k2, v2 = bshd_inputs(2, 8, 2, 1000, 3001, d, g, shift=True)
    with _ext.hd_narrow(3):
        check(q, k, v, f"D={d} O-in-V kv_lens {layout} seed={seed}", layout, kv_lens)
        assert_ran_o_in_v(d)
        check(q2, k2, v2, f"D={d} O-in-V GQA 8q/2kv {layout} seed={seed}", layout)
        assert_ran_o_in_v(d)


@pytest.mark.parametrize("d", (192, 256), ids=lambda d: f"d{d}")
def test_o_in_v_batch_without_keys(d):
    """kv_lens 0 for one batch: its tiles run no key block (no ping-pong turn, O = 0, LSE = -inf) between tiles that
    do, in the same CTAs, and still store O through the V stages and release them to the producer."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(3, 4, 4, 1500, 1023, d, g)
    kv_lens = torch.tensor([1023, 0, 555], dtype=torch.int32, device=DEV)
    out = torch.full_like(q, float("nan"))
    lse = torch.full((3, 4, 1500), float("nan"), dtype=torch.float32, device=DEV)
    scale = 1.0 / math.sqrt(d)
    with _ext.hd_narrow(3):
        _ext.forward(q, k, v, out, lse, kv_lens, scale)
        torch.cuda.synchronize()
        assert_ran_o_in_v(d)
    assert torch.equal(out[1], torch.zeros_like(out[1])), f"D={d} seed={seed}: O of the keyless batch"
    assert torch.isneginf(lse[1]).all(), f"D={d} seed={seed}: LSE of the keyless batch"
    for bi, n in ((0, 1023), (2, 555)):
        qb, kb, vb = q[bi:bi + 1], k[bi:bi + 1, :n], v[bi:bi + 1, :n]
        ref, ref_lse = reference(qb, kb, vb, scale)
        assert_accurate(out[bi:bi + 1], ref, cudnn(qb, kb, vb, scale), f"D={d} O-in-V batch {bi} seed={seed}")
        assert (lse[bi:bi + 1].double() - ref_lse).abs().max().item() < LSE_ATOL, f"D={d} batch {bi} LSE seed={seed}"


@pytest.mark.parametrize("d", (192, 256), ids=lambda d: f"d{d}")
def test_o_in_v_redo_and_fp16(d):
    """The fixed-reference redo runs its tiles again on the O-in-V build (the local tile count, and with it the
    producer's o_done phases, carries on); fp16 has no O-in-V build and runs wide."""
    g, seed = new_gen()
    q, k, v = climbing_inputs(d, g)
    scale = 1.0 / math.sqrt(d)
    ref, _ = reference(q, k, v, scale)
    h16 = [t.half() for t in bshd_inputs(1, 3, 3, 1023, 777, d, g)]
    with _ext.hd_narrow(3):
        assert_accurate(vidattn.attention(q, k, v), ref, cudnn(q, k, v, scale), f"redo D={d} O-in-V seed={seed}")
        assert_ran_o_in_v(d)
        check(*h16, f"D={d} fp16 under the O-in-V setting seed={seed}")
        assert (_ext.last_block_n(), _ext.last_o_path()) == (OV_BUILDS[d], 1)
