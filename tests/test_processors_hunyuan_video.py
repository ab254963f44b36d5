"""vidattn.HunyuanVideoAttnProcessor against diffusers' HunyuanVideoAttnProcessor2_0 on tiny random
HunyuanVideo transformers (T2V and the token-replace I2V variant), built offline."""
import warnings

import pytest
import torch

import vidattn
from family_helpers import AttentionSpy
from conftest import is_hopper

diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_hunyuan_video import (  # noqa: E402
    HunyuanVideoAttnProcessor2_0 as StockProcessor,
)

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

TEXT_DIM, POOLED_DIM, IN_CH = 32, 16, 4


def tiny_hunyuan(seed=0, head_dim=64, **overrides):
    from diffusers import HunyuanVideoTransformer3DModel

    torch.manual_seed(seed)
    # 1 dual-stream + 1 single-stream block, 1 refiner layer; RoPE axes split the head dim (t/h/w).
    axes = (16, 24, 24) if head_dim == 64 else (16, 56, 56)
    config = dict(in_channels=IN_CH, out_channels=IN_CH, num_attention_heads=2, attention_head_dim=head_dim,
                  num_layers=1, num_single_layers=1, num_refiner_layers=1, mlp_ratio=2.0, patch_size=2,
                  patch_size_t=1, text_embed_dim=TEXT_DIM, pooled_projection_dim=POOLED_DIM, rope_axes_dim=axes)
    return HunyuanVideoTransformer3DModel(**{**config, **overrides}).eval()


def tiny_inputs(batch=2, text=7, valid=(7, 4), seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, IN_CH, 3, 8, 8, generator=g)
    t = torch.full((batch,), 500, dtype=torch.long)
    ctx = torch.randn(batch, text, TEXT_DIM, generator=g)
    mask = (torch.arange(text)[None, :] < torch.tensor(valid[:batch])[:, None]).long()
    pooled = torch.randn(batch, POOLED_DIM, generator=g)
    guidance = torch.full((batch,), 3000.0)
    return x, t, ctx, mask, pooled, guidance


def forward(model, inputs):
    with torch.no_grad():
        return model(*inputs[:5], guidance=inputs[5]).sample


def processors(model):
    return [m.processor for m in model.modules() if hasattr(m, "set_processor")]


@pytest.mark.parametrize("variant", [None, "token_replace"])
def test_apply_matches_stock_restores_exact_objects_and_skips_refiner(variant):
    model = tiny_hunyuan(image_condition_type=variant)
    inputs = tiny_inputs()
    originals = processors(model)
    expected = forward(model, inputs)

    handle = vidattn.apply(model)
    assert handle.replaced == ["transformer_blocks.0.attn", "single_transformer_blocks.0.attn"]
    assert all(isinstance(model.get_submodule(p).processor, vidattn.HunyuanVideoAttnProcessor)
               for p in handle.replaced)
    # the token refiner's plain attention is left alone and reported
    assert handle.skipped == [("context_embedder.token_refiner.refiner_blocks.0.attn",
                               "no vidattn processor for AttnProcessor2_0")]
    assert "stock     1 x AttnProcessor2_0" in str(handle) and "[context_embedder.token_refiner" in str(handle)
    torch.testing.assert_close(forward(model, inputs), expected, atol=1e-5, rtol=1e-5)

    assert vidattn.restore(model) == 2
    assert all(a is b for a, b in zip(processors(model), originals))
    torch.testing.assert_close(forward(model, inputs), expected, atol=0, rtol=0)


def test_text_padding_mask_becomes_kv_lens(monkeypatch):
    model = tiny_hunyuan()
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch)
    forward(model, tiny_inputs())
    seen = [(c["k"][1], c["kv_lens"]) for c in spy.calls]
    n_video = 3 * 4 * 4  # 3 frames x (8/2) x (8/2)
    assert len(seen) == 2
    for n_keys, lens in seen:
        assert n_keys == n_video + 7 and lens.tolist() == [n_video + 7, n_video + 4]


def test_padded_text_tokens_change_nothing():
    model = tiny_hunyuan()
    vidattn.apply(model)
    inputs = tiny_inputs()
    out = forward(model, inputs)
    x, t, ctx, mask, pooled, guidance = inputs
    ctx = ctx.clone()
    ctx[1, 4:] = 100 * torch.randn(3, TEXT_DIM)  # padded tokens of the second prompt
    out2 = forward(model, (x, t, ctx, mask, pooled, guidance))
    torch.testing.assert_close(out2, out, atol=1e-6, rtol=1e-6)


