"""vidattn.AllegroAttnProcessor against diffusers' AllegroAttnProcessor2_0. Allegro's head dim, 96, is outside the
kernel's envelope: the op runs SDPA and says why."""
import warnings

import pytest
import torch

import vidattn
from family_helpers import (AttentionSpy, assert_restored, attention_processors, check_unknown_module_skipped,
                            envelope_reasons)

diffusers = pytest.importorskip("diffusers")
from diffusers.models.attention_processor import AllegroAttnProcessor2_0  # noqa: E402
from diffusers.models.embeddings import get_3d_rotary_pos_embed_allegro  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

TEXT = 10
LENS = [10, 6]
VIDEO = 2 * 4 * 4


def tiny_allegro(seed: int = 0):
    """2 layers, 2 heads x 96 (Allegro's head dim), captions of width 32."""
    from diffusers import AllegroTransformer3DModel

    torch.manual_seed(seed)
    return AllegroTransformer3DModel(patch_size=2, patch_size_t=1, num_attention_heads=2, attention_head_dim=96,
                                     in_channels=4, out_channels=4, num_layers=2, cross_attention_dim=192,
                                     sample_height=8, sample_width=8, sample_frames=2, caption_channels=32).eval()


def allegro_rope(frames=2, grid=4):
    """What AllegroPipeline._prepare_rotary_positional_embeddings computes."""
    freqs_t, freqs_h, freqs_w, grid_t, grid_h, grid_w = get_3d_rotary_pos_embed_allegro(
        embed_dim=96, crops_coords=((0, 0), (grid, grid)), grid_size=(grid, grid), temporal_size=frames,
        interpolation_scale=(2.2, 2.0, 2.0))
    pos = torch.cartesian_prod(grid_t.long(), grid_h.long(), grid_w.long())
    pos = pos.reshape(-1, 3).transpose(0, 1).reshape(3, 1, -1).contiguous()
    return (freqs_t, freqs_h, freqs_w), tuple(pos)


def _to_cuda(obj):
    if isinstance(obj, (tuple, list)):
        return type(obj)(_to_cuda(x) for x in obj)
    return obj.to("cuda")


def tiny_inputs(batch=2, seed=1):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 4, 2, 8, 8, generator=g)
    ctx = torch.randn(batch, TEXT, 32, generator=g)
    t = torch.full((batch,), 500, dtype=torch.long)
    mask = (torch.arange(TEXT)[None, :] < torch.tensor(LENS[:batch])[:, None]).long()
    return x, ctx, t, mask


def forward(model, x, ctx, t, mask, rope):
    with torch.no_grad():
        return model(x, ctx, t, encoder_attention_mask=mask, image_rotary_emb=rope).sample


def test_apply_matches_stock_and_restores_exact_objects(monkeypatch):
    model = tiny_allegro()
    inputs = (*tiny_inputs(), allegro_rope())
    before = attention_processors(model)
    assert [type(p) for _, _, p in before] == [AllegroAttnProcessor2_0] * 4
    expected = forward(model, *inputs)

    handle = vidattn.apply(model)
    assert len(handle.replaced) == 4 and handle.skipped == []
    assert all(type(p) is vidattn.AllegroAttnProcessor for _, _, p in attention_processors(model))
    spy = AttentionSpy(monkeypatch)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    assert len(spy.calls) == 4
    for call, cross in zip(spy.calls, [False, True, False, True]):
        assert call["layout"] == "bhsd" and call["q"] == (2, 2, VIDEO, 96)
        assert (call["kv_lens"].tolist() if cross else call["kv_lens"]) == (LENS if cross else None)

    assert vidattn.restore(model) == 4
    assert_restored(model, before)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=0, rtol=0)


