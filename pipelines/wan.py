"""Wan 2.1 text-to-video, built offline.

Default: the real Wan2.1-T2V architecture (1.3B or 14B diffusers configs, written out below) with seeded random
weights, the real `AutoencoderKLWan` architecture with random weights, and the `UniPCMultistepScheduler` the
published pipeline ships. There is no text encoder: prompt embeddings are seeded random tensors of the UMT5 shape
(1, 512, 4096), derived deterministically from the prompt text. `model_dir` loads a local diffusers Wan folder
(real weights) instead; nothing is ever downloaded.

Random weights give meaningless videos, but every tensor has the real shape and the transformer does the real
amount of work, which is what attention benchmarks need.
"""
from __future__ import annotations

import copy
import hashlib
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import torch

TEXT_LEN = 512  # UMT5 context length the Wan pipeline pads to (max_sequence_length)

# Wan-AI/Wan2.1-T2V-1.3B-Diffusers, transformer/config.json
WAN21_T2V_1_3B = {
    "patch_size": [1, 2, 2],
    "num_attention_heads": 12,
    "attention_head_dim": 128,
    "in_channels": 16,
    "out_channels": 16,
    "text_dim": 4096,
    "freq_dim": 256,
    "ffn_dim": 8960,
    "num_layers": 30,
    "cross_attn_norm": True,
    "qk_norm": "rms_norm_across_heads",
    "eps": 1e-6,
    "image_dim": None,
    "added_kv_proj_dim": None,
    "rope_max_seq_len": 1024,
}

# Wan-AI/Wan2.1-T2V-14B-Diffusers, transformer/config.json
WAN21_T2V_14B = {**WAN21_T2V_1_3B, "num_attention_heads": 40, "ffn_dim": 13824, "num_layers": 40}

# A CPU-sized model with the same structure (RoPE split, qk RMS norm across heads, cross-attn to 512 tokens).
TINY_TRANSFORMER = {
    **WAN21_T2V_1_3B,
    "num_attention_heads": 2,
    "attention_head_dim": 64,
    "text_dim": 32,
    "freq_dim": 32,
    "ffn_dim": 256,
    "num_layers": 2,
}

# Wan-AI/Wan2.1-T2V-*-Diffusers, vae/config.json (identical for 1.3B and 14B)
WAN21_VAE = {
    "base_dim": 96,
    "z_dim": 16,
    "dim_mult": [1, 2, 4, 4],
    "num_res_blocks": 2,
    "attn_scales": [],
    "temperal_downsample": [False, True, True],
    "dropout": 0.0,
    # latents_mean / latents_std: the real per-channel statistics equal AutoencoderKLWan's defaults (copied
    # from the Wan release), so they are left to the class.
}

# Same compression factors (4x time, 8x space, 16 latent channels), a fraction of the width.
TINY_VAE = {**WAN21_VAE, "base_dim": 8, "num_res_blocks": 1}

# Wan-AI/Wan2.1-T2V-*-Diffusers, scheduler/scheduler_config.json
WAN21_UNIPC = {
    "beta_end": 0.02,
    "beta_schedule": "linear",
    "beta_start": 0.0001,
    "disable_corrector": [],
    "dynamic_thresholding_ratio": 0.995,
    "final_sigmas_type": "zero",
    "flow_shift": 3.0,
    "lower_order_final": True,
    "num_train_timesteps": 1000,
    "predict_x0": True,
    "prediction_type": "flow_prediction",
    "rescale_betas_zero_snr": False,
    "sample_max_value": 1.0,
    "solver_order": 2,
    "solver_p": None,
    "solver_type": "bh2",
    "steps_offset": 0,
    "thresholding": False,
    "timestep_spacing": "linspace",
    "trained_betas": None,
    "use_beta_sigmas": False,
    "use_exponential_sigmas": False,
    "use_flow_sigmas": True,
    "use_karras_sigmas": False,
}

# The Wan team's default negative prompt (English rendering used in the diffusers docs).
DEFAULT_NEGATIVE_PROMPT = (
    "Bright tones, overexposed, static, blurred details, subtitles, style, works, paintings, images, static, "
    "overall gray, worst quality, low quality, JPEG compression residue, ugly, incomplete, extra fingers, poorly "
    "drawn hands, poorly drawn faces, deformed, disfigured, misshapen limbs, fused fingers, still picture, messy "
    "background, three legs, many people in the background, walking backwards"
)


@dataclass(frozen=True)
class Preset:
    name: str
    transformer: dict
    vae: dict
    height: int
    width: int
    frames: int
    description: str
    extra: dict = field(default_factory=dict)


