"""The head-dim A/B variants on a Hopper GPU (tile_config.cuh, VIDATTN_BLOCK_N_D96_3WG and _D192_SHORT; capi.cu,
vidattn_sm90_set_d96_warpgroups / _set_d192_block_n): D=96 (and 72, 80 padded onto it) on three consumer warpgroups,
D=192 (and 160) at N=64 with two Q buffers. Each against float64 attention and cuDNN with fresh random inputs
(tests/test_envelope_gpu.py's `check`: odd lengths, both layouts, kv_lens, LSE, a NaN-poisoned output), several
tiles per CTA (the second Q buffer and the deferred O store cross tile boundaries), the tail launch and its merge,
the fixed-reference redo, and that the variant, not the default, ran (its key-block width)."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import hopper_skip_reason

pytestmark = pytest.mark.gpu
if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402
from test_envelope_gpu import DEV, assert_accurate, bshd_inputs, check, cudnn, new_gen, reference  # noqa: E402

# head dim -> (the context manager that forces the variant, its key-block width, the default build's width)
VARIANTS = {72: (lambda: _ext.d96_warpgroups(3), 96, 176), 80: (lambda: _ext.d96_warpgroups(3), 96, 176),
            96: (lambda: _ext.d96_warpgroups(3), 96, 176), 160: (lambda: _ext.d192_block_n(64), 64, 112),
            192: (lambda: _ext.d192_block_n(64), 64, 112)}
LENGTHS = ((1, 1), (113, 1023), (1023, 113), (4224, 4224))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("sq,skv", LENGTHS, ids=lambda x: str(x))
@pytest.mark.parametrize("d", VARIANTS, ids=lambda d: f"d{d}")
def test_variant(d, sq, skv, layout):
    force, n, _ = VARIANTS[d]
    g, seed = new_gen()
    b, h = (1, 2) if sq >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g, shift=sq == 113)
    with force():
        # 4224 x 4224 on 2 heads: 44 (192-row) or 66 (128-row) tiles, one partial round: the tail launch
        check(q, k, v, f"D={d} variant {sq}x{skv} {layout} seed={seed}", layout,
              expect_tail=True if sq == 4224 else None)
        assert _ext.last_block_n() == n


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d", VARIANTS, ids=lambda d: f"d{d}")
def test_variant_kv_lens(d, layout):
    force, n, _ = VARIANTS[d]
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 777, 1023, d, g)
    kv_lens = torch.tensor([1023, 301], dtype=torch.int32, device=DEV)
    with force():
        check(q, k, v, f"D={d} variant kv_lens {layout} seed={seed}", layout, kv_lens)
        assert _ext.last_block_n() == n


@pytest.mark.parametrize("d", (96, 192), ids=lambda d: f"d{d}")
def test_variant_many_tiles_per_cta_grouped_and_fp16(d):
    """Several tiles back to back per CTA (the second Q buffer loads a tile early, O's store waits under the next
    tile's S_0); grouped K/V; fp16 keeps the default build (the variants are bf16 only)."""
    force, n, default_n = VARIANTS[d]
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 9, 9, 4224, 2049, d, g)
    q2, k2, v2 = bshd_inputs(2, 8, 2, 1000, 3001, d, g, shift=True)
    h16 = [t.half() for t in bshd_inputs(1, 3, 3, 1023, 777, d, g)]
    with force():
        check(q, k, v, f"D={d} variant 9x4224x2049 seed={seed}")
        assert _ext.last_block_n() == n
        check(q2, k2, v2, f"D={d} variant GQA 8q/2kv seed={seed}")
        check(*h16, f"D={d} variant fp16 seed={seed}")
        assert _ext.last_block_n() == default_n
    vidattn.attention(q, k, v)
    assert _ext.last_block_n() == default_n  # the block restored the default


@pytest.mark.parametrize("d", (96, 192), ids=lambda d: f"d{d}")
def test_variant_fixed_reference_redo(d):
    """Scores that climb along the keys, so each row's sum leaves the fixed reference's safe range: the variant's
    tiles run again with the exact online softmax (flash_fwd.cuh, redo_tiles)."""
    force, _, _ = VARIANTS[d]
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 2, 2, 257, 1000, d, g)
    ramp = torch.linspace(0, 12, 1000, device=DEV)[None, :, None, None]
    q = (1 + 0.1 * q.float()).to(q.dtype)
    k = (ramp + 0.1 * k.float()).to(k.dtype)
    scale = 1.0 / math.sqrt(d)
    ref, _ = reference(q, k, v, scale)
    with force():
        assert_accurate(vidattn.attention(q, k, v), ref, cudnn(q, k, v, scale), f"redo D={d} variant seed={seed}")


def test_variant_switches_refuse_other_values():
    with pytest.raises(ValueError):
        _ext.set_d96_warpgroups(4)
    with pytest.raises(ValueError):
        _ext.set_d192_block_n(96)
