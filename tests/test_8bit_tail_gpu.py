"""The 8-bit path's tail launch on a Hopper GPU (csrc/capi_8bit.cuh q8_plan_tail, q8_fwd.cuh's kSplit, combine.cuh;
dev/NOTES_8bit.md "v18"): the library plans what tests/test_8bit_tail.py's model plans; with the tail launch the output
and LSE are within test_8bit_gpu.py's bounds of fp64 on fresh random inputs (odd lengths whose last key block is
partial in the last range, a main launch before the tail, a lone tile, both layouts, fp16, strided views, poisoned
outputs, a key offset, V = ones), the LSE within 1e-4 (D=128) or 1e-2 (D=64) of the plain launch's; a tail launch
repeats bit for bit; set_tail(0), kv_lens (below mode 2) and the Q-in-the-kernel pre-pass keep the plain launch;
mode 2 splits kv_lens calls, ranges without keys among them."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU", allow_module_level=True)

import test_8bit_gpu as base  # noqa: E402 - its helpers and bounds (check, randn, ref64, assert_row_mass)
import vidattn  # noqa: E402
from _support import load_script  # noqa: E402
from vidattn import quant8  # noqa: E402

DEV = base.DEV
MODEL = load_script(Path(__file__).resolve().parent / "test_8bit_tail.py", "test_8bit_tail_model")
SMS = torch.cuda.get_device_properties(DEV).multi_processor_count
# The LSE's largest difference between a tail launch and the plain launch, per head dim. The two quantize P against
# different row maxima. D=128 sums the row in fp32 before rounding (12 seeds a case: at most 2.7e-5 apart); D=64 sums
# the rounded P on the tensor cores (3.3-4.9e-3, and 5.1e-3 in call P31). A 128-key block lost or counted twice would
# move the LSE by about 3e-2 or more on these tests' shapes (at most 4097 keys).
LSE_VS_PLAIN = {128: 1e-4, 64: 1e-2}


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    yield
    quant8.set_tail(-1)
    quant8.set_prep(-1)


def planned(q, k, layout="bshd"):
    """Key ranges per tail tile the model plans for this call (0: the plain launch)."""
    b, sq, h = (q.shape[0], q.shape[1], q.shape[2]) if layout == "bshd" else (q.shape[0], q.shape[2], q.shape[1])
    skv = k.shape[1] if layout == "bshd" else k.shape[2]
    tiles, splits = MODEL.tail_plan(b, h, sq, skv, SMS)
    return splits if tiles else 0


# (batch, heads, queries, keys): a lone tile (no main launch, the last range's last block 1 key long), several tail
# tiles (a partial Q tile among them), one full round of the main launch and a tail, the main launch's tiles spread
# over batches.
CASES = [(1, 1, 100, 2049), (2, 3, 577, 4097), (1, SMS + 1, 150, 2200), (3, 45, 192, 1500)]


@pytest.mark.parametrize("d", [128, 64])
@pytest.mark.parametrize("case", CASES)
def test_tail_launch_against_fp64(d, case):
    b, h, sq, skv = case
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(b, n, h, d, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
    want = planned(q, k)
    assert want >= 2, "the case must plan a tail launch"
    base.check(q, k, v, lse=True, seed=seed)
    assert quant8.last_tail_splits() == want
    _, lse_tail = vidattn.attention(q, k, v, precision="8bit", return_lse=True)
    quant8.set_tail(0)
    _, lse_plain = vidattn.attention(q, k, v, precision="8bit", return_lse=True)
    assert quant8.last_tail_splits() == 0
    d_lse = float((lse_tail - lse_plain).abs().max())
    assert d_lse <= LSE_VS_PLAIN[d], f"LSE tail vs plain {d_lse:.2e} > {LSE_VS_PLAIN[d]:.0e} (seed {seed})"


@pytest.mark.parametrize("d", [128, 64])
def test_layouts_dtypes_poison_and_offset(d):
    """BHSD strided views (every other head) in fp16, a shared key offset, and NaN-poisoned output and LSE: every
    element of the tail's rows is written by the merge."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, 6, n, d, dtype=torch.float16, seed=seed + i) for i, n in enumerate((333, 1800, 1800)))
    qv, kv, vv = q[:, ::2], k[:, ::2], v[:, ::2]
    assert planned(qv, kv, "bhsd") >= 2
    base.check(qv, kv + 2.0, vv, layout="bhsd", lse=True, seed=seed)
    assert quant8.last_tail_splits() == planned(qv, kv, "bhsd")
    q, k, v = (base.randn(1, n, 5, d, seed=seed + 7 + i) for i, n in enumerate((400, 3000, 3000)))
    out, lse = base.forward_8bit_poisoned(q, k, v)
    assert quant8.last_tail_splits() == planned(q, k) >= 2
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), f"seed {seed}"
    o_ref, lse_ref = base.ref64(q, k, v, 1 / math.sqrt(d))
    assert base.rel_l2(out, o_ref) <= base.REL_L2, f"seed {seed}"
    assert float((lse.double() - lse_ref).abs().max()) <= base.lse_bound(q, k, 1 / math.sqrt(d)), f"seed {seed}"