PRESETS: dict[str, Preset] = {
    "1.3b": Preset("1.3b", WAN21_T2V_1_3B, WAN21_VAE, 480, 832, 81,
                   "Wan2.1-T2V-1.3B architecture (30 layers, 12 heads x 128, ffn 8960), random weights"),
    "14b": Preset("14b", WAN21_T2V_14B, WAN21_VAE, 480, 832, 81,
                  "Wan2.1-T2V-14B architecture (40 layers, 40 heads x 128, ffn 13824), random weights"),
    "tiny": Preset("tiny", TINY_TRANSFORMER, TINY_VAE, 64, 96, 9,
                   "tiny Wan-structured model for CPU tests (2 layers, 2 heads x 64), random weights"),
}

# What `from_pretrained(torch_dtype=...)` keeps in fp32 for this model class (diffusers `_keep_in_fp32_modules`).
_FALLBACK_KEEP_FP32 = ["rope", "time_embedder", "scale_shift_table", "norm1", "norm2", "norm3"]

SPATIAL_MULTIPLE = 16  # VAE 8x spatial compression times the transformer's 2x2 patch
TEMPORAL_FACTOR = 4    # VAE temporal compression: frames must be 4k+1


class PipelineError(ValueError):
    """A user-facing problem (bad folder, bad size); scripts print the message and exit without a traceback."""


