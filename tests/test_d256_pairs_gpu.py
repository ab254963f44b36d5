"""The routed D=256 build (O-in-V, read-late) run by CTA pairs that share each K/V block (VIDATTN_HD_NARROW=8:
tile_config.cuh kPairs, each CTA multicasting half of every block into both) on a Hopper GPU, against float64
attention and cuDNN with fresh random inputs (tests/test_envelope_gpu.py's `check`: both layouts, LSE, a NaN-poisoned
output wider than D, a strided output): pairs of one-block and many-block tiles, 2-4 tiles per CTA, the tail launch
after a pair launch (without clusters), kv_lens with a batch without keys (both tiles of a pair share the batch),
grouped K/V, the redo with one tile of each pair spiked (the pair redoes the union of its marks), output and LSE equal
to setting 6's bit for bit (the same blocks in the same order per tile), the fallback to setting 6's build where the
Q blocks do not pair up, fp16 (runs wide) and the refusal of D=192 under the setting. CPU side:
tests/test_d256_pairs.py."""
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
                               cudnn, new_gen, reference)

SETTING, ROUTED, O_PATH, BLOCK_N, Q_BOX_ROWS = 8, 6, 4, 80, 128



def assert_ran_pairs(expect: int = 2):
    assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_q_box_rows()) == (BLOCK_N, O_PATH, Q_BOX_ROWS)
    assert _ext.last_cluster_ctas() == expect, f"clusters of {_ext.last_cluster_ctas()} CTAs, not {expect}"


# (batch, heads, queries, keys, tail launch): two Q blocks a head (one pair) over one block, a partial one and 11
# blocks (12 tiles: from 12 blocks on they would all go to the tail launch, with no pair launch); 4096 queries (32
# blocks) over 9 heads (288 tiles: 2-3 per CTA) with keys ending mid-block, too few blocks for a tail launch (11) and
# enough (53: a last round of 24 tiles as key ranges after the pair launch); 512 queries (4 blocks, two pairs a head)
CASES = ((2, 3, 256, 1, False), (2, 3, 255, 80, False), (2, 3, 200, 880, False), (1, 9, 4096, 848, False),
         (1, 9, 4096, 4224, True), (3, 4, 512, 333, False))


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("b,h,sq,skv,tail", CASES, ids=lambda x: str(x))
def test_pairs(b, h, sq, skv, tail, layout):
    g, seed = new_gen()
    q, k, v = bshd_inputs(b, h, h, sq, skv, 256, g, shift=sq == 255)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D=256 pairs {b}x{h}x{sq}x{skv} {layout} seed={seed}", layout, expect_tail=tail)
        assert_ran_pairs()


def test_pairs_padded_head_dim():
    """D=200 on the D=256 pair build (TMA's zero fill past D in both CTAs' halves, the O store clipped at D)."""
    g, seed = new_gen()
    with _ext.hd_narrow(SETTING):
        check(*bshd_inputs(2, 5, 5, 512, 700, 200, g), f"D=200 pairs seed={seed}")
        assert_ran_pairs()


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_pairs_kv_lens_and_grouped(layout):
    """kv_lens (both tiles of a pair belong to one batch, so they walk the same blocks); grouped K/V 8q/2kv, four
    query heads on one K/V head, so that pairs of different heads read the same blocks too."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, 512, 1023, 256, g)
    kv_lens = torch.tensor([1023, 257], dtype=torch.int32, device=DEV)
    q2, k2, v2 = bshd_inputs(2, 8, 2, 1000, 848, 256, g, shift=True)
    with _ext.hd_narrow(SETTING):
        check(q, k, v, f"D=256 pairs kv_lens {layout} seed={seed}", layout, kv_lens)
        assert_ran_pairs()
        check(q2, k2, v2, f"D=256 pairs GQA 8q/2kv {layout} seed={seed}", layout)
        assert_ran_pairs()


@pytest.mark.parametrize("b,h,sq", [(3, 4, 1500), (3, 133, 256)], ids=["one keyless tile per CTA", "keyless runs"])
def test_pairs_batch_without_keys(b, h, sq):
    """kv_lens 0 for one batch: both tiles of each of its pairs load Q only and store O = 0 from registers, LSE -inf,
    with no K/V traffic between the CTAs and no o_done phase (flash_fwd.cuh o_tiles), between batches with keys; with
    133 heads of two Q blocks each CTA runs two keyless tiles in a row, the case dev/probes/pair_protocol_sim.py found
    unsafe when such tiles went through a V stage."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(b, h, h, sq, 1008, 256, g)
    check_keyless_batch(q, k, v, [1008, 0, 544], SETTING, assert_ran_pairs, f"pairs {h} heads seed={seed}")


