"""Block-sparse attention without a GPU: the tables the kernel reads, the block-mask forms, the reference path that
every fallback runs, the argument errors and explain's reasons (vidattn/sparse.py, vidattn/ops.py)."""
import math
import warnings

import pytest
import torch

import vidattn
from vidattn import sparse


def _ref(q, k, v, blocks, scale=None):
    """fp64 (B, H, S, D) reference: the element mask expanded from the 64 x 64 blocks; rows without keys -> 0."""
    b, h, sq, d = q.shape
    skv = k.shape[2]
    scale = 1 / math.sqrt(d) if scale is None else scale
    if k.shape[1] != h:
        k = k.repeat_interleave(h // k.shape[1], 1)
        v = v.repeat_interleave(h // v.shape[1], 1)
    mask = blocks.repeat_interleave(64, -2)[..., :sq, :].repeat_interleave(64, -1)[..., :skv]
    s = (q.double() @ k.double().transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    empty = torch.isinf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    z = p.sum(-1, keepdim=True)
    o = (p @ v.double()) / torch.where(empty, torch.ones_like(z), z)
    lse = torch.where(empty, torch.full_like(m, float("-inf")), m + torch.log(z)).squeeze(-1)
    return o.masked_fill(empty, 0.0), lse


def test_tables_pairs_blocks_into_tiles_with_their_bits():
    # 1 x 1, 4 query blocks (two tiles), 6 key blocks (three 128-key blocks)
    blocks = torch.zeros(1, 1, 4, 6, dtype=torch.bool)
    # Entries are (first key / 64, bits); a block only the second half of which is needed starts 64 keys later, its
    # bits moved to the first half.
    blocks[0, 0, 0, 1] = True   # tile 0 rows 0-63, key block 0's second half -> starts at key 64, bit 0
    blocks[0, 0, 1, 4] = True   # tile 0 rows 64-127, key block 2's first half -> bit 2
    blocks[0, 0, 2, 0] = True   # tile 1 rows 0-63, key block 0 first half -> bit 0
    blocks[0, 0, 2, 3] = True   # tile 1 rows 0-63, key block 1 second half -> starts at key 192, bit 0
    blocks[0, 0, 2, 5] = True   # tile 1 rows 0-63, key block 2 second half, and rows 64-127 its first half
    blocks[0, 0, 3, 4] = True   # -> stays at key 256, bits 1 and 2
    t = sparse.tables(blocks)
    assert t.count.tolist() == [[[2, 3]]]
    assert t.entries.shape == (1, 1, 2, 3, 2) and t.entries.dtype == torch.int32 and t.entries.is_contiguous()
    assert t.entries[0, 0, 0, :2].tolist() == [[1, 1], [4, 4]]
    assert t.entries[0, 0, 1].tolist() == [[0, 1], [3, 1], [4, 6]]


@pytest.mark.parametrize("wgs", [2, 3])
def test_tables_lists_used_blocks_ascending_for_random_masks(wgs):
    """Tiles of `wgs` 64-row blocks (3: D=64's three-warpgroup build, bits 2 w + c for w < 3)."""
    g = torch.Generator().manual_seed(0)
    blocks = torch.rand(2, 3, 9, 13, generator=g) < 0.3
    t = sparse.tables(blocks, wgs)
    tiles = -(-9 // wgs)
    assert t.wgs == wgs and t.count.shape == (2, 3, tiles)
    padded = torch.zeros(2, 3, wgs * tiles, 14, dtype=torch.bool)
    padded[:, :, :9, :13] = blocks
    for b in range(2):
        for h in range(3):
            for m in range(tiles):
                rows = slice(wgs * m, wgs * m + wgs)
                n = int(t.count[b, h, m])
                first = t.entries[b, h, m, :n, 0].tolist()
                assert all(y > x for x, y in zip(first, first[1:]))
                want = [c for c in range(7) if padded[b, h, rows, 2 * c:2 * c + 2].any()]
                assert [f // 2 for f in first] == want
                for j, c in enumerate(want):
                    bits = int(t.entries[b, h, m, j, 1])
                    assert bits < 1 << (2 * wgs)
                    late = first[j] % 2  # starts at the second half: only first-half bits, the block's own second
                    for w in range(wgs):
                        if late:
                            assert not padded[b, h, wgs * m + w, 2 * c]
                            assert not bits >> (2 * w + 1) & 1
                        for s in range(2 - late):
                            assert bool(bits >> (2 * w + s) & 1) == bool(padded[b, h, wgs * m + w, 2 * c + s + late])


def test_the_op_refuses_tables_built_for_another_tile():
    """Tables for 192-row tiles handed to the op as 128-row ones (or the reverse) would be misread by the kernel: the
    op checks their tile count against the queries first (shapes only: at 193-256 queries both tilings have two tiles
    and the check cannot tell them apart; vidattn.attention always builds the tables for the tile it launches)."""
    from vidattn import ops
    q = torch.randn(1, 1000, 2, 64)
    blocks = torch.ones(1, 1, 16, 16, dtype=torch.bool)
    for built, said in ((3, 2), (2, 3)):
        tab = sparse.tables(blocks, built)
        with pytest.raises(ValueError, match="block-sparse tables for"):
            ops._sparse_impl(q, q, q, "bshd", None, tab.count, tab.entries, blocks, False, said)


@pytest.mark.parametrize("env, want", [(None, 2), ("2", 2), ("3", 3), (" 3 ", 3), ("4", 2)])
def test_d64_warpgroups_two_by_default_three_when_asked(env, want):
    """Two warpgroups at D=64 unless VIDATTN_SPARSE_D64_WARPGROUPS says 3 at import (dev/NOTES.md "Call P92": 128-row
    tiles ran NABLA's sliding-tile and scattered masks faster)."""
    import os
    import subprocess
    import sys
    e = {k: v for k, v in os.environ.items() if k != "VIDATTN_SPARSE_D64_WARPGROUPS"}
    if env is not None:
        e["VIDATTN_SPARSE_D64_WARPGROUPS"] = env
    out = subprocess.run([sys.executable, "-c", "from vidattn import sparse; print(sparse.warpgroups(64))"],
                         env=e, capture_output=True, text=True, check=True,
                         cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__)))).stdout.split()
    assert out[-1] == str(want)


def test_tables_refuse_other_warpgroup_counts_and_d64_takes_the_setting(monkeypatch):
    with pytest.raises(ValueError, match="2 or 3 warpgroups"):
        sparse.tables(torch.ones(1, 1, 2, 2, dtype=torch.bool), 4)
    assert sparse.warpgroups(128) == 2 and sparse.warpgroups(64) == sparse.D64_WARPGROUPS
    monkeypatch.setattr(sparse, "D64_WARPGROUPS", 3)
    assert sparse.warpgroups(64) == 3 and sparse.warpgroups(128) == 2
    seen = []
    real = sparse.tables
    monkeypatch.setattr(sparse, "tables", lambda blocks, wgs=2: seen.append(wgs) or real(blocks, wgs))
    for d in (64, 128):  # (on the CPU the tables are built, then the reference path runs them)
        q = torch.randn(1, 200, 2, d)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", vidattn.VidattnFallbackWarning)
            out = vidattn.attention(q, q, q, block_mask=torch.ones(1, 1, 4, 4, dtype=torch.bool))
        assert torch.allclose(out, vidattn.attention(q, q, q), atol=1e-5)
    assert seen == [3, 2]


def _kernel_walk(q, k, v, tab, scale, wgs=2, fixed=False):
    """A float64 model of the block-sparse consumer's walk (csrc/sm90/flash_fwd.cuh, kSparse): per tile and warpgroup,
    the list's entries in order (tiles of `wgs` 64-row blocks), each a window of 128 keys from 64 * its first column;
    the warpgroup's two bits give
    its 16-key steps (sparse_steps: 1 with no bit, 4 with the first half's only, else the block's own: 8, or for a
    window reaching past Skv the steps up to Skv where those are at most 5, block_steps at N = 128) and its
    exponentiated columns (sparse_any: none without a bit, else all 128, the masked ones -inf). Score columns no
    S step wrote are NaN here, so a column the masks (bits, keys past Skv) fail to cover shows; with no exponentials,
    the one step's P is 0. The max stays -inf until a row meets a key (kKeepNegInf).
    fixed: the bf16 builds' fixed reference (VIDATTN_SPARSE_FIXED_REF): a warpgroup's blocks up to and including the
    first that names it run as above; every later one exponentiates all 128 columns against that block's max, a half
    whose bit is clear masked by an offset of -inf in the exponent instead of the selects (softmax_fixed_ref's kBits),
    the columns past a narrowed S -inf as issue_qk_block fills them, no max, no rescale."""
    b, h, sq, d = q.shape
    skv = k.shape[2]
    sl2 = scale * math.log2(math.e)
    out = torch.zeros(b, h, sq, d, dtype=torch.float64)
    lse = torch.full((b, h, sq), float("-inf"), dtype=torch.float64)
    kp = torch.cat([k.double(), torch.zeros(b, h, 192, d, dtype=torch.float64)], 2)  # TMA's zeros past Skv
    vp = torch.cat([v.double(), torch.zeros(b, h, 192, d, dtype=torch.float64)], 2)
    for bi in range(b):
        for hi in range(h):
            for t in range(tab.count.shape[-1]):
                for w in range(wgs):
                    r0, r1 = 64 * (wgs * t + w), min(sq, 64 * (wgs * t + w) + 64)
                    if r0 >= r1:
                        continue
                    qr = q[bi, hi, r0:r1].double()
                    m = torch.full((r1 - r0,), float("-inf"), dtype=torch.float64)
                    l = torch.zeros(r1 - r0, dtype=torch.float64)
                    o = torch.zeros(r1 - r0, d, dtype=torch.float64)
                    ref_set = False
                    for j in range(min(int(tab.count[bi, hi, t]), -(-skv // 128))):  # (tile_work's clamp)
                        first, bits = (int(x) for x in tab.entries[bi, hi, t, j])
                        kv0, mine = 64 * first, (bits >> (2 * w)) & 3
                        rest = -(-(skv - kv0) // 16)  # block_steps: a partial block narrows to at most 5 steps
                        own = 8 if kv0 + 128 <= skv or rest > 5 else rest
                        steps = 1 if mine == 0 else min(own, 4) if mine == 1 else own
                        s = torch.full((r1 - r0, 128), float("nan"), dtype=torch.float64)
                        s[:, :16 * steps] = qr @ kp[bi, hi, kv0:kv0 + 16 * steps].T
                        on_ref = fixed and ref_set  # (a block after this warpgroup's first with a key)
                        if on_ref:
                            s[:, 16 * steps:] = float("-inf")  # issue_qk_block's fill past a narrowed S
                        else:
                            for c in range(2):  # mask_sparse
                                if not (mine >> c) & 1:
                                    s[:, 64 * c:64 * c + 64] = float("-inf")
                        if kv0 + 128 > skv:  # mask_keys
                            s[:, max(0, skv - kv0):] = float("-inf")
                        if on_ref:  # softmax_fixed_ref: a clear bit's half masked by its offset
                            off = torch.tensor([0.0 if (mine >> c) & 1 else float("inf") for c in range(2)],
                                               dtype=torch.float64).repeat_interleave(64)
                            p = torch.exp2(s * sl2 - m[:, None] * sl2 - off[None, :])
                            l = l + p.sum(-1)
                            o = o + p[:, :16 * steps] @ vp[bi, hi, kv0:kv0 + 16 * steps]
                            continue
                        mx = torch.maximum(s.amax(-1), m)
                        ref = torch.where(torch.isinf(mx), torch.zeros_like(mx), mx)
                        alpha = torch.exp2((m - ref) * sl2)
                        if mine == 0:  # online_softmax without `any`: no exponentials, P = 0 for the one step
                            p = torch.zeros_like(s)
                            l = l * alpha
                        else:
                            p = torch.exp2(s * sl2 - ref[:, None] * sl2)
                            l = l * alpha + p.sum(-1)
                        o = o * alpha[:, None] + p[:, :16 * steps] @ vp[bi, hi, kv0:kv0 + 16 * steps]
                        m = mx
                        ref_set = ref_set or mine != 0
                    seen = l > 0
                    out[bi, hi, r0:r1] = torch.where(seen[:, None], o / torch.where(seen, l, 1.0)[:, None], 0.0)
                    lse[bi, hi, r0:r1] = torch.where(seen, m * scale + torch.log(torch.where(seen, l, 1.0)),
                                                     float("-inf"))
    return out, lse


@pytest.mark.parametrize("fixed", [False, True])
@pytest.mark.parametrize("wgs", [2, 3])
@pytest.mark.parametrize("sq, skv, density", [(300, 1000, 0.3), (256, 1024, 0.15), (130, 777, 0.6)])
def test_the_kernels_walk_over_the_tables_is_the_masked_softmax(sq, skv, density, wgs, fixed):
    """The tables with late-starting entries, walked as the kernel walks them (_kernel_walk), give the fp64 masked
    attention: every (row, key) pair the mask names computed once, none it leaves out, no unwritten score column
    reaching P, rows without keys 0 with LSE -inf; with the online softmax throughout and with the fixed reference.
    (A model of the kernel's logic; tests/test_sparse_gpu.py runs it.)"""
    g = torch.Generator().manual_seed(sq + skv)
    h, d = 2, 16
    nq, nk = (sq + 63) // 64, (skv + 63) // 64
    blocks = torch.rand(1, h, nq, nk, generator=g) < density
    blocks[0, 0, 0] = False  # a row block without keys
    blocks[0, 1, :, 1::2] |= torch.rand(nq, nk // 2, generator=g) < 0.5  # second halves: late-starting entries
    q, k, v = (torch.randn(1, h, n, d, generator=g, dtype=torch.float64) for n in (sq, skv, skv))
    tab = sparse.tables(blocks, wgs)
    assert bool((tab.entries[..., 0] % 2 == 1).any())
    got, got_lse = _kernel_walk(q, k, v, tab, 0.25, wgs, fixed)
    want, want_lse = _ref(q, k, v, blocks, 0.25)
    assert torch.isfinite(got).all()
    assert torch.allclose(got, want, atol=1e-12, rtol=1e-10)
    assert torch.equal(torch.isinf(got_lse), torch.isinf(want_lse))
    fin = ~torch.isinf(want_lse)
    assert torch.allclose(got_lse[fin], want_lse[fin].double(), atol=1e-10)


def _flex_block_mask(dense_blocks, block=64, mask_mod=None):
    fa = pytest.importorskip("torch.nn.attention.flex_attention")
    nb = dense_blocks.sum(-1).to(torch.int32)
    idx = dense_blocks.to(torch.int8).argsort(dim=-1, descending=True, stable=True).to(torch.int32)
    return fa.BlockMask.from_kv_blocks(torch.zeros_like(nb), idx, nb, idx, BLOCK_SIZE=block, mask_mod=mask_mod)


def test_dense_blocks_reads_a_flex_block_mask_as_nabla_builds_it():
    g = torch.Generator().manual_seed(1)
    want = torch.rand(1, 2, 4, 4, generator=g) < 0.5
    bm = _flex_block_mask(want)
    got = sparse.dense_blocks(bm, 1, 2, 256, 256)
    assert torch.equal(got, want)


def test_dense_blocks_upsamples_128_blocks_and_broadcasts_heads():
    want128 = torch.tensor([[[[True, False], [False, True]]]])
    bm = _flex_block_mask(want128, block=128)
    got = sparse.dense_blocks(bm, 1, 3, 256, 256)
    assert got.shape == (1, 3, 4, 4)
    assert torch.equal(got[0, 2], want128[0, 0].repeat_interleave(2, 0).repeat_interleave(2, 1))


def test_block_mask_with_a_mask_mod_is_refused_with_the_reason():
    want = torch.ones(1, 1, 2, 2, dtype=torch.bool)
    bm = _flex_block_mask(want, mask_mod=lambda b, h, q, kv: q >= kv)
    assert "mask_mod" in sparse.block_mask_reason(bm)
    q = torch.randn(1, 128, 1, 64)
    with pytest.raises(ValueError, match="mask_mod"):
        vidattn.attention(q, q, q, block_mask=bm)


@pytest.mark.parametrize("bad, exc, match", [
    (torch.ones(1, 1, 2, 3, dtype=torch.bool), ValueError, "ceil"),
    (torch.ones(1, 1, 2, 2, dtype=torch.int32), TypeError, "bool"),
    ([[True]], TypeError, "BlockMask"),
    (torch.ones(2, 1, 2, 2, dtype=torch.bool), ValueError, "B or 1"),
])
def test_bad_block_masks_raise(bad, exc, match):
    q = torch.randn(1, 100, 2, 64)
    with pytest.raises(exc, match=match):
        vidattn.attention(q, q, q, block_mask=bad)
    with pytest.raises(exc, match=match):
        vidattn.explain(q, q, q, block_mask=bad)


def test_block_mask_with_kv_lens_or_causal_raises():
    q = torch.randn(1, 64, 1, 64)
    bm = torch.ones(1, 1, 1, 1, dtype=torch.bool)
    with pytest.raises(ValueError, match="kv_lens"):
        vidattn.attention(q, q, q, block_mask=bm, kv_lens=torch.tensor([10]))
    with pytest.raises(ValueError, match="causal"):
        vidattn.attention(q, q, q, block_mask=bm, causal=True)


def test_block_mask_calls_check_the_precision_and_run_exact_at_8bit():
    """A block-mask call runs the exact block-sparse path at any precision (docs/precision.md), but a precision that
    is none still raises, as it does without a mask; explain says why 8 bits do not run."""
    q = torch.randn(1, 64, 1, 64)
    bm = torch.ones(1, 1, 1, 1, dtype=torch.bool)
    for fn in (vidattn.attention, vidattn.explain):
        with pytest.raises(ValueError, match="precision"):
            fn(q, q, q, block_mask=bm, precision="fp4")
    exact = vidattn.attention(q, q, q, block_mask=bm)
    assert torch.equal(vidattn.attention(q, q, q, block_mask=bm, precision="8bit"), exact)
    assert "block mask" in vidattn.explain(q, q, q, block_mask=bm, precision="8bit")


@pytest.mark.parametrize("sq, skv, heads, kv_heads", [(200, 333, 4, 4), (64, 64, 2, 1), (130, 1, 3, 3)])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_cpu_fallback_matches_fp64_with_empty_rows(sq, skv, heads, kv_heads, layout):
    g = torch.Generator().manual_seed(sq + skv)
    nq, nk = (sq + 63) // 64, (skv + 63) // 64
    blocks = torch.rand(1, heads, nq, nk, generator=g) < 0.5
    blocks[0, 0, 0] = False  # one block row sees nothing: O = 0, LSE -inf
    qh = torch.randn(1, heads, sq, 64, generator=g)
    kh = torch.randn(1, kv_heads, skv, 64, generator=g)
    vh = torch.randn(1, kv_heads, skv, 64, generator=g)
    want, want_lse = _ref(qh, kh, vh, blocks)
    tr = (lambda t: t.transpose(1, 2).contiguous()) if layout == "bshd" else (lambda t: t)
    with pytest.warns(vidattn.VidattnFallbackWarning, match="block mask"):
        vidattn.ops._warned.clear()
        out, lse = vidattn.attention(tr(qh), tr(kh), tr(vh), layout=layout, block_mask=blocks, return_lse=True)
    got = out.transpose(1, 2) if layout == "bshd" else out
    assert torch.allclose(got.double(), want, atol=2e-5, rtol=1e-4)
    assert torch.equal(torch.isinf(lse), torch.isinf(want_lse))
    fin = torch.isfinite(want_lse)
    assert torch.allclose(lse[fin].double(), want_lse[fin], atol=1e-5)
    assert torch.all(got[0, 0, :64] == 0)


def test_full_block_mask_equals_dense_attention_on_cpu():
    q, k, v = (torch.randn(2, 150, 3, 64) for _ in range(3))
    blocks = torch.ones(1, 1, 3, 3, dtype=torch.bool)
    out = vidattn.attention(q, k, v, block_mask=blocks)
    dense = vidattn.attention(q, k, v)
    assert torch.allclose(out, dense, atol=1e-5)


def test_explain_names_the_block_mask_and_the_head_dim():
    q = torch.randn(1, 64, 2, 96)
    reason = vidattn.explain(q, q, q, block_mask=torch.ones(1, 1, 1, 1, dtype=torch.bool))
    assert reason is not None and "block mask" in reason
    assert "head dim 96" in sparse.envelope_reason(q, q, q)
    assert sparse.envelope_reason(q[..., :64], q[..., :64], q[..., :64]) is None


def test_library_reason_for_an_old_library():
    assert "predates this package's block-sparse tables" in sparse.library_reason(object())

    class FirstTables:  # the first block-sparse libraries: key blocks counted in 128 keys, a layout call of 3 outputs
        def vidattn_sm90_sparse_tile(self, *a):
            raise AssertionError("read as this package's layout")
    assert "predates this package's block-sparse tables" in sparse.library_reason(FirstTables())

    class TwoOnly:  # 64-key entries, 128-row tiles only (no vidattn_sm90_sparse_warpgroups)
        def vidattn_sm90_sparse_layout(self, m, n, blk, unit):
            m._obj.value, n._obj.value, blk._obj.value, unit._obj.value = 128, 128, 64, 64
    assert sparse.library_reason(TwoOnly()) is None and sparse.library_reason(TwoOnly(), 2, 64) is None
    assert "no block-sparse build with 3 warpgroups at head dim 64" in sparse.library_reason(TwoOnly(), 3, 64)

    class Both(TwoOnly):
        def vidattn_sm90_sparse_warpgroups(self, d):
            return 0b1100 if d == 64 else 0b100
    assert sparse.library_reason(Both(), 3, 64) is None
    assert "3 warpgroups at head dim 128" in sparse.library_reason(Both(), 3, 128)


def test_density_counts_clipped_blocks():
    blocks = torch.ones(1, 1, 2, 2, dtype=torch.bool)
    assert sparse.density(blocks, 100, 100) == pytest.approx(1.0)
    blocks[0, 0, 1, 1] = False  # the 36 x 36 corner
    assert sparse.density(blocks, 100, 100) == pytest.approx(1 - 36 * 36 / 100 ** 2)


def test_compiled_block_sparse_call_matches_eager_on_cpu():
    q, k, v = (torch.randn(1, 130, 2, 64) for _ in range(3))
    blocks = torch.rand(1, 2, 3, 3, generator=torch.Generator().manual_seed(3)) < 0.6
    blocks[..., 0] = True

    def f(q, k, v, blocks):
        return vidattn.attention(q, k, v, block_mask=blocks)

    eager = f(q, k, v, blocks)
    compiled = torch.compile(f, fullgraph=True, backend="eager")(q, k, v, blocks)
    assert torch.allclose(eager, compiled, atol=1e-6)


def test_sparse_builds_live_in_a_translation_unit_of_their_own():
    """The block-sparse kernels are instantiated only in csrc/capi_sparse.cu (in capi.cu's module they changed how
    cicc compiled the dense kernels: ptxas then serialised their wgmmas), and every build compiles both units."""
    from pathlib import Path
    from vidattn import _csrc, _ext
    root = Path(__file__).resolve().parent.parent
    capi = (root / "csrc/capi.cu").read_text()
    unit = (root / "csrc/capi_sparse.cu").read_text()
    assert "kSparseBuild" not in capi and "flash_fwd_kernel<kHeadDim, kWGs, kBN, kFp16, false, false>" in unit
    assert "__attribute__((weak)) int sparse_launch(" in capi and "int sparse_launch(" in unit
    # the layout entry point only where the builds are, so a capi.cu-only library reports none (library_reason)
    assert 'extern "C" int vidattn_sm90_sparse_layout(' in unit and "vidattn_sm90_sparse_layout(" not in capi
    assert 'extern "C" int vidattn_sm90_sparse_warpgroups(' in unit and "vidattn_sm90_sparse_warpgroups(" not in capi
    assert _csrc.ENTRIES == ("capi.cu", "capi_sparse.cu") and _csrc.ENTRY == _csrc.ENTRIES[0]
    assert "ENTRIES" in (root / "scripts/ci_kernel_check.sh").read_text()
    src = (root / "vidattn/_ext.py").read_text()
    assert '*(str(CSRC / e) for e in ENTRIES)' in src


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_kernel_outputs_are_the_callers_layout_with_a_bshd_view(layout):
    """ops._kernel_outputs (the dense and block-sparse kernel paths' outputs): O contiguous in the caller's layout,
    the kernel's (B, S, H, Dv) view of it, and the LSE (B, H, S) only when asked for."""
    from vidattn import ops
    q = torch.empty(2, 5, 3, 64) if layout == "bshd" else torch.empty(2, 3, 5, 64)
    vv = torch.empty(2, 7, 3, 32)  # (B, Skv, H, Dv)
    out, view, lse = ops._kernel_outputs(q, vv, layout, True)
    assert out.is_contiguous() and view.shape == (2, 5, 3, 32) and lse.shape == (2, 3, 5)
    assert out.shape == ((2, 5, 3, 32) if layout == "bshd" else (2, 3, 5, 32))
    assert view.data_ptr() == out.data_ptr() and lse.dtype == torch.float32
    assert ops._kernel_outputs(q, vv, layout, False)[2] is None


def test_forward_refuses_tables_a_library_cannot_read():
    """_ext.forward takes block-sparse tables only to a library whose layout is the tables' (the rule explain uses:
    sparse.library_reason), before anything is launched."""
    from vidattn import _ext

    class Old:  # a library from before block-sparse attention: no layout entry point, nothing launched
        def vidattn_sm90_fwd(self, *a):
            raise AssertionError("launched")

    q = torch.zeros(1, 128, 1, 64, dtype=torch.bfloat16)
    tab = sparse.tables(torch.ones(1, 1, 2, 2, dtype=torch.bool))
    with pytest.raises(_ext.KernelLaunchError, match="predates this package's block-sparse"):
        _ext.forward(q, q, q, torch.empty_like(q), None, None, 0.125, lib=Old(), sparse=tab)
