"""vidattn.MochiAttnProcessor against diffusers' MochiAttnProcessor2_0; `vidattn.apply` on a model without
`set_attn_processor` (MochiAttention holds its processor as a plain attribute)."""
import pytest
import torch

import vidattn
from conftest import is_hopper
from family_helpers import (AttentionSpy, assert_restored, attention_processors, check_unknown_module_skipped,
                            envelope_reasons)

diffusers = pytest.importorskip("diffusers")
from diffusers.models.attention_processor import MochiAttnProcessor2_0  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning"),
              pytest.mark.filterwarnings("ignore:In CPU autocast:UserWarning")]  # diffusers' MochiRoPE on the CPU

TEXT = 8
VIDEO = 2 * 4 * 4  # latents (B, 4, 2, 8, 8), patch 2


def tiny_mochi(head_dim: int = 64, seed: int = 0):
    """2 layers (the last one context_pre_only: no to_add_out), 2 heads x head_dim."""
    from diffusers import MochiTransformer3DModel

    torch.manual_seed(seed)
    return MochiTransformer3DModel(patch_size=2, num_attention_heads=2, attention_head_dim=head_dim, num_layers=2,
                                   pooled_projection_dim=16, in_channels=4, text_embed_dim=32, time_embed_dim=16,
                                   max_sequence_length=TEXT).eval()


def tiny_inputs(batch=2, lens=(TEXT, 5), seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 4, 2, 8, 8, generator=g)
    ctx = torch.randn(batch, TEXT, 32, generator=g)
    t = torch.full((batch,), 500, dtype=torch.long)
    mask = (torch.arange(TEXT)[None, :] < torch.tensor(lens[:batch])[:, None]).long()
    return x, ctx, t, mask


def forward(model, x, ctx, t, mask):
    with torch.no_grad():
        return model(x, ctx, t, mask).sample


def test_model_has_no_set_attn_processor():
    model = tiny_mochi()
    assert not hasattr(model, "set_attn_processor")
    attn = model.transformer_blocks[0].attn1
    assert not hasattr(attn, "set_processor") and type(attn.processor) is MochiAttnProcessor2_0


def test_apply_sets_each_module_matches_stock_and_restores_exact_objects(monkeypatch):
    model = tiny_mochi()
    inputs = tiny_inputs()
    before = attention_processors(model)
    assert [type(p) for _, _, p in before] == [MochiAttnProcessor2_0] * 2
    expected = forward(model, *inputs)

    handle = vidattn.apply(model)
    assert handle.replaced == ["transformer_blocks.0.attn1", "transformer_blocks.1.attn1"] and handle.skipped == []
    assert all(type(p) is vidattn.MochiAttnProcessor for _, _, p in attention_processors(model))
    assert "MochiTransformer3DModel" in str(handle)
    spy = AttentionSpy(monkeypatch)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    # one batched call per layer (the stock processor loops over the batch): [video, text] with kv_lens
    assert len(spy.calls) == 2
    for call in spy.calls:
        assert call["q"] == (2, VIDEO + TEXT, 2, 64) and call["layout"] == "bshd"
        assert call["kv_lens"].tolist() == [VIDEO + TEXT, VIDEO + 5]

    assert vidattn.restore(model) == 2
    assert_restored(model, before)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=0, rtol=0)


def test_apply_on_a_pipeline_reaches_the_transformer():
    class Pipe:  # the part of DiffusionPipeline that apply reads
        def __init__(self, transformer):
            self.transformer = transformer
            self.components = {"transformer": transformer, "text_encoder": None, "scheduler": object()}

    pipe = Pipe(tiny_mochi())
    handle = vidattn.apply(pipe)
    assert handle.replaced == ["transformer.transformer_blocks.0.attn1", "transformer.transformer_blocks.1.attn1"]
    assert vidattn.restore(pipe) == 2
    assert all(type(p) is MochiAttnProcessor2_0 for _, _, p in attention_processors(pipe.transformer))