def spiked_second_blocks(g, heads: int, sq: int, skv: int):
    """Scores that climb along the keys (as test_envelope_gpu.climbing_inputs) in the odd Q blocks only: their rows'
    sums against the first key block's max leave the fixed reference's safe range, so those tiles are marked for the
    exact redo, and their partners (the even blocks, small scores) are not; the pair redoes both."""
    q, k, v = bshd_inputs(1, heads, heads, sq, skv, 256, g)
    ramp = torch.linspace(0, 12, skv, device=DEV)[None, :, None, None]
    rows = torch.arange(sq, device=DEV)
    odd = ((rows // 128) % 2 == 1)[None, :, None, None]
    qf = torch.where(odd, 1 + 0.1 * q.float(), 0.1 * q.float())
    return qf.to(q.dtype), (ramp + 0.1 * k.float()).to(k.dtype), v


@pytest.mark.parametrize("heads,sq", [(2, 256), (140, 512)], ids=["one pair a head", "several pairs per CTA"])
def test_pairs_redo_with_one_tile_of_each_pair_spiked(heads, sq):
    g, seed = new_gen()
    q, k, v = spiked_second_blocks(g, heads, sq, 1000)
    scale = 1.0 / math.sqrt(256)
    full = torch.tensor([k.shape[1]], dtype=torch.int32, device=DEV)  # kv_lens: no tail launch for these tiles
    ref, ref_lse = reference(q, k, v, scale)
    with _ext.hd_narrow(SETTING):
        out, lse = vidattn.attention(q, k, v, kv_lens=full, return_lse=True)
        assert _ext.last_tail_splits() == 0
        assert_ran_pairs()
    assert_accurate(out, ref, cudnn(q, k, v, scale), f"pairs redo seed={seed}")
    assert (lse.double() - ref_lse).abs().max().item() < LSE_ATOL, f"pairs redo LSE seed={seed}"
    with _ext.hd_narrow(ROUTED):
        out6, lse6 = vidattn.attention(q, k, v, kv_lens=full, return_lse=True)
    # the spiked tiles run exact on both builds; their partners, redone needlessly in the pair, run exact there and
    # on the fixed reference alone: equal within the fixed reference's rounding, not bit for bit
    odd = ((torch.arange(sq, device=DEV) // 128) % 2 == 1)
    assert torch.equal(out[:, odd], out6[:, odd]) and torch.equal(lse[:, :, odd], lse6[:, :, odd]), f"seed={seed}"


# (batch, heads, queries, keys): 1-8 tiles per CTA, one-block to 103-block tiles
BITWISE = ((16, 8, 1024, 1024), (1, 9, 4096, 848), (1, 8, 8192, 8192))


@pytest.mark.parametrize("b,h,sq,skv", BITWISE, ids=lambda x: str(x))
def test_pairs_match_setting_6_bit_for_bit(b, h, sq, skv):
    """Each tile of a pair walks the same key blocks in the same order, with the same instructions, as on the routed
    build: only who loaded half of each block differs. O and the LSE equal setting 6's bit for bit. kv_lens of the
    full length keeps both on the plain schedule (tail_kv_lens_off), whatever grid the pairs get: a tail launch's
    split of the keys would change the arithmetic of the tiles it takes."""
    g, _ = new_gen()
    q, k, v = bshd_inputs(b, h, h, sq, skv, 256, g)
    full = torch.full((b,), skv, dtype=torch.int32, device=DEV)
    with _ext.hd_narrow(ROUTED):
        ref, ref_lse = vidattn.attention(q, k, v, layout="bshd", kv_lens=full, return_lse=True)
        assert _ext.last_tail_splits() == 0 and _ext.last_cluster_ctas() == 1
    with _ext.hd_narrow(SETTING):
        out, lse = vidattn.attention(q, k, v, layout="bshd", kv_lens=full, return_lse=True)
        assert_ran_pairs()
        assert _ext.last_tail_splits() == 0
    assert torch.isfinite(out).all() and torch.equal(out, ref) and torch.equal(lse, ref_lse)


def test_unpaired_calls_fall_back_and_fp16_and_d192():
    """An odd Q-block count a head (257 queries: 3 blocks) runs setting 6's build, unclustered; fp16 has no such build
    and runs wide; bf16 at D=192 is refused under the setting, and the refusal names it."""
    g, seed = new_gen()
    with _ext.hd_narrow(SETTING):
        check(*bshd_inputs(2, 3, 3, 257, 1000, 256, g), f"D=256 odd Q blocks under the pair setting seed={seed}")
        assert_ran_pairs(expect=1)
        check(*[t.half() for t in bshd_inputs(1, 3, 3, 1024, 1008, 256, g)], f"D=256 fp16 pair setting seed={seed}")
        assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_cluster_ctas()) == (BLOCK_N, 1, 1)
        q192, k192, v192 = bshd_inputs(1, 2, 2, 300, 300, 192, g)
        out = torch.empty_like(q192)
        with pytest.raises(_ext.KernelLaunchError, match="HD_NARROW=8"):
            _ext.forward(q192, k192, v192, out, None, None, 1.0 / math.sqrt(192))
        _ext._launch_error = None  # the refusal was the point; later tests run the kernel again
        assert (_ext.last_block_n(), _ext.last_o_path(), _ext.last_cluster_ctas()) == (0, 0, 0)


def test_pairs_under_a_cuda_graph():
    """Captured and replayed (the cluster launch goes through cudaLaunchKernelEx): the replay equals the eager call."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 8, 8, 2048, 2048, 256, g)
    with _ext.hd_narrow(SETTING):
        eager = vidattn.attention(q, k, v)
        assert_ran_pairs()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            vidattn.attention(q, k, v)  # warm-up on the capture stream
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            out = vidattn.attention(q, k, v)
        graph.replay()
        torch.cuda.synchronize()
    assert torch.equal(out, eager), f"seed={seed}"
