"""vidattn's CogVideoX processors against diffusers' CogVideoXAttnProcessor2_0 / FusedCogVideoXAttnProcessor2_0."""
import warnings

import pytest
import torch

import vidattn
from conftest import is_hopper
from family_helpers import (AttentionSpy, assert_restored, attention_processors, check_unknown_module_skipped,
                            envelope_reasons)

diffusers = pytest.importorskip("diffusers")
from diffusers.models.attention_processor import (  # noqa: E402
    CogVideoXAttnProcessor2_0,
    FusedCogVideoXAttnProcessor2_0,
)
from diffusers.models.embeddings import get_3d_rotary_pos_embed  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

TEXT = 8  # max_text_seq_length: the text block in front of the video tokens


def tiny_cogvideox(rope: bool = True, head_dim: int = 64, seed: int = 0):
    """2 layers, 2 heads x head_dim; latents (B, 3 frames, 4 ch, 8, 8) -> 3 x 4 x 4 = 48 video tokens + 8 text.
    rope=True is CogVideoX-5B's setup (RoPE in the processor), rope=False 2B's (sincos position embedding)."""
    from diffusers import CogVideoXTransformer3DModel

    torch.manual_seed(seed)
    return CogVideoXTransformer3DModel(
        num_attention_heads=2, attention_head_dim=head_dim, in_channels=4, out_channels=4, time_embed_dim=16,
        text_embed_dim=32, num_layers=2, sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
        max_text_seq_length=TEXT, use_rotary_positional_embeddings=rope,
    ).eval()


def tiny_inputs(batch=2, rope=True, head_dim=64, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 3, 4, 8, 8, generator=g)
    ctx = torch.randn(batch, TEXT, 32, generator=g)
    t = torch.full((batch,), 500, dtype=torch.long)
    emb = None
    if rope:  # what CogVideoXPipeline._prepare_rotary_positional_embeddings computes (CogVideoX 1.0)
        emb = get_3d_rotary_pos_embed(embed_dim=head_dim, crops_coords=((0, 0), (4, 4)), grid_size=(4, 4),
                                      temporal_size=3)
    return x, ctx, t, emb


def forward(model, x, ctx, t, emb):
    with torch.no_grad():
        return model(x, ctx, t, image_rotary_emb=emb).sample


@pytest.mark.parametrize("rope", [True, False])
def test_apply_matches_stock_and_restores_exact_objects(rope, monkeypatch):
    model = tiny_cogvideox(rope)
    inputs = tiny_inputs(rope=rope)
    before = attention_processors(model)
    assert [type(p) for _, _, p in before] == [CogVideoXAttnProcessor2_0] * 2
    expected = forward(model, *inputs)

    handle = vidattn.apply(model)
    assert handle.replaced == ["transformer_blocks.0.attn1", "transformer_blocks.1.attn1"] and handle.skipped == []
    assert all(type(p) is vidattn.CogVideoXAttnProcessor for _, _, p in attention_processors(model))
    assert "CogVideoXTransformer3DModel" in str(handle)
    spy = AttentionSpy(monkeypatch)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    # joint text + video attention, SDPA's (B, H, S, D) layout, no mask
    assert [(c["q"], c["layout"], c["kv_lens"]) for c in spy.calls] == [((2, 2, TEXT + 48, 64), "bhsd", None)] * 2

    assert vidattn.restore(model) == 2
    assert_restored(model, before)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=0, rtol=0)


def test_fused_projections_match_stock():
    model = tiny_cogvideox()
    inputs = tiny_inputs()
    model.fuse_qkv_projections()
    before = attention_processors(model)
    assert [type(p) for _, _, p in before] == [FusedCogVideoXAttnProcessor2_0] * 2
    expected = forward(model, *inputs)
    handle = vidattn.apply(model)
    assert len(handle.replaced) == 2
    assert all(type(p) is vidattn.FusedCogVideoXAttnProcessor for _, _, p in attention_processors(model))
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    vidattn.restore(model)
    assert_restored(model, before)


def test_set_attn_processor_by_hand_restores_stock():
    model = tiny_cogvideox()
    inputs = tiny_inputs(batch=1)
    expected = forward(model, *inputs)
    model.set_attn_processor(vidattn.CogVideoXAttnProcessor())
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    # diffusers' Attention has no default processor class: the vidattn processor names its stock one
    assert vidattn.restore(model) == 2
    assert [type(p) for _, _, p in attention_processors(model)] == [CogVideoXAttnProcessor2_0] * 2


# ------------------------------------------------------------------------------------- masks (processor level)
def _joint_call(mask, text=None, seed=5):
    model = tiny_cogvideox()
    attn = model.transformer_blocks[0].attn1
    g = torch.Generator().manual_seed(seed)
    hidden = torch.randn(2, 48, 128, generator=g)
    text = torch.randn(2, TEXT, 128, generator=g) if text is None else text
    emb = tiny_inputs()[3]
    with torch.no_grad():
        expected = CogVideoXAttnProcessor2_0()(attn, hidden, text, attention_mask=mask, image_rotary_emb=emb)
        out = vidattn.CogVideoXAttnProcessor()(attn, hidden, text, attention_mask=mask, image_rotary_emb=emb)
    for o, e in zip(out, expected):  # (video, text) outputs
        torch.testing.assert_close(o, e, atol=1e-5, rtol=1e-5)
    return out