@pytest.mark.parametrize("d", [128, 64])
def test_row_mass(d):
    """V = ones: each row's ranges, merged, still weigh to 1 within the row-sum mode's bound."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k = (base.randn(1, n, 3, d, seed=seed + i) for i, n in enumerate((500, 2500)))
    out = vidattn.attention(q, k, torch.ones_like(k), precision="8bit")
    assert quant8.last_tail_splits() == planned(q, k) >= 2
    base.assert_row_mass(out, q, k, seed=seed)


@pytest.mark.parametrize("d", [128, 64])
def test_repeats_bit_for_bit(d):
    """Two runs of a tail launch, K on the quarter grid (the pre-pass's sums exact in any order): the same bits (the
    merge adds the ranges in a fixed order)."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, d, seed=seed + i) for i, n in enumerate((577, 4097, 4097)))
    k = base.on_quarter_grid(k)
    a, la = base.forward_8bit_poisoned(q, k, v)
    b, lb = base.forward_8bit_poisoned(q, k, v)
    assert quant8.last_tail_splits() >= 2
    assert base.same_bits(a, b) and base.same_bits(la, lb), f"seed {seed}"


@pytest.mark.parametrize("d", [128, 64])
def test_plain_launch_where_asked_or_needed(d):
    """set_tail(0); kv_lens in mode 1; prep mode 2 (Q quantized by the attention kernel, whose producer fills the
    first stages of block 0): the plain launch, reported as 0 ranges. The default (2) splits kv_lens calls."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, d, seed=seed + i) for i, n in enumerate((300, 2049, 2049)))
    assert planned(q, k) >= 2
    quant8.set_tail(0)
    base.check(q, k, v, seed=seed)
    assert quant8.last_tail_splits() == 0
    quant8.set_tail(1)
    lens = torch.tensor([2049, 700], dtype=torch.int32, device=DEV)
    base.check(q, k, v, kv_lens=lens, lse=True, seed=seed)
    assert quant8.last_tail_splits() == 0
    quant8.set_tail(-1)
    base.check(q, k, v, kv_lens=lens, lse=True, seed=seed)
    assert quant8.last_tail_splits() == planned(q, k)
    quant8.set_prep(2)
    base.check(q, k, v, seed=seed)
    assert quant8.last_tail_splits() == 0 and quant8.last_prep() == 2
    quant8.set_prep(-1)
    base.check(q, k, v, seed=seed)
    assert quant8.last_tail_splits() == planned(q, k)


@pytest.mark.parametrize("d", [128, 64])
def test_kv_lens_in_mode_2(d):
    """set_tail(2) (dev/NOTES_8bit.md "v18b"): kv_lens calls take the tail launch the shapes plan. All tiles in the
    tail: batches of 4097, 1, 129 and 2500 keys, so most of the short batches' ranges hold no key; NaN in V past each
    kv_len, poisoned output and LSE. Then a main launch before a tail whose tiles are a short batch's. Each within
    test_8bit_gpu.py's fp64 bounds, the LSE near mode 1's (the plain launch on these calls)."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(4, n, 3, d, seed=seed + i) for i, n in enumerate((300, 4097, 4097)))
    want = planned(q, k)  # from the shapes alone: kv_lens do not change the plan
    assert want >= 4, "every short batch must leave ranges without keys"
    lens = torch.tensor([4097, 1, 129, 2500], dtype=torch.int32, device=DEV)
    for bi, n in enumerate(lens.tolist()):
        v[bi, n:] = float("nan")  # keys past kv_len must not reach the output
    quant8.set_tail(1)
    _, lse_plain = vidattn.attention(q, k, v, kv_lens=lens, precision="8bit", return_lse=True)
    assert quant8.last_tail_splits() == 0
    quant8.set_tail(2)
    base.check(q, k, v, kv_lens=lens, lse=True, seed=seed)
    assert quant8.last_tail_splits() == want
    out, lse = base.forward_8bit_poisoned(q, k, v, kv_lens=lens)
    assert quant8.last_tail_splits() == want
    assert not torch.isnan(out).any() and not torch.isnan(lse).any(), f"seed {seed}"
    d_lse = float((lse - lse_plain).abs().max())
    assert d_lse <= LSE_VS_PLAIN[d], f"LSE tail vs plain {d_lse:.2e} > {LSE_VS_PLAIN[d]:.0e} (seed {seed})"
    # 140 tiles: a main launch of 132, the last batch's 8 tiles as ranges of its 900 keys.
    q, k, v = (base.randn(2, n, 70, d, seed=seed + 9 + i) for i, n in enumerate((150, 2200, 2200)))
    assert planned(q, k) >= 2
    lens = torch.tensor([2200, 900], dtype=torch.int32, device=DEV)
    base.check(q, k, v, kv_lens=lens, lse=True, seed=seed)
    assert quant8.last_tail_splits() == planned(q, k)


def test_graph_capture():
    """A tail launch (three more kernels on the stream, the plan from shapes alone) replays in a CUDA graph with the
    eager call's bits."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(1, n, 4, 128, seed=seed + i) for i, n in enumerate((300, 3000, 3000)))
    k = base.on_quarter_grid(k)
    eager = vidattn.attention(q, k, v, precision="8bit")
    assert quant8.last_tail_splits() >= 2
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        vidattn.attention(q, k, v, precision="8bit")  # warm-up on the side stream
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        out = vidattn.attention(q, k, v, precision="8bit")
    g.replay()
    torch.cuda.synchronize()
    assert base.same_bits(out, eager), f"seed {seed}"
