"""vidattn.HunyuanVideo15AttnProcessor against diffusers' HunyuanVideo15AttnProcessor2_0 on a tiny random
HunyuanVideo 1.5 transformer, built offline."""
import warnings

import pytest
import torch

import vidattn
from family_helpers import AttentionSpy
from conftest import is_hopper

diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_hunyuan_video15 import (  # noqa: E402
    HunyuanVideo15AttnProcessor2_0 as StockProcessor,
)

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

TEXT_DIM, TEXT2_DIM, IMAGE_DIM, IN_CH = 32, 24, 16, 4
N_VIDEO = 3 * 8 * 8  # 3 frames x 8 x 8, patch size 1


def tiny_hunyuan15(seed=0, head_dim=64):
    from diffusers import HunyuanVideo15Transformer3DModel

    torch.manual_seed(seed)
    axes = (16, 24, 24) if head_dim == 64 else (16, 56, 56)
    return HunyuanVideo15Transformer3DModel(
        in_channels=IN_CH, out_channels=IN_CH, num_attention_heads=2, attention_head_dim=head_dim, num_layers=2,
        num_refiner_layers=1, mlp_ratio=2.0, text_embed_dim=TEXT_DIM, text_embed_2_dim=TEXT2_DIM,
        image_embed_dim=IMAGE_DIM, rope_axes_dim=axes).eval()


