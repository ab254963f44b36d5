"""vidattn.WanAttnProcessor against diffusers' own WanAttnProcessor; apply/restore on models and pipelines."""
import warnings

import pytest
import torch

import vidattn
from family_helpers import AttentionSpy
from conftest import TINY_WAN_I2V, is_hopper, tiny_wan, tiny_wan_inputs, tiny_wan_pipeline

diffusers = pytest.importorskip("diffusers")
from diffusers.models.transformers.transformer_wan import WanAttnProcessor as StockWanAttnProcessor  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")


def processors(model):
    return [m.processor for m in model.modules() if hasattr(m, "set_processor")]


def forward(model, *inputs):
    with torch.no_grad():
        return model(*inputs).sample


def test_apply_on_model_matches_stock_and_restores_exact_objects():
    model = tiny_wan()
    inputs = tiny_wan_inputs(batch=2)
    originals = processors(model)
    assert all(type(p) is StockWanAttnProcessor for p in originals)
    expected = forward(model, *inputs)

    handle = vidattn.apply(model)
    assert len(handle.replaced) == 4 and handle.skipped == []
    assert handle.replaced[0] == "blocks.0.attn1"
    assert all(isinstance(p, vidattn.WanAttnProcessor) for p in processors(model))
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)

    text = str(handle)
    assert "4 attention modules use vidattn" in text and "WanTransformer3DModel" in text

    assert vidattn.restore(model) == 4
    assert all(a is b for a, b in zip(processors(model), originals))
    torch.testing.assert_close(forward(model, *inputs), expected, atol=0, rtol=0)


def test_handle_restore_and_double_apply():
    model = tiny_wan()
    originals = processors(model)
    first = vidattn.apply(model)
    second = vidattn.apply(model)  # harmless: everything is already vidattn
    assert second.replaced == [] and len(second.skipped) == 4
    assert all("already" in reason for _, reason in second.skipped)
    assert second.restore() == 4
    assert all(a is b for a, b in zip(processors(model), originals))
    assert first.restore() == 0  # the state it would restore was handed on to `second`
    assert vidattn.restore(model) == 0


def test_apply_on_pipeline_covers_both_transformers():
    pipe = tiny_wan_pipeline(two_transformers=True)
    gen_kwargs = dict(height=16, width=16, num_frames=5, num_inference_steps=2, guidance_scale=3.0,
                      output_type="np")
    g = torch.Generator().manual_seed(0)
    prompt_embeds, negative_embeds = torch.randn(1, 16, 32, generator=g), torch.randn(1, 16, 32, generator=g)

    def generate():
        return pipe(prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_embeds,
                    generator=torch.Generator().manual_seed(0), **gen_kwargs).frames

    pipe.set_progress_bar_config(disable=True)
    originals = processors(pipe.transformer) + processors(pipe.transformer_2)
    expected = generate()
    handle = vidattn.apply(pipe)
    assert len(handle.replaced) == 8
    assert {p.split(".")[0] for p in handle.replaced} == {"transformer", "transformer_2"}
    assert "transformer_2 (WanTransformer3DModel)" in str(handle)
    out = generate()
    assert out.shape == expected.shape == (1, 5, 16, 16, 3)
    assert abs(out - expected).max() < 1e-5
    assert vidattn.restore(pipe) == 8
    assert all(a is b for a, b in zip(processors(pipe.transformer) + processors(pipe.transformer_2), originals))


def test_set_attn_processor_directly():
    model = tiny_wan()
    inputs = tiny_wan_inputs()
    expected = forward(model, *inputs)
    model.set_attn_processor(vidattn.WanAttnProcessor())
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)
    # processors set by hand have no recorded original: restore gives the modules their default processor
    assert vidattn.restore(model) == 4
    assert all(type(p) is StockWanAttnProcessor for p in processors(model))


