"""The kernel's envelope on the CPU: head dims that are multiples of 8 up to 256 (padded on the fly onto the next
build up: tests/test_head_dims.py), grouped-query and multi-query K/V, what explain says outside, argument checks,
what the C ABI is handed, and the SDPA fallback's grouped-query answer and LSE. The kernel's own answers: tests/test_envelope_gpu.py."""
from __future__ import annotations

import ctypes
import contextlib
import math
import warnings

import pytest
import torch
import torch.nn.functional as F

import vidattn
from vidattn import _ext, ops

from _support import ROOT, attention_fp64, load_script

INSIDE = "no library in this test"  # what explain says once shapes, dtypes and strides are all inside


@pytest.fixture
def device_could_run(monkeypatch):
    """explain as on a Hopper GPU with no library: a call inside the envelope reads INSIDE."""
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: INSIDE)


def qkv(b=1, sq=5, skv=7, hq=4, hkv=4, d=64, layout="bshd", dtype=torch.bfloat16, seed=0):
    g = torch.Generator().manual_seed(seed)

    def t(s, h):
        shape = (b, s, h, d) if layout == "bshd" else (b, h, s, d)
        return torch.randn(shape, generator=g).to(dtype)

    return t(sq, hq), t(skv, hkv), t(skv, hkv)


@pytest.mark.parametrize("d", [8, 16, 40, 56, 64, 72, 80, 88, 96, 112, 120, 128, 136, 160, 192, 200, 248, 256])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_multiples_of_8_up_to_256_are_inside(device_could_run, d, layout):
    assert vidattn.explain(*qkv(d=d, layout=layout), layout=layout) == INSIDE


@pytest.mark.parametrize("d", [264, 320, 512])
def test_head_dims_over_256_are_outside_and_say_so(device_could_run, d):
    reason = vidattn.explain(*qkv(d=d))
    assert reason.startswith(f"head dim {d} is over 256") and "64, 96, 128, 192, 256" in reason


@pytest.mark.parametrize("d", [4, 20, 100, 127, 201])
def test_head_dims_not_multiple_of_8_are_outside(device_could_run, d):
    reason = vidattn.explain(*qkv(d=d))
    assert reason == f"head dim {d} is not a multiple of 8 (the kernel runs multiples of 8 up to 256)"


@pytest.mark.parametrize("hq,hkv", [(32, 8), (8, 1), (6, 3), (4, 4)])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_grouped_and_multi_query_kv_are_inside(device_could_run, hq, hkv, layout):
    q, k, v = qkv(hq=hq, hkv=hkv, d=128, layout=layout)
    assert vidattn.explain(q, k, v, layout=layout, kv_lens=torch.tensor([3])) == INSIDE


def test_grouped_query_with_a_padded_head_dim_is_inside(device_could_run):
    assert vidattn.explain(*qkv(hq=8, hkv=2, d=72)) == INSIDE


def test_envelope_reason_refuses_heads_that_do_not_group():
    """What ops._validate raises for is refused by the envelope too (callers that reach it directly: the backend)."""
    q, k, v = qkv(hq=6, hkv=4)
    assert "grouped-query" in _ext.envelope_reason(q, k, v, None, 0.125)
    q, k, v = qkv(hq=8, hkv=4)
    assert "grouped-query" in _ext.envelope_reason(q, k, v[:, :, :2], None, 0.125)
    assert _ext.envelope_reason(q, k, v, None, 0.125) is None


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("fn", [vidattn.attention, vidattn.explain])
def test_heads_that_do_not_group_raise(fn, layout):
    h = 2 if layout == "bshd" else 1
    q, k, v = qkv(hq=6, hkv=4, layout=layout)
    with pytest.raises(ValueError, match=r"multiple of k/v's \(grouped-query attention\)"):
        fn(q, k, v, layout=layout)
    q, k, v = qkv(hq=8, hkv=4, layout=layout)
    with pytest.raises(ValueError, match="same number of heads"):
        fn(q, k, v.narrow(h, 0, 2), layout=layout)
    with pytest.raises(ValueError, match="same number of heads"):
        fn(q, k.narrow(h, 0, 2), v, layout=layout)


