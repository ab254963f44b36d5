"""Tiny models of the diffusers video transformer classes vidattn routes beyond pipelines/families.py, with the
inputs of one forward: the CPU check that `vidattn.apply` reaches each family (tests/test_processors_families.py)
and that its output equals stock.

    from pipelines.zoo import ZOO, build_tiny
    model, inputs = build_tiny("ltx2")        # seeded random weights, fp32, CPU
    out = model(**inputs)[0]

Each entry: the diffusers class, a tiny config of the real structure (head dim 64 or 128 where the config allows, so
the processors hand the kernel shapes it takes), and the inputs its pipeline would pass (random tensors).
"""
from __future__ import annotations

from typing import Callable

import torch


def _g(seed):
    return torch.Generator().manual_seed(seed)


def _rn(g, *shape):
    return torch.randn(*shape, generator=g)


def _ltx2(g):
    cfg = dict(in_channels=8, out_channels=8, patch_size=1, patch_size_t=1, num_attention_heads=2,
               attention_head_dim=64, cross_attention_dim=128, audio_in_channels=8, audio_out_channels=8,
               audio_num_attention_heads=2, audio_attention_head_dim=64, audio_cross_attention_dim=128,
               num_layers=2, qk_norm="rms_norm_across_heads", caption_channels=32, rope_double_precision=False)
    b, f, h, w, af, L = 2, 2, 4, 4, 5, 8
    mask = torch.ones(b, L, dtype=torch.bool)
    mask[0, 5:] = False  # prompt padding in one sample: key padding -> kv_lens
    inputs = dict(hidden_states=_rn(g, b, f * h * w, 8), audio_hidden_states=_rn(g, b, af, 8),
                  encoder_hidden_states=_rn(g, b, L, 32), audio_encoder_hidden_states=_rn(g, b, L, 32),
                  timestep=torch.full((b,), 500.0), encoder_attention_mask=mask, audio_encoder_attention_mask=mask,
                  num_frames=f, height=h, width=w, audio_num_frames=af, fps=25.0)
    return "LTX2VideoTransformer3DModel", cfg, inputs


def _helios(g):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4,
               text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2, rope_dim=(16, 24, 24),
               has_multi_term_memory_patch=True, guidance_cross_attn=True, zero_history_timestep=True)
    b, c, f, h, w = 1, 4, 2, 8, 8
    inputs = dict(hidden_states=_rn(g, b, c, f, h, w), timestep=torch.tensor([500]),
                  encoder_hidden_states=_rn(g, b, 12, 16), indices_hidden_states=torch.ones(b, f),
                  indices_latents_history_short=torch.ones(b, f - 1), indices_latents_history_mid=torch.ones(b, f - 1),
                  indices_latents_history_long=torch.ones(b, (f - 1) * 4),
                  latents_history_short=_rn(g, b, c, f - 1, h, w), latents_history_mid=_rn(g, b, c, f - 1, h, w),
                  latents_history_long=_rn(g, b, c, (f - 1) * 4, h, w))
    return "HeliosTransformer3DModel", cfg, inputs


def _anyflow(g):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4,
               text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2, rope_max_seq_len=32)
    inputs = dict(hidden_states=_rn(g, 1, 2, 4, 8, 8), timestep=torch.full((1, 2), 500.0),
                  r_timestep=torch.full((1, 2), 250.0),
                  encoder_hidden_states=_rn(g, 1, 12, 16))
    return "AnyFlowTransformer3DModel", cfg, inputs


def _motif(g):
    cfg = dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=64, num_layers=1,
               num_single_layers=1, mlp_ratio=2.0, patch_size=2, patch_size_t=1, text_embed_dim=16,
               rope_axes_dim=(16, 24, 24))
    mask = torch.ones(2, 8, dtype=torch.bool)
    mask[1, 5:] = False
    inputs = dict(hidden_states=_rn(g, 2, 4, 2, 8, 8), timestep=torch.tensor([500, 500]),
                  encoder_hidden_states=_rn(g, 2, 8, 16), encoder_attention_mask=mask)
    return "MotifVideoTransformer3DModel", cfg, inputs


def _easyanimate(g):
    cfg = dict(num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4, patch_size=2,
               sample_width=8, sample_height=8, num_layers=2, mmdit_layers=2, time_embed_dim=16, text_embed_dim=16,
               text_embed_dim_t5=None)
    inputs = dict(hidden_states=_rn(g, 2, 4, 2, 8, 8), timestep=torch.tensor([500, 500]),
                  encoder_hidden_states=_rn(g, 2, 8, 16))
    return "EasyAnimateTransformer3DModel", cfg, inputs


def _cosmos(g):
    cfg = dict(in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=64, num_layers=2,
               mlp_ratio=2.0, text_embed_dim=16, adaln_lora_dim=4, max_size=(4, 32, 32), patch_size=(1, 2, 2),
               rope_scale=(2.0, 1.0, 1.0), concat_padding_mask=False, extra_pos_embed_type="learnable")
    inputs = dict(hidden_states=_rn(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500.0]),
                  encoder_hidden_states=_rn(g, 1, 12, 16), fps=30)
    return "CosmosTransformer3DModel", cfg, inputs


