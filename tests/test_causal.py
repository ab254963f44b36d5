"""Causal masks on the Python side (no GPU): the `causal=` argument and its errors, what explain says, the SDPA
fallback's mask against a float64 reference written out here (top-left, bottom-right, kv_lens, rows without keys,
grouped K/V, both layouts, LSE, autograd), the custom op under torch.compile and FakeTensorMode, the C ABI's field,
the 8-bit route, and the diffusers backend's is_causal branch. The kernel's side is tests/test_causal_gpu.py."""
from __future__ import annotations

import math
import warnings

import pytest
import torch

import vidattn
from vidattn import _ext, ops


@pytest.fixture(autouse=True)
def quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.VidattnFallbackWarning)
        yield


def keep_mask(mode, b, sq, skv, kv_lens):
    """(B, 1, Sq, Skv) boolean: keys below kv_len first, then j <= i + shift (0, or kv_len - Sq bottom-right)."""
    kvl = (torch.full((b,), skv) if kv_lens is None else kv_lens).long()[:, None, None]
    i, j = torch.arange(sq)[None, :, None], torch.arange(skv)[None, None, :]
    shift = kvl - sq if mode == "bottom_right" else torch.zeros_like(kvl)
    return ((j < kvl) & (j <= i + shift))[:, None]


def reference(q, k, v, mode, kv_lens=None, layout="bshd"):
    """float64 (out in q's layout, lse (B, H, Sq)); rows without a key: 0 and -inf."""
    if layout == "bshd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    qb, kb, vb = (t.double() for t in (q, k, v))
    g = qb.shape[1] // kb.shape[1]
    kb, vb = kb.repeat_interleave(g, dim=1), vb.repeat_interleave(g, dim=1)
    s = qb @ kb.transpose(-1, -2) / math.sqrt(qb.shape[-1])
    s = s.masked_fill(~keep_mask(mode, qb.shape[0], qb.shape[2], kb.shape[2], kv_lens), float("-inf"))
    lse = torch.logsumexp(s, -1)
    out = (torch.exp(s - lse[..., None].clamp_min(-1e300)).nan_to_num(0.0) @ vb)
    return (out.transpose(1, 2) if layout == "bshd" else out), lse


def inputs(b=2, sq=37, skv=53, h=4, hkv=None, d=16, dtype=torch.float32, layout="bshd", seed=0):
    g = torch.Generator().manual_seed(seed)
    hkv = hkv or h

    def r(s, n):
        shape = (b, s, n, d) if layout == "bshd" else (b, n, s, d)
        return torch.randn(shape, generator=g).to(dtype)

    return r(sq, h), r(skv, hkv), r(skv, hkv)


# ---- the argument ---------------------------------------------------------------------------------------------

def test_causal_values_map_to_the_abi_codes():
    assert ops._causal_code(False) == ops._causal_code(None) == _ext.CAUSAL_NONE == 0
    assert ops._causal_code(True) == ops._causal_code("top_left") == _ext.CAUSAL_TOP_LEFT == 1
    assert ops._causal_code("bottom_right") == _ext.CAUSAL_BOTTOM_RIGHT == 2


@pytest.mark.parametrize("bad,err", [("lower_right", ValueError), ("causal", ValueError), (1, TypeError),
                                     (0, TypeError), (1.0, TypeError), ([True], TypeError)])
def test_bad_causal_values_are_refused(bad, err):
    q, k, v = inputs()
    with pytest.raises(err, match="vidattn.attention: causal must be False, True, 'top_left' or 'bottom_right'"):
        vidattn.attention(q, k, v, causal=bad)
    with pytest.raises(err, match="vidattn.explain: causal"):
        vidattn.explain(q, k, v, causal=bad)


def test_default_is_not_causal():
    q, k, v = inputs()
    assert torch.equal(vidattn.attention(q, k, v), vidattn.attention(q, k, v, causal=False))
    ref, _ = reference(q, k, v, "top_left")
    assert not torch.allclose(vidattn.attention(q, k, v).double(), ref, atol=1e-3)


# ---- the fallback's mask, exact ---------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("mode", ["top_left", "bottom_right", True])
@pytest.mark.parametrize("sq,skv", [(37, 53), (53, 37), (1, 40), (40, 1), (33, 33)], ids=lambda x: str(x))
def test_fallback_matches_float64(sq, skv, mode, layout):
    name = "top_left" if mode is True else mode
    q, k, v = inputs(sq=sq, skv=skv, layout=layout)
    out, lse = vidattn.attention(q, k, v, layout=layout, causal=mode, return_lse=True)
    ref, ref_lse = reference(q, k, v, name, layout=layout)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    fin = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse.double()[fin], ref_lse[fin], atol=1e-5, rtol=1e-5)