@pytest.mark.parametrize("hkv", [1, 2, 4])
def test_8bit_takes_grouped_query_as_the_equal_head_call(device_could_run, hkv):
    """Grouped-query and multi-query K/V meet the 8-bit path's envelope as equal head counts do: explain gives the
    same text for both (here the test's stand-in for a missing library), with nothing about the grouping."""
    q, k, v = qkv(hq=8, hkv=hkv, d=128)
    reason = vidattn.explain(q, k, v, precision="8bit")
    assert reason == vidattn.explain(*qkv(hq=8, hkv=8, d=128), precision="8bit")
    assert INSIDE in reason and "group" not in reason and "heads" not in reason


def test_default_scale_is_of_the_real_head_dim(monkeypatch):
    """The scale handed to the kernel for D=72 is 1/sqrt(72), not 1/sqrt(128) of the build it runs on."""
    seen = {}
    monkeypatch.setattr(_ext, "kernel_reason", lambda q, k, v, kv_lens, scale: None)
    monkeypatch.setattr(_ext, "forward", lambda q, k, v, out, lse, kv_lens, scale: seen.update(scale=scale))
    ops._attention_impl(*qkv(d=72), "bshd", None, None, False)
    assert seen["scale"] == 1.0 / math.sqrt(72)


class _CaptureLib:
    """Stands in for the library: records the argument block vidattn_sm90_fwd is handed."""

    def __init__(self):
        self.args = None

    def vidattn_sm90_fwd(self, args_ref, stream):
        a = args_ref._obj
        self.args = {name: getattr(a, name) for name, _ in a._fields_}
        self.args["k_stride"] = tuple(a.k_stride)
        return 0


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_forward_hands_the_c_abi_the_kv_heads_and_real_head_dim(monkeypatch, layout):
    lib = _CaptureLib()
    monkeypatch.setattr(_ext, "_device_guard", lambda device: contextlib.nullcontext())
    monkeypatch.setattr(_ext, "_current_stream", lambda device: 0)
    monkeypatch.setattr(_ext, "workspace", lambda lib, device: None)
    q, k, v = (ops._bshd(t, layout) for t in qkv(b=2, sq=9, skv=11, hq=32, hkv=8, d=96, layout=layout))
    out = torch.empty_like(q)
    _ext.forward(q, k, v, out, None, None, 0.1, lib=lib)
    a = lib.args
    got = (a["batch"], a["heads"], a["kv_heads"], a["seqlen_q"], a["seqlen_kv"], a["head_dim"])
    assert got == (2, 32, 8, 9, 11, 96)
    assert a["k_stride"] == tuple(k.stride()[:3])  # the K/V maps step over the caller's 8 heads, in place


def test_abi_fields_are_last_so_older_callers_pass_zero():
    """A caller that fills the block positionally without kv_heads, causal and the block-sparse tables (older tools)
    leaves them 0: equal heads, no mask, dense. causal came after kv_heads, the tables after causal, their tiles'
    warpgroups (0: two) after the tables."""
    assert _ext._Args._fields_[-6:] == [("kv_heads", ctypes.c_int64), ("causal", ctypes.c_int32),
                                        ("blk_cnt", ctypes.c_void_p), ("blk_list", ctypes.c_void_p),
                                        ("blk_stride", ctypes.c_int64), ("blk_wgs", ctypes.c_int32)]
    a = _ext._Args()
    assert a.kv_heads == 0 and a.causal == 0 and a.blk_cnt is None and a.blk_list is None and a.blk_stride == 0
    assert a.blk_wgs == 0


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("hq,hkv", [(8, 2), (4, 1)])
def test_fallback_answers_grouped_query_with_lse(layout, hq, hkv):
    """On the CPU the call runs SDPA (enable_gqa); its output and LSE (chunked, K broadcast per group) against fp64."""
    q, k, v = qkv(b=2, sq=37, skv=29, hq=hq, hkv=hkv, d=40, layout=layout, dtype=torch.float32, seed=3)
    kv_lens = torch.tensor([29, 11])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.VidattnFallbackWarning)
        out, lse = vidattn.attention(q, k, v, layout=layout, kv_lens=kv_lens, return_lse=True)
    qh, kh, vh = (t if layout == "bhsd" else t.transpose(1, 2) for t in (q, k, v))
    ref, ref_lse = attention_fp64(qh, kh, vh, 1 / math.sqrt(40), kv_lens, layout="bhsd")
    out_h = out if layout == "bhsd" else out.transpose(1, 2)
    assert out.shape == q.shape and lse.shape == (2, hq, 37)
    torch.testing.assert_close(out_h.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)