def tiny_inputs(seed=1, image=False):
    """Batch 2: Qwen text 7 tokens (7 and 4 valid), ByT5 text 5 tokens (3 and 5 valid), 3 image tokens."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(2, IN_CH, 3, 8, 8, generator=g)
    t = torch.full((2,), 500.0)
    ctx = torch.randn(2, 7, TEXT_DIM, generator=g)
    mask = (torch.arange(7)[None, :] < torch.tensor([7, 4])[:, None]).long()
    ctx2 = torch.randn(2, 5, TEXT2_DIM, generator=g)
    mask2 = (torch.arange(5)[None, :] < torch.tensor([3, 5])[:, None]).long()
    img = torch.randn(2, 3, IMAGE_DIM, generator=g) if image else torch.zeros(2, 3, IMAGE_DIM)
    return dict(hidden_states=x, timestep=t, encoder_hidden_states=ctx, encoder_attention_mask=mask,
                encoder_hidden_states_2=ctx2, encoder_attention_mask_2=mask2, image_embeds=img)


def forward(model, inputs):
    with torch.no_grad():
        return model(**inputs).sample


def processors(model):
    return [m.processor for m in model.modules() if hasattr(m, "set_processor")]


@pytest.mark.parametrize("image", [False, True], ids=["t2v", "i2v"])
def test_apply_matches_stock_and_restores_exact_objects(image):
    model = tiny_hunyuan15()
    inputs = tiny_inputs(image=image)
    originals = processors(model)
    expected = forward(model, inputs)

    handle = vidattn.apply(model)
    assert handle.replaced == ["transformer_blocks.0.attn", "transformer_blocks.1.attn"]
    assert all(isinstance(model.get_submodule(p).processor, vidattn.HunyuanVideo15AttnProcessor)
               for p in handle.replaced)
    assert handle.skipped == [("context_embedder.token_refiner.refiner_blocks.0.attn",
                               "no vidattn processor for AttnProcessor2_0")]
    torch.testing.assert_close(forward(model, inputs), expected, atol=1e-5, rtol=1e-5)

    assert vidattn.restore(model) == 2
    assert all(a is b for a, b in zip(processors(model), originals))
    torch.testing.assert_close(forward(model, inputs), expected, atol=0, rtol=0)


def test_text_mask_becomes_kv_lens(monkeypatch):
    model = tiny_hunyuan15()
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch)
    forward(model, tiny_inputs())  # T2V: the 3 image tokens are padding; valid text 7+3 and 4+5
    seen = [(c["k"][1], c["kv_lens"]) for c in spy.calls]
    assert len(seen) == 2
    for n_keys, lens in seen:
        assert n_keys == N_VIDEO + 3 + 5 + 7
        assert lens.tolist() == [N_VIDEO + 10, N_VIDEO + 9]


def test_padded_text_tokens_change_nothing():
    model = tiny_hunyuan15()
    vidattn.apply(model)
    inputs = tiny_inputs()
    out = forward(model, inputs)
    changed = dict(inputs)
    changed["encoder_hidden_states"] = inputs["encoder_hidden_states"].clone()
    changed["encoder_hidden_states"][1, 4:] = 100 * torch.randn(3, TEXT_DIM)
    changed["encoder_hidden_states_2"] = inputs["encoder_hidden_states_2"].clone()
    changed["encoder_hidden_states_2"][0, 3:] = 100 * torch.randn(2, TEXT2_DIM)
    torch.testing.assert_close(forward(model, changed), out, atol=1e-6, rtol=1e-6)


def _joint_call(text_mask):
    model = tiny_hunyuan15()
    attn = model.transformer_blocks[0].attn
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 12, 128, generator=g)
    text = torch.randn(2, 6, 128, generator=g)
    cos, sin = torch.randn(12, 64, generator=g), torch.randn(12, 64, generator=g)
    with torch.no_grad():
        expected = StockProcessor()(attn, hidden, text, attention_mask=text_mask, image_rotary_emb=(cos, sin))
        out = vidattn.HunyuanVideo15AttnProcessor()(attn, hidden, text, attention_mask=text_mask,
                                                    image_rotary_emb=(cos, sin))
    return out, expected


def test_padded_query_rows_match_stock_zeros(monkeypatch):
    """Padded text rows keep no key in the stock mask (SDPA gives zeros): the text-stream output, padded rows
    included, is the stock one; the kernel is called once with kv_lens."""
    spy = AttentionSpy(monkeypatch)
    mask = (torch.arange(6)[None, :] < torch.tensor([6, 2])[:, None]).long()
    (video, text), (video_ref, text_ref) = _joint_call(mask)
    seen = [c["kv_lens"] for c in spy.calls]
    torch.testing.assert_close(video, video_ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(text, text_ref, atol=1e-5, rtol=1e-5)
    assert [lens.tolist() for lens in seen] == [[18, 14]]


def test_non_prefix_text_mask_falls_back_to_diffusers_dispatch(fresh_warnings):
    mask = torch.ones(2, 6, dtype=torch.long)
    mask[1, 2] = 0  # a hole: not a prefix
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, expected = _joint_call(mask)
    for a, b in zip(out, expected):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)
    assert any(issubclass(w.category, vidattn.VidattnFallbackWarning) and "prefix" in str(w.message)
               for w in caught)


@pytest.mark.gpu
def test_gpu_hunyuan15_head_dim_128_bf16_takes_kernel_path(monkeypatch):
    model = tiny_hunyuan15(head_dim=128).to("cuda", torch.bfloat16)
    inputs = {k: (v.to("cuda", torch.bfloat16) if v.is_floating_point() else v.to("cuda"))
              for k, v in tiny_inputs(image=True).items()}
    expected = forward(model, inputs)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, inputs)
    calls = [c["explain"] for c in spy.calls]
    assert len(calls) == 2
    if is_hopper():
        assert calls == [None] * 2, calls
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.gpu
def test_gpu_hunyuan15_real_shape_joint_call_is_in_kernel_envelope():
    """HunyuanVideo 1.5 at its real heads x D (16 x 128), text padding as kv_lens: the kernel runs it."""
    if not is_hopper():
        pytest.skip("needs an sm_90 GPU")
    s = 30600 + 1000 + 256 + 729
    q, k, v = (torch.randn(2, s, 16, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    lens = torch.tensor([s, s - 700], device="cuda", dtype=torch.int32)
    assert vidattn.explain(q, k, v, kv_lens=lens) is None