def test_head_dim_96_is_inside_the_envelope(monkeypatch):
    """On the CPU in bf16 (so the dtype passes): every call hands the kernel tensors it takes (D=96 runs on the D=128
    build, padded on the fly); only the device keeps it on SDPA here."""
    model = tiny_allegro().to(torch.bfloat16)
    x, ctx, t, mask = tiny_inputs()
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch)
    forward(model, x.bfloat16(), ctx.bfloat16(), t, mask, allegro_rope())
    reasons = envelope_reasons(spy.calls)
    assert len(reasons) == 4 and all(r is None for r in reasons), reasons
    q, k, v = spy.calls[0]["tensors"]
    assert q.shape[-1] == 96
    # explain() names the device first on a machine without a GPU; on a Hopper GPU the kernel runs
    reason = vidattn.explain(q, k, v, layout="bhsd")
    assert reason is None or "no CUDA GPU" in reason


def test_padded_text_tokens_change_nothing():
    model = tiny_allegro()
    x, ctx, t, mask = tiny_inputs()
    rope = allegro_rope()
    vidattn.apply(model)
    out = forward(model, x, ctx, t, mask, rope)
    ctx2 = ctx.clone()
    ctx2[1, LENS[1]:] = torch.randn(TEXT - LENS[1], 32) * 10
    torch.testing.assert_close(forward(model, x, ctx2, t, mask, rope), out, atol=1e-6, rtol=1e-6)


def test_processor_set_by_hand_restores_stock():
    model = tiny_allegro()
    inputs = (*tiny_inputs(), allegro_rope())
    expected = forward(model, *inputs)
    assert not hasattr(model, "set_attn_processor")  # as Mochi: set per module
    for block in model.transformer_blocks:
        block.attn1.set_processor(vidattn.AllegroAttnProcessor())
        block.attn2.set_processor(vidattn.AllegroAttnProcessor())
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    assert vidattn.restore(model) == 4
    assert [type(p) for _, _, p in attention_processors(model)] == [AllegroAttnProcessor2_0] * 4


@pytest.mark.parametrize("kind", ["holes", "soft_bias"])
def test_other_masks_run_the_stock_sdpa_call(kind, fresh_warnings, monkeypatch):
    model = tiny_allegro()
    attn = model.transformer_blocks[0].attn2
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 12, 192, generator=g)
    text = torch.randn(2, TEXT, 192, generator=g)
    keep = torch.arange(TEXT)[None, :] < torch.tensor([TEXT, 6])[:, None]
    keep[0, 2] = kind != "holes"
    mask = ((1 - keep.float()) * (-10000.0 if kind == "holes" else -3.0)).unsqueeze(1)
    spy = AttentionSpy(monkeypatch)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        expected = AllegroAttnProcessor2_0()(attn, hidden, text, attention_mask=mask)
        out = vidattn.AllegroAttnProcessor()(attn, hidden, text, attention_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert spy.calls == []
    assert any(issubclass(w.category, vidattn.VidattnFallbackWarning) and "attention_mask" in str(w.message)
               for w in caught)


def test_unknown_modules_are_skipped_and_reported():
    check_unknown_module_skipped(tiny_allegro(), n_replaced=4)


# ------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_allegro_head_dim_96_bf16_runs_the_kernel(monkeypatch):
    """Head dim 96 runs on the D=128 build, padded on the fly: every attention call is inside the envelope."""
    model = tiny_allegro().to("cuda", torch.bfloat16)
    x, ctx, t, mask = tiny_inputs()
    x, ctx, t, mask = x.to("cuda", torch.bfloat16), ctx.to("cuda", torch.bfloat16), t.to("cuda"), mask.to("cuda")
    rope = allegro_rope()
    rope = _to_cuda(rope)  # nested: ((cos, sin) per axis, ...), positions
    expected = forward(model, x, ctx, t, mask, rope)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, x, ctx, t, mask, rope)
    assert len(spy.calls) == 4
    assert all(c["explain"] is None for c in spy.calls), [c["explain"] for c in spy.calls]
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