def test_i2v_image_branch_matches_stock():
    model = tiny_wan(**{k: v for k, v in TINY_WAN_I2V.items() if k in ("image_dim", "added_kv_proj_dim")})
    x, t, _ = tiny_wan_inputs()
    g = torch.Generator().manual_seed(3)
    text = torch.randn(1, 512, 32, generator=g)  # Wan's processor takes the last 512 context tokens as text
    image = torch.randn(1, 7, TINY_WAN_I2V["image_dim"], generator=g)
    with torch.no_grad():
        expected = model(x, t, text, encoder_hidden_states_image=image).sample
        vidattn.apply(model)
        out = model(x, t, text, encoder_hidden_states_image=image).sample
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)


def test_fused_projections_match_stock():
    model = tiny_wan()
    inputs = tiny_wan_inputs()
    model.fuse_qkv_projections()
    expected = forward(model, *inputs)
    vidattn.apply(model)
    torch.testing.assert_close(forward(model, *inputs), expected, atol=1e-5, rtol=1e-5)


def test_carries_diffusers_processor_attributes():
    model = tiny_wan()
    model.blocks[0].attn1.processor._parallel_config = "sentinel"
    vidattn.apply(model)
    assert model.blocks[0].attn1.processor._parallel_config == "sentinel"
    assert model.blocks[0].attn2.processor._parallel_config is None


# ------------------------------------------------------------------------------------- masks (processor level)
def _cross_attention_call(mask, batch=2):
    model = tiny_wan()
    attn = model.blocks[0].attn2
    g = torch.Generator().manual_seed(5)
    hidden = torch.randn(batch, 12, 128, generator=g)
    context = torch.randn(batch, 9, 128, generator=g)
    with torch.no_grad():
        expected = StockWanAttnProcessor()(attn, hidden, context, attention_mask=mask)
        out = vidattn.WanAttnProcessor()(attn, hidden, context, attention_mask=mask)
    return out, expected


@pytest.mark.parametrize("shape", [(2, 9), (2, 1, 1, 9)])
def test_key_padding_mask_becomes_kv_lens(shape, monkeypatch):
    spy = AttentionSpy(monkeypatch)
    keep = torch.arange(9)[None, :] < torch.tensor([9, 4])[:, None]
    out, expected = _cross_attention_call(keep.reshape(shape))
    seen = [c["kv_lens"] for c in spy.calls]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert len(seen) == 1 and seen[0].tolist() == [9, 4] and seen[0].dtype == torch.int32