def test_fallback_lse_chunks_over_rows_with_groups(monkeypatch):
    """Several row chunks (the LSE's memory cap) give the same LSE as one."""
    monkeypatch.setattr(ops, "_LSE_CHUNK_ELEMENTS", 4 * 2 * 13)
    q, k, v = qkv(b=1, sq=50, skv=13, hq=4, hkv=2, d=16, layout="bhsd", dtype=torch.float32, seed=5)
    _, lse = ops.sdpa_fallback(q, k, v, 0.3, None, True)
    torch.testing.assert_close(lse.double(), attention_fp64(q, k, v, 0.3, layout="bhsd")[1], atol=1e-5, rtol=1e-5)


def test_fallback_with_equal_heads_calls_sdpa_as_before(monkeypatch):
    """enable_gqa is passed only where the heads differ: the equal-head call is the one it always was."""
    calls = []
    real = F.scaled_dot_product_attention

    def spy(*args, **kwargs):
        calls.append(kwargs)
        return real(*args, **kwargs)

    monkeypatch.setattr(ops.F, "scaled_dot_product_attention", spy)
    q, k, v = qkv(hq=4, hkv=4, layout="bhsd", dtype=torch.float32)
    ops.sdpa_fallback(q, k, v, 0.1, None, False)
    q, k, v = qkv(hq=4, hkv=2, layout="bhsd", dtype=torch.float32)
    ops.sdpa_fallback(q, k, v, 0.1, None, False)
    assert "enable_gqa" not in calls[0] and calls[1]["enable_gqa"] is True


def test_backend_context_parallel_repeats_grouped_kv_for_the_templates(monkeypatch):
    """diffusers' context-parallel templates refuse enable_gqa and split heads themselves: the backend hands them K/V
    repeated per group (the direct path passes them to the kernel as they are)."""
    import importlib
    import types

    from vidattn.diffusers import backend
    ad = importlib.import_module(backend._DISPATCH)
    seen = {}

    def template(query, key, value, attn_mask, dropout_p, is_causal, scale, enable_gqa, return_lse, **kw):
        seen.update(k=key, v=value, enable_gqa=enable_gqa)
        return query

    monkeypatch.setattr(ad, "_templated_context_parallel_attention", template, raising=False)
    q, k, v = qkv(hq=8, hkv=2, dtype=torch.float32)
    config = types.SimpleNamespace(context_parallel_config=types.SimpleNamespace(ring_degree=1))
    backend.vidattn_attention(q, k, v, enable_gqa=True, _parallel_config=config)
    assert seen["enable_gqa"] is False and seen["k"].shape[2] == seen["v"].shape[2] == 8
    torch.testing.assert_close(seen["k"], k.repeat_interleave(4, dim=2), atol=0, rtol=0)


def _bench_kernel():
    return load_script(ROOT / "scripts" / "bench_kernel.py", register=True)


def test_bench_envelope_shapes_only_when_named():
    """The full table stays the anchors'; Allegro's D=96 and the 32q/8kv shape run when --shapes names them, with
    K/V of their own head count and SDPA's enable_gqa for the grouped one only."""
    bk = _bench_kernel()
    assert all(s.kv_heads == s.h for s in bk.select_shapes(None))
    assert not {s.name for s in bk.select_shapes(None)} & {s.name for s in bk.EXTRA_SHAPES}
    [allegro] = bk.select_shapes(["allegro"])
    assert (allegro.h, allegro.kv_heads, allegro.sq, allegro.d) == (24, 24, 79200, 96)
    [gqa] = bk.select_shapes(["gqa"])
    assert (gqa.h, gqa.kv_heads, gqa.sq, gqa.d) == (32, 8, 32768, 128)
    assert gqa.bytes_bf16() == 2 * 128 * (2 * 32 + 2 * 8) * 32768
    q, k = torch.empty(1, 32, 4, 8), torch.empty(1, 8, 4, 8)
    assert bk.gqa_kwargs(q, k) == {"enable_gqa": True} and bk.gqa_kwargs(q, q) == {}