def test_alignments_differ_only_when_lengths_do():
    q, k, v = inputs(sq=20, skv=20)
    assert torch.equal(vidattn.attention(q, k, v, causal="top_left"), vidattn.attention(q, k, v, causal="bottom_right"))
    q, k, v = inputs(sq=20, skv=30)
    a, b = vidattn.attention(q, k, v, causal="top_left"), vidattn.attention(q, k, v, causal="bottom_right")
    assert not torch.allclose(a, b)
    # bottom-right: the last query sees every key, as the non-causal call's last row does
    torch.testing.assert_close(b[:, -1], vidattn.attention(q, k, v)[:, -1])
    # top-left: query 0 sees key 0 only
    torch.testing.assert_close(a[:, 0], v[:, 0])


def test_rows_without_keys_are_zero_with_lse_minus_inf():
    q, k, v = inputs(sq=50, skv=20)
    out, lse = vidattn.attention(q, k, v, causal="bottom_right", return_lse=True)
    assert (out[:, :30] == 0).all() and torch.isneginf(lse[:, :, :30]).all()
    assert torch.isfinite(out).all() and torch.isfinite(lse[:, :, 30:]).all()


@pytest.mark.parametrize("mode", ["top_left", "bottom_right"])
def test_kv_lens_shorten_first(mode):
    """kv_lens cut the keys, then the mask aligns to them: bottom-right's last query sees exactly kv_len keys."""
    q, k, v = inputs(b=3, sq=25, skv=40)
    kv_lens = torch.tensor([40, 17, 3], dtype=torch.int32)
    out, lse = vidattn.attention(q, k, v, kv_lens=kv_lens, causal=mode, return_lse=True)
    ref, ref_lse = reference(q, k, v, mode, kv_lens)
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
    fin = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse.double()[fin], ref_lse[fin], atol=1e-5, rtol=1e-5)
    if mode == "bottom_right":  # batch 2 has 3 keys: queries 0..21 see none
        assert (out[2, :22] == 0).all() and not (out[2, 22:] == 0).all()
        for bi, n in enumerate(kv_lens.tolist()):
            full = vidattn.attention(q[bi:bi + 1, -1:], k[bi:bi + 1, :n], v[bi:bi + 1, :n])
            torch.testing.assert_close(out[bi:bi + 1, -1:], full)


def test_grouped_query_and_bf16():
    q, k, v = inputs(h=8, hkv=2, sq=30, skv=45, dtype=torch.bfloat16)
    for mode in ("top_left", "bottom_right"):
        out = vidattn.attention(q, k, v, causal=mode)
        ref, _ = reference(q, k, v, mode)
        assert out.dtype == torch.bfloat16
        assert (out.double() - ref).abs().max().item() < 2e-2


def test_strided_views():
    g = torch.Generator().manual_seed(1)
    qkv = torch.randn(2, 31, 3, 4, 16, generator=g)
    q, k, v = qkv.unbind(2)
    out = vidattn.attention(q, k, v, causal="bottom_right")
    ref, _ = reference(q, k, v, "bottom_right")
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)


def test_autograd_path_keeps_the_mask():
    q, k, v = (t.requires_grad_() for t in inputs(sq=20, skv=12))
    out = vidattn.attention(q, k, v, causal="bottom_right")
    ref, _ = reference(q.detach(), k.detach(), v.detach(), "bottom_right")
    torch.testing.assert_close(out.detach().double(), ref, atol=1e-5, rtol=1e-5)
    out.sum().backward()
    assert torch.isfinite(q.grad).all() and (q.grad[:, :8] == 0).all()  # rows without keys: no gradient
    assert torch.isfinite(k.grad).all() and torch.isfinite(v.grad).all()


def test_lse_chunks_apply_the_mask_per_chunk(monkeypatch):
    monkeypatch.setattr(ops, "_LSE_CHUNK_ELEMENTS", 64)  # a few query rows per chunk
    q, k, v = inputs(sq=29, skv=23)
    kv_lens = torch.tensor([23, 9], dtype=torch.int32)
    for mode in ("top_left", "bottom_right"):
        _, lse = vidattn.attention(q, k, v, kv_lens=kv_lens, causal=mode, return_lse=True)
        _, ref_lse = reference(q, k, v, mode, kv_lens)
        assert torch.equal(torch.isneginf(lse), torch.isneginf(ref_lse))
        fin = torch.isfinite(ref_lse)
        torch.testing.assert_close(lse.double()[fin], ref_lse[fin], atol=1e-5, rtol=1e-5)