@pytest.mark.parametrize("kind", ["holes", "float", "per_query", "3d"])
def test_other_masks_fall_back_to_diffusers_dispatch(kind, fresh_warnings):
    if kind == "holes":
        mask = torch.ones(2, 9, dtype=torch.bool)
        mask[1, 3] = False
    elif kind == "float":
        mask = torch.zeros(2, 1, 1, 9)
        mask[0, ..., 5:] = float("-inf")
    elif kind == "3d":  # diffusers gives (B, 1, Skv) to SDPA as is (broadcast over heads): kept that way
        mask = torch.arange(9)[None, None, :] < torch.tensor([9, 4])[:, None, None]
    else:
        mask = torch.rand(2, 1, 12, 9, generator=torch.Generator().manual_seed(0)) > 0.3
        mask[..., 0] = True
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out, expected = _cross_attention_call(mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    assert any(issubclass(w.category, vidattn.VidattnFallbackWarning) and "attention_mask" in str(w.message)
               for w in caught)


# ------------------------------------------------------------------------------------- unsupported models
class _OtherAttnProcessor:
    def __call__(self, attn, hidden_states, *args, **kwargs):
        return hidden_states


class _OtherAttention(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.processor = _OtherAttnProcessor()

    def set_processor(self, processor):
        self.processor = processor


class _UnknownModel(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = _OtherAttention()


def test_unknown_model_raises_naming_it():
    with pytest.raises(ValueError) as info:
        vidattn.apply(_UnknownModel())
    msg = str(info.value)
    assert "vidattn has no processor for _UnknownModel" in msg
    assert "_OtherAttnProcessor" in msg and "WanAttnProcessor" in msg.split("supported: ")[1]
    assert 'set_attention_backend("vidattn")' in msg  # the route for models whose processors dispatch


def test_a_model_held_back_by_its_users_backend_is_named_so():
    """Kandinsky 5 (a backend route) with a backend the user set: apply routes nothing, and the message says that
    (not that vidattn has no processor for it) with the reason."""
    from pipelines import registry

    import diffusers.models.attention_dispatch as ad

    b = registry.build("kandinsky5", "tiny", dtype=torch.float32)
    active = ad._AttentionBackendRegistry._active_backend  # set_attention_backend also sets diffusers' global one
    try:
        b.model.set_attention_backend("_native_math")
        with pytest.raises(ValueError) as info:
            vidattn.apply(b.model)
    finally:
        ad._AttentionBackendRegistry.set_active_backend(active)
    msg = str(info.value)
    assert msg.startswith("vidattn.apply routed no attention module of Kandinsky5Transformer3DModel"), msg
    assert "has no processor for" not in msg


def test_not_a_model_raises():
    with pytest.raises(TypeError, match="diffusers pipeline or a torch.nn.Module"):
        vidattn.apply(object())


def test_unknown_modules_are_skipped_and_reported():
    model = tiny_wan()
    model.extra = _OtherAttention()
    handle = vidattn.apply(model)
    assert len(handle.replaced) == 4
    assert handle.skipped == [("extra", "no vidattn processor for _OtherAttnProcessor")]
    assert "stock     1 x _OtherAttnProcessor: no vidattn route for test_processors._OtherAttnProcessor" in str(handle)
    assert type(model.extra.processor) is _OtherAttnProcessor


def test_register_processor_extends_apply():
    class MyProcessor(_OtherAttnProcessor):
        pass

    with pytest.raises(ValueError, match="ambiguous"):
        vidattn.register_processor("_OtherAttnProcessor", MyProcessor)
    vidattn.register_processor(_OtherAttnProcessor, MyProcessor)
    try:
        model = _UnknownModel()
        original = model.attn.processor
        handle = vidattn.apply(model)
        assert handle.replaced == ["attn"] and type(model.attn.processor) is MyProcessor
        vidattn.restore(model)
        assert model.attn.processor is original
    finally:
        from vidattn.diffusers import PROCESSORS, ROUTES
        from vidattn.diffusers.apply import stock_key
        PROCESSORS.pop(stock_key(_OtherAttnProcessor))
        ROUTES.pop(stock_key(_OtherAttnProcessor))


def test_import_vidattn_does_not_import_diffusers():
    import subprocess
    import sys

    # `import vidattn` and the op stay diffusers-free; `vidattn.apply` / the processors import vidattn.diffusers,
    # which registers the "vidattn" diffusers backend and so imports diffusers.
    code = "import sys, vidattn; vidattn.attention; vidattn.explain; assert 'diffusers' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_star_import_without_diffusers_takes_the_op():
    """`from vidattn import *` on a machine without diffusers gives the op and leaves the integration out; with
    diffusers it gives both."""
    import subprocess
    import sys

    without = ("import sys; sys.modules['diffusers'] = None\n"  # import diffusers now raises ImportError
               "from vidattn import *\n"
               "assert callable(attention) and callable(explain) and 'apply' not in dir()")
    subprocess.run([sys.executable, "-c", without], check=True)
    with_ = "from vidattn import *; import vidattn; assert apply is vidattn.apply and callable(WanAttnProcessor)"
    subprocess.run([sys.executable, "-c", with_], check=True)


# ------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
def test_gpu_tiny_wan_bf16_takes_kernel_path(monkeypatch):
    model = tiny_wan().to("cuda", torch.bfloat16)
    x, t, ctx = (a.to("cuda") for a in tiny_wan_inputs(batch=2, frames=5, size=16, text=40))
    x, ctx = x.bfloat16(), ctx.bfloat16()
    expected = forward(model, x, t, ctx)
    vidattn.apply(model)
    spy = AttentionSpy(monkeypatch, explain=True)
    out = forward(model, x, t, ctx)
    calls = [c["explain"] for c in spy.calls]
    assert len(calls) == 4
    if is_hopper():
        assert calls == [None] * 4, calls
    torch.testing.assert_close(out.float(), expected.float(), atol=5e-2, rtol=5e-2)
