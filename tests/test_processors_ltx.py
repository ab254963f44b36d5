"""vidattn.LTXVideoAttnProcessor against diffusers' LTXVideoAttnProcessor (LTX-Video 0.9.x D=64, 13B D=128)."""
import warnings

import pytest
import torch

import vidattn
from conftest import is_hopper
from family_helpers import (AttentionSpy, assert_restored, attention_processors, check_unknown_module_skipped,
                            envelope_reasons)
from vidattn.diffusers.sdpa_common import sdpa_mask_to_kv_lens

diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_ltx import LTXVideoAttnProcessor as StockLTXProcessor  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

TEXT = 10
LENS = [10, 6]  # valid prompt tokens per sample: the tokenizer pads after them


def tiny_ltx(head_dim: int = 64, seed: int = 0):
    """2 layers, 2 heads x head_dim (64: LTX-Video 0.9.x, 128: 13B), captions of width 32."""
    from diffusers import LTXVideoTransformer3DModel

    torch.manual_seed(seed)
    return LTXVideoTransformer3DModel(in_channels=8, out_channels=8, num_attention_heads=2, attention_head_dim=head_dim,
                                      cross_attention_dim=2 * head_dim, num_layers=2, caption_channels=32).eval()


def tiny_inputs(batch=2, lens=LENS, seed=1):
    """Latents of 2 x 4 x 4 = 32 tokens, TEXT caption tokens with the pipeline's 0/1 prompt mask."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 32, 8, generator=g)
    ctx = torch.randn(batch, TEXT, 32, generator=g)
    t = torch.full((batch,), 500, dtype=torch.long)
    mask = (torch.arange(TEXT)[None, :] < torch.tensor(lens[:batch])[:, None]).long()
    return x, ctx, t, mask


def forward(model, x, ctx, t, mask):
    with torch.no_grad():
        return model(x, ctx, t, mask, num_frames=2, height=4, width=4, rope_interpolation_scale=(1.0, 32, 32)).sample


@pytest.mark.parametrize("head_dim", [64, 128])
def test_apply_matches_stock_and_restores_exact_objects(head_dim, monkeypatch):
    model = tiny_ltx(head_dim)
    inputs = tiny_inputs()
    before = attention_processors(model)
    assert [type(p) for _, _, p in before] == [StockLTXProcessor] * 4
    expected = forward(model, *inputs)

    handle = vidattn.apply(model)
    assert len(handle.replaced) == 4 and handle.skipped == []
    assert handle.replaced[:2] == ["transformer_blocks.0.attn1", "transformer_blocks.0.attn2"]
    assert all(type(p) is vidattn.LTXVideoAttnProcessor for _, _, p in attention_processors(model))
    spy = AttentionSpy(monkeypatch)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    # self-attention unmasked; text cross-attention: the prompt mask (an additive -10000 bias by then) -> kv_lens
    assert len(spy.calls) == 4
    for call, cross in zip(spy.calls, [False, True, False, True]):
        assert call["layout"] == "bshd" and call["q"] == (2, 32, 2, head_dim)
        if cross:
            assert call["k"] == (2, TEXT, 2, head_dim) and call["kv_lens"].tolist() == LENS
        else:
            assert call["kv_lens"] is None

    assert vidattn.restore(model) == 4
    assert_restored(model, before)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=0, rtol=0)


def test_padded_text_tokens_change_nothing():
    model = tiny_ltx()
    x, ctx, t, mask = tiny_inputs()
    vidattn.apply(model)
    out = forward(model, x, ctx, t, mask)
    ctx2 = ctx.clone()
    ctx2[1, LENS[1]:] = torch.randn(TEXT - LENS[1], 32) * 10
    torch.testing.assert_close(forward(model, x, ctx2, t, mask), out, atol=1e-6, rtol=1e-6)
    ctx2[1, :LENS[1]] += 1  # a valid token does change the output
    assert not torch.allclose(forward(model, x, ctx2, t, mask), out, atol=1e-3)


def test_set_attn_processor_by_hand_restores_stock():
    model = tiny_ltx()
    inputs = tiny_inputs()
    expected = forward(model, *inputs)
    model.set_attn_processor(vidattn.LTXVideoAttnProcessor())
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    assert vidattn.restore(model) == 4
    assert [type(p) for _, _, p in attention_processors(model)] == [StockLTXProcessor] * 4


# ------------------------------------------------------------------------------------- masks (processor level)
def _cross_call(mask):
    model = tiny_ltx()
    attn = model.transformer_blocks[0].attn2
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 12, 128, generator=g)
    text = torch.randn(2, TEXT, 128, generator=g)
    with torch.no_grad():
        expected = StockLTXProcessor()(attn, hidden, text, attention_mask=mask)
        out = vidattn.LTXVideoAttnProcessor()(attn, hidden, text, attention_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def _bias(keep):
    return ((1 - keep.float()) * -10000.0).unsqueeze(1)  # what the model makes of the pipeline's prompt mask


@pytest.mark.parametrize("kind", ["bool", "bias", "bias_4d"])
def test_key_padding_masks_become_kv_lens(kind, monkeypatch):
    spy = AttentionSpy(monkeypatch)
    keep = torch.arange(TEXT)[None, :] < torch.tensor([TEXT, 3])[:, None]
    mask = {"bool": keep, "bias": _bias(keep), "bias_4d": _bias(keep)[:, None]}[kind]
    _cross_call(mask)
    assert len(spy.calls) == 1 and spy.calls[0]["kv_lens"].tolist() == [TEXT, 3]


@pytest.mark.parametrize("kind", ["holes", "soft_bias", "all_masked", "per_query"])
def test_other_masks_fall_back_to_diffusers_dispatch(kind, fresh_warnings, monkeypatch):
    keep = torch.arange(TEXT)[None, :] < torch.tensor([TEXT, 6])[:, None]
    if kind == "holes":
        keep[0, 4] = False
        mask = _bias(keep)
    elif kind == "soft_bias":
        mask = _bias(keep) * 1e-3  # -10: a bias, not padding
    elif kind == "all_masked":  # stock softmax over equal -10000 biases: uniform, not "no keys"
        keep[1] = False
        mask = _bias(keep)
    else:
        mask = torch.rand(2, 1, 12, TEXT, generator=torch.Generator().manual_seed(0)) > 0.3
        mask[..., 0] = True
    spy = AttentionSpy(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        _cross_call(mask)
    assert spy.calls == []
    assert any(issubclass(w.category, vidattn.VidattnFallbackWarning) and "attention_mask" in str(w.message)
               for w in caught)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_diffusers_bias_in_each_dtype_is_key_padding(dtype):
    keep = torch.arange(TEXT)[None, :] < torch.tensor([TEXT, 4])[:, None]
    bias = ((1 - keep.to(dtype)) * -10000.0)[:, None, None, :].expand(2, 3, 1, TEXT)  # -9984 in bf16
    lens, reason = sdpa_mask_to_kv_lens(bias, 2, 3, 12, TEXT)
    assert reason is None and lens.tolist() == [TEXT, 4]
    lens, reason = sdpa_mask_to_kv_lens(bias.float().masked_fill(~keep[:, None, None, :], float("-inf")),
                                        2, 3, 12, TEXT)
    assert reason is None and lens.tolist() == [TEXT, 4]

@pytest.mark.parametrize("head_dim", [64, 128])
def test_bf16_calls_are_inside_the_kernel_envelope(head_dim, monkeypatch):
    """On the CPU in bf16: everything but the device says kernel (head dim, strides, alignment, kv_lens)."""
    model = tiny_ltx(head_dim).to(torch.bfloat16)
    x, ctx, t, mask = tiny_inputs()
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch)
    forward(model, x.bfloat16(), ctx.bfloat16(), t, mask)
    assert len(spy.calls) == 4 and envelope_reasons(spy.calls) == [None] * 4


def test_unknown_modules_are_skipped_and_reported():
    check_unknown_module_skipped(tiny_ltx(), n_replaced=4)


# ------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", [64, 128])
def test_gpu_ltx_bf16_takes_kernel_path(head_dim, monkeypatch):
    model = tiny_ltx(head_dim).to("cuda", torch.bfloat16)
    x, ctx, t, mask = tiny_inputs()
    x, ctx, t, mask = x.to("cuda", torch.bfloat16), ctx.to("cuda", torch.bfloat16), t.to("cuda"), mask.to("cuda")
    expected = forward(model, x, ctx, t, mask)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, x, ctx, t, mask)
    assert len(spy.calls) == 4 and all(c["q"][-1] == head_dim for c in spy.calls)
    assert [c["kv_lens"] is not None for c in spy.calls] == [False, True, False, True]
    if is_hopper():
        assert [c["explain"] for c in spy.calls] == [None] * 4
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
