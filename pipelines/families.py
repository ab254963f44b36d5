"""Every video DiT family vidattn supports, built offline for one transformer forward.

For each family: the real published transformer config (written out below, with the checkpoint it mirrors),
a tiny config of the same structure for CPU tests, the default video size of the family's diffusers pipeline,
and a builder of the inputs the pipeline hands the transformer at that size: latents, timestep, seeded random
text embeddings of the real text encoder's width and length, the masks the pipeline builds, and the RoPE tables
where the pipeline (not the transformer) computes them (CogVideoX, Allegro; computed by the pipeline's own
method). The batch is what one transformer call of the default pipeline gets: 2 where the pipeline batches
classifier-free guidance (CogVideoX, LTX-Video, Mochi, Allegro), 1 where it runs the two branches as separate
calls (Wan, SkyReels-V2, HunyuanVideo 1.5) or has no CFG (HunyuanVideo: embedded guidance).

    from pipelines.families import build
    built = build("hunyuan_video", "default", device="cuda", dtype=torch.bfloat16)
    out = built.forward()              # one transformer forward (no grad), the output tensor
    python3 -m pipelines.families      # table: tokens, params, estimated H200 time and memory per family

Random weights: the outputs mean nothing, but every tensor has the real shape and every forward does the
real work, which is what attention timings need. Nothing is downloaded.
"""
from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Callable

import torch

# ------------------------------------------------------------------------------------------------ configs
# Real configs: each is the transformer/config.json of the named diffusers checkpoint (written from the
# published config; keys the class defaults identically are included where they define the architecture).

# Wan-AI/Wan2.1-T2V-1.3B-Diffusers and -14B-Diffusers: pipelines/wan.py holds them.
from .wan import TINY_TRANSFORMER as _WAN_TINY  # noqa: E402
from .wan import WAN21_T2V_1_3B, WAN21_T2V_14B, _cast_like_from_pretrained  # noqa: E402

# Skywork/SkyReels-V2-DF-1.3B-540P-Diffusers: the Wan 1.3B shape (30 layers, 12 x 128, ffn 8960). The forward is
# the T2V pipeline's (one timestep per sample, no fps embedding: inject_sample_info off, full-sequence
# attention); the diffusion-forcing timestep matrix changes the modulation, not the attention work.
SKYREELS_V2_1_3B = {
    "patch_size": [1, 2, 2], "num_attention_heads": 12, "attention_head_dim": 128, "in_channels": 16,
    "out_channels": 16, "text_dim": 4096, "freq_dim": 256, "ffn_dim": 8960, "num_layers": 30,
    "cross_attn_norm": True, "qk_norm": "rms_norm_across_heads", "eps": 1e-6, "image_dim": None,
    "added_kv_proj_dim": None, "rope_max_seq_len": 1024, "pos_embed_seq_len": None,
    "inject_sample_info": False, "num_frame_per_block": 1,
}

# hunyuanvideo-community/HunyuanVideo (the diffusers port of tencent/HunyuanVideo, 13B):
# 20 dual-stream + 40 single-stream blocks, 24 heads x 128, Llama text (4096) + CLIP-L pooled (768).
HUNYUAN_VIDEO = {
    "in_channels": 16, "out_channels": 16, "num_attention_heads": 24, "attention_head_dim": 128,
    "num_layers": 20, "num_single_layers": 40, "num_refiner_layers": 2, "mlp_ratio": 4.0, "patch_size": 2,
    "patch_size_t": 1, "qk_norm": "rms_norm", "guidance_embeds": True, "text_embed_dim": 4096,
    "pooled_projection_dim": 768, "rope_theta": 256.0, "rope_axes_dim": [16, 56, 56],
    "image_condition_type": None,
}

# hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v (8.3B): 54 double-stream blocks, 16 heads x 128,
# Qwen2.5-VL text (3584), ByT5 glyph text (1472), SigLIP image tokens (1152; zeros for T2V), latents 32 ch
# (+32 condition + 1 mask channels in), VAE 16x spatial, patch 1.
HUNYUAN_VIDEO15_480P_T2V = {
    "in_channels": 65, "out_channels": 32, "num_attention_heads": 16, "attention_head_dim": 128,
    "num_layers": 54, "num_refiner_layers": 2, "mlp_ratio": 4.0, "patch_size": 1, "patch_size_t": 1,
    "qk_norm": "rms_norm", "text_embed_dim": 3584, "text_embed_2_dim": 1472, "image_embed_dim": 1152,
    "rope_theta": 256.0, "rope_axes_dim": [16, 56, 56], "target_size": 640, "task_type": "t2v",
    "use_meanflow": False,
}

# THUDM/CogVideoX-5b: 42 layers, 48 heads x 64, RoPE (computed by the pipeline), T5 text 226 tokens.
COGVIDEOX_5B = {
    "num_attention_heads": 48, "attention_head_dim": 64, "in_channels": 16, "out_channels": 16,
    "flip_sin_to_cos": True, "freq_shift": 0, "time_embed_dim": 512, "ofs_embed_dim": None, "text_embed_dim": 4096,
    "num_layers": 42, "dropout": 0.0, "attention_bias": True, "sample_width": 90, "sample_height": 60,
    "sample_frames": 49, "patch_size": 2, "patch_size_t": None, "temporal_compression_ratio": 4,
    "max_text_seq_length": 226, "activation_fn": "gelu-approximate", "timestep_activation_fn": "silu",
    "norm_elementwise_affine": True, "norm_eps": 1e-5, "spatial_interpolation_scale": 1.875,
    "temporal_interpolation_scale": 1.0, "use_rotary_positional_embeddings": True,
    "use_learned_positional_embeddings": False, "patch_bias": True,
}

