"""The D=256 O-in-V build's variant whose Q is released and loaded per consumer warpgroup (VIDATTN_HD_NARROW=5:
tile_config.cuh kQHalves, flash_fwd.cuh load_q) on a Hopper GPU, against float64 attention and cuDNN with fresh random
inputs (tests/test_envelope_gpu.py's `check`: both layouts, LSE, a NaN-poisoned output wider than D whose extra
columns must stay NaN, the output a strided view): odd lengths, a partial last key block, 1 key and 1 query, head dim
200, rows past seqlen_q (the last Q block's second half partly or wholly past them: 1023, 200, 113, 1), 2-3 tiles per
CTA with 1, 2, odd and even key-block counts (each warpgroup's half of the next Q loads into its own rows while the
other warpgroup may still read its half), kv_lens with a batch without keys, grouped K/V, the fixed-reference redo,
the tail launch (the O-in-V build's split kernel, Q's box back at 128 rows), fp16 (no such build: runs wide), the
refusal of D=192 under the setting, and the output equal to the O-in-V build's bit for bit. CPU side:
tests/test_d256_q_halves.py."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import hopper_skip_reason

# kv_lens calls stay on the variant's own plain schedule (conftest.py, tail_kv_lens_off)
pytestmark = [pytest.mark.gpu, pytest.mark.usefixtures("tail_kv_lens_off", "launch_refusal_fails_its_test")]
if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402
from test_envelope_gpu import (DEV, assert_accurate, bshd_inputs, check, check_keyless_batch,  # noqa: E402
                               climbing_inputs, cudnn, new_gen, reference)

SETTING, O_PATH, BLOCK_N, Q_BOX_ROWS = 5, 2, 80, 64



def assert_ran_variant():
    assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_q_box_rows()) == (BLOCK_N, O_PATH, Q_BOX_ROWS)


# (head dim, queries, keys, tail launch): as tests/test_d256_o_regs_gpu.py's cases; here the tail launch's split
# kernel is the O-in-V build's with a 128-row Q box re-encoded for it, so the tail cases check that re-encoding.
CASES = ((256, 1, 1, False), (256, 113, 879, False), (256, 1023, 113, False), (256, 200, 1, False),
         (256, 113, 1023, True), (256, 4224, 4224, True), (200, 113, 801, False), (200, 4224, 77, False))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d,sq,skv,tail", CASES, ids=lambda x: str(x))
def test_q_halves(d, sq, skv, tail, layout):
    g, seed = new_gen()
    b, h = (1, 2) if sq >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g, shift=sq == 113)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D={d} Q-halves {sq}x{skv} {layout} seed={seed}", layout, expect_tail=tail)
        assert_ran_variant()


@pytest.mark.parametrize("skv", (77, 160, 1023, 1029, 2049), ids=lambda x: f"kv{x}")
def test_q_halves_several_tiles_per_cta(skv):
    """2-3 tiles per CTA (9 heads x 33 tiles on 132 SMs) with 1, 2, odd and even key-block counts: warpgroup 0's half
    of the next tile's Q loads as soon as its own last S has retired, while warpgroup 1 still runs its last S on its
    own half. (From 12 blocks the last 33 tiles go to the tail launch; the first 264 run on the variant.)"""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 9, 9, 4224, skv, 256, g)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D=256 Q-halves 9x4224x{skv} seed={seed}")
        assert_ran_variant()


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_q_halves_kv_lens_and_grouped(layout):
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 777, 1023, 256, g)
    kv_lens = torch.tensor([1023, 301], dtype=torch.int32, device=DEV)
    q2, k2, v2 = bshd_inputs(2, 8, 2, 1000, 3001, 256, g, shift=True)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D=256 Q-halves kv_lens {layout} seed={seed}", layout, kv_lens)
        assert_ran_variant()
        check(q2, k2, v2, f"D=256 Q-halves GQA 8q/2kv {layout} seed={seed}", layout)
        assert_ran_variant()


def test_q_halves_batch_without_keys_and_strided_inputs():
    """kv_lens 0 for one batch (O = 0, LSE = -inf; each warpgroup releases its half at once) between tiles that have
    keys; q, k, v strided views (every other head of a wider tensor)."""
    g, seed = new_gen()
    qw, kw, vw = bshd_inputs(3, 8, 8, 1500, 1023, 256, g)
    q, k, v = qw[:, :, ::2], kw[:, :, ::2], vw[:, :, ::2]
    check_keyless_batch(q, k, v, [1023, 0, 555], SETTING, assert_ran_variant, f"Q-halves seed={seed}")


# (batch, heads, queries, keys): one tile per CTA at odd lengths (90 tiles); 2-3 tiles per CTA, 10 key blocks, no
# tail launch (297 tiles); the envelope's D256 1K shape itself (1024 tiles: 7-8 per CTA, 13 blocks, no tail launch)
BITWISE = ((2, 5, 1111, 1029), (1, 9, 4224, 800), (16, 8, 1024, 1024))


@pytest.mark.parametrize("b,h,sq,skv", BITWISE, ids=lambda x: str(x))
def test_q_halves_matches_o_in_v_bit_for_bit(b, h, sq, skv):
    """Only where Q comes from changes (per-warpgroup boxes into the same rows, each half released and refilled on
    its own warpgroup's barriers from tile to tile): the outputs agree exactly."""
    g, _ = new_gen()
    q, k, v = bshd_inputs(b, h, h, sq, skv, 256, g)
    with _ext.hd_narrow(3):
        ref = vidattn.attention(q, k, v, layout="bshd")
        assert (_ext.last_o_path(), _ext.last_q_box_rows(), _ext.last_tail_splits()) == (2, 128, 0)
    with _ext.hd_narrow(SETTING):
        out = vidattn.attention(q, k, v, layout="bshd")
        assert_ran_variant()
        assert _ext.last_tail_splits() == 0
    assert torch.isfinite(out).all() and torch.equal(out, ref)


def test_q_halves_redo_fp16_and_d192_refused():
    """The fixed-reference redo runs its tiles again on the variant; fp16 has no such build and runs wide; bf16 at
    D=192 is refused under the setting (no D=192 variant), and the refusal names it."""
    g, seed = new_gen()
    q, k, v = climbing_inputs(256, g)
    scale = 1.0 / math.sqrt(256)
    ref, _ = reference(q, k, v, scale)
    h16 = [t.half() for t in bshd_inputs(1, 3, 3, 1023, 777, 256, g)]
    q192, k192, v192 = bshd_inputs(1, 2, 2, 300, 300, 192, g)
    full = torch.tensor([k.shape[1]], dtype=torch.int32, device=DEV)
    with _ext.hd_narrow(SETTING):
        assert_accurate(vidattn.attention(q, k, v, kv_lens=full), ref, cudnn(q, k, v, scale),
                        f"redo Q-halves seed={seed}")
        assert _ext.last_tail_splits() == 0
        assert_ran_variant()
        check(*h16, f"D=256 fp16 under the Q-halves setting seed={seed}")
        assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_q_box_rows()) == (BLOCK_N, 1, 128)
        out = torch.empty_like(q192)
        with pytest.raises(_ext.KernelLaunchError, match="HD_NARROW=5"):
            _ext.forward(q192, k192, v192, out, None, None, 1.0 / math.sqrt(192))
        _ext._launch_error = None  # the refusal was the point; later tests run the kernel again
        assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_q_box_rows()) == (0, 0, 0)
