"""Grouped-query and multi-query attention on the 8-bit path, on a Hopper GPU (csrc/sm90/q8_quant.cuh q8_kv_row,
q8_fwd.cuh, capi_8bit.cuh q8_layout): K/V with fewer heads than Q are quantized once per key/value head and read in
place by each query head of the group.

Two kinds of check, on fresh random inputs:
- against fp64 (K/V repeated for the reference only) within test_8bit_gpu.py's bounds: odd lengths, kv_lens with NaN
  past them, LSE, fp16, both layouts and strided views, a poisoned output;
- bit for bit against the same call with K/V repeated to the query heads (the equal-head path): K on a grid of
  quarters, so the pre-pass's K sums are exact in any order (test_8bit_gpu.on_quarter_grid) and both calls quantize the
  same codes. This covers every pre-pass (fused, three launches, Q in the kernel), the LSE, and the tail launch.
"""
from __future__ import annotations

import ctypes
import math

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU", allow_module_level=True)

import test_8bit_gpu as base  # noqa: E402 - its helpers and bounds (randn, ref64, rel_l2, lse_bound, same_bits)
import vidattn  # noqa: E402
from vidattn import _ext, quant8  # noqa: E402

DEV = base.DEV


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    """The 8-bit kernel at every length and both head dims: the routes that send short keys, and grouped K/V at D=64,
    to the exact kernel by design are bypassed here (test_grouped_d64_runs_exact_by_design checks that one)."""
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    monkeypatch.setattr(quant8, "GROUPED_EXACT_HEAD_DIMS", ())
    yield
    quant8.set_prep(-1)
    quant8.set_tail(-1)


def seed_now():
    return int(torch.randint(0, 1 << 20, ()).item())


def repeat_kv(t, groups, layout):
    return t.repeat_interleave(groups, dim=2 if layout == "bshd" else 1)


def run(q, k, v, layout, kv_lens=None, lse=True):
    assert vidattn.explain(q, k, v, layout=layout, kv_lens=kv_lens, precision="8bit") is None
    r = vidattn.attention(q, k, v, layout=layout, kv_lens=kv_lens, return_lse=lse, precision="8bit")
    torch.cuda.synchronize()
    return r if lse else (r, None)


