"""The 8-bit pre-pass in one launch (prep mode 3, q8_quant.cuh's q8_prep_once_kernel) on a Hopper GPU: the same
output as the default pre-pass (mode 1: statistics and Q, then the K/V pass) bit for bit, on odd lengths, kv_lens,
fp16, strided and BHSD inputs, NaN keys, both automatic lags (a head's K and V up to 8 MiB: its K/V items one segment
late; larger: in the same segment), CUDA graph replays (the ticket and the counters are zeroed with the statistics on
every replay); the workspace's ticket and per-head counters after a call; and the calls it does not take (LSE, D=64,
the per-key K/V pass) reporting the mode that ran."""
from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU", allow_module_level=True)

import test_8bit_gpu as base  # noqa: E402
from dev.stress import budget  # noqa: E402
from vidattn import quant8  # noqa: E402

DEV = base.DEV
same_bits = base.same_bits


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    yield
    quant8.set_prep(-1)
    quant8.set_kv_pass(-1)


def run(mode, q, k, v, kv_lens=None, layout_bhsd=False):
    """One 8-bit launch without LSE (mode 3 takes only those) into a NaN-poisoned output under prep `mode`:
    (out as (B, S, H, D), the mode that ran)."""
    quant8.set_prep(mode)
    try:
        out = torch.full_like(q, float("nan"))
        if layout_bhsd:
            quant8.forward_8bit(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out.transpose(1, 2), None,
                                kv_lens, 1 / math.sqrt(q.shape[-1]))
        else:
            quant8.forward_8bit(q, k, v, out, None, kv_lens, 1 / math.sqrt(q.shape[-1]))
        torch.cuda.synchronize()
        return (out.transpose(1, 2) if layout_bhsd else out), quant8.last_prep()
    finally:
        quant8.set_prep(-1)


def inputs(b, h, sq, skv, d=128, dtype=torch.bfloat16, seed=None):
    seed = int(torch.randint(0, 1 << 20, ()).item()) if seed is None else seed
    q, k, v = (base.randn(b, n, h, d, seed=seed + i, dtype=dtype) for i, n in enumerate((sq, skv, skv)))
    return q, base.on_quarter_grid(k), v, seed  # (K on the grid: its sums exact in any order, so both modes agree)