# Lightricks/LTX-Video (0.9.x, 2B): 28 layers, 32 heads x 64, 128 latent channels (VAE 32x spatial, 8x time),
# patch 1, T5 text 128 tokens with the prompt mask.
LTX_VIDEO_09 = {
    "in_channels": 128, "out_channels": 128, "patch_size": 1, "patch_size_t": 1, "num_attention_heads": 32,
    "attention_head_dim": 64, "cross_attention_dim": 2048, "num_layers": 28, "activation_fn": "gelu-approximate",
    "qk_norm": "rms_norm_across_heads", "norm_elementwise_affine": False, "norm_eps": 1e-6,
    "caption_channels": 4096, "attention_bias": True, "attention_out_bias": True,
}

# genmo/mochi-1-preview (10B): 48 layers, 24 heads x 128 (text stream 1536 wide), 12 latent channels (VAE 8x
# spatial, 6x time), T5 text 256 tokens with the prompt mask.
MOCHI_1 = {
    "patch_size": 2, "num_attention_heads": 24, "attention_head_dim": 128, "num_layers": 48,
    "pooled_projection_dim": 1536, "in_channels": 12, "out_channels": None, "qk_norm": "rms_norm",
    "text_embed_dim": 4096, "time_embed_dim": 256, "activation_fn": "swiglu", "max_sequence_length": 256,
}

# rhymes-ai/Allegro (2.8B): 32 layers, 24 heads x 96 (outside the kernel: falls back by design), T5 text 512.
ALLEGRO = {
    "patch_size": 2, "patch_size_t": 1, "num_attention_heads": 24, "attention_head_dim": 96, "in_channels": 4,
    "out_channels": 4, "num_layers": 32, "dropout": 0.0, "cross_attention_dim": 2304, "attention_bias": True,
    "sample_height": 90, "sample_width": 160, "sample_frames": 22, "activation_fn": "gelu-approximate",
    "norm_elementwise_affine": False, "norm_eps": 1e-6, "caption_channels": 4096, "interpolation_scale_h": 2.0,
    "interpolation_scale_w": 2.0, "interpolation_scale_t": 2.2,
}

# Lightricks/LTX-2 (19B, audio + video): the class defaults are this checkpoint's transformer config. 48 blocks;
# video 32 heads x 128 (cross-attention to 4096-wide text), audio 32 heads x 64 (2048); Gemma-3 text (3840 wide,
# 1024 tokens after the connectors), six attentions per block (video/audio self, video/audio->text, a2v, v2a).
LTX2_19B = {
    "in_channels": 128, "out_channels": 128, "patch_size": 1, "patch_size_t": 1, "num_attention_heads": 32,
    "attention_head_dim": 128, "cross_attention_dim": 4096, "audio_in_channels": 128, "audio_out_channels": 128,
    "audio_num_attention_heads": 32, "audio_attention_head_dim": 64, "audio_cross_attention_dim": 2048,
    "num_layers": 48, "qk_norm": "rms_norm_across_heads", "caption_channels": 3840, "rope_type": "interleaved",
}

# Tiny configs: same classes and structure (RoPE splits, qk norms, masks), CPU-sized.
TINY = {
    "wan": _WAN_TINY,
    "skyreels_v2": {**SKYREELS_V2_1_3B, "num_attention_heads": 2, "attention_head_dim": 64, "text_dim": 32,
                    "freq_dim": 32, "ffn_dim": 64, "num_layers": 2, "rope_max_seq_len": 32},
    "hunyuan_video": {**HUNYUAN_VIDEO, "in_channels": 4, "out_channels": 4, "num_attention_heads": 2,
                      "attention_head_dim": 64, "num_layers": 1, "num_single_layers": 1, "num_refiner_layers": 1,
                      "mlp_ratio": 2.0, "text_embed_dim": 32, "pooled_projection_dim": 16,
                      "rope_axes_dim": [16, 24, 24]},
    "hunyuan_video15": {**HUNYUAN_VIDEO15_480P_T2V, "in_channels": 9, "out_channels": 4, "num_attention_heads": 2,
                        "attention_head_dim": 64, "num_layers": 2, "num_refiner_layers": 1, "mlp_ratio": 2.0,
                        "text_embed_dim": 32, "text_embed_2_dim": 24, "image_embed_dim": 16,
                        "rope_axes_dim": [16, 24, 24]},
    "cogvideox": {**COGVIDEOX_5B, "num_attention_heads": 2, "in_channels": 4, "out_channels": 4,
                  "time_embed_dim": 16, "text_embed_dim": 32, "num_layers": 2, "sample_width": 8,
                  "sample_height": 8, "sample_frames": 9, "max_text_seq_length": 8},
    "ltx": {**LTX_VIDEO_09, "in_channels": 8, "out_channels": 8, "num_attention_heads": 2,
            "cross_attention_dim": 128, "num_layers": 2, "caption_channels": 32},
    "mochi": {**MOCHI_1, "num_attention_heads": 2, "attention_head_dim": 64, "num_layers": 2,
              "pooled_projection_dim": 16, "in_channels": 4, "text_embed_dim": 32, "time_embed_dim": 16,
              "max_sequence_length": 8},
    "allegro": {**ALLEGRO, "num_attention_heads": 2, "num_layers": 2, "cross_attention_dim": 192,
                "sample_height": 8, "sample_width": 8, "sample_frames": 2, "caption_channels": 32},
}
TINY["ltx2"] = {**LTX2_19B, "in_channels": 8, "out_channels": 8, "num_attention_heads": 2, "cross_attention_dim": 256,
                "audio_in_channels": 8, "audio_out_channels": 8, "audio_num_attention_heads": 2,
                "audio_cross_attention_dim": 128, "num_layers": 2, "caption_channels": 32,
                "rope_double_precision": False}
