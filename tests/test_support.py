"""tests/_support.py itself: the float64 reference the accuracy tests trust (against SDPA in float64 and a
per-element sum), the same-precision baseline, and the script loader."""
import math
import sys

import pytest
import torch
import torch.nn.functional as F

from _support import ROOT, attention_fp64, load_script, sdpa_same_precision


def _qkv(b=2, sq=9, skv=11, h=4, hkv=2, d=8, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, n, heads, d, generator=g) for n, heads in ((sq, h), (skv, hkv), (skv, hkv)))


def _mask(b, sq, skv, kv_lens, causal):
    j, i = torch.arange(skv)[None, None, :], torch.arange(sq)[None, :, None]
    lens = torch.tensor(kv_lens)[:, None, None]
    keep = (j < lens).expand(b, sq, skv)
    if causal:
        keep = keep & (j <= i + (lens - sq if causal == "bottom_right" else 0))
    return keep[:, None]  # (B, 1, Sq, Skv)


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_matches_sdpa_in_float64_and_the_lse_sum(causal, layout):
    q, k, v = _qkv()
    kv_lens = [11, 6]
    keep = _mask(2, 9, 11, kv_lens, causal)
    want = F.scaled_dot_product_attention(*(t.double().transpose(1, 2) for t in (q, k, v)), attn_mask=keep,
                                          scale=0.3, enable_gqa=True)
    args = (q, k, v) if layout == "bshd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    out, lse = attention_fp64(*args, 0.3, torch.tensor(kv_lens), layout=layout, causal=causal)
    assert out.dtype == lse.dtype == torch.float64 and lse.shape == (2, 4, 9)
    rows = keep.any(-1).squeeze(1)  # (B, Sq): rows with at least one key
    got = out if layout == "bhsd" else out.transpose(1, 2)
    assert torch.allclose(got[rows[:, None].expand(2, 4, 9)], want[rows[:, None].expand(2, 4, 9)], atol=1e-12)
    bb, hh, ii = 1, 3, 8  # one LSE element by hand: query head 3 reads K head 1
    s = [0.3 * float(q[bb, ii, hh].double() @ k[bb, jj, 1].double()) for jj in range(11) if keep[bb, 0, ii, jj]]
    assert lse[bb, hh, ii].item() == pytest.approx(math.log(sum(math.exp(x) for x in s)), rel=1e-12)


def test_rows_without_a_key_are_zero_with_lse_minus_inf():
    q, k, v = _qkv(b=1, sq=5, skv=3, h=2, hkv=2)
    out, lse = attention_fp64(q, k, v, kv_lens=[2], causal="bottom_right")  # query i keeps keys j <= i - 3
    assert (out[0, :3] == 0).all() and (lse[0, :, :3] == float("-inf")).all()
    assert torch.isfinite(out).all() and torch.isfinite(lse[0, :, 3:]).all()


def test_default_scale_and_chunks_change_nothing():
    q, k, v = _qkv(sq=37, skv=13)
    whole, whole_lse = attention_fp64(q, k, v, kv_lens=[13, 5], causal=True)
    parts, parts_lse = attention_fp64(q, k, v, kv_lens=[13, 5], causal=True, chunk_bytes=2 * 4 * 13 * 8 * 5)
    assert torch.allclose(parts, whole, atol=1e-14) and torch.allclose(parts_lse, whole_lse, atol=1e-14)
    scaled, _ = attention_fp64(q, k, v, 1 / math.sqrt(8), kv_lens=[13, 5], causal=True)
    assert torch.equal(scaled, whole)


def test_load_script_fresh_module_and_registration():
    path = ROOT / "scripts" / "plot_results.py"
    a, b = load_script(path), load_script(path, "_support_plot", register=True)
    assert a is not b and a.__name__ == "plot_results" and "plot_results" not in sys.modules
    assert sys.modules.pop("_support_plot") is b and callable(b.main)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_same_precision_baseline_is_sdpa_with_groups_and_key_mask(layout):
    q, k, v = _qkv()
    kv_lens = torch.tensor([11, 6])
    want = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), enable_gqa=True, scale=0.3,
                                          attn_mask=_mask(2, 9, 11, [11, 6], False))
    args = (q, k, v) if layout == "bshd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    out = sdpa_same_precision(*args, 0.3, kv_lens, layout=layout)
    assert out.dtype == q.dtype and out.shape == args[0].shape
    assert torch.allclose(out if layout == "bhsd" else out.transpose(1, 2), want, atol=1e-6)