def check_fp64(q, k, v, *, layout="bshd", kv_lens=None, seed=None, bound=base.REL_L2):
    """The grouped call against fp64 attention on K/V repeated to the query heads."""
    hq, hkv = (q.shape[2], k.shape[2]) if layout == "bshd" else (q.shape[1], k.shape[1])
    out, lse = run(q, k, v, layout, kv_lens)
    to_bshd = (lambda t: t) if layout == "bshd" else (lambda t: t.transpose(1, 2))
    qb, ob = to_bshd(q), to_bshd(out)
    kb, vb = (repeat_kv(to_bshd(t), hq // hkv, "bshd") for t in (k, v))
    vb = vb.nan_to_num()  # (NaN only past kv_lens)
    sc = 1 / math.sqrt(q.shape[-1])
    o_ref, lse_ref = base.ref64(qb, kb, vb, sc, kv_lens)
    assert out.shape == q.shape and out.dtype == q.dtype
    assert not torch.isnan(ob).any(), f"NaN in the output (seed {seed})"
    err = base.rel_l2(ob, o_ref)
    assert err <= bound, f"relative L2 {err:.3e} > {bound:.1e} (seed {seed})"
    assert float((ob.double() - o_ref).abs().max()) <= base.MAX_ABS * float(vb.double().abs().max()), f"seed {seed}"
    fin = torch.isfinite(lse_ref)
    d = float((lse.double() - lse_ref)[fin].abs().max())
    assert d <= base.lse_bound(qb, kb, sc), f"LSE max |err| {d:.3e} (seed {seed})"
    return err


@pytest.mark.parametrize("d", [128, 64])
@pytest.mark.parametrize("hq,hkv", [(8, 2), (6, 1), (4, 4)])
@pytest.mark.parametrize("sq,skv", [(1, 77), (1023, 517), (300, 4224)])
def test_grouped_against_fp64(d, hq, hkv, sq, skv):
    seed = seed_now()
    q = base.randn(1, sq, hq, d, seed=seed)
    k, v = (base.randn(1, skv, hkv, d, seed=seed + i) for i in (1, 2))
    check_fp64(q, k, v, seed=seed, bound=base.REL_L2_LOOSE if sq == 1 else base.REL_L2)


@pytest.mark.parametrize("d", [128, 64])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_grouped_bhsd_strided_kv_lens(d, dtype):
    """BHSD views of every other head (strided), three batches with kv_lens (NaN in V past each), fp16 and bf16."""
    seed = seed_now()
    q = base.randn(3, 8, 300, d, dtype=dtype, seed=seed)[:, ::2]            # 4 query heads
    k, v = (base.randn(3, 4, 1000, d, dtype=dtype, seed=seed + i)[:, ::2] for i in (1, 2))  # 2 key/value heads
    kv_lens = torch.tensor(base.KV_LENS, dtype=torch.int32, device=DEV)
    v[1, :, 37:] = float("nan")
    check_fp64(q, k, v, layout="bhsd", kv_lens=kv_lens, seed=seed)


@pytest.mark.parametrize("d", [128, 64])
def test_grouped_poisoned_output(d):
    """Every element of the output and the LSE is written (both start as NaN)."""
    seed = seed_now()
    q = base.randn(2, 777, 8, d, seed=seed)
    k, v = (base.randn(2, 1500, 2, d, seed=seed + i) for i in (1, 2))
    out = torch.full_like(q, float("nan"))
    lse = torch.full((2, 8, 777), float("nan"), device=DEV)
    quant8.forward_8bit(q, k, v, out, lse, None, 1 / math.sqrt(d))
    torch.cuda.synchronize()
    assert not out.isnan().any() and not lse.isnan().any()


@pytest.mark.parametrize("d", [128, 64])
@pytest.mark.parametrize("prep", [1, 0, 2])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_grouped_equals_repeated_bit_for_bit(d, prep, layout):
    """Grouped K/V give exactly the output and LSE of the same K/V repeated to the query heads, under each pre-pass,
    with kv_lens and without, for groups of 4 and multi-query (one key/value head)."""
    seed = seed_now()
    quant8.set_prep(prep)
    for b, sq, skv, hq, hkv, lens in [(2, 333, 1100, 8, 2, None), (3, 200, 1000, 6, 1, base.KV_LENS),
                                      (1, 1, 129, 4, 1, None)]:
        shape = (lambda s, h: (b, s, h, d)) if layout == "bshd" else (lambda s, h: (b, h, s, d))
        q = base.randn(*shape(sq, hq), seed=seed)
        k = base.on_quarter_grid(base.randn(*shape(skv, hkv), seed=seed + 1))
        v = base.randn(*shape(skv, hkv), seed=seed + 2)
        kl = None if lens is None else torch.tensor(lens, dtype=torch.int32, device=DEV)
        for lse in (False, True):
            got = run(q, k, v, layout, kl, lse)
            assert quant8.last_prep() == (0 if prep == 1 and lse else prep)
            want = run(q, repeat_kv(k, hq // hkv, layout), repeat_kv(v, hq // hkv, layout), layout, kl, lse)
            case = f"seed {seed} {(b, sq, skv, hq, hkv, lens)} lse {lse}"
            assert base.same_bits(got[0], want[0]), case
            if lse:
                assert base.same_bits(got[1], want[1]), case


@pytest.mark.parametrize("d", [128, 64])
def test_grouped_tail_launch_equals_repeated(d):
    """Shapes whose last round runs as the tail launch (key ranges merged by combine_kernel): grouped equals repeated
    bit for bit there too, and at least one of them ran the tail."""
    seed = seed_now()
    sms = torch.cuda.get_device_properties(DEV).multi_processor_count
    splits = []
    for b, sq, skv, hq, hkv in [(2, 577, 4097, 4, 2), (1, 150, 2200, 2 * (sms + 1), sms + 1), (1, 100, 2049, 8, 1)]:
        q = base.randn(b, sq, hq, d, seed=seed)
        k = base.on_quarter_grid(base.randn(b, skv, hkv, d, seed=seed + 1))
        v = base.randn(b, skv, hkv, d, seed=seed + 2)
        got = run(q, k, v, "bshd")
        splits.append(quant8.last_tail_splits())
        want = run(q, repeat_kv(k, hq // hkv, "bshd"), repeat_kv(v, hq // hkv, "bshd"), "bshd")
        assert quant8.last_tail_splits() == splits[-1]
        assert base.same_bits(got[0], want[0]) and base.same_bits(got[1], want[1]), f"seed {seed} {(b, sq, skv, hq)}"
    assert max(splits) > 0, f"no case ran the tail launch: {splits}"


def test_grouped_d64_runs_exact_by_design(monkeypatch):
    """With the route in place, grouped K/V at D=64 and precision="8bit" run the exact kernel, silently, and explain
    names the route; at D=128 the 8-bit kernel runs them."""
    import warnings

    monkeypatch.setattr(quant8, "GROUPED_EXACT_HEAD_DIMS", (64,))
    q = base.randn(1, 300, 8, 64, seed=1)
    k, v = (base.randn(1, 1000, 2, 64, seed=i) for i in (2, 3))
    assert "GROUPED_EXACT_HEAD_DIMS" in vidattn.explain(q, k, v, precision="8bit")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        out = vidattn.attention(q, k, v, precision="8bit")
    assert base.same_bits(out, vidattn.attention(q, k, v, precision="exact"))
    q = base.randn(1, 300, 8, 128, seed=1)
    k, v = (base.randn(1, 1000, 2, 128, seed=i) for i in (2, 3))
    assert vidattn.explain(q, k, v, precision="8bit") is None


def test_grouped_workspace_is_per_key_value_head():
    """The K/V parts of the workspace are per key/value head: 32 query heads on 8 take less than 32 on 32, more than
    8 on 8; the entry point without kv_heads is the equal-head size; heads that do not group size to 0."""
    lib = quant8._entry(_ext._library(None))
    gqa = quant8.workspace_bytes(1, 32, 4096, 4096, 128, h_kv=8)
    assert quant8.workspace_bytes(1, 8, 4096, 4096, 128) < gqa < quant8.workspace_bytes(1, 32, 4096, 4096, 128)
    assert lib.vidattn_q8_workspace_bytes_kv(1, 32, 0, 4096, 4096, 128) == quant8.workspace_bytes(1, 32, 4096, 4096,
                                                                                                   128)
    assert lib.vidattn_q8_workspace_bytes_kv(1, 32, 5, 4096, 4096, 128) == 0


def test_c_entry_refuses_heads_that_do_not_group():
    """kv_heads that do not divide heads are refused with the exact entry's words, nothing launched."""
    lib = quant8._entry(_ext._library(None))
    q = base.randn(1, 256, 4, 128, seed=1)
    k, v = (base.randn(1, 256, 3, 128, seed=i) for i in (2, 3))
    out = torch.full_like(q, float("nan"))
    nbytes = quant8.workspace_bytes(1, 4, 256, 256, 128)
    ws = torch.empty(nbytes, dtype=torch.uint8, device=DEV)
    args = _ext.launch_args(q, k, v, out, None, None, 1 / math.sqrt(128))
    args.workspace, args.workspace_bytes = ws.data_ptr(), nbytes
    assert lib.vidattn_q8_fwd(ctypes.byref(args), None) == 1
    assert "kv_heads must divide heads" in lib.vidattn_sm90_last_error().decode()
    torch.cuda.synchronize()
    assert out.isnan().all()