TINY["wan14b"] = TINY["wan"]


# ------------------------------------------------------------------------------------------------ specs
@dataclass(frozen=True)
class Size:
    height: int
    width: int
    frames: int


@dataclass(frozen=True)
class Family:
    name: str
    display: str            # model name for tables
    cls_name: str           # diffusers model class
    checkpoint: str         # the checkpoint whose config CONFIG mirrors
    config: dict
    sizes: dict             # preset name -> Size ("default" = the pipeline's default video size)
    batch: int              # batch of one transformer call in the default pipeline (CFG batched or not)
    text: dict              # text encoder(s): {"tokens": L, "dim": width, "valid": [...per batch element]}
    vae_spatial: int
    vae_temporal: int
    pipeline: str           # the pipeline whose transformer call the inputs mirror
    note: str = ""
    tiny_text_tokens: int = 8
    extra: dict = field(default_factory=dict)

    def presets(self) -> list[str]:
        return list(self.sizes) + ["tiny"]


TINY_SIZES = {  # CPU sizes that keep each VAE's compression factors valid
    "wan": Size(64, 96, 9), "wan14b": Size(64, 96, 9), "skyreels_v2": Size(64, 64, 9),
    "hunyuan_video": Size(64, 64, 9), "hunyuan_video15": Size(128, 128, 9), "cogvideox": Size(64, 64, 9),
    "ltx": Size(128, 128, 9), "mochi": Size(64, 64, 7), "allegro": Size(64, 64, 8), "ltx2": Size(128, 128, 9),
}

FAMILIES: dict[str, Family] = {f.name: f for f in [
    Family("wan", "Wan2.1-T2V-1.3B", "WanTransformer3DModel", "Wan-AI/Wan2.1-T2V-1.3B-Diffusers",
           WAN21_T2V_1_3B, {"default": Size(480, 832, 81)}, 1,
           {"tokens": 512, "dim": 4096, "valid": None}, 8, 4, "WanPipeline",
           "CFG as two batch-1 calls; UMT5 512 tokens (zero-padded past the prompt)"),
    Family("wan14b", "Wan2.1-T2V-14B", "WanTransformer3DModel", "Wan-AI/Wan2.1-T2V-14B-Diffusers",
           WAN21_T2V_14B, {"default": Size(480, 832, 81)}, 1,
           {"tokens": 512, "dim": 4096, "valid": None}, 8, 4, "WanPipeline",
           "CFG as two batch-1 calls; UMT5 512 tokens (zero-padded past the prompt)"),
    Family("skyreels_v2", "SkyReels-V2-1.3B-540P", "SkyReelsV2Transformer3DModel",
           "Skywork/SkyReels-V2-DF-1.3B-540P-Diffusers", SKYREELS_V2_1_3B, {"default": Size(544, 960, 97)}, 1,
           {"tokens": 512, "dim": 4096, "valid": None}, 8, 4, "SkyReelsV2Pipeline",
           "CFG as two batch-1 calls; UMT5 512 tokens"),
    Family("hunyuan_video", "HunyuanVideo-13B", "HunyuanVideoTransformer3DModel", "hunyuanvideo-community/HunyuanVideo",
           HUNYUAN_VIDEO, {"default": Size(720, 1280, 129), "540p": Size(544, 960, 129)}, 1,
           {"tokens": 256, "dim": 4096, "valid": [64]}, 8, 4, "HunyuanVideoPipeline",
           "embedded guidance (no CFG batch); Llama text 256 tokens, 64 valid -> joint attention with a key "
           "padding mask; the token refiner (2 layers, text only) stays stock"),
    Family("hunyuan_video15", "HunyuanVideo-1.5-480p", "HunyuanVideo15Transformer3DModel",
           "hunyuanvideo-community/HunyuanVideo-1.5-Diffusers-480p_t2v", HUNYUAN_VIDEO15_480P_T2V,
           {"default": Size(480, 848, 121)}, 1,
           {"tokens": 1000, "dim": 3584, "valid": [64], "tokens_2": 256, "dim_2": 1472, "valid_2": [0],
            "image_tokens": 729}, 16, 4, "HunyuanVideo15Pipeline",
           "CFG as separate batch-1 calls (guider); Qwen2.5-VL 1000 tokens (64 valid), ByT5 256 (0 valid: no "
           "quoted text), 729 zero image tokens (T2V) -> joint attention with kv_lens"),
    Family("cogvideox", "CogVideoX-5B", "CogVideoXTransformer3DModel", "THUDM/CogVideoX-5b", COGVIDEOX_5B,
           {"default": Size(480, 720, 49)}, 2, {"tokens": 226, "dim": 4096, "valid": None}, 8, 4,
           "CogVideoXPipeline",
           "CFG batched (batch 2); T5 226 tokens, no mask; joint text+video attention; RoPE from the pipeline"),
    Family("ltx", "LTX-Video-0.9 (2B)", "LTXVideoTransformer3DModel", "Lightricks/LTX-Video", LTX_VIDEO_09,
           {"default": Size(512, 704, 161)}, 2, {"tokens": 128, "dim": 4096, "valid": [1, 64]}, 32, 8,
           "LTXPipeline", "CFG batched (batch 2: empty negative prompt, prompt); T5 128 tokens with mask"),
    Family("mochi", "Mochi-1-preview (10B)", "MochiTransformer3DModel", "genmo/mochi-1-preview", MOCHI_1,
           {"default": Size(480, 848, 163)}, 2, {"tokens": 256, "dim": 4096, "valid": [1, 64]}, 8, 6,
           "MochiPipeline",
           "CFG batched (batch 2); T5 256 tokens with mask; 163 frames (the model's native length; "
           "MochiPipeline's num_frames default is 19)"),
    Family("allegro", "Allegro (2.8B)", "AllegroTransformer3DModel", "rhymes-ai/Allegro", ALLEGRO,
           {"default": Size(720, 1280, 88)}, 2, {"tokens": 512, "dim": 4096, "valid": [1, 64]}, 8, 4,
           "AllegroPipeline",
           "CFG batched (batch 2); T5 512 tokens with mask; head dim 96: every call falls back to SDPA by design; "
           "RoPE from the pipeline"),
    Family("ltx2", "LTX-2 (19B, audio+video)", "LTX2VideoTransformer3DModel", "Lightricks/LTX-2", LTX2_19B,
           {"default": Size(512, 768, 121), "short": Size(512, 768, 41)}, 2,
           {"tokens": 1024, "dim": 3840, "valid": None}, 32, 8, "LTX2Pipeline",
           "CFG batched (batch 2); Gemma-3 1024 tokens through the connectors (padding replaced by registers: an "
           "all-zero mask); audio latents for 121 frames at 24 fps (126 tokens); six attentions per block"),
]}