@pytest.mark.parametrize("skv", [77, 128, 129, 2049, 4096 + 77])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_one_launch_bit_for_bit(skv, dtype):
    q, k, v, seed = inputs(2, 3, 333, skv, dtype=dtype)
    a, ra = run(1, q, k, v)
    b, rb = run(3, q, k, v)
    assert (ra, rb) == (1, 3)
    assert same_bits(a, b), f"seed {seed}"
    assert not torch.isnan(b).any()
    lens = torch.tensor([skv, max(1, skv // 3)], dtype=torch.int32, device=DEV)
    a, _ = run(1, q, k, v, kv_lens=lens)
    b, _ = run(3, q, k, v, kv_lens=lens)
    assert same_bits(a, b), f"seed {seed} (kv_lens)"


@pytest.mark.parametrize("b,h,sq,skv", [(3, 24, 700, 1000),  # lag 1, many segments, Q blocks ahead of them
                                        (1, 2, 256, 16500)])  # 16.5K keys (8.06 MiB a head): lag 0
def test_both_lags_and_many_heads(b, h, sq, skv):
    plan = budget.q8_once_plan(b, h, sq, skv)
    assert plan["lag"] == (1 if skv <= 16384 else 0)
    q, k, v, seed = inputs(b, h, sq, skv)
    a, _ = run(1, q, k, v)
    c, r = run(3, q, k, v)
    assert r == 3 and same_bits(a, c), f"seed {seed}"


def test_strided_chunks_bhsd_and_nan_keys():
    seed = int(torch.randint(0, 1 << 20, ()).item())
    qkv = base.on_quarter_grid(base.randn(1, 1500, 3 * 4, 128, seed=seed))
    q, k, v = qkv.chunk(3, dim=2)
    assert not k.is_contiguous()
    assert same_bits(run(1, q, k, v)[0], run(3, q, k, v)[0]), f"seed {seed}"
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # (B, H, S, D)
    assert same_bits(run(1, qt, kt, vt, layout_bhsd=True)[0], run(3, qt, kt, vt, layout_bhsd=True)[0])
    # (a plain launch: 4 tiles of 6 key blocks plan no tail launch)
    q, k, v, seed = inputs(1, 2, 200, 700)
    k[0, 300, 1, 5] = float("nan")
    a, b = run(1, q, k, v)[0], run(3, q, k, v)[0]
    assert torch.equal(torch.isnan(a), torch.isnan(b)) and torch.isnan(b[:, :, 1]).any()
    assert torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


def test_graph_replays_start_from_a_zero_ticket():
    q, k, v, seed = inputs(2, 4, 500, 3000)
    want, _ = run(3, q, k, v)
    quant8.set_prep(3)
    out = torch.full_like(q, float("nan"))
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):  # (one eager call first: the library loads outside the capture)
        quant8.forward_8bit(q, k, v, out, None, None, 1 / math.sqrt(128))
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        quant8.forward_8bit(q, k, v, out, None, None, 1 / math.sqrt(128))
    for _ in range(3):
        out.fill_(float("nan"))
        g.replay()
        torch.cuda.synchronize()
        assert same_bits(out, want), f"seed {seed}"
    q2, k2, v2, _ = inputs(2, 4, 500, 3000)
    q.copy_(q2), k.copy_(k2), v.copy_(v2)
    g.replay()
    torch.cuda.synchronize()
    quant8.set_prep(-1)
    assert same_bits(out, run(1, q, k, v)[0]), f"seed {seed} (new inputs)"


@pytest.mark.parametrize("b,h,sq,skv", [(2, 3, 200, 700), (3, 24, 700, 1000), (1, 2, 256, 16500)])
def test_ticket_and_counters_in_the_workspace(b, h, sq, skv):
    """After a mode-3 call each head's counter holds its 128-key block count (budget.q8_once_plan's model of the
    host's plan: every statistics item ran once and counted itself), and the ticket the chunks taken: all the items'
    (items / chunk, rounded up), then one more per CTA, which found none left (at most two CTAs an SM)."""
    import ctypes

    from vidattn import _ext

    q, k, v, _ = inputs(b, h, sq, skv)
    out = torch.empty_like(q)
    lib = quant8._entry(_ext._library(None))
    nbytes = quant8.workspace_bytes(b, h, sq, skv, 128)
    ws = torch.full((nbytes,), 0x7F, dtype=torch.uint8, device=DEV)  # poisoned: the memset must zero the words
    args = _ext.launch_args(q, k, v, out, None, None, 1 / math.sqrt(128))
    args.workspace, args.workspace_bytes = ws.data_ptr(), nbytes
    quant8.set_prep(3)
    try:
        assert lib.vidattn_q8_fwd(ctypes.byref(args), None) == 0, lib.vidattn_sm90_last_error().decode()
        torch.cuda.synchronize()
        assert quant8.last_prep() == 3
    finally:
        quant8.set_prep(-1)
    off, n = budget.q8_layout(b, h, sq, skv, 128)["sync"]
    words = ws[off:off + n].view(torch.int32).cpu()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    plan = budget.q8_once_plan(b, h, sq, skv, sms=sms)
    chunk, items = plan["chunk"], plan["items"]
    taken = -(-items // chunk) * chunk
    ticket = int(words[0])
    # (the launch's CTAs: as many as fit, at most one per chunk; every CTA's last atomic finds no chunk left)
    assert ticket % chunk == 0 and taken + chunk <= ticket <= taken + chunk * min(taken // chunk, 2 * sms), \
        (ticket, items)
    assert 0 <= int(words[1]) <= b * h * plan["nkb"]  # K/V items that waited for their statistics
    assert torch.equal(words[2:], torch.full((b * h,), plan["nkb"], dtype=torch.int32))


def test_calls_it_does_not_take_run_another_mode():
    q, k, v, _ = inputs(1, 2, 300, 900)
    quant8.set_prep(3)
    try:
        lse = torch.empty(1, 2, 300, device=DEV)
        quant8.forward_8bit(q, k, v, torch.empty_like(q), lse, None, 0.1)  # LSE: Q's term reads the statistics
        assert quant8.last_prep() == 0
        q6, k6, v6, _ = inputs(1, 2, 300, 900, d=64)
        quant8.forward_8bit(q6, k6, v6, torch.empty_like(q6), None, None, 0.1)  # D=64: no whole-row K/V pass
        assert quant8.last_prep() == 1
        quant8.set_kv_pass(0)
        quant8.forward_8bit(q, k, v, torch.empty_like(q), None, None, 0.1)
        assert quant8.last_prep() == 1
    finally:
        quant8.set_prep(-1)
        quant8.set_kv_pass(-1)
    torch.cuda.synchronize()
