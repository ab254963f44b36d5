"""The routed D=256 build (O-in-V, the O stores' reads waited for under the next S_0) with a tile's last, partial key
block narrowed by as little as one 16-key step (VIDATTN_HD_NARROW=7: tile_config.cuh kNarrowAll, FwdTraits::kNarrowMax
4 instead of 2 at N=80) on a Hopper GPU, against float64 attention and cuDNN with fresh random inputs
(tests/test_envelope_gpu.py's `check`: both layouts, LSE, a NaN-poisoned output wider than D, a strided output):
last blocks of 1, 2, 3 and 4 steps (3 and 4 are what the variant adds: 1K keys end in 64 of 80, 32K in 48) and full,
one-block tiles, 2-3 tiles per CTA, kv_lens with a batch without keys, grouped K/V, the redo, the tail launch (the
O-in-V split kernel, narrowing as before), fp16 (runs wide), the refusal of D=192 under the setting, and the output
and LSE equal to setting 6's bit for bit: narrowing leaves out only keys whose p is exactly 0, and a step of zeros
adds nothing to O. The variant reports setting 6's width, O path and Q box. That the block really runs narrow no
longer shows in the outputs: NaN in V past the length showed it until the consumers zeroed those rows before P V
(flash_fwd.cuh, zero_v_rows), and test_steps_left_out_are_not_read now holds both settings exact there. CPU side
(the narrow width's bound at every narrowing site, a model of block_steps): tests/test_d256_narrow_all.py.
"""
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
from test_envelope_gpu import (DEV, LSE_ATOL, assert_accurate, bshd_inputs, check, check_keyless_batch,  # noqa: E402
                               climbing_inputs, cudnn, new_gen, reference)

SETTING, ROUTED, O_PATH, BLOCK_N, Q_BOX_ROWS = 7, 6, 4, 80, 128



def assert_ran_variant():
    # setting 6's numbers too: the variant differs in its partial blocks only (tests/test_d256_narrow_all.py models
    # where it narrows; the outputs are the same bit for bit)
    assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_q_box_rows()) == (BLOCK_N, O_PATH, Q_BOX_ROWS)


def steps_of_last_block(skv: int) -> int:
    return -(-(skv % BLOCK_N) // 16) if skv % BLOCK_N else BLOCK_N // 16


# (head dim, queries, keys, tail launch): last blocks of 1 (1, 801), 2 (817), 3 (848, 833), 4 (864, 64) and 5 steps
# (880: none partial) on the variant (at most 11 blocks: fewer tiles than SMs with 12 or more run wholly as key
# ranges), and two that do run as key ranges, on the O-in-V split kernel (1024 and 4224: 4 steps, full width there)
CASES = ((256, 1, 1, False), (256, 113, 801, False), (256, 200, 817, False), (256, 113, 848, False),
         (256, 1023, 864, False), (256, 77, 880, False), (256, 113, 1024, True), (256, 4224, 4224, True),
         (200, 113, 833, False), (200, 300, 64, False))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d,sq,skv,tail", CASES, ids=lambda x: str(x))
def test_narrow_all(d, sq, skv, tail, layout):
    g, seed = new_gen()
    b, h = (1, 2) if sq >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g, shift=sq == 113)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D={d} narrow-all {sq}x{skv} ({steps_of_last_block(skv)} steps) {layout} seed={seed}",
              layout, expect_tail=tail)
        assert_ran_variant()


@pytest.mark.parametrize("skv", (64, 208, 961, 977, 1008, 1024, 2049), ids=lambda x: f"kv{x}")
def test_narrow_all_several_tiles_per_cta(skv):
    """2-3 tiles per CTA (9 heads x 33 tiles on 132 SMs), each ending in a narrowed block of 1-4 steps, between
    tiles of one block (64) and of several; the last 33 tiles go to the tail launch from 12 blocks on."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 9, 9, 4224, skv, 256, g)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D=256 narrow-all 9x4224x{skv} ({steps_of_last_block(skv)} steps) seed={seed}")
        assert_ran_variant()


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_narrow_all_kv_lens_and_grouped(layout):
    """kv_lens ending in 4 (1023) and 2 (257) steps (kept on the plain schedule: tail_kv_lens_off); grouped K/V at
    848 keys (3 steps; 128 tiles of 11 blocks: no tail launch either)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 777, 1023, 256, g)
    kv_lens = torch.tensor([1023, 257], dtype=torch.int32, device=DEV)
    q2, k2, v2 = bshd_inputs(2, 8, 2, 1000, 848, 256, g, shift=True)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D=256 narrow-all kv_lens {layout} seed={seed}", layout, kv_lens)
        assert_ran_variant()
        check(q2, k2, v2, f"D=256 narrow-all GQA 8q/2kv {layout} seed={seed}", layout)
        assert_ran_variant()