def test_key_prefix_mask_becomes_kv_lens(monkeypatch):
    spy = AttentionSpy(monkeypatch)
    keep = torch.arange(TEXT + 48)[None, :] < torch.tensor([TEXT + 48, TEXT + 20])[:, None]
    _joint_call(keep)
    assert len(spy.calls) == 1 and spy.calls[0]["kv_lens"].tolist() == [TEXT + 48, TEXT + 20]


def test_text_padding_mask_is_honoured_through_the_fallback(fresh_warnings):
    # Text padding in a joint [text, video] sequence keeps keys that are not a prefix: the stock SDPA call runs.
    keep = torch.ones(2, TEXT + 48, dtype=torch.bool)
    keep[1, 5:TEXT] = False
    g = torch.Generator().manual_seed(7)
    text = torch.randn(2, TEXT, 128, generator=g)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        video, _ = _joint_call(keep, text)
    assert any(issubclass(w.category, vidattn.VidattnFallbackWarning) and "prefix" in str(w.message)
               for w in caught)
    text2 = text.clone()
    text2[1, 5:] = torch.randn(TEXT - 5, 128, generator=g) * 10  # change only the padded text tokens
    video2, _ = _joint_call(keep, text2)
    torch.testing.assert_close(video2, video, atol=1e-6, rtol=1e-6)

def test_bf16_calls_are_inside_the_kernel_envelope(monkeypatch):
    """On the CPU in bf16: everything but the device says kernel (head dim 64, strides, alignment)."""
    model = tiny_cogvideox().to(torch.bfloat16)
    x, ctx, t, emb = tiny_inputs()
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch)
    forward(model, x.bfloat16(), ctx.bfloat16(), t, emb)
    assert len(spy.calls) == 2 and envelope_reasons(spy.calls) == [None, None]


def test_unknown_modules_are_skipped_and_reported():
    check_unknown_module_skipped(tiny_cogvideox(), n_replaced=2)


# ------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_cogvideox_head_dim_64_bf16_takes_kernel_path(monkeypatch):
    model = tiny_cogvideox().to("cuda", torch.bfloat16)
    x, ctx, t, emb = tiny_inputs()
    x, ctx, t = x.to("cuda", torch.bfloat16), ctx.to("cuda", torch.bfloat16), t.to("cuda")
    emb = tuple(e.to("cuda") for e in emb)
    expected = forward(model, x, ctx, t, emb)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, x, ctx, t, emb)
    assert len(spy.calls) == 2 and all(c["q"][-1] == 64 for c in spy.calls)
    if is_hopper():
        assert [c["explain"] for c in spy.calls] == [None, None]
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)


def test_consisid_main_attention_runs_the_cogvideox_processor_and_perceivers_stay_stock(monkeypatch):
    """ConsisID (docs/support.md row 14): its blocks' attention is CogVideoX's processor, routed to vidattn's; the face
    perceivers (PerceiverCrossAttention, a matmul + softmax module and no processor) stay stock. A tiny model with the
    face branch on: every block's joint attention goes through vidattn.attention, the output equals stock's."""
    from diffusers import ConsisIDTransformer3DModel

    torch.manual_seed(0)
    # (LFE_output_dim must be the perceivers' kv width, 2/3 of the 128 inner dim; LFE_depth a multiple of LFE_num_scale)
    model = ConsisIDTransformer3DModel(
        num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4, time_embed_dim=16,
        text_embed_dim=32, num_layers=2, sample_width=8, sample_height=8, sample_frames=9, patch_size=2,
        max_text_seq_length=TEXT, use_rotary_positional_embeddings=True, is_train_face=True, cross_attn_interval=1,
        cross_attn_dim_head=16, cross_attn_num_heads=2, LFE_id_dim=24, LFE_vit_dim=16, LFE_depth=5, LFE_dim_head=8,
        LFE_num_heads=2, LFE_num_id_token=2, LFE_num_querie=4, LFE_output_dim=85, LFE_ff_mult=1, LFE_num_scale=5,
    ).eval()
    x, ctx, t, emb = tiny_inputs()
    g = torch.Generator().manual_seed(2)
    face = dict(id_cond=torch.randn(2, 24, generator=g), id_vit_hidden=[torch.randn(2, 5, 16, generator=g)] * 5)

    def run():
        with torch.no_grad():
            return model(x, ctx, t, image_rotary_emb=emb, **face).sample

    before = attention_processors(model)
    assert [type(p) for _, _, p in before] == [CogVideoXAttnProcessor2_0] * 2
    assert len(model.perceiver_cross_attention) == 2
    expected = run()
    handle = vidattn.apply(model)
    assert handle.replaced == ["transformer_blocks.0.attn1", "transformer_blocks.1.attn1"] and handle.skipped == []
    spy = AttentionSpy(monkeypatch)
    out = run()
    assert [(c["q"], c["layout"]) for c in spy.calls] == [((2, 2, TEXT + 48, 64), "bhsd")] * 2
    with torch.no_grad():  # the face branch (the perceivers) is live in this model: another face moves the output
        other = model(x, ctx, t, image_rotary_emb=emb, id_cond=-face["id_cond"], id_vit_hidden=face["id_vit_hidden"])
        assert not torch.allclose(other.sample, out, atol=1e-3)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert vidattn.restore(model) == 2
    assert_restored(model, before)
