"""Block-sparse attention on the kernel (csrc/sm90/flash_fwd.cuh, kSparse) on a Hopper GPU.

Fresh random inputs (the seed is in every failure message) and random 64 x 64 block masks at several densities, with
block rows and whole tiles that see no key; the reference is float64 attention on the upcast inputs with the element
mask the blocks expand to, and the kernel's error must stay within a small multiple of SDPA's on the same bf16/fp16
inputs with the same (dense) mask. Odd lengths (partial query tiles, a partial last key block that may come anywhere
in a tile's list), both layouts, strided views of a fused QKV, grouped K/V, LSE, fp16. Outputs are checked for being
written everywhere (the allocator's cache is poisoned with NaN first). Rows that see no key must be exact zeros with
an LSE of -inf."""
from __future__ import annotations

import math

import pytest
import torch

from conftest import hopper_skip_reason

pytestmark = pytest.mark.gpu
if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import torch.nn.functional as F  # noqa: E402

import sys  # noqa: E402
from pathlib import Path  # noqa: E402

import vidattn  # noqa: E402
from vidattn import _ext, sparse  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.accuracy import fa_atol  # noqa: E402  (FlashAttention's absolute term, as in tests/test_kernel_gpu.py)

DEV = "cuda"
# max |err| <= K_ERR x SDPA's + fa_atol + FLOOR, the dense suite's bound (tests/test_kernel_gpu.py's docstring says
# why): with the fixed reference a row's largest p is no longer exactly 1, so a key that dominates its row carries
# bf16's rounding in its weight, which SDPA's running max spares; its relative L2 stays SDPA's (checked below).
K_ERR, FLOOR = 2.0, 2e-5


