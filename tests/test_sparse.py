"""Block-sparse attention without a GPU: the tables the kernel reads, the block-mask forms, the reference path that
every fallback runs, the argument errors and explain's reasons (vidattn/sparse.py, vidattn/ops.py)."""
import math

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
    # 1 x 1, 3 query blocks (two tiles: the second half empty), 5 key blocks (three 128-key blocks)
    blocks = torch.zeros(1, 1, 3, 5, dtype=torch.bool)
    blocks[0, 0, 0, 1] = True   # tile 0 rows 0-63, key block 0's second half -> bit 1
    blocks[0, 0, 1, 4] = True   # tile 0 rows 64-127, key block 2's first half -> bit 2
    blocks[0, 0, 2, 0] = True   # tile 1 rows 0-63, key block 0 first half -> bit 0
    blocks[0, 0, 2, 3] = True   # tile 1 rows 0-63, key block 1 second half -> bit 1
    t = sparse.tables(blocks)
    assert t.count.tolist() == [[[2, 2]]]
    assert t.entries.shape == (1, 1, 2, 3, 2) and t.entries.dtype == torch.int32 and t.entries.is_contiguous()
    assert t.entries[0, 0, 0, :2].tolist() == [[0, 2], [2, 4]]
    assert t.entries[0, 0, 1, :2].tolist() == [[0, 1], [1, 2]]


def test_tables_lists_used_blocks_ascending_for_random_masks():
    g = torch.Generator().manual_seed(0)
    blocks = torch.rand(2, 3, 9, 13, generator=g) < 0.3
    t = sparse.tables(blocks)
    padded = torch.zeros(2, 3, 10, 14, dtype=torch.bool)
    padded[:, :, :9, :13] = blocks
    for b in range(2):
        for h in range(3):
            for m in range(5):
                n = int(t.count[b, h, m])
                idx = t.entries[b, h, m, :n, 0].tolist()
                assert idx == sorted(idx)
                want = [c for c in range(7) if padded[b, h, 2 * m:2 * m + 2, 2 * c:2 * c + 2].any()]
                assert idx == want
                for j, c in enumerate(idx):
                    bits = int(t.entries[b, h, m, j, 1])
                    for w in range(2):
                        for s in range(2):
                            assert bool(bits >> (2 * w + s) & 1) == bool(padded[b, h, 2 * m + w, 2 * c + s])


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
    assert "predates block-sparse" in sparse.library_reason(object())


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
    assert "kSparseBuild" not in capi and "flash_fwd_kernel<kHeadDim, 2, kBN, kFp16, false, false>" in unit
    assert "__attribute__((weak)) int sparse_launch(" in capi and "int sparse_launch(" in unit
    # the layout entry point only where the builds are, so a capi.cu-only library reports none (library_reason)
    assert 'extern "C" int vidattn_sm90_sparse_tile(' in unit and "vidattn_sm90_sparse_tile(" not in capi
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
    with pytest.raises(_ext.KernelLaunchError, match="predates block-sparse"):
        _ext.forward(q, q, q, torch.empty_like(q), None, None, 0.125, lib=Old(), sparse=tab)