def test_top_left_without_kv_lens_uses_is_causal(monkeypatch):
    """SDPA's fused backends take is_causal; only the masks SDPA cannot say are built out."""
    seen = []
    real = ops.F.scaled_dot_product_attention

    def spy(*a, **kw):
        seen.append((kw.get("is_causal", False), kw.get("attn_mask") is not None))
        return real(*a, **kw)

    monkeypatch.setattr(ops.F, "scaled_dot_product_attention", spy)
    q, k, v = inputs(sq=20, skv=30)
    vidattn.attention(q, k, v, causal=True)
    vidattn.attention(q, k, v, causal="bottom_right")
    q, k, v = inputs(sq=30, skv=30)
    vidattn.attention(q, k, v, causal="bottom_right")  # equal lengths: the same mask as top-left
    vidattn.attention(q, k, v, causal=True, kv_lens=torch.tensor([30, 4]))
    assert seen == [(True, False), (False, True), (True, False), (False, True)]


# ---- explain, routing ------------------------------------------------------------------------------------------

def test_explain_names_the_mask():
    q, k, v = inputs()
    assert "causal" not in vidattn.explain(q, k, v)
    why = vidattn.explain(q, k, v, causal="bottom_right")
    assert "causal='bottom_right'" in why and "SDPA runs it with the same mask" in why
    assert "causal='top_left'" in vidattn.explain(q, k, v, causal=True)


def test_8bit_precision_runs_causal_calls_exact(monkeypatch):
    import vidattn.quant8 as quant8

    def no_8bit(*a, **kw):
        raise AssertionError("the 8-bit path has no causal mask")

    monkeypatch.setattr(quant8, "attention_8bit", no_8bit)
    q, k, v = inputs()
    out = vidattn.attention(q, k, v, causal="bottom_right", precision="8bit")
    torch.testing.assert_close(out, vidattn.attention(q, k, v, causal="bottom_right"))
    why = vidattn.explain(q, k, v, causal=True, precision="8bit")
    assert why.startswith("8-bit path not used: it has no causal mask (causal='top_left')")
    with vidattn.use_precision("8bit"):
        torch.testing.assert_close(vidattn.attention(q, k, v, causal=True), vidattn.attention(q, k, v, causal=True,
                                                                                              precision="exact"))


def test_kernel_reason_checks_the_library(monkeypatch):
    """A causal call runs the kernel only on a library that takes the mode, and not with VIDATTN_CAUSAL_KERNEL=0."""

    class Old:
        pass

    class New:
        @staticmethod
        def vidattn_sm90_causal_modes():
            return 2

    assert _ext.causal_reason(_ext.CAUSAL_NONE, Old()) is None
    assert _ext.causal_reason(_ext.CAUSAL_TOP_LEFT, Old()) == "this kernel library predates causal masks"
    assert _ext.causal_reason(_ext.CAUSAL_BOTTOM_RIGHT, New()) is None
    monkeypatch.setattr(_ext, "causal_kernel_enabled", False)
    assert "VIDATTN_CAUSAL_KERNEL=0" in _ext.causal_reason(_ext.CAUSAL_TOP_LEFT, New())
    assert _ext.causal_reason(_ext.CAUSAL_NONE, New()) is None


def test_launch_args_carry_the_mode():
    q, k, v = inputs(h=4, hkv=2, dtype=torch.bfloat16)
    out = torch.empty_like(q)
    a = _ext.launch_args(q, k, v, out, None, None, 0.25, _ext.CAUSAL_BOTTOM_RIGHT)
    assert a.causal == 2 and a.kv_heads == 2
    assert _ext.launch_args(q, k, v, out, None, None, 0.25).causal == 0  # the 8-bit launch's: no mask
    # causal follows kv_heads; only the block-sparse tables and their tiles' warpgroups come after it
    # (tests/test_envelope.py)
    assert _ext._Args._fields_[-5] == ("causal", __import__("ctypes").c_int32)


def test_env_switch():
    for val, want in (("0", False), (" 0 ", False), ("1", True), ("", True), (None, True)):
        assert _ext.causal_kernel_from_env({} if val is None else {"VIDATTN_CAUSAL_KERNEL": val}) is want


# ---- the custom op: FakeTensorMode, torch.compile --------------------------------------------------------------