def poison_cache(nbytes=1 << 28):
    """Leave NaN in the blocks the caching allocator hands out next, so an element the kernel does not write shows."""
    t = torch.full((nbytes // 4,), float("nan"), device=DEV)
    del t


def element_mask(blocks, sq, skv):
    return blocks.repeat_interleave(64, -2)[..., :sq, :].repeat_interleave(64, -1)[..., :skv]


def ref64(qh, kh, vh, mask, scale):
    h = qh.shape[1]
    kh = kh.repeat_interleave(h // kh.shape[1], 1).double()
    vh = vh.repeat_interleave(h // vh.shape[1], 1).double()
    s = (qh.double() @ kh.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    empty = torch.isinf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    z = p.sum(-1, keepdim=True)
    o = (p @ vh) / torch.where(empty, torch.ones_like(z), z)
    lse = torch.where(empty, torch.full_like(m, float("-inf")), m + torch.log(z)).squeeze(-1)
    return o.masked_fill(empty, 0.0), lse, empty.squeeze(-1)


def random_blocks(b, h, sq, skv, density, g):
    nq, nk = (sq + 63) // 64, (skv + 63) // 64
    blocks = torch.rand(b, h, nq, nk, device=DEV, generator=g) < density
    return blocks


def check(qh, kh, vh, blocks, seed, layout="bshd", scale=None, strided=None):
    """Run the op on (B, H, S, D) inputs in `layout` and compare with fp64 and SDPA's error on the same mask."""
    b, h, sq, d = qh.shape
    skv = kh.shape[2]
    sc = 1 / math.sqrt(d) if scale is None else scale
    mask = element_mask(blocks, sq, skv)
    want, want_lse, empty = ref64(qh, kh, vh, mask, sc)
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) if strided else t.transpose(1, 2).contiguous() for t in (qh, kh, vh))
    else:
        q, k, v = qh, kh, vh
    assert vidattn.explain(q, k, v, layout=layout, scale=scale, block_mask=blocks) is None, seed
    poison_cache()
    out, lse = vidattn.attention(q, k, v, layout=layout, scale=scale, block_mask=blocks, return_lse=True)
    got = out.transpose(1, 2) if layout == "bshd" else out
    assert torch.isfinite(got).all(), f"non-finite output, seed {seed}"
    assert torch.all(got[empty.unsqueeze(-1).expand_as(got)] == 0), f"rows without keys not zero, seed {seed}"
    assert torch.equal(torch.isinf(lse), empty), f"LSE -inf pattern, seed {seed}"
    err = (got.double() - want).abs().masked_fill(empty.unsqueeze(-1), 0)
    ksdpa = kh.repeat_interleave(h // kh.shape[1], 1)
    vsdpa = vh.repeat_interleave(h // vh.shape[1], 1)
    sdpa = F.scaled_dot_product_attention(qh, ksdpa, vsdpa, attn_mask=mask, scale=sc)
    serr = (sdpa.double() - want).abs().masked_fill(empty.unsqueeze(-1), 0).nan_to_num(0)
    atol = fa_atol(want[~empty], got.dtype) if bool((~empty).any()) else 0.0
    assert err.max() <= K_ERR * serr.max() + atol + FLOOR, \
        f"max err {err.max():.3e} vs SDPA {serr.max():.3e} (+ {atol:.1e}), seed {seed}"
    rel = err.norm() / want.norm().clamp_min(1e-30)
    srel = serr.norm() / want.norm().clamp_min(1e-30)
    assert rel <= 1.5 * srel + 1e-6, f"rel L2 {rel:.3e} vs SDPA {srel:.3e}, seed {seed}"
    fin = ~empty
    assert torch.allclose(lse[fin].double(), want_lse[fin], atol=1e-2), f"LSE, seed {seed}"
    return got


@pytest.fixture(params=[2, 3], ids=["wg2", "wg3"])
def d64_wgs(request, monkeypatch):
    """Both block-sparse D=64 builds (128-row tiles of two warpgroups, the default, and 192-row ones of three),
    whatever the setting the tests run under; head dim 128 has the two-warpgroup build only."""
    if request.param == 3 and request.node.callspec.params.get("d", 64) != 64:
        pytest.skip("head dim 128 has one block-sparse build (two warpgroups)")
    monkeypatch.setattr(sparse, "D64_WARPGROUPS", request.param)
    return request.param


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("density", [0.08, 0.4, 1.0])
@pytest.mark.parametrize("sq, skv", [(1000, 777), (4096, 4096), (130, 2000)])
@pytest.mark.usefixtures("d64_wgs")
def test_random_block_masks_match_fp64(d, density, sq, skv):
    g = torch.Generator(device=DEV)
    seed = g.seed()
    h = 4
    blocks = random_blocks(2, h, sq, skv, density, g)
    blocks[0, 1, 0] = False                # a block row with no key: O = 0, LSE -inf
    blocks[1, 2, :2] = False               # a whole tile with no key
    qh, kh, vh = (torch.randn(2, h, n, d, device=DEV, generator=g, dtype=torch.bfloat16) for n in (sq, skv, skv))
    check(qh, kh, vh, blocks, seed)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.usefixtures("d64_wgs")
def test_bhsd_fp16_grouped_kv_and_scale(d):
    g = torch.Generator(device=DEV)
    seed = g.seed()
    blocks = random_blocks(1, 8, 1500, 1500, 0.3, g)
    qh = torch.randn(1, 8, 1500, d, device=DEV, generator=g, dtype=torch.float16)
    kh, vh = (torch.randn(1, 2, 1500, d, device=DEV, generator=g, dtype=torch.float16) for _ in range(2))
    check(qh, kh, vh, blocks, seed, layout="bhsd", scale=0.07)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.usefixtures("d64_wgs")
def test_strided_views_of_a_fused_qkv(d):
    g = torch.Generator(device=DEV)
    seed = g.seed()
    b, s, h = 1, 2100, 6
    qkv = torch.randn(b, s, 3, h, d, device=DEV, generator=g, dtype=torch.bfloat16)
    q, k, v = qkv.unbind(2)  # (B, S, H, D) views with a 3 H D sequence stride
    blocks = random_blocks(b, h, s, s, 0.25, g)
    check(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), blocks, seed, strided=True)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.usefixtures("d64_wgs")
def test_a_row_whose_first_blocks_are_masked_keeps_its_far_scores(d):
    """The online softmax's reference stays -inf across a row's masked blocks (kKeepNegInf): with 0 kept instead, a
    row whose scores all lie far below 0 would sum to nothing and come out NaN or 0."""
    g = torch.Generator(device=DEV)
    seed = g.seed()
    sq, skv, h = 256, 1024, 2
    qh = torch.randn(1, h, sq, d, device=DEV, generator=g)
    kh = torch.randn(1, h, skv, d, device=DEV, generator=g)
    # every score near -300 / scale-units: q aligned against a shared key direction
    direction = torch.randn(d, device=DEV, generator=g)
    direction = direction / direction.norm()
    qh = (qh * 0.1 + 20 * direction).bfloat16()
    kh = (kh * 0.1 - 20 * direction).bfloat16()
    vh = torch.randn(1, h, skv, d, device=DEV, generator=g, dtype=torch.bfloat16)
    blocks = torch.zeros(1, h, 4, 16, dtype=torch.bool, device=DEV)
    blocks[..., 0, 9] = True      # warpgroup 0: only late key blocks
    blocks[..., 1, 15] = True
    blocks[..., 2, 3] = True
    blocks[..., 3, 0] = True
    blocks[..., 3, 14] = True
    check(qh, kh, vh, blocks, seed, scale=1.0)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.usefixtures("d64_wgs")
def test_a_late_key_far_above_the_fixed_reference_is_redone(d):
    """Each warpgroup's rows take their fixed reference in their first block with a key; one key in a later block
    far above it (2^87 and more of the reference's weight) pushes the row sums past 2^64, and the tile runs again with
    the online softmax (the dense builds' redo): the result is the exact one. A warpgroup whose first key is late
    (row block 1) sets its reference there."""
    g = torch.Generator(device=DEV)
    seed = g.seed()
    h, s = 2, 1500
    qh = (torch.randn(1, h, s, d, device=DEV, generator=g) * 0.5 + 1.0).bfloat16()
    kh = torch.randn(1, h, s, d, device=DEV, generator=g)
    kh[:, :, 1300] = 8.0  # scores ~ 8 d against ~ N(0, 9-13) elsewhere
    kh = kh.bfloat16()
    vh = torch.randn(1, h, s, d, device=DEV, generator=g, dtype=torch.bfloat16)
    n = (s + 63) // 64
    blocks = torch.rand(1, h, n, n, device=DEV, generator=g) < 0.5
    blocks[..., 1300 // 64] = True
    blocks[..., 1, : 1300 // 64] = False  # row block 1 meets its first key in the dominant key's block
    check(qh, kh, vh, blocks, seed)


def _two_row_blocks(d, needs, entry_bits, prepare):
    """Two 64-row blocks (2 heads, 640 keys) with the key blocks `needs[r]` each, random inputs bf16 after
    `prepare(q, k)` edits them in fp32; checks that the tile's second entry is key blocks 2-3 with these two
    warpgroups' bits. Returns (q, k, v, blocks, seed, the block-sparse output)."""
    g = torch.Generator(device=DEV)
    seed = g.seed()
    h, sq, skv = 2, 128, 640
    qh, kh, vh = (torch.randn(1, h, n, d, device=DEV, generator=g) for n in (sq, skv, skv))
    prepare(qh, kh)
    qh, kh, vh = qh.bfloat16(), kh.bfloat16(), vh.bfloat16()
    blocks = torch.zeros(1, h, 2, skv // 64, dtype=torch.bool, device=DEV)
    for r, keys in enumerate(needs):
        blocks[..., r, keys] = True
    tab = sparse.tables(blocks, sparse.warpgroups(d))
    assert int(tab.entries[0, 0, 0, 1, 0]) == 2 and int(tab.entries[0, 0, 0, 1, 1]) & 0b1111 == entry_bits, seed
    return qh, kh, vh, blocks, seed, vidattn.attention(qh, kh, vh, layout="bhsd", block_mask=blocks)


def _exact_rows(out, qh, kh, vh, blocks, rows, seed):
    """The block-sparse output's `rows` are finite and the exact attention over their own blocks."""
    keep = element_mask(blocks, qh.shape[2], kh.shape[2])[:, :, rows]
    want, _, _ = ref64(qh[:, :, rows], kh, vh, keep, 1 / math.sqrt(qh.shape[-1]))
    got = out[:, :, rows].double()
    assert torch.isfinite(want).all(), f"the reference's rows, seed {seed}"
    assert torch.isfinite(got).all(), f"non-finite rows, seed {seed}"
    rel = float((got - want).norm() / want.norm())
    assert rel < 1e-2, f"rel L2 {rel:.2e}, seed {seed}"


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
@pytest.mark.usefixtures("d64_wgs")
def test_a_non_finite_key_in_a_half_a_warpgroup_skips_stays_out_of_its_rows(d, poison):
    """Row block 0 needs key blocks 0, 1, 3 and 5, row block 1 needs 0, 1, 2 and 5, so the 128-key entry of blocks 2
    and 3 is listed for both: row block 1 needs its first half, so it starts on time, and row block 0 computes all of
    it with its first half masked. Block 2's keys are non-finite: row block 1's rows come out non-finite as the
    reference's do; row block 0's must be the exact attention over its own blocks. (Row block 1's non-finite sums
    send the tile to the redo whatever row block 0's pass did: the next test isolates row block 0's masked half.
    V is left finite: a masked key's p is 0, and 0 x NaN is NaN.)"""
    def prepare(qh, kh):
        kh[:, :, 128:192] = poison
    qh, kh, vh, blocks, seed, out = _two_row_blocks(d, ([0, 1, 3, 5], [0, 1, 2, 5]), 0b0110, prepare)
    assert not torch.isfinite(out[:, :, 64:]).all(), f"row block 1 sees the non-finite keys, seed {seed}"
    _exact_rows(out, qh, kh, vh, blocks, slice(0, 64), seed)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.usefixtures("d64_wgs")
def test_a_score_that_overflows_only_in_a_half_a_warpgroup_masks_is_redone(d):
    """The masks of the previous test, with finite inputs: row block 0's queries and block 2's keys share one dimension
    at 2^70, which no other key or query has, so their score overflows to +inf in fp32 in row block 0's rows only, in
    the half of the entry of blocks 2 and 3 that row block 0 computes masked (bits 0b10). On its fixed-reference pass
    that half is masked in the exponent's offset, where +inf gives NaN in the row sum; the tile must then run again
    with the exact softmax (the selects), and every row must be the exact attention over its own blocks."""
    def prepare(qh, kh):
        qh[..., 0], kh[..., 0] = 0.0, 0.0
        qh[:, :, :64, 0] = 2.0 ** 70
        kh[:, :, 128:192, 0] = 2.0 ** 70
    qh, kh, vh, blocks, seed, out = _two_row_blocks(d, ([0, 1, 3, 5], [0, 1, 2, 5]), 0b0110, prepare)
    _exact_rows(out, qh, kh, vh, blocks, slice(0, 128), seed)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("poison", [float("nan"), float("inf")])
@pytest.mark.usefixtures("d64_wgs")
def test_a_non_finite_key_in_the_unread_half_of_a_first_half_block_stays_out(d, poison):
    """Both row blocks need key blocks 0, 1, 2 and 5: the 128-key entry of blocks 2 and 3 is a first-half-only block
    for both warpgroups (four steps of S and P V). Block 3's keys are non-finite and no row needs them: every row must
    be the exact attention over its own blocks. (The narrowed S never computes block 3's scores: issue_qk_block
    writes -inf past its four steps. This guards that path.)"""
    def prepare(qh, kh):
        kh[:, :, 192:256] = poison
    qh, kh, vh, blocks, seed, out = _two_row_blocks(d, ([0, 1, 2, 5], [0, 1, 2, 5]), 0b0101, prepare)
    _exact_rows(out, qh, kh, vh, blocks, slice(0, 128), seed)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("skv", [1000, 1024])
@pytest.mark.usefixtures("d64_wgs")
def test_one_row_block_the_first_half_and_the_other_the_second(d, skv):
    """Row block 0 needs key blocks 0 and 14, row block 1 needs 0 and 15: the entry of blocks 14 and 15 (the last,
    partial at 1000 keys) names the first half for one warpgroup and the second for the other (bits 0b1001). Each
    row block must be the exact attention over its own keys (the second warpgroup computes the whole block, its first
    half masked, and at 1000 keys its last 40 keys past Skv)."""
    g = torch.Generator(device=DEV)
    seed = g.seed()
    h, sq = 2, 128
    qh, kh, vh = (torch.randn(1, h, n, d, device=DEV, generator=g).bfloat16() for n in (sq, skv, skv))
    blocks = torch.zeros(1, h, 2, (skv + 63) // 64, dtype=torch.bool, device=DEV)
    blocks[..., 0, [0, 14]] = True
    blocks[..., 1, [0, 15]] = True
    tab = sparse.tables(blocks, sparse.warpgroups(d))
    assert int(tab.entries[0, 0, 0, 1, 0]) == 14 and int(tab.entries[0, 0, 0, 1, 1]) & 0b1111 == 0b1001, seed
    out = vidattn.attention(qh, kh, vh, layout="bhsd", block_mask=blocks)
    _exact_rows(out, qh, kh, vh, blocks, slice(0, sq), seed)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("skv", [777, 1000, 1024])
@pytest.mark.usefixtures("d64_wgs")
def test_blocks_needed_only_in_their_second_half_start_late(d, skv):
    """A key block whose first 64 keys no row of the tile needs starts 64 keys later (sparse.tables): its needed keys
    run as a first half (half the steps, half the exponentials), and the rest of the window (the next block's first
    half, or keys past Skv: TMA's zeros, masked) counts for nothing. Here every entry starts late, the last one ends
    past the keys (at 777 its window holds 73 keys: 64 < L < 128; at 1000 a partial 64-key block), and each warpgroup
    skips the blocks only its partner needs."""
    g = torch.Generator(device=DEV)
    seed = g.seed()
    sq, h = 256, 3
    nk = (skv + 63) // 64
    blocks = torch.zeros(1, h, 4, nk, dtype=torch.bool, device=DEV)
    blocks[..., 1::2] = torch.rand(1, h, 4, nk // 2, device=DEV, generator=g) < 0.5
    blocks[..., 0, nk - 1 if nk % 2 == 0 else nk - 2] = True  # the last second half: a window past Skv
    tab = sparse.tables(blocks)
    listed = torch.arange(tab.entries.shape[-2], device=DEV) < tab.count[..., None]
    assert bool((tab.entries[..., 0] % 2 == 1)[listed].all()) and bool(listed.any()), seed
    qh, kh, vh = (torch.randn(1, h, n, d, device=DEV, generator=g, dtype=torch.bfloat16) for n in (sq, skv, skv))
    check(qh, kh, vh, blocks, seed)


@pytest.mark.parametrize("density", [0.08, 0.4, 1.0])
@pytest.mark.parametrize("sq, skv", [(1000, 777), (4096, 4096), (130, 2000), (200, 1000), (320, 900)])
def test_d64_three_warpgroup_tiles_match_fp64(monkeypatch, density, sq, skv):
    """Head dim 64 on the three-warpgroup build (192-row tiles: VIDATTN_SPARSE_D64_WARPGROUPS=3, the tables built for
    it): random masks with an empty block row and an empty tile, odd lengths (a last tile of one row block: 200, 4096
    and 1000 rows; of two: 320; of three, a partial last block: 130)."""
    monkeypatch.setattr(sparse, "D64_WARPGROUPS", 3)
    g = torch.Generator(device=DEV)
    seed = g.seed()
    h = 4
    blocks = random_blocks(2, h, sq, skv, density, g)
    blocks[0, 1, 0] = False                # a block row with no key
    blocks[1, 2, :3] = False               # a whole 192-row tile with no key
    qh, kh, vh = (torch.randn(2, h, n, 64, device=DEV, generator=g, dtype=torch.bfloat16) for n in (sq, skv, skv))
    check(qh, kh, vh, blocks, seed)
    assert _ext.last_q_box_rows() == 192, "the three-warpgroup build did not run"


@pytest.mark.parametrize("skv", [777, 1024])
def test_d64_three_warpgroup_tiles_with_late_starts(monkeypatch, skv):
    """Late-starting entries on 192-row tiles: the rule looks at all three warpgroups' first halves."""
    monkeypatch.setattr(sparse, "D64_WARPGROUPS", 3)
    g = torch.Generator(device=DEV)
    seed = g.seed()
    nk = (skv + 63) // 64
    blocks = torch.zeros(1, 3, 6, nk, dtype=torch.bool, device=DEV)
    blocks[..., 1::2] = torch.rand(1, 3, 6, nk // 2, device=DEV, generator=g) < 0.5
    blocks[..., 2, nk - 1 if nk % 2 == 0 else nk - 2] = True
    tab = sparse.tables(blocks, 3)
    listed = torch.arange(tab.entries.shape[-2], device=DEV) < tab.count[..., None]
    assert bool((tab.entries[..., 0] % 2 == 1)[listed].all()), seed
    qh, kh, vh = (torch.randn(1, 3, n, 64, device=DEV, generator=g, dtype=torch.bfloat16) for n in (384, skv, skv))
    check(qh, kh, vh, blocks, seed)
    assert _ext.last_q_box_rows() == 192, "the three-warpgroup build did not run"


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.usefixtures("d64_wgs")
def test_full_mask_equals_the_dense_kernel(d):
    g = torch.Generator(device=DEV)
    q, k, v = (torch.randn(1, 3000, 4, d, device=DEV, generator=g, dtype=torch.bfloat16) for _ in range(3))
    blocks = torch.ones(1, 1, 47, 47, dtype=torch.bool, device=DEV)
    out = vidattn.attention(q, k, v, block_mask=blocks)
    dense = vidattn.attention(q, k, v)
    # (different builds: the dense one's fixed reference against the sparse one's online softmax)
    assert (out.float() - dense.float()).abs().max() < 2e-2


def test_flex_block_mask_as_nabla_builds_it():
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    g = torch.Generator(device=DEV)
    seed = g.seed()
    h, s, d = 4, 64 * 40, 64
    dense = random_blocks(1, h, s, s, 0.2, g)
    dense |= torch.eye(40, dtype=torch.bool, device=DEV)  # every row block sees itself (NABLA's STA prior)
    nb = dense.sum(-1).to(torch.int32)
    idx = dense.to(torch.int8).argsort(dim=-1, descending=True, stable=True).to(torch.int32)
    bm = fa.BlockMask.from_kv_blocks(torch.zeros_like(nb), idx, nb, idx, BLOCK_SIZE=64, mask_mod=None)
    qh, kh, vh = (torch.randn(1, h, s, d, device=DEV, generator=g, dtype=torch.bfloat16) for _ in range(3))
    got = check(qh, kh, vh, dense, seed)
    out = vidattn.attention(qh.transpose(1, 2), kh.transpose(1, 2), vh.transpose(1, 2), block_mask=bm)
    assert torch.equal(out.transpose(1, 2), got), seed


@pytest.mark.parametrize("d, wgs", [(128, 2), (64, 3)])
def test_compiled_and_graphed_calls(monkeypatch, d, wgs):
    monkeypatch.setattr(sparse, "D64_WARPGROUPS", wgs if d == 64 else 2)
    torch._dynamo.reset()
    g = torch.Generator(device=DEV)
    q, k, v = (torch.randn(1, 1100, 4, d, device=DEV, generator=g, dtype=torch.bfloat16) for _ in range(3))
    blocks = random_blocks(1, 4, 1100, 1100, 0.3, g)
    eager = vidattn.attention(q, k, v, block_mask=blocks)
    compiled = torch.compile(lambda q, k, v, m: vidattn.attention(q, k, v, block_mask=m), fullgraph=True)
    assert torch.equal(compiled(q, k, v, blocks), eager)
    tab = sparse.tables(blocks, wgs)
    out = torch.empty_like(q)
    graph = torch.cuda.CUDAGraph()
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        out.copy_(torch.ops.vidattn.sparse_attention(q, k, v, "bshd", None, tab.count, tab.entries, blocks, False,
                                                     wgs)[0])
    graph.replay()
    torch.cuda.synchronize()
    assert torch.equal(out, eager)


def test_outside_the_sparse_builds_runs_the_reference_with_a_reason():
    g = torch.Generator(device=DEV)
    q = torch.randn(1, 300, 2, 96, device=DEV, generator=g, dtype=torch.bfloat16)
    blocks = torch.ones(1, 1, 5, 5, dtype=torch.bool, device=DEV)
    reason = vidattn.explain(q, q, q, block_mask=blocks)
    assert "head dim 96" in reason and "block mask" in reason
    with pytest.warns(vidattn.VidattnFallbackWarning):
        vidattn.ops._warned.clear()
        out = vidattn.attention(q, q, q, block_mask=blocks)
    assert torch.allclose(out.float(), vidattn.attention(q, q, q).float(), atol=2e-2)


def test_c_entry_refuses_what_it_cannot_run():
    lib = _ext.load()
    q = torch.randn(1, 128, 1, 64, device=DEV, dtype=torch.bfloat16)
    tab = sparse.tables(torch.ones(1, 1, 2, 2, dtype=torch.bool, device=DEV))
    out = torch.empty_like(q)
    for kw, msg in (({"causal": 1}, "causal"),):
        with pytest.raises(_ext.KernelLaunchError, match=msg):
            _ext.forward(q, q, q, out, None, None, 0.125, lib=lib, sparse=tab, **kw)
    with pytest.raises(_ext.KernelLaunchError, match="kv_lens"):
        _ext.forward(q, q, q, out, None, torch.tensor([5], device=DEV, dtype=torch.int32), 0.125, lib=lib, sparse=tab)
    q96 = torch.randn(1, 128, 1, 96, device=DEV, dtype=torch.bfloat16)
    with pytest.raises(_ext.KernelLaunchError, match="head dim"):
        _ext.forward(q96, q96, q96, torch.empty_like(q96), None, None, 0.1, lib=lib, sparse=tab)