def _joint_call(mask, single_stream=False):
    model = tiny_hunyuan()
    attn = (model.single_transformer_blocks if single_stream else model.transformer_blocks)[0].attn
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 12, 128, generator=g)
    text = torch.randn(2, 5, 128, generator=g)
    cos, sin = torch.randn(12, 64, generator=g), torch.randn(12, 64, generator=g)
    with torch.no_grad():
        expected = StockProcessor()(attn, hidden, text, attention_mask=mask, image_rotary_emb=(cos, sin))
        out = vidattn.HunyuanVideoAttnProcessor()(attn, hidden, text, attention_mask=mask,
                                                  image_rotary_emb=(cos, sin))
    return out, expected


@pytest.mark.parametrize("single_stream", [False, True])
def test_processor_matches_stock_with_prefix_mask(single_stream):
    keep = torch.arange(17)[None, :] < torch.tensor([17, 14])[:, None]
    out, expected = _joint_call(keep[:, None, None, :], single_stream)
    for a, b in zip(out, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_non_prefix_mask_falls_back_to_diffusers_dispatch(fresh_warnings):
    keep = torch.ones(2, 1, 1, 17, dtype=torch.bool)
    keep[1, ..., 13] = False  # a hole inside the text tokens
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, expected = _joint_call(keep)
    for a, b in zip(out, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert any(issubclass(w.category, vidattn.VidattnFallbackWarning) and "prefix" in str(w.message)
               for w in caught)


@pytest.mark.gpu
def test_gpu_hunyuan_head_dim_128_bf16_takes_kernel_path(monkeypatch):
    model = tiny_hunyuan(head_dim=128).to("cuda", torch.bfloat16)
    inputs = [a.to("cuda") for a in tiny_inputs()]
    for i in (0, 2, 4):
        inputs[i] = inputs[i].bfloat16()
    expected = forward(model, inputs)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, inputs)
    calls = [c["explain"] for c in spy.calls]
    assert len(calls) == 2  # dual- and single-stream joint attention, both with kv_lens
    if is_hopper():
        assert calls == [None] * 2, calls
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.parametrize("batch", [1, 2])
def test_framepack_transformer_matches_stock(batch):
    """FramePack's HunyuanVideo transformer uses the same processor (mask None at batch 1, (B, 1, 1, S) else)."""
    from diffusers import HunyuanVideoFramepackTransformer3DModel

    torch.manual_seed(0)
    model = HunyuanVideoFramepackTransformer3DModel(
        in_channels=IN_CH, out_channels=IN_CH, num_attention_heads=2, attention_head_dim=64, num_layers=1,
        num_single_layers=1, num_refiner_layers=1, mlp_ratio=2.0, text_embed_dim=TEXT_DIM,
        pooled_projection_dim=POOLED_DIM, rope_axes_dim=(16, 24, 24), has_image_proj=True, image_proj_dim=16,
        has_clean_x_embedder=True).eval()
    x, t, ctx, mask, pooled, guidance = tiny_inputs(batch=batch, valid=(4, 7))
    g = torch.Generator().manual_seed(2)
    kwargs = dict(
        guidance=guidance, indices_latents=torch.arange(3),
        latents_clean=torch.randn(batch, IN_CH, 2, 8, 8, generator=g), indices_latents_clean=torch.tensor([0, 4]),
        latents_history_2x=torch.randn(batch, IN_CH, 2, 8, 8, generator=g),
        indices_latents_history_2x=torch.tensor([5, 6]),
        latents_history_4x=torch.randn(batch, IN_CH, 4, 8, 8, generator=g),
        indices_latents_history_4x=torch.arange(7, 11))
    args = (x, t, ctx, mask, pooled, torch.randn(batch, 5, 16, generator=g))
    with torch.no_grad():
        expected = model(*args, **kwargs).sample
        handle = vidattn.apply(model)
        out = model(*args, **kwargs).sample
    assert len(handle.replaced) == 2 and len(handle.skipped) == 1
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.gpu
def test_gpu_hunyuan_real_shape_joint_call_is_in_kernel_envelope():
    """HunyuanVideo's joint attention at its real heads x D (24 x 128): video tokens + 256 text tokens, the
    text padding as kv_lens; the kernel runs it (explain is None) on Hopper."""
    if not is_hopper():
        pytest.skip("needs an sm_90 GPU")
    s = 32760 + 256
    q, k, v = (torch.randn(2, s, 24, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    lens = torch.tensor([s, 32760 + 77], device="cuda", dtype=torch.int32)
    assert vidattn.explain(q, k, v, kv_lens=lens) is None