def test_op_and_fake_take_the_mode():
    from torch._subclasses.fake_tensor import FakeTensorMode

    q, k, v = inputs(sq=21, skv=34)
    out, lse = torch.ops.vidattn.attention(q, k, v, "bshd", None, None, True, 2)
    ref, ref_lse = reference(q, k, v, "bottom_right")
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        fo, fl = torch.ops.vidattn.attention(fq, fk, fv, "bshd", None, None, True, 1)
        assert tuple(fo.shape) == tuple(q.shape) and tuple(fl.shape) == (2, 4, 21)
        assert vidattn.attention(fq, fk, fv, causal="bottom_right").shape == q.shape
    # callers that predate the argument (schema default 0)
    torch.testing.assert_close(torch.ops.vidattn.attention(q, k, v, "bshd", None, None, False)[0],
                               vidattn.attention(q, k, v))


@pytest.mark.parametrize("mode", [True, "bottom_right"])
def test_torch_compile_fullgraph(mode):
    torch._dynamo.reset()
    q, k, v = inputs(sq=19, skv=27)
    fn = torch.compile(lambda a, b, c: vidattn.attention(a, b, c, causal=mode, return_lse=True), fullgraph=True,
                       backend="aot_eager")
    out, lse = fn(q, k, v)
    eo, el = vidattn.attention(q, k, v, causal=mode, return_lse=True)
    torch.testing.assert_close(out, eo)
    torch.testing.assert_close(lse, el)


# ---- the diffusers backend's is_causal branch ------------------------------------------------------------------

def test_backend_sends_is_causal_to_the_kernel_top_left(monkeypatch):
    pytest.importorskip("diffusers")
    import importlib

    from diffusers.models import attention_dispatch as ad
    backend = importlib.import_module("vidattn.diffusers.backend")
    calls = []
    real = ops.attention

    def spy(*a, **kw):
        calls.append(kw.get("causal", False))
        return real(*a, **kw)

    monkeypatch.setattr(ops, "attention", spy)
    q, k, v = inputs(sq=12, skv=10)
    native = ad._AttentionBackendRegistry._backends[ad.AttentionBackendName.NATIVE]
    out = backend.vidattn_attention(q, k, v, is_causal=True)
    torch.testing.assert_close(out, native(q, k, v, is_causal=True), atol=1e-5, rtol=1e-5)
    out, lse = backend.vidattn_attention(q, k, v, is_causal=True, return_lse=True)
    _, ref_lse = reference(q, k, v, "top_left")
    torch.testing.assert_close(lse.double(), ref_lse.transpose(1, 2), atol=1e-5, rtol=1e-5)
    assert calls == [True, True]
    assert "causal='top_left'" in backend.explain(q, k, v, is_causal=True)
    # with a mask as well (SDPA refuses the pair): still diffusers' native backend
    calls.clear()
    why = backend.explain(q, k, v, attn_mask=torch.ones(2, 10, dtype=torch.bool), is_causal=True)
    assert why.startswith("diffusers' native backend: is_causal=True with an attn_mask")
    assert calls == []


# ---- the benchmark's causal shapes --------------------------------------------------------------------------------

def test_bench_causal_shapes_count_the_kept_pairs():
    from pathlib import Path

    from _support import load_script

    path = Path(__file__).resolve().parent.parent / "scripts" / "bench_kernel.py"
    mod = load_script(path, "bench_kernel_causal", register=True)
    shapes = mod.select_shapes(["causal"])
    assert [(s.name, s.sq, s.d) for s in shapes] == [("causal 8K D128", 8192, 128), ("causal 32K D128", 32768, 128),
                                                     ("causal 8K D64", 8192, 64), ("causal 32K D64", 32768, 64)]
    for s in shapes:
        assert mod.causal_of(s) == "top_left" and s.sq == s.skv
        assert s.flops == 4 * s.b * s.h * s.d * s.sq * (s.sq + 1) // 2
        assert s.b * s.h * s.sq // 128 >= 15 * 132  # at least 15 rounds of 128-row tiles on 132 SMs: the GPU full
    assert all(mod.causal_of(s) is None for s in mod.SHAPES)  # the default table stays dense
    assert mod.gqa_kwargs(torch.empty(1, 2, 3, 4), torch.empty(1, 2, 3, 4), "top_left") == {"is_causal": True}
    assert mod.gqa_kwargs(torch.empty(1, 2, 3, 4), torch.empty(1, 2, 3, 4)) == {}
    # vidattn's timed call carries the mask
    seen = []

    class Spy:
        @staticmethod
        def attention(q, k, v, **kw):
            seen.append(kw)

    q = torch.empty(1, 4, 2, 8)
    mod.make_fn("vidattn", [(q, q, q)], Spy, "top_left")()
    mod.make_fn("vidattn", [(q, q, q)], Spy)()
    assert seen == [{"layout": "bshd", "causal": "top_left"}, {"layout": "bshd"}]
