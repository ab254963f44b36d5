"""LTX-2 (audio + video) built offline: `LTX2Pipeline` with the real architecture and seeded random weights.

    from pipelines.ltx2 import build_ltx2_pipeline, ltx2_prompt_embeds, write_video_with_audio
    pipe = build_ltx2_pipeline("default", device="cuda", dtype=torch.bfloat16)
    out = pipe(prompt_embeds=..., prompt_attention_mask=..., ..., output_type="np")   # out.frames, out.audio

Components: the 19B transformer (pipelines/families.py LTX2_19B), and the class defaults of diffusers' LTX-2 video
VAE, audio VAE, vocoder and text connectors (they describe the Lightricks/LTX-2 release). There is no text encoder:
Gemma-3 12B is replaced by seeded random hidden states of its shape (49 stacked layers x 3840, 1024 tokens) hashed
from the prompt, which the pipeline's own connectors then turn into the transformer's text tokens. Nothing is
downloaded. The "tiny" preset is the same structure at CPU size.
"""
from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import numpy as np
import torch

TINY_CONNECTORS = dict(caption_channels=32, text_proj_in_factor=2, video_connector_num_attention_heads=4,
                       video_connector_attention_head_dim=8, video_connector_num_layers=1,
                       video_connector_num_learnable_registers=None, audio_connector_num_attention_heads=4,
                       audio_connector_attention_head_dim=8, audio_connector_num_layers=1,
                       audio_connector_num_learnable_registers=None, connector_rope_base_seq_len=32,
                       rope_double_precision=False, causal_temporal_positioning=False)
TINY_VAE = dict(in_channels=3, out_channels=3, latent_channels=8, block_out_channels=(8,),
                decoder_block_out_channels=(8,), layers_per_block=(1,), decoder_layers_per_block=(1, 1),
                spatio_temporal_scaling=(True,), decoder_spatio_temporal_scaling=(True,),
                decoder_inject_noise=(False, False), downsample_type=("spatial",), upsample_residual=(False,),
                upsample_factor=(1,), timestep_conditioning=False, patch_size=1, patch_size_t=1,
                encoder_causal=True, decoder_causal=False)
TINY_AUDIO_VAE = dict(base_channels=4, output_channels=2, ch_mult=(1,), num_res_blocks=1, attn_resolutions=None,
                      in_channels=2, resolution=32, latent_channels=2, norm_type="pixel", causality_axis="height",
                      dropout=0.0, mid_block_add_attention=False, sample_rate=16000, mel_hop_length=160,
                      is_causal=True, mel_bins=8)
TINY_VOCODER = dict(in_channels=16, hidden_channels=32, out_channels=2, upsample_kernel_sizes=[4, 4],
                    upsample_factors=[2, 2], resnet_kernel_sizes=[3], resnet_dilations=[[1, 3, 5]],
                    leaky_relu_negative_slope=0.1, output_sampling_rate=16000)
# The tiny transformer (families.TINY["ltx2"]) reads 8 video latent channels (TINY_VAE) and 2 x 4 packed audio
# ones (audio latent channels x mel bins / 4... as the pipeline packs them).
TINY_TRANSFORMER = {"in_channels": 8, "out_channels": 8, "audio_in_channels": 4, "audio_out_channels": 4,
                    "caption_channels": 32, "cross_attention_dim": 256, "audio_cross_attention_dim": 128,
                    "vae_scale_factors": (8, 2, 2)}
TEXT_TOKENS = {"default": 1024, "tiny": 16}
# The release's video VAE is the class default but for its compression ratios, which its config states: the class
# derives 64x / 16x from patch 4 and four scaling blocks, while the decoder (patch 4, three 2x upsamplers) and the
# pipeline's own fallbacks give 32x spatial, 8x temporal.
DEFAULT_VAE = {"spatial_compression_ratio": 32, "temporal_compression_ratio": 8}


def _seeded(module_cls, kwargs: dict, seed: int, device):
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(device):
            return module_cls(**kwargs)