def token_count(height: int, width: int, frames: int, patch=(1, 2, 2)) -> int:
    """Transformer sequence length for a video of this size (32760 at 480x832x81)."""
    lat_t = (frames - 1) // TEMPORAL_FACTOR + 1
    return (lat_t // patch[0]) * (height // 8 // patch[1]) * (width // 8 // patch[2])


def validate_size(height: int, width: int, frames: int) -> None:
    """Raise PipelineError with a clear message unless the size is one the Wan pipeline takes as is."""
    for name, val in (("height", height), ("width", width)):
        if val <= 0 or val % SPATIAL_MULTIPLE:
            raise PipelineError(f"--{name} must be a positive multiple of {SPATIAL_MULTIPLE} "
                                f"(VAE 8x times patch 2), got {val}")
    if frames < 1 or (frames - 1) % TEMPORAL_FACTOR:
        lo = max(1, (frames - 1) // TEMPORAL_FACTOR * TEMPORAL_FACTOR + 1)
        raise PipelineError(f"--frames must be 4k+1 (1, 5, 9, ..., 81), got {frames}; try {lo} or {lo + 4}")


def flow_shift_for(height: int, width: int) -> float:
    """Wan's recommendation: 3.0 at 480p, 5.0 at 720p."""
    return 5.0 if height * width >= 720 * 1280 else 3.0


def seed_from_text(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode("utf-8")).digest()[:8], "little") & ((1 << 63) - 1)


def text_embeddings(text: str, text_dim: int = 4096, length: int = TEXT_LEN, *, device="cpu",
                    dtype=torch.float32, std: float = 0.25) -> torch.Tensor:
    """Stand-in for UMT5: a (1, length, text_dim) tensor seeded by the text, deterministic across machines.

    Like the real pipeline's output, positions past the prompt's (approximate) token count are zero padding.
    Generated on the CPU so the values do not depend on the device.
    """
    g = torch.Generator(device="cpu").manual_seed(seed_from_text(text))
    n_tok = max(1, min(length, math.ceil(len(text.encode("utf-8")) / 4) + 1))
    emb = torch.zeros(1, length, text_dim)
    emb[:, :n_tok] = torch.randn(1, n_tok, text_dim, generator=g) * std
    return emb.to(device=device, dtype=dtype)


def initial_latents(pipe, height: int, width: int, frames: int, seed: int, device="cpu") -> torch.Tensor:
    """The pipeline's starting noise, drawn on the CPU from `seed` (so identical on every device and run)."""
    c = pipe.transformer.config.in_channels
    t = (frames - 1) // pipe.vae_scale_factor_temporal + 1
    shape = (1, c, t, height // pipe.vae_scale_factor_spatial, width // pipe.vae_scale_factor_spatial)
    g = torch.Generator(device="cpu").manual_seed(seed)
    return torch.randn(shape, generator=g, dtype=torch.float32).to(device)


def make_scheduler(flow_shift: float = 3.0, kind: str = "unipc"):
    """The scheduler the published Wan 2.1 pipeline uses (UniPC, flow sigmas), or flow-matching Euler."""
    from diffusers import FlowMatchEulerDiscreteScheduler, UniPCMultistepScheduler

    if kind == "unipc":
        return UniPCMultistepScheduler(**{**WAN21_UNIPC, "flow_shift": flow_shift})
    if kind == "euler":
        return FlowMatchEulerDiscreteScheduler(num_train_timesteps=1000, shift=flow_shift)
    raise PipelineError(f"unknown scheduler {kind!r} (unipc or euler)")


def _cast_like_from_pretrained(model: torch.nn.Module, dtype: torch.dtype,
                               fallback_keep=_FALLBACK_KEEP_FP32) -> torch.nn.Module:
    """`model.to(dtype)` but keeping the modules diffusers keeps in fp32 when loading (RoPE tables, norms, ...): the
    class's `_keep_in_fp32_modules`, or `fallback_keep` for a class without one (pipelines.families passes none)."""
    from diffusers.utils import logging as dlogging

    level = dlogging.get_verbosity()
    dlogging.set_verbosity_error()  # the "cast with to()" warning: we do the keep-in-fp32 part ourselves below
    try:
        model.to(dtype)
    finally:
        dlogging.set_verbosity(level)
    if dtype == torch.float32:
        return model
    keep = list(getattr(type(model), "_keep_in_fp32_modules", None) or fallback_keep)
    for name, module in model.named_modules():
        if any(k in name.split(".") for k in keep):
            module.to(torch.float32)
    for name, p in model.named_parameters():
        if name.split(".")[-1] in keep:
            p.data = p.data.float()
    return model


def read_model_index(model_dir: str | Path, example: str = "") -> tuple[Path, dict]:
    """(folder, parsed model_index.json) of a local diffusers pipeline folder; PipelineError naming what is wrong
    otherwise. `example` ends the no-such-directory message (what to pass instead)."""
    p = Path(model_dir).expanduser()
    if not p.exists():
        raise PipelineError(f"--model {model_dir}: no such directory (weights are never downloaded; pass a local "
                            f"diffusers {example})")
    if not p.is_dir():
        raise PipelineError(f"--model {model_dir}: not a directory")
    index = p / "model_index.json"
    if not index.is_file():
        raise PipelineError(f"--model {model_dir}: no model_index.json, so not a diffusers pipeline folder")
    try:
        return p, json.loads(index.read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise PipelineError(f"--model {model_dir}: unreadable model_index.json ({exc})") from None


def check_model_dir(model_dir: str | Path) -> Path:
    """Validate that `model_dir` is a local diffusers Wan folder; return it as a Path."""
    p, info = read_model_index(model_dir, "folder such as a snapshot of Wan-AI/Wan2.1-T2V-1.3B-Diffusers")
    cls = str(info.get("_class_name", ""))
    if not cls.startswith("Wan"):
        raise PipelineError(f"--model {model_dir}: model_index.json describes {cls or 'an unknown class'}, "
                            f"not a Wan pipeline")
    for sub in ("transformer", "vae"):
        if not (p / sub / "config.json").is_file():
            raise PipelineError(f"--model {model_dir}: missing {sub}/config.json")
    return p


def build_pipeline(preset: str = "1.3b", *, model_dir: str | Path | None = None, device="cpu",
                   dtype: torch.dtype = torch.bfloat16, seed: int = 0, flow_shift: float = 3.0,
                   scheduler: str = "unipc", vae_dtype: torch.dtype = torch.float32):
    """A ready `WanPipeline` on `device`: transformer in `dtype`, VAE in `vae_dtype` (fp32, as Wan recommends).

    Without `model_dir` the weights are random, seeded by `seed` and initialised by diffusers/PyTorch defaults
    directly on `device` (fast, reproducible for a given device type).
    """
    from diffusers import AutoencoderKLWan, WanPipeline, WanTransformer3DModel

    device = torch.device(device)
    sched = make_scheduler(flow_shift, scheduler)
    if model_dir is not None:
        path = check_model_dir(model_dir)
        try:
            transformer = WanTransformer3DModel.from_pretrained(path, subfolder="transformer", torch_dtype=dtype)
            vae = AutoencoderKLWan.from_pretrained(path, subfolder="vae", torch_dtype=vae_dtype)
        except (OSError, ValueError, EnvironmentError) as exc:
            raise PipelineError(f"--model {model_dir}: could not load weights ({exc})") from None
        pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=sched, transformer=transformer)
        return pipe.to(device)

    if preset not in PRESETS:
        raise PipelineError(f"unknown preset {preset!r} (choose from {', '.join(PRESETS)})")
    spec = PRESETS[preset]
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        if device.type == "cuda":
            torch.cuda.manual_seed(seed)
        with torch.device(device):
            transformer = WanTransformer3DModel(**copy.deepcopy(spec.transformer))
            vae = AutoencoderKLWan(**copy.deepcopy(spec.vae))
    transformer = _cast_like_from_pretrained(transformer, dtype).eval().requires_grad_(False)
    vae = _cast_like_from_pretrained(vae, vae_dtype).eval().requires_grad_(False)
    pipe = WanPipeline(tokenizer=None, text_encoder=None, vae=vae, scheduler=sched, transformer=transformer)
    pipe.set_progress_bar_config(leave=False)
    return pipe


def prompt_pair(pipe, prompt: str, negative_prompt: str = DEFAULT_NEGATIVE_PROMPT):
    """(prompt_embeds, negative_prompt_embeds) for `pipe`'s text width, on its device, in fp32 (pipe casts)."""
    text_dim = pipe.transformer.config.text_dim
    dev = pipe.transformer.device
    return (text_embeddings(prompt, text_dim, device=dev),
            text_embeddings(negative_prompt, text_dim, device=dev))


def transformer_inputs(latents: torch.Tensor, prompt_embeds: torch.Tensor, dtype: torch.dtype) -> dict:
    """Keyword arguments for one Wan transformer forward outside the pipeline: `latents` as the hidden states and
    `prompt_embeds` in `dtype`, at timestep 999 (the first denoising step's), tuple output."""
    t = torch.full((latents.shape[0],), 999.0, device=latents.device)
    return dict(hidden_states=latents.to(dtype), timestep=t, encoder_hidden_states=prompt_embeds.to(dtype),
                return_dict=False)


@torch.no_grad()
def decode_latents(pipe, latents: torch.Tensor, output_type: str = "np"):
    """What `WanPipeline.__call__` does after the loop: un-normalise, VAE decode, postprocess."""
    vae = pipe.vae
    z = latents.to(vae.device, vae.dtype)
    mean = torch.tensor(vae.config.latents_mean).view(1, vae.config.z_dim, 1, 1, 1).to(z.device, z.dtype)
    inv_std = 1.0 / torch.tensor(vae.config.latents_std).view(1, vae.config.z_dim, 1, 1, 1).to(z.device, z.dtype)
    z = z / inv_std + mean
    video = vae.decode(z, return_dict=False)[0]
    return pipe.video_processor.postprocess_video(video, output_type=output_type)


@torch.no_grad()
def denoise(pipe, *, prompt_embeds, negative_prompt_embeds, latents, height, width, frames, steps,
            guidance, callback=None, progress=True):
    """Run the denoising loop only (output_type='latent'); returns the final latents (fp32)."""
    pipe.set_progress_bar_config(disable=not progress, leave=False)
    kwargs = {}
    if callback is not None:
        kwargs["callback_on_step_end"] = callback
    out = pipe(prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_prompt_embeds, latents=latents,
               height=height, width=width, num_frames=frames, num_inference_steps=steps,
               guidance_scale=guidance, output_type="latent", return_dict=False, **kwargs)
    return out[0]


def write_video(frames, path: str | Path, fps: int = 16) -> Path:
    """Write frames (F, H, W, 3) float in [0, 1] or uint8 as an H.264 mp4 via imageio-ffmpeg.

    Written with imageio directly, from uint8: diffusers' `export_to_video` (0.42) multiplies every numpy frame by 255,
    so uint8 frames handed to it wrapped around (x -> 256 - x: every video came out colour-inverted)."""
    import imageio
    import numpy as np

    check_video_writer()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    arr = np.asarray(frames)
    if arr.dtype != np.uint8:
        arr = (np.clip(arr, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)
    with imageio.get_writer(str(path), format="FFMPEG", mode="I", fps=fps, codec="libx264", quality=5,
                            macro_block_size=16) as writer:
        for frame in arr:
            writer.append_data(frame)
    return path


def check_video_writer() -> None:
    """PipelineError naming the missing package when mp4s cannot be written (imageio-ffmpeg's ffmpeg): scripts call
    it before a generation, not after."""
    try:
        import imageio  # noqa: F401
        import imageio_ffmpeg

        imageio_ffmpeg.get_ffmpeg_exe()
    except (ImportError, RuntimeError) as exc:
        raise PipelineError(f"writing an mp4 needs imageio and imageio-ffmpeg ({exc}): pip install imageio "
                            f"imageio-ffmpeg (or pip install '.[diffusers]')") from None