def test_processor_set_by_hand_restores_stock():
    model = tiny_mochi()
    inputs = tiny_inputs()
    expected = forward(model, *inputs)
    for block in model.transformer_blocks:
        block.attn1.processor = vidattn.MochiAttnProcessor()
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    assert vidattn.restore(model) == 2  # MochiAttention has no default processor class: ours names the stock one
    assert [type(p) for _, _, p in attention_processors(model)] == [MochiAttnProcessor2_0] * 2


# ------------------------------------------------------------------------------------- masks
@pytest.mark.parametrize("kind", ["prefix", "holes", "all_valid", "none_valid", "bool", "none"])
@pytest.mark.parametrize("block", [0, 1])  # block 1 is context_pre_only (no to_add_out)
def test_processor_matches_stock_for_any_prompt_mask(kind, block):
    model = tiny_mochi()
    attn = model.transformer_blocks[block].attn1
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, VIDEO, 128, generator=g)
    text = torch.randn(2, TEXT, 16, generator=g)
    cos, sin = torch.randn(VIDEO, 2, 32, generator=g), torch.randn(VIDEO, 2, 32, generator=g)
    mask = (torch.arange(TEXT)[None, :] < torch.tensor([6, 3])[:, None]).long()
    if kind == "holes":  # the stock loop keeps the valid tokens, in order, wherever they are
        mask = torch.tensor([[1, 0, 1, 1, 0, 0, 1, 0], [0, 0, 0, 1, 1, 0, 0, 0]])
    elif kind == "all_valid":
        mask = torch.ones(2, TEXT, dtype=torch.long)
    elif kind == "none_valid":
        mask[1] = 0
    elif kind == "bool":
        mask = mask.bool()
    elif kind == "none":  # no mask: every prompt token valid (the stock loop needs one: all ones for it)
        mask = torch.ones(2, TEXT, dtype=torch.long)
    with torch.no_grad():
        expected = MochiAttnProcessor2_0()(attn, hidden, text, attention_mask=mask, image_rotary_emb=(cos, sin))
        out = vidattn.MochiAttnProcessor()(attn, hidden, text, attention_mask=None if kind == "none" else mask,
                                           image_rotary_emb=(cos, sin))
    assert len(out) == 2 and out[1].shape == expected[1].shape
    for o, e in zip(out, expected):  # video and text outputs (dropped text rows: the stock zeros, projected)
        torch.testing.assert_close(o, e, atol=1e-5, rtol=1e-5)


def test_padded_text_tokens_change_nothing():
    model = tiny_mochi()
    x, ctx, t, mask = tiny_inputs()
    vidattn.apply(model)
    out = forward(model, x, ctx, t, mask)
    ctx2 = ctx.clone()
    ctx2[1, 5:] = torch.randn(TEXT - 5, 32) * 10
    torch.testing.assert_close(forward(model, x, ctx2, t, mask), out, atol=1e-6, rtol=1e-6)

def test_bf16_calls_are_inside_the_kernel_envelope(monkeypatch):
    """On the CPU in bf16 at Mochi's head dim 128: everything but the device says kernel."""
    model = tiny_mochi(head_dim=128).to(torch.bfloat16)
    x, ctx, t, mask = tiny_inputs()
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch)
    forward(model, x.bfloat16(), ctx.bfloat16(), t, mask)
    assert len(spy.calls) == 2 and envelope_reasons(spy.calls) == [None, None]


def test_unknown_modules_are_skipped_and_reported():
    check_unknown_module_skipped(tiny_mochi(), n_replaced=2)


# ------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_mochi_head_dim_128_bf16_takes_kernel_path(monkeypatch):
    model = tiny_mochi(head_dim=128).to("cuda", torch.bfloat16)
    x, ctx, t, mask = tiny_inputs()
    x, ctx, t, mask = x.to("cuda", torch.bfloat16), ctx.to("cuda", torch.bfloat16), t.to("cuda"), mask.to("cuda")
    expected = forward(model, x, ctx, t, mask)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, x, ctx, t, mask)
    assert len(spy.calls) == 2 and all(c["q"][-1] == 128 for c in spy.calls)
    if is_hopper():
        assert [c["explain"] for c in spy.calls] == [None, None]
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