class FamilyError(ValueError):
    """A user-facing problem (unknown family or preset)."""


def family(name: str) -> Family:
    if name not in FAMILIES:
        raise FamilyError(f"unknown model family {name!r} (choose from {', '.join(FAMILIES)})")
    return FAMILIES[name]


def config_for(name: str, preset: str) -> dict:
    fam = family(name)
    if preset == "tiny":
        return copy.deepcopy(TINY[name])
    if preset not in fam.sizes:
        raise FamilyError(f"model family {name}: unknown preset {preset!r} (choose from {', '.join(fam.presets())})")
    return copy.deepcopy(fam.config)


def size_for(name: str, preset: str) -> Size:
    fam = family(name)
    if preset == "tiny":
        return TINY_SIZES[name]
    if preset not in fam.sizes:
        raise FamilyError(f"model family {name}: unknown preset {preset!r} (choose from {', '.join(fam.presets())})")
    return fam.sizes[preset]


def model_class(name: str):
    import diffusers

    return getattr(diffusers, family(name).cls_name)


# ------------------------------------------------------------------------------------------------ geometry
def latent_frames(name: str, frames: int) -> int:
    fam = family(name)
    if name == "allegro":  # AllegroPipeline.prepare_latents
        return math.ceil(frames / 4) if frames % 2 == 0 else math.ceil((frames - 1) / 4) + 1
    return (frames - 1) // fam.vae_temporal + 1


def patch_sizes(name: str, config: dict) -> tuple[int, int]:
    """(temporal, spatial) patch of the transformer."""
    p = config["patch_size"]
    if isinstance(p, (list, tuple)):
        return int(p[0]), int(p[1])
    return int(config.get("patch_size_t") or 1), int(p)


def check_size(name: str, size: Size, config: dict) -> None:
    fam = family(name)
    _, ps = patch_sizes(name, config)
    mult = fam.vae_spatial * ps
    for what, v in (("height", size.height), ("width", size.width)):
        if v <= 0 or v % mult:
            raise FamilyError(f"{name}: --{what} must be a positive multiple of {mult} (VAE {fam.vae_spatial}x "
                              f"times patch {ps}), got {v}")
    if size.frames < 1 or (name != "allegro" and (size.frames - 1) % fam.vae_temporal):
        raise FamilyError(f"{name}: --frames must be {fam.vae_temporal}k+1, got {size.frames}")


