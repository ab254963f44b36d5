"""The 8-bit pre-pass's whole-row K/V pass (q8_kv2_kernel, quant8.set_kv_pass(1)) on a Hopper GPU: the attention's
output and LSE are those of the per-key pass (q8_kv_kernel) bit for bit (same codes, same scales), on odd lengths,
kv_lens tails, fp16, strided q/k/v (a fused qkv projection's chunks), the BHSD layout and NaN keys; at D=64 a forced
pass 1 runs the per-key pass and says so."""
from __future__ import annotations


import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU", allow_module_level=True)

import test_8bit_gpu as base  # noqa: E402
from vidattn import quant8  # noqa: E402

DEV = base.DEV


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    yield
    quant8.set_kv_pass(-1)


def run(mode, q, k, v, kv_lens=None, layout_bhsd=False):
    quant8.set_kv_pass(mode)
    try:
        return (*base.forward_8bit_poisoned(q, k, v, kv_lens, layout_bhsd), quant8.last_kv_pass())
    finally:
        quant8.set_kv_pass(-1)


same_bits = base.same_bits


@pytest.mark.parametrize("skv", [77, 128, 129, 2049, 4096 + 77])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_whole_row_pass_bit_for_bit(skv, dtype):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 128, seed=seed + i, dtype=dtype) for i, n in enumerate((333, skv, skv)))
    k = base.on_quarter_grid(k)
    a, la, ra = run(0, q, k, v)
    b, lb, rb = run(1, q, k, v)
    assert (ra, rb) == (0, 1)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed}"
    assert not torch.isnan(b).any()
    lens = torch.tensor([skv, max(1, skv // 3)], dtype=torch.int32, device=DEV)
    a, la, _ = run(0, q, k, v, kv_lens=lens)
    b, lb, _ = run(1, q, k, v, kv_lens=lens)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed} (kv_lens)"


def test_strided_chunks_and_bhsd():
    """q, k, v as chunks of one fused projection (row stride 3 x heads x 128) and in the BHSD layout."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    # (on the grid before the chunks, which then keep the fused projection's strides)
    qkv = base.on_quarter_grid(base.randn(1, 1500, 3 * 4, 128, seed=seed))
    q, k, v = qkv.chunk(3, dim=2)
    assert not k.is_contiguous()
    a, la, _ = run(0, q, k, v)
    b, lb, _ = run(1, q, k, v)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed}"
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))  # (B, H, S, D)
    a, la, _ = run(0, qt, kt, vt, layout_bhsd=True)
    b, lb, _ = run(1, qt, kt, vt, layout_bhsd=True)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed} (BHSD)"


def test_nan_keys_give_the_same_rows():
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(1, n, 2, 128, seed=seed + i) for i, n in enumerate((200, 700, 700)))
    k = base.on_quarter_grid(k)
    k[0, 300, 1, 5] = float("nan")
    a, _, _ = run(0, q, k, v)
    b, _, _ = run(1, q, k, v)
    assert torch.equal(torch.isnan(a), torch.isnan(b)) and torch.isnan(b[:, :, 1]).any()
    assert torch.equal(torch.nan_to_num(a), torch.nan_to_num(b))


def test_head_dim_64_runs_the_per_key_pass():
    q, k, v = (base.randn(1, n, 2, 64, seed=i) for i, n in enumerate((129, 300, 300)))
    _, _, r = run(1, q, k, v)
    assert r == 0


def _workspace_after_call(q, k, v, lens, poison):
    """One 8-bit call (BSHD) through the C entry on a workspace filled with `poison` bytes: the workspace after the
    call (synchronized) and its parts as dev/stress/budget.py models capi_8bit.cuh's q8_layout, {part: (byte offset,
    bytes)}."""
    import ctypes
    import math

    from dev.stress import budget
    from vidattn import _ext

    b, sq, h, d = q.shape
    out = torch.empty_like(q)
    lib = quant8._entry(_ext._library(None))
    nbytes = quant8.workspace_bytes(b, h, sq, k.shape[1], d)
    ws = torch.full((nbytes,), poison, dtype=torch.uint8, device=DEV)
    args = _ext.launch_args(q, k, v, out, None, lens, 1 / math.sqrt(d))
    args.workspace, args.workspace_bytes = ws.data_ptr(), nbytes
    assert lib.vidattn_q8_fwd(ctypes.byref(args), None) == 0, lib.vidattn_sm90_last_error().decode()
    torch.cuda.synchronize()
    return ws, budget.q8_layout(b, h, sq, k.shape[1], d)


@pytest.mark.parametrize("d", [64, 128])
@pytest.mark.parametrize("skv", [77, 700, 1500, 2049])
def test_statistics_in_the_workspace(d, skv):
    """The statistics launch's per-channel K sums and max |V| (q8_kv_stats_block, kQ8StatUnroll keys a thread per
    load round), read back from the workspace: exact against torch over the valid keys only (K on the quarter grid,
    so every order of the fp32 sums is exact; max is exact), with kv_lens that end inside a 512-key statistics block
    and inside an unrolled round, and a huge V value past the shorter batch's kv_len that must not count."""
    seed = int(torch.randint(0, 1 << 20, ()).item())
    b, h, sq = 2, 3, 200
    q, k, v = (base.randn(b, n, h, d, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
    k = base.on_quarter_grid(k)
    short = max(1, skv // 3 + 5)
    v[1, short:, 0, 3] = 1e4  # past batch 1's kv_len: not in its statistics
    lens = torch.tensor([skv, short], dtype=torch.int32, device=DEV)
    ws, parts = _workspace_after_call(q, k, v, lens, 0xFF)  # poisoned: the memset must zero the sums
    (o_sum, n_sum), (o_max, n_max) = parts["k_sum"], parts["v_amax"]
    k_sum = ws[o_sum:o_sum + n_sum].view(torch.float32).view(b, h, d)
    v_amax = ws[o_max:o_max + n_max].view(torch.int32).view(b, h, d)
    for bi, n in enumerate((skv, short)):
        want_sum = k[bi, :n].float().sum(0)  # (H, D), exact on the grid
        want_max = v[bi, :n].float().abs().amax(0)
        assert torch.equal(k_sum[bi], want_sum), f"seed {seed}, batch {bi}: K sums"
        assert torch.equal(v_amax[bi], want_max.view(torch.int32)), f"seed {seed}, batch {bi}: max |V|"


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("d", [64, 128])
def test_k_codes_in_the_workspace(d, mode):
    """The K/V pass's K' codes read back from the workspace ([B, H, Skv_pad, D] INT8, both passes: the per-key pass's
    shared tile and kv2's stores), against torch: K minus its mean over the valid keys, times 127 / the max |k - mean|
    of each 128-key block's four key groups (key % 8 / 2), rounded to nearest even, zeros past kv_len. Within one code
    everywhere (the kernel's fp32 reciprocal may round a tie the other way) and exact on nearly all: a chunk of a row
    stored in the wrong place moves codes by tens."""
    if d == 64 and mode == 1:
        pytest.skip("D=64 has the per-key pass only")
    seed = int(torch.randint(0, 1 << 20, ()).item())
    b, h, sq, skv = 2, 3, 100, 700
    q, k, v = (base.randn(b, n, h, d, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
    k = base.on_quarter_grid(k)
    lens = torch.tensor([skv, 300], dtype=torch.int32, device=DEV)
    quant8.set_kv_pass(mode)
    try:
        ws, parts = _workspace_after_call(q, k, v, lens, 0x55)  # poisoned
        assert quant8.last_kv_pass() == mode
    finally:
        quant8.set_kv_pass(-1)
    skv_pad = -(-skv // 128) * 128
    off, nbytes = parts["k8"]
    k8 = ws[off:off + nbytes].view(torch.int8).view(b, h, skv_pad, d).to(torch.int32)
    for bi, n in enumerate((skv, 300)):
        kk = k[bi, :n].float().transpose(0, 1)  # (H, n, D)
        kc = kk - kk.sum(1, keepdim=True) / n
        ref = torch.zeros(h, skv_pad, d, dtype=torch.int32, device=DEV)
        for blk in range(-(-n // 128)):
            s0, s1 = 128 * blk, min(128 * blk + 128, n)
            x = kc[:, s0:s1]
            grp = (torch.arange(s0, s1, device=DEV) % 8) // 2
            for g in range(4):
                sel = grp == g
                if not sel.any():
                    continue
                t = x[:, sel].abs().amax(dim=(1, 2), keepdim=True)  # (H, 1, 1)
                inv = torch.where(t > 0, 127.0 / t, torch.ones_like(t))
                codes = torch.round(x[:, sel] * inv).clamp(-127, 127).to(torch.int32)
                idx = torch.arange(s0, s1, device=DEV)[sel]
                ref[:, idx] = codes
        got = k8[bi]
        diff = (got - ref).abs()
        assert int(diff.max()) <= 1, f"seed {seed}, batch {bi}: K' codes off by {int(diff.max())}"
        assert float((diff > 0).float().mean()) < 1e-3, f"seed {seed}, batch {bi}"
        assert int(got[:, n:].abs().max() if n < skv_pad else 0) == 0, f"seed {seed}: codes past kv_len"
