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