def _kandinsky5(g):
    cfg = dict(in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, out_visual_dim=4, patch_size=(1, 2, 2),
               model_dim=128, ff_dim=64, num_text_blocks=1, num_visual_blocks=2, axes_dims=(16, 24, 24))
    inputs = dict(hidden_states=_rn(g, 1, 2, 8, 8, 4), encoder_hidden_states=_rn(g, 1, 8, 16),
                  timestep=torch.tensor([500.0]), pooled_projections=_rn(g, 1, 8),
                  visual_rope_pos=(torch.arange(2), torch.arange(4), torch.arange(4)),
                  text_rope_pos=torch.arange(8))
    return "Kandinsky5Transformer3DModel", cfg, inputs


def _wan_vace(g):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4,
               text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2, rope_max_seq_len=32, vace_layers=[0],
               vace_in_channels=8)
    inputs = dict(hidden_states=_rn(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500]),
                  encoder_hidden_states=_rn(g, 1, 12, 16), control_hidden_states=_rn(g, 1, 8, 2, 8, 8))
    return "WanVACETransformer3DModel", cfg, inputs


def _chronoedit(g):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=4, out_channels=4,
               text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2, rope_max_seq_len=32)
    inputs = dict(hidden_states=_rn(g, 1, 4, 2, 8, 8), timestep=torch.tensor([500]),
                  encoder_hidden_states=_rn(g, 1, 12, 16))
    return "ChronoEditTransformer3DModel", cfg, inputs


def _minimax_h3(g):
    from .registry import Geo, _in_minimax_h3

    cfg = dict(num_attention_heads=2, attention_head_dim=64, hidden_size=96, num_layers=2, num_refiner_layers=1,
               ffn_dim=64, in_channels=4, audio_in_channels=6, patch_size=(1, 2, 2), text_dim=8, freq_dim=8,
               time_embed_hidden_dim=24, time_embed_dim=16, rope_freq_dim=8)
    # the registry's packing ([4 text, 6 audio, 8 video] rows: 2 latent frames of 4x4 patched 2x2)
    return "MiniMaxH3Transformer3DModel", cfg, _in_minimax_h3(cfg, Geo(1, 2, 4, 4, 4), g)


def _cosmos3(g):
    cfg = dict(head_dim=64, hidden_act="relu2", hidden_size=128, intermediate_size=64, latent_channel=2,
               latent_patch_size=1, num_attention_heads=2, num_hidden_layers=2, num_key_value_heads=1,
               patch_latent_dim=2, qk_norm_for_text=False, rms_norm_eps=1e-5, rope_axes_dim=[16, 8, 8],
               rope_theta=1e4, vocab_size=32)
    h = w = 2
    nv = h * w
    seq = 3 + nv
    idx = torch.arange(3, seq)
    inputs = dict(input_ids=torch.tensor([1, 2, 3]), text_indexes=torch.tensor([0, 1, 2]),
                  position_ids=torch.zeros((3, seq), dtype=torch.long), und_len=3, sequence_length=seq,
                  vision_tokens=[_rn(g, 1, 2, 1, h, w)], vision_token_shapes=[(1, h, w)],
                  vision_sequence_indexes=idx, vision_mse_loss_indexes=idx, vision_timesteps=torch.ones(nv),
                  vision_noisy_frame_indexes=[torch.tensor([0])])
    return "Cosmos3OmniTransformer", cfg, inputs


def _wan_animate(g):
    cfg = dict(patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=64, in_channels=12, latent_channels=4,
               out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2, image_dim=16, rope_max_seq_len=32,
               motion_encoder_channel_sizes={"4": 16, "8": 16, "16": 16}, motion_encoder_size=16,
               motion_style_dim=8, motion_dim=4, motion_encoder_dim=16, face_encoder_hidden_dim=16,
               face_encoder_num_heads=2, inject_face_latents_blocks=2)
    f = 20  # the face encoder's 77-frame segment maps onto 21 latent frames: (f + 1) must be 21
    inputs = dict(hidden_states=_rn(g, 1, 12, f + 1, 8, 8), timestep=torch.tensor([500]),
                  encoder_hidden_states=_rn(g, 1, 12, 16), encoder_hidden_states_image=_rn(g, 1, 12, 16),
                  pose_hidden_states=_rn(g, 1, 4, f, 8, 8), face_pixel_values=_rn(g, 1, 3, 77, 16, 16))
    return "WanAnimateTransformer3DModel", cfg, inputs


# name -> (builder, attention modules the route should reach: "kernel" / "backend" counts are checked by the test)
ZOO: dict[str, Callable] = {
    "ltx2": _ltx2, "helios": _helios, "anyflow": _anyflow, "motif_video": _motif, "easyanimate": _easyanimate,
    "cosmos": _cosmos, "kandinsky5": _kandinsky5, "wan_vace": _wan_vace, "chronoedit": _chronoedit,
    "minimax_h3": _minimax_h3, "cosmos3": _cosmos3, "wan_animate": _wan_animate,
}


def build_tiny(name: str, seed: int = 0):
    """(model, inputs) for one tiny forward of the family `name` (fp32, CPU, seeded random weights)."""
    import diffusers

    cls_name, cfg, inputs = ZOO[name](_g(seed + 1))
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        model = getattr(diffusers, cls_name)(**cfg)
    return model.eval().requires_grad_(False), inputs