def build_ltx2_pipeline(preset: str = "default", *, device="cpu", dtype=torch.bfloat16, seed: int = 0):
    """LTX2Pipeline with seeded random weights (no text encoder: pass `ltx2_prompt_embeds`)."""
    from diffusers import AutoencoderKLLTX2Audio, AutoencoderKLLTX2Video, FlowMatchEulerDiscreteScheduler, LTX2Pipeline
    from diffusers.pipelines.ltx2 import LTX2TextConnectors
    from diffusers.pipelines.ltx2.vocoder import LTX2Vocoder

    from .families import _cast, build_model

    tiny = preset == "tiny"
    device = torch.device(device)
    transformer = build_model("ltx2", "tiny" if tiny else "default", device=device, dtype=dtype, seed=seed,
                              overrides=TINY_TRANSFORMER if tiny else None)
    connectors = _seeded(LTX2TextConnectors, TINY_CONNECTORS if tiny else {}, seed + 1, device)
    vae = _seeded(AutoencoderKLLTX2Video, TINY_VAE if tiny else DEFAULT_VAE, seed + 2, device)
    vae.use_framewise_encoding = vae.use_framewise_decoding = False
    audio_vae = _seeded(AutoencoderKLLTX2Audio, TINY_AUDIO_VAE if tiny else {}, seed + 3, device)
    vocoder = _seeded(LTX2Vocoder, TINY_VOCODER if tiny else {}, seed + 4, device)
    for m in (connectors, vae, audio_vae, vocoder):
        _cast(m, dtype).eval().requires_grad_(False)
    pipe = LTX2Pipeline(scheduler=FlowMatchEulerDiscreteScheduler(), vae=vae, audio_vae=audio_vae, text_encoder=None,
                        tokenizer=None, connectors=connectors, transformer=transformer, vocoder=vocoder)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def ltx2_prompt_embeds(pipe, prompt: str, *, tokens: int, device, dtype, valid: int | None = None):
    """(embeds, mask): stand-ins for Gemma-3's stacked hidden states of `prompt` (seeded from its hash), the width
    the pipeline's connectors read (caption_channels x text_proj_in_factor)."""
    cfg = pipe.connectors.config
    width = cfg.caption_channels * cfg.text_proj_in_factor
    seed = int.from_bytes(hashlib.sha256(prompt.encode()).digest()[:8], "little")
    g = torch.Generator().manual_seed(seed)
    emb = (torch.randn(1, tokens, width, generator=g) * 0.5).to(device=device, dtype=dtype)
    mask = torch.zeros(1, tokens, dtype=torch.long)
    mask[:, : (tokens if valid is None else valid)] = 1
    return emb, mask.to(device)


def call_kwargs(preset: str, height: int, width: int, frames: int, steps: int, frame_rate: float, seed: int,
                guidance: float, device) -> dict:
    """The LTX2Pipeline call for a run: the pipeline's defaults, with STG off for the tiny preset (its default
    block, 28, does not exist in a 2-layer model)."""
    kw = dict(height=height, width=width, num_frames=frames, frame_rate=frame_rate, num_inference_steps=steps,
              guidance_scale=guidance, generator=torch.Generator(device="cpu").manual_seed(seed), output_type="np")
    if preset == "tiny":
        kw.update(stg_scale=0.0, audio_stg_scale=0.0, spatio_temporal_guidance_blocks=None)
    return kw


def write_video_with_audio(frames: np.ndarray, audio, path: str | Path, fps: float, sample_rate: int) -> Path:
    """An mp4 of `frames` ((F, H, W, 3) in [0, 1]) with `audio` ((channels, samples) in [-1, 1]) as its AAC track,
    muxed by the ffmpeg that imageio-ffmpeg ships; without audio, the video alone."""
    import imageio_ffmpeg

    from .wan import write_video

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    if audio is None:
        return write_video(frames, path, fps=int(round(fps)))
    silent = path.with_suffix(".video.mp4")
    wav = path.with_suffix(".wav")
    write_video(frames, silent, fps=int(round(fps)))
    write_wav(audio, wav, sample_rate)
    cmd = [imageio_ffmpeg.get_ffmpeg_exe(), "-y", "-loglevel", "error", "-i", str(silent), "-i", str(wav),
           "-c:v", "copy", "-c:a", "aac", str(path)]
    try:
        subprocess.run(cmd, check=True, capture_output=True, timeout=600)
    finally:
        silent.unlink(missing_ok=True)
        wav.unlink(missing_ok=True)
    return path


def write_wav(audio, path: Path, sample_rate: int) -> None:
    import wave

    a = audio.detach().float().cpu().numpy() if isinstance(audio, torch.Tensor) else np.asarray(audio, np.float32)
    if a.ndim == 1:
        a = a[None]
    pcm = (np.clip(a, -1.0, 1.0).T * 32767.0).astype("<i2")  # (samples, channels)
    with wave.open(str(path), "wb") as w:
        w.setnchannels(pcm.shape[1])
        w.setsampwidth(2)
        w.setframerate(int(sample_rate))
        w.writeframes(pcm.tobytes())
