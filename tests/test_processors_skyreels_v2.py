"""vidattn.SkyReelsV2AttnProcessor against diffusers' SkyReelsV2AttnProcessor on tiny random SkyReels-V2
transformers (T2V, I2V, diffusion forcing with the block-causal mask), built offline."""
import warnings

import pytest
import torch

import vidattn
from family_helpers import AttentionSpy
from conftest import is_hopper

diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_skyreels_v2 import (  # noqa: E402
    SkyReelsV2AttnProcessor as StockProcessor,
)

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

TINY = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=16, out_channels=16,
            text_dim=32, freq_dim=32, ffn_dim=64, num_layers=2, cross_attn_norm=True, rope_max_seq_len=32)
TOKENS_PER_FRAME = 16  # 8 x 8 latent, patch 2 x 2


def tiny_skyreels(seed=0, **overrides):
    from diffusers import SkyReelsV2Transformer3DModel

    torch.manual_seed(seed)
    return SkyReelsV2Transformer3DModel(**{**TINY, **overrides}).eval()


def tiny_inputs(batch=1, frames=3, text=10, seed=1, per_frame_timesteps=False):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(batch, 16, frames, 8, 8, generator=g)
    t = (torch.randint(0, 1000, (batch, frames), generator=g) if per_frame_timesteps
         else torch.full((batch,), 500, dtype=torch.long))
    ctx = torch.randn(batch, text, TINY["text_dim"], generator=g)
    return x, t, ctx


def forward(model, *inputs, **kwargs):
    with torch.no_grad():
        return model(*inputs, **kwargs).sample


def processors(model):
    return [m.processor for m in model.modules() if hasattr(m, "set_processor")]


def test_apply_matches_stock_and_restores_exact_objects():
    model = tiny_skyreels()
    inputs = tiny_inputs(batch=2)
    originals = processors(model)
    assert all(type(p) is StockProcessor for p in originals)
    expected = forward(model, *inputs)

    handle = vidattn.apply(model)
    assert len(handle.replaced) == 4 and handle.skipped == []
    assert all(isinstance(p, vidattn.SkyReelsV2AttnProcessor) for p in processors(model))
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    assert "SkyReelsV2Transformer3DModel" in str(handle)

    assert vidattn.restore(model) == 4
    assert all(a is b for a, b in zip(processors(model), originals))
    torch.testing.assert_close(forward(model, *inputs), expected, atol=0, rtol=0)


def test_i2v_image_branch_matches_stock():
    model = tiny_skyreels(image_dim=24, added_kv_proj_dim=128)
    x, t, _ = tiny_inputs()
    g = torch.Generator().manual_seed(3)
    text = torch.randn(1, 512, 32, generator=g)  # the processor takes the last 512 context tokens as text
    image = torch.randn(1, 7, 24, generator=g)
    expected = forward(model, x, t, text, encoder_hidden_states_image=image)
    vidattn.apply(model)
    torch.testing.assert_close(forward(model, x, t, text, encoder_hidden_states_image=image), expected,
                               atol=1e-5, rtol=1e-5)


def test_fused_projections_match_stock():
    model = tiny_skyreels()
    inputs = tiny_inputs()
    model.fuse_qkv_projections()
    expected = forward(model, *inputs)
    vidattn.apply(model)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)