def test_narrow_all_batch_without_keys():
    """kv_lens 0 for one batch (O = 0, LSE = -inf) between batches ending in 3 (1008) and 4 (544) steps."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(3, 4, 4, 1500, 1008, 256, g)
    check_keyless_batch(q, k, v, [1008, 0, 544], SETTING, assert_ran_variant, f"narrow-all seed={seed}")


# (batch, heads, queries, keys): the envelope's D256 1K shape (1024 tiles, 7-8 per CTA, 13 blocks ending in 4 steps,
# no tail launch), last blocks of 3, 2 and 1 steps with 2-3 tiles per CTA (297 tiles of 11 blocks: no tail launch),
# and 8K keys (512 tiles of 103 blocks ending in 2 steps: a last round of 116 tiles, too many to split)
BITWISE = ((16, 8, 1024, 1024), (1, 9, 4224, 848), (1, 9, 4224, 817), (1, 9, 4224, 801), (1, 8, 8192, 8192))


@pytest.mark.parametrize("b,h,sq,skv", BITWISE, ids=lambda x: str(x))
def test_narrow_all_matches_setting_6_bit_for_bit(b, h, sq, skv):
    """Narrowing changes no arithmetic on the valid keys: the S columns it computes are the same dot products, the
    columns it leaves out are -inf either way (mask_keys after the full-width S), so p = 0 there and the row sums add
    the same zeros in the same order, and the P V steps it leaves out add P = 0 times V, which is +-0 per product:
    O and the LSE equal setting 6's bit for bit (finite V)."""
    g, _ = new_gen()
    q, k, v = bshd_inputs(b, h, h, sq, skv, 256, g)
    with _ext.hd_narrow(ROUTED):
        ref, ref_lse = vidattn.attention(q, k, v, layout="bshd", return_lse=True)
        assert (_ext.last_o_path(), _ext.last_q_box_rows()) == (O_PATH, Q_BOX_ROWS)
        splits = _ext.last_tail_splits()
    with _ext.hd_narrow(SETTING):
        out, lse = vidattn.attention(q, k, v, layout="bshd", return_lse=True)
        assert_ran_variant()
        assert _ext.last_tail_splits() == splits
    assert torch.isfinite(out).all() and torch.equal(out, ref) and torch.equal(lse, ref_lse)


@pytest.mark.parametrize("steps", (1, 2, 3, 4))
def test_steps_left_out_are_not_read(steps):
    """NaN past the length is harmless under the variant and under setting 6: one batch of 1040 keys with kv_lens
    ending its last block in `steps` steps, NaN in K and V past those steps (keys 960 + 16 steps .. 1039, all past
    kv_len). A masked key's score is -inf after the full-width S (a select: NaN in K is harmless), and a full-width P V
    adds P = 0 times V's rows past the length, which the consumers zero in the stage first (flash_fwd.cuh,
    zero_v_rows). Before that change this test was the evidence that the variant narrows and setting 6 (narrowing only
    1-2 steps) does not: setting 6 turned NaN at 3 and 4 steps. Now both are exact at every count and give the same
    output bit for bit (the steps setting 6 adds are P = 0 times V = 0), and the outputs can no longer tell the widths
    apart."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 4, 4, 333, 1040, 256, g)
    n = 960 + 16 * steps - 5
    k[:, 960 + 16 * steps:] = float("nan")
    v[:, 960 + 16 * steps:] = float("nan")
    kv_lens = torch.tensor([n], dtype=torch.int32, device=DEV)
    scale = 1.0 / math.sqrt(256)
    ref, ref_lse = reference(q, k[:, :n], v[:, :n], scale)
    base = cudnn(q, k[:, :n], v[:, :n], scale)
    what = f"{steps} steps, NaN past them, seed={seed}"
    with _ext.hd_narrow(SETTING):
        out, lse = vidattn.attention(q, k, v, layout="bshd", kv_lens=kv_lens, return_lse=True)
        assert_ran_variant()
    assert_accurate(out, ref, base, f"narrow-all {what}")
    assert (lse.double() - ref_lse).abs().max().item() < LSE_ATOL, what
    with _ext.hd_narrow(ROUTED):
        out6 = vidattn.attention(q, k, v, layout="bshd", kv_lens=kv_lens)
    assert torch.equal(out6, out), f"setting 6 against the narrow-all variant, {what}"


def test_narrow_all_redo_fp16_and_d192_refused():
    """The fixed-reference redo on the variant (1000 keys: a last block of 3 steps); fp16 has no such build and runs
    wide; bf16 at D=192 is refused under the setting, and the refusal names it."""
    g, seed = new_gen()
    q, k, v = climbing_inputs(256, g)
    scale = 1.0 / math.sqrt(256)
    ref, _ = reference(q, k, v, scale)
    h16 = [t.half() for t in bshd_inputs(1, 3, 3, 1023, 1008, 256, g)]
    q192, k192, v192 = bshd_inputs(1, 2, 2, 300, 300, 192, g)
    full = torch.tensor([k.shape[1]], dtype=torch.int32, device=DEV)
    with _ext.hd_narrow(SETTING):
        assert_accurate(vidattn.attention(q, k, v, kv_lens=full), ref, cudnn(q, k, v, scale),
                        f"redo narrow-all seed={seed}")
        assert _ext.last_tail_splits() == 0
        assert_ran_variant()
        check(*h16, f"D=256 fp16 under the narrow-all setting seed={seed}")
        assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_q_box_rows()) == (BLOCK_N, 1, 128)
        out = torch.empty_like(q192)
        with pytest.raises(_ext.KernelLaunchError, match="HD_NARROW=7"):
            _ext.forward(q192, k192, v192, out, None, None, 1.0 / math.sqrt(192))
        _ext._launch_error = None  # the refusal was the point; later tests run the kernel again
        assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_q_box_rows()) == (0, 0, 0)