def video_tokens(name: str, size: Size, config: dict | None = None) -> int:
    """Video tokens the transformer attends over (per sample) at this size."""
    config = config or family(name).config
    pt, ps = patch_sizes(name, config)
    fam = family(name)
    t = latent_frames(name, size.frames) // pt
    return t * (size.height // fam.vae_spatial // ps) * (size.width // fam.vae_spatial // ps)


def attention_shapes(name: str, size: Size, config: dict | None = None, batch: int | None = None) -> list[dict]:
    """The attention calls of one forward as [{count, B, H, Sq, Skv, D, what}] (full text lengths: masks are
    ignored, so these are the FLOPs a dense kernel does)."""
    fam = family(name)
    c = config or fam.config
    b = fam.batch if batch is None else batch
    n = video_tokens(name, size, c)
    h, d = c["num_attention_heads"], c["attention_head_dim"]
    txt = fam.text["tokens"]
    if name in ("wan", "wan14b", "skyreels_v2"):
        return [dict(count=c["num_layers"], B=b, H=h, Sq=n, Skv=n, D=d, what="self"),
                dict(count=c["num_layers"], B=b, H=h, Sq=n, Skv=txt, D=d, what="cross (text)")]
    if name == "hunyuan_video":
        return [dict(count=c["num_layers"] + c["num_single_layers"], B=b, H=h, Sq=n + txt, Skv=n + txt, D=d,
                     what="joint video+text"),
                dict(count=c["num_refiner_layers"], B=b, H=h, Sq=txt, Skv=txt, D=d, what="token refiner (stock)")]
    if name == "hunyuan_video15":
        extra = txt + fam.text["tokens_2"] + fam.text["image_tokens"]
        return [dict(count=c["num_layers"], B=b, H=h, Sq=n + extra, Skv=n + extra, D=d, what="joint video+text+image"),
                dict(count=c["num_refiner_layers"], B=b, H=h, Sq=txt, Skv=txt, D=d, what="token refiner (stock)")]
    if name == "cogvideox":
        return [dict(count=c["num_layers"], B=b, H=h, Sq=n + txt, Skv=n + txt, D=d, what="joint text+video")]
    if name == "mochi":
        return [dict(count=c["num_layers"], B=b, H=h, Sq=n + txt, Skv=n + txt, D=d, what="joint video+text")]
    if name == "ltx2":
        na = ltx2_audio_tokens(size)
        ha, da = c["audio_num_attention_heads"], c["audio_attention_head_dim"]
        L = c["num_layers"]
        return [dict(count=L, B=b, H=h, Sq=n, Skv=n, D=d, what="video self"),
                dict(count=L, B=b, H=h, Sq=n, Skv=txt, D=d, what="video->text"),
                dict(count=L, B=b, H=ha, Sq=na, Skv=na, D=da, what="audio self"),
                dict(count=L, B=b, H=ha, Sq=na, Skv=txt, D=da, what="audio->text"),
                dict(count=L, B=b, H=ha, Sq=n, Skv=na, D=da, what="audio->video (a2v)"),
                dict(count=L, B=b, H=ha, Sq=na, Skv=n, D=da, what="video->audio (v2a)")]
    if name in ("ltx", "allegro"):
        return [dict(count=c["num_layers"], B=b, H=h, Sq=n, Skv=n, D=d, what="self"),
                dict(count=c["num_layers"], B=b, H=h, Sq=n, Skv=txt, D=d, what="cross (text)")]
    raise FamilyError(name)


def ltx2_audio_tokens(size: Size, frame_rate: float = 24.0) -> int:
    """Audio latents LTX2Pipeline makes for `size.frames` at `frame_rate`: 16 kHz, hop 160, 4x VAE compression."""
    return round(size.frames / frame_rate * 16000 / 160 / 4)


def attention_flops(shapes: list[dict]) -> float:
    return float(sum(4 * s["count"] * s["B"] * s["H"] * s["Sq"] * s["Skv"] * s["D"] for s in shapes))


# ------------------------------------------------------------------------------------------------ building
def param_count(name: str, preset: str = "default") -> int:
    """Parameters of the architecture, counted on the meta device (nothing allocated)."""
    cls = model_class(name)
    with torch.device("meta"):
        model = cls(**config_for(name, preset))
    return sum(p.numel() for p in model.parameters())


def _cast(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """`model.to(dtype)` keeping what `from_pretrained(torch_dtype=...)` keeps in fp32 (the class's
    `_keep_in_fp32_modules`: Wan and SkyReels-V2 have one, the others none; no fallback list, unlike Wan's loader)."""
    return _cast_like_from_pretrained(model, dtype, fallback_keep=())


def build_model(name: str, preset: str = "default", *, device="cpu", dtype=torch.bfloat16, seed: int = 0,
                overrides: dict | None = None):
    """The family's transformer with seeded random weights (diffusers/PyTorch default init) on `device`;
    `overrides` changes config keys (tests: fewer layers)."""
    device = torch.device(device)
    cls = model_class(name)
    config = {**config_for(name, preset), **(overrides or {})}
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        if device.type == "cuda":
            torch.cuda.manual_seed(seed)
        with torch.device(device):
            model = cls(**config)
    return _cast(model, dtype).eval().requires_grad_(False)


def _randn(shape, g, device, dtype, std=1.0):
    return (torch.randn(shape, generator=g) * std).to(device=device, dtype=dtype)


def _mask(valid: list[int], length: int, device) -> torch.Tensor:
    """The tokenizer's 0/1 attention mask (int64): `valid[b]` leading ones per sample."""
    lens = torch.tensor(valid)
    return (torch.arange(length)[None, :] < lens[:, None]).long().to(device)


def _valid(spec_valid, batch: int, length: int) -> list[int]:
    if spec_valid is None:
        return [length] * batch
    v = list(spec_valid)
    v = v[-batch:] if len(v) >= batch else [v[-1]] * batch
    return [min(max(x, 0), length) for x in v]


def make_inputs(name: str, model, size: Size, *, dtype: torch.dtype, batch: int | None = None, seed: int = 0,
                tiny: bool = False, timestep: float = 999.0) -> dict:
    """Keyword arguments for one `model(...)` forward as the family's pipeline builds them (return_dict=False).

    Random tensors are drawn on the CPU from `seed` (identical on every device), then moved to the model's
    device and dtype.
    """
    fam = family(name)
    cfg = model.config
    dev = next(model.parameters()).device
    b = fam.batch if batch is None else batch
    g = torch.Generator(device="cpu").manual_seed(seed)
    lt = latent_frames(name, size.frames)
    lh, lw = size.height // fam.vae_spatial, size.width // fam.vae_spatial
    text = dict(fam.text)
    if tiny:
        text["tokens"] = fam.tiny_text_tokens
        text["valid"] = None if text["valid"] is None else [min(v, 5) for v in text["valid"]]
    L = text["tokens"]
    valid = _valid(text["valid"], b, L)

    if name in ("wan", "wan14b", "skyreels_v2"):
        from .wan import text_embeddings

        prompt = "A red fox trots through fresh snow in a quiet birch forest at dawn."
        emb = torch.cat([text_embeddings(prompt, cfg.text_dim, length=L) for _ in range(b)])
        return dict(hidden_states=_randn((b, cfg.in_channels, lt, lh, lw), g, dev, dtype),
                    timestep=torch.full((b,), timestep, device=dev),
                    encoder_hidden_states=emb.to(dev, dtype), return_dict=False)

    if name == "hunyuan_video":
        return dict(hidden_states=_randn((b, cfg.in_channels, lt, lh, lw), g, dev, dtype),
                    timestep=torch.full((b,), timestep).to(dev, dtype),
                    encoder_hidden_states=_randn((b, L, cfg.text_embed_dim), g, dev, dtype, 0.25),
                    encoder_attention_mask=_mask(valid, L, dev).to(dtype),  # pipeline: .to(transformer_dtype)
                    pooled_projections=_randn((b, cfg.pooled_projection_dim), g, dev, dtype, 0.25),
                    guidance=torch.full((b,), 6.0 * 1000.0).to(dev, dtype),  # embedded guidance 6.0
                    return_dict=False)

    if name == "hunyuan_video15":
        l2 = 8 if tiny else text["tokens_2"]
        n_img = 9 if tiny else text["image_tokens"]
        v2 = _valid(text["valid_2"], b, l2)
        lat_c = (cfg.in_channels - 1) // 2  # latents, then as many zero condition channels, then a zero mask
        latents = _randn((b, lat_c, lt, lh, lw), g, dev, dtype)
        hidden = torch.cat([latents, torch.zeros_like(latents), torch.zeros_like(latents[:, :1])], dim=1)
        emb2 = _randn((b, l2, cfg.text_embed_2_dim), g, dev, dtype, 0.25)
        emb2 = emb2 * _mask(v2, l2, dev)[..., None].to(dtype)  # no glyph text: the pipeline's zeros
        return dict(hidden_states=hidden, timestep=torch.full((b,), timestep).to(dev, dtype),
                    encoder_hidden_states=_randn((b, L, cfg.text_embed_dim), g, dev, dtype, 0.25),
                    encoder_attention_mask=_mask(valid, L, dev),
                    encoder_hidden_states_2=emb2, encoder_attention_mask_2=_mask(v2, l2, dev),
                    image_embeds=torch.zeros((b, n_img, cfg.image_embed_dim), device=dev, dtype=dtype),
                    return_dict=False)

    if name == "cogvideox":
        from diffusers import CogVideoXPipeline

        fake = SimpleNamespace(vae_scale_factor_spatial=fam.vae_spatial, transformer=SimpleNamespace(config=cfg))
        rope = None
        if cfg.use_rotary_positional_embeddings:
            rope = CogVideoXPipeline._prepare_rotary_positional_embeddings(fake, size.height, size.width, lt, dev)
        return dict(hidden_states=_randn((b, lt, cfg.in_channels, lh, lw), g, dev, dtype),
                    encoder_hidden_states=_randn((b, L, cfg.text_embed_dim), g, dev, dtype, 0.25),
                    timestep=torch.full((b,), int(timestep), dtype=torch.long, device=dev),
                    image_rotary_emb=rope, return_dict=False)

    if name == "ltx":
        frame_rate = 25  # LTXPipeline default
        return dict(hidden_states=_randn((b, lt * lh * lw, cfg.in_channels), g, dev, dtype),  # packed, patch 1
                    encoder_hidden_states=_randn((b, L, cfg.caption_channels), g, dev, dtype, 0.25),
                    timestep=torch.full((b,), timestep, device=dev),
                    encoder_attention_mask=_mask(valid, L, dev),
                    num_frames=lt, height=lh, width=lw,
                    rope_interpolation_scale=(fam.vae_temporal / frame_rate, fam.vae_spatial, fam.vae_spatial),
                    return_dict=False)

    if name == "ltx2":
        na = 5 if tiny else ltx2_audio_tokens(size)
        return dict(hidden_states=_randn((b, lt * lh * lw, cfg.in_channels), g, dev, dtype),  # packed, patch 1
                    audio_hidden_states=_randn((b, na, cfg.audio_in_channels), g, dev, dtype),
                    encoder_hidden_states=_randn((b, L, cfg.caption_channels), g, dev, dtype, 0.25),
                    audio_encoder_hidden_states=_randn((b, L, cfg.caption_channels), g, dev, dtype, 0.25),
                    timestep=torch.full((b,), timestep, device=dev), sigma=torch.full((b,), timestep, device=dev),
                    encoder_attention_mask=_mask(valid, L, dev), audio_encoder_attention_mask=_mask(valid, L, dev),
                    num_frames=lt, height=lh, width=lw, fps=24.0, audio_num_frames=na, return_dict=False)

    if name == "mochi":
        return dict(hidden_states=_randn((b, cfg.in_channels, lt, lh, lw), g, dev, dtype),
                    encoder_hidden_states=_randn((b, L, cfg.text_embed_dim), g, dev, dtype, 0.25),
                    timestep=torch.full((b,), timestep).to(dev, dtype),
                    encoder_attention_mask=_mask(valid, L, dev), return_dict=False)

    if name == "allegro":
        from diffusers import AllegroPipeline

        fake = SimpleNamespace(vae_scale_factor_spatial=fam.vae_spatial, transformer=SimpleNamespace(config=cfg))
        rope = AllegroPipeline._prepare_rotary_positional_embeddings(fake, b, size.height, size.width, lt, dev)
        return dict(hidden_states=_randn((b, cfg.in_channels, lt, lh, lw), g, dev, dtype),
                    encoder_hidden_states=_randn((b, L, cfg.caption_channels), g, dev, dtype, 0.25),
                    encoder_attention_mask=_mask(valid, L, dev),
                    timestep=torch.full((b,), int(timestep), dtype=torch.long, device=dev),
                    image_rotary_emb=rope, return_dict=False)
    raise FamilyError(name)


@dataclass
class Built:
    """A family's transformer and the inputs of one forward at one size."""
    name: str
    preset: str
    model: torch.nn.Module
    inputs: dict
    size: Size
    batch: int
    config: dict

    @property
    def family(self) -> Family:
        return family(self.name)

    def forward(self) -> torch.Tensor:
        with torch.no_grad():
            return self.model(**self.inputs)[0]

    def info(self) -> dict:
        """What the report records about the model and its inputs."""
        fam, c = self.family, self.config
        n = video_tokens(self.name, self.size, c)
        shapes = attention_shapes(self.name, self.size, c, self.batch)
        layers = (f"{c['num_layers']} dual + {c['num_single_layers']} single" if self.name == "hunyuan_video"
                  else str(c["num_layers"]))
        return {"model_family": self.name, "model": fam.display if self.preset != "tiny" else f"{fam.display} (tiny)",
                "checkpoint": fam.checkpoint if self.preset != "tiny" else None, "class": fam.cls_name,
                "pipeline": fam.pipeline, "preset": self.preset,
                "height": self.size.height, "width": self.size.width, "frames": self.size.frames,
                "batch": self.batch, "tokens": n, "heads": c["num_attention_heads"],
                "head_dim": c["attention_head_dim"],
                "layers": layers, "params": sum(p.numel() for p in self.model.parameters()),
                "attention_shapes": shapes, "attention_flops": attention_flops(shapes), "inputs_note": fam.note,
                "input_shapes": {k: (list(v.shape) if isinstance(v, torch.Tensor) else
                                     (None if v is None else type(v).__name__))
                                 for k, v in self.inputs.items() if k != "return_dict"}}


def build(name: str, preset: str = "default", *, device="cpu", dtype=torch.bfloat16, seed: int = 0,
          size: Size | None = None, batch: int | None = None, overrides: dict | None = None) -> Built:
    """The family's transformer and the inputs of one forward at the preset's size (or `size`), for the
    pipeline's batch (or `batch`)."""
    fam = family(name)
    config = {**config_for(name, preset), **(overrides or {})}
    size = size or size_for(name, preset)
    check_size(name, size, config)
    model = build_model(name, preset, device=device, dtype=dtype, seed=seed, overrides=overrides)
    b = fam.batch if batch is None else batch
    inputs = make_inputs(name, model, size, dtype=dtype, batch=b, seed=seed + 1, tiny=(preset == "tiny"))
    return Built(name, preset, model, inputs, size, b, config)


# ------------------------------------------------------------------------------------------------ planning
# Time model for one forward on an H200 under cuDNN SDPA, fitted to the measured Wan2.1-1.3B forward (618 ms,
# 56 % attention; bench/results/e2e_1.3b_20261130) and checked against Wan2.1-14B (3202 ms measured, 3.5 s
# from the model): attention at the kernel-bench TFLOPS for its head dim, dense layers at 700 TFLOPS, and an
# elementwise cost per token x hidden x layer. An ESTIMATE for budgeting device time, never a result.
_ATTN_TFLOPS = {64: 420e12, 96: 350e12, 128: 560e12}
_LINEAR_TFLOPS = 700e12
_ELEMENTWISE_S = 9.1e-11  # seconds per (token x hidden x layer)
H200_GIB = 139.0


def _layers(name: str, c: dict) -> int:
    return c["num_layers"] + (c.get("num_single_layers") or 0)


def estimate(name: str, preset: str = "default", params: int | None = None, batch: int | None = None,
             size: Size | None = None) -> dict:
    """Estimated seconds per forward and peak GiB on one H200 (bf16) for budgeting; see the constants above."""
    fam = family(name)
    c = config_for(name, preset)
    size = size or size_for(name, preset)
    b = fam.batch if batch is None else batch
    params = param_count(name, preset) if params is None else params
    shapes = attention_shapes(name, size, c, b)
    n = video_tokens(name, size, c)
    hidden = c["num_attention_heads"] * c["attention_head_dim"]
    tokens = b * (n + fam.text["tokens"])
    t_attn = sum(4 * s["count"] * s["B"] * s["H"] * s["Sq"] * s["Skv"] * s["D"] / _ATTN_TFLOPS[s["D"]]
                 for s in shapes)
    t_lin = 2.0 * params * tokens / _LINEAR_TFLOPS
    t_elem = _ELEMENTWISE_S * tokens * hidden * _layers(name, c)
    weights_gib = params * 2 / 2**30
    # activations: ~16 live (tokens x hidden) bf16 tensors at the widest point of a block (MLP expansion, q/k/v,
    # fp32 RoPE temporaries), plus the attention output
    act_gib = 16 * tokens * hidden * 2 / 2**30
    return {"family": name, "preset": preset, "tokens": n, "batch": b, "params": params,
            "forward_s": t_attn + t_lin + t_elem, "attention_s": t_attn, "weights_gib": weights_gib,
            "peak_gib": weights_gib + act_gib, "fits_h200": weights_gib + act_gib < H200_GIB}


# Forwards per path in the device run (warm-up, timed), chosen so the whole cross-model stage fits two
# 10-minute device calls; the profile forward comes on top (the census rides on the first warm-up forward).
DEVICE_ITERS = {"ltx2": (1, 3), "wan": (2, 5), "wan14b": (1, 3), "skyreels_v2": (1, 5), "hunyuan_video": (1, 2),
                "hunyuan_video15": (1, 3), "cogvideox": (2, 5), "ltx": (2, 10), "mochi": (1, 3), "allegro": (1, 2)}
# Cheap first, so a short budget still measures most families.
DEVICE_ORDER = ["ltx", "ltx2", "wan", "cogvideox", "skyreels_v2", "hunyuan_video15", "wan14b", "mochi", "allegro",
                "hunyuan_video"]


def stage_estimate(name: str, preset: str = "default", est: dict | None = None) -> dict:
    """Estimated wall seconds of `e2e_report.py --model-family NAME` on the H200 (both paths, build included)
    and the per-family timeout the device stage uses (about 2x the estimate + 90 s)."""
    est = est or estimate(name, preset)
    w, i = DEVICE_ITERS[name]
    forwards = 2 * (w + i + 1)
    build_s = 25 + 1.5 * est["params"] / 1e9  # interpreter + diffusers import + random init on the GPU + cast
    wall = build_s + forwards * est["forward_s"]
    return {**est, "warmup": w, "iters": i, "forwards": forwards, "stage_s": wall,
            "timeout_s": int(math.ceil((2 * wall + 90) / 10) * 10)}


def plan(names: list[str] | None = None) -> list[dict]:
    """stage_estimate for each "family" or "family:preset" (default: DEVICE_ORDER at default sizes)."""
    out = []
    for item in names or DEVICE_ORDER:
        name, _, preset = item.partition(":")
        out.append(stage_estimate(name, preset or "default"))
    return out


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Per-family default size, parameters and estimated H200 cost.")
    p.add_argument("families", nargs="*", metavar="FAMILY[:PRESET]", help=f"default: {' '.join(DEVICE_ORDER)}")
    p.add_argument("--timeouts-file", default=None, metavar="PATH",
                   help="also write 'family preset timeout_s warmup iters estimated_s' lines to PATH (for scripts)")
    args = p.parse_args(argv)
    try:
        rows = plan(args.families or None)
    except FamilyError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.timeouts_file:
        with open(args.timeouts_file, "w") as fh:
            for r in rows:
                fh.write(f"{r['family']} {r['preset']} {r['timeout_s']} {r['warmup']} {r['iters']} "
                         f"{int(round(r['stage_s']))}\n")
    print(f"{'family':22} {'tokens':>7} {'batch':>5} {'params':>8} {'est fwd':>8} {'est GiB':>8} {'fits':>5} "
          f"{'est stage':>9} {'timeout':>7}")
    for r in rows:
        label = r["family"] + ("" if r["preset"] == "default" else ":" + r["preset"])
        print(f"{label:22} {r['tokens']:7d} {r['batch']:5d} {r['params'] / 1e9:7.2f}B {r['forward_s']:7.2f}s "
              f"{r['peak_gib']:8.1f} {'yes' if r['fits_h200'] else 'NO':>5} {r['stage_s']:8.0f}s {r['timeout_s']:6d}s")
    print(f"total estimated: {sum(r['stage_s'] for r in rows):.0f} s (estimates for budgeting, not measurements)")


if __name__ == "__main__":
    main()
