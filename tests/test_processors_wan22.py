"""Wan image-to-video pipelines under vidattn.apply: Wan 2.2 I2V A14B (two transformers, no image encoder)
and Wan 2.1 I2V (image keys in every cross-attention), tiny random components built offline."""
import pytest
import torch

import vidattn
from conftest import TINY_WAN_I2V, tiny_wan

diffusers = pytest.importorskip("diffusers")

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

# I2V transformers see noise latents (16) + the condition latents (16) + the frame mask (4 = VAE time stride).
I2V_CHANNELS = dict(in_channels=36, out_channels=16)


def processors(model):
    return [m.processor for m in model.modules() if hasattr(m, "set_processor")]


def tiny_clip():
    """A random CLIP vision tower (hidden 24 = the tiny transformer's image_dim; 32 px, patch 16: 5 tokens)."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    torch.manual_seed(2)
    config = CLIPVisionConfig(hidden_size=TINY_WAN_I2V["image_dim"], intermediate_size=32, num_hidden_layers=2,
                              num_attention_heads=2, image_size=32, patch_size=16)
    return CLIPImageProcessor(size={"shortest_edge": 32}, crop_size={"height": 32, "width": 32}), \
        CLIPVisionModel(config).eval()


def tiny_i2v_pipeline(transformer, transformer_2=None, boundary_ratio=None, clip=(None, None)):
    from diffusers import AutoencoderKLWan, FlowMatchEulerDiscreteScheduler, WanImageToVideoPipeline

    torch.manual_seed(0)
    vae = AutoencoderKLWan(base_dim=3, z_dim=16, dim_mult=[1, 1, 1, 1], num_res_blocks=1,
                           temperal_downsample=[False, True, True]).eval()
    pipe = WanImageToVideoPipeline(tokenizer=None, text_encoder=None, vae=vae,
                                   scheduler=FlowMatchEulerDiscreteScheduler(shift=7.0), image_processor=clip[0],
                                   image_encoder=clip[1], transformer=transformer, transformer_2=transformer_2,
                                   boundary_ratio=boundary_ratio)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def generate(pipe, **extra):
    g = torch.Generator().manual_seed(0)
    image = torch.rand(1, 3, 16, 16, generator=g)  # a (B, C, H, W) image in [0, 1]
    prompt, negative = torch.randn(1, 512, 32, generator=g), torch.randn(1, 512, 32, generator=g)
    return pipe(image=image, prompt_embeds=prompt, negative_prompt_embeds=negative, height=16, width=16,
                num_frames=5, num_inference_steps=2, guidance_scale=3.0, output_type="latent",
                generator=torch.Generator().manual_seed(0), **extra).frames


def test_wan22_i2v_a14b_both_transformers_match_stock_and_restore():
    pipe = tiny_i2v_pipeline(tiny_wan(seed=0, **I2V_CHANNELS), tiny_wan(seed=1, **I2V_CHANNELS),
                             boundary_ratio=0.9)
    originals = processors(pipe.transformer) + processors(pipe.transformer_2)
    expected = generate(pipe)
    handle = vidattn.apply(pipe)
    assert len(handle.replaced) == 8
    assert {p.split(".")[0] for p in handle.replaced} == {"transformer", "transformer_2"}
    ran = []
    for name in ("transformer", "transformer_2"):
        getattr(pipe, name).register_forward_hook(lambda *_, name=name: ran.append(name))
    out = generate(pipe)
    assert set(ran) == {"transformer", "transformer_2"}  # boundary 0.9: step 1 on transformer, step 2 on _2
    assert out.shape == expected.shape == (1, 16, 2, 2, 2)  # final latents (VAE decode skipped: not attention)
    assert abs(out - expected).max() < 1e-5
    assert vidattn.restore(pipe) == 8
    assert all(a is b for a, b in zip(processors(pipe.transformer) + processors(pipe.transformer_2), originals))


def test_wan21_i2v_image_keys_match_stock():
    image_cfg = {k: v for k, v in TINY_WAN_I2V.items() if k in ("image_dim", "added_kv_proj_dim")}
    pytest.importorskip("transformers")
    pipe = tiny_i2v_pipeline(tiny_wan(seed=0, **I2V_CHANNELS, **image_cfg), clip=tiny_clip())
    expected = generate(pipe)
    handle = vidattn.apply(pipe)
    # the CLIP image encoder's attention is not a diffusers processor: not touched
    assert len(handle.replaced) == 4 and all(p.startswith("transformer.") for p in handle.replaced)
    assert pipe.transformer.blocks[0].attn2.add_k_proj is not None  # the image-key branch is exercised
    out = generate(pipe)
    assert abs(out - expected).max() < 1e-5