def test_diffusion_forcing_block_causal_mask_runs_per_block(monkeypatch):
    """num_frame_per_block=2 over 4 latent frames: the (1, 1, 64, 64) block-causal mask becomes two kernel
    calls per self-attention (rows 0-31 on keys 0-31, rows 32-63 on all 64 keys)."""
    model = tiny_skyreels(num_frame_per_block=2)
    inputs = tiny_inputs(batch=2, frames=4, per_frame_timesteps=True)
    expected = forward(model, *inputs, enable_diffusion_forcing=True)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch)
    out = forward(model, *inputs, enable_diffusion_forcing=True)
    seen = [(c["q"][1], c["k"][1], c["kv_lens"]) for c in spy.calls]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    n = 4 * TOKENS_PER_FRAME
    self_calls = [(sq, skv) for sq, skv, _ in seen if skv != 10]
    assert self_calls == [(n // 2, n // 2), (n // 2, n)] * 2
    assert len(seen) == 6 and all(lens is None for _, _, lens in seen)


def test_block_causal_mask_cache_and_inference_mode(monkeypatch):
    """The row-prefix test runs once per mask object (cached), is redone when the mask changes in place, and
    works on inference-mode tensors (no version counter: not cached)."""
    from vidattn.diffusers import _base

    calls = []
    real_equal = torch.equal
    monkeypatch.setattr(_base.torch, "equal", lambda a, b: calls.append(1) or real_equal(a, b))
    frames = torch.arange(4).repeat_interleave(3)
    mask = (frames[None, :] <= frames[:, None])[None, None]  # (1, 1, 12, 12), 4 blocks of 3 rows
    first = _base.row_prefix_runs(mask, 12, 12)
    assert first == ([(0, 3, 3), (3, 6, 6), (6, 9, 9), (9, 12, 12)], None) and len(calls) == 1
    assert _base.row_prefix_runs(mask, 12, 12) == first and len(calls) == 1
    mask[..., 5, 1] = False  # in place: re-checked, row 5 now has a hole
    assert _base.row_prefix_runs(mask, 12, 12)[0] is None and len(calls) == 2
    with torch.inference_mode():
        frozen = (frames[None, :] <= frames[:, None])[None, None]
        assert _base.row_prefix_runs(frozen, 12, 12) == first
        assert _base.row_prefix_runs(frozen, 12, 12) == first
    assert len(calls) == 4


def _self_attention_call(mask):
    model = tiny_skyreels()
    attn = model.blocks[0].attn1
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(2, 12, 128, generator=g)
    with torch.no_grad():
        expected = StockProcessor()(attn, hidden, None, attention_mask=mask)
        out = vidattn.SkyReelsV2AttnProcessor()(attn, hidden, None, attention_mask=mask)
    return out, expected


def test_row_prefix_mask_with_an_empty_run_matches_stock():
    lens = torch.tensor([0, 0, 3, 3, 3, 7, 7, 12, 12, 12, 12, 12])  # first rows keep no key: zeros, as SDPA
    mask = (torch.arange(12)[None, :] < lens[:, None])[None, None]
    out, expected = _self_attention_call(mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("kind", ["not_prefix", "float"])
def test_other_masks_fall_back_to_diffusers_dispatch(kind, fresh_warnings):
    mask = torch.ones(1, 1, 12, 12, dtype=torch.bool).tril()
    if kind == "not_prefix":
        mask[..., 5, 2] = False
    else:
        mask = torch.zeros(1, 1, 12, 12).masked_fill(~mask, float("-inf"))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, expected = _self_attention_call(mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert any(issubclass(w.category, vidattn.VidattnFallbackWarning) and "attention_mask" in str(w.message)
               for w in caught)


def test_unknown_modules_are_skipped_and_reported():
    class OtherProcessor:
        def __call__(self, attn, hidden_states, *args, **kwargs):
            return hidden_states

    class Other(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.processor = OtherProcessor()

        def set_processor(self, processor):
            self.processor = processor

    model = tiny_skyreels()
    model.extra = Other()
    handle = vidattn.apply(model)
    assert len(handle.replaced) == 4
    assert handle.skipped == [("extra", "no vidattn processor for OtherProcessor")]
    assert type(model.extra.processor) is OtherProcessor


@pytest.mark.gpu
@pytest.mark.parametrize("forcing", [False, True], ids=["t2v", "diffusion_forcing"])
def test_gpu_skyreels_head_dim_128_bf16_takes_kernel_path(forcing, monkeypatch):
    model = tiny_skyreels(attention_head_dim=128, num_frame_per_block=2 if forcing else 1).to("cuda", torch.bfloat16)
    x, t, ctx = (a.to("cuda") for a in tiny_inputs(batch=2, frames=4, text=40, per_frame_timesteps=forcing))
    x, ctx = x.bfloat16(), ctx.bfloat16()
    kwargs = dict(enable_diffusion_forcing=forcing)
    expected = forward(model, x, t, ctx, **kwargs)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, x, t, ctx, **kwargs)
    calls = [c["explain"] for c in spy.calls]
    assert len(calls) == (6 if forcing else 4)
    if is_hopper():
        assert calls == [None] * len(calls), calls
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)


@pytest.mark.gpu
def test_gpu_skyreels_real_shape_block_calls_are_in_kernel_envelope():
    """SkyReels-V2 14B (40 x 128) at 544x960x97 (51000 tokens, 25 latent frames of 2040): a diffusion-forcing
    block of 5 frames is a query slice on a key prefix; the kernel runs both views as they are."""
    if not is_hopper():
        pytest.skip("needs an sm_90 GPU")
    per_frame, s = 2040, 51000
    q, k, v = (torch.randn(1, s, 40, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    a, b = 5 * per_frame, 10 * per_frame  # the second block of 5 frames attends to the first 10 frames
    assert vidattn.explain(q[:, a:b], k[:, :b], v[:, :b]) is None
    assert vidattn.explain(q, k, v) is None
