"""Full video generation offline for the registry's families: one generic builder, one small adapter per family.

    from pipelines.generate import build_family_pipeline, family_call, generating, why_not
    pipe = build_family_pipeline("hunyuan_video", "default", device="cuda", dtype=torch.bfloat16)
    call = family_call("hunyuan_video", pipe, "a fox in the snow", "", preset="default", device="cuda",
                       dtype=torch.bfloat16)                            # the __call__ keywords, embeddings included
    out = pipe(**call, output_type="np")

Each adapter names the family's diffusers pipeline class, its VAE class at the released config (`vae_config`:
keys over the class defaults, {} where the defaults are the release's; `vae_note` says which) with seeded random
weights, the pipeline's scheduler class (its default config unless the adapter states the release's), and the
prompt embeddings its `__call__` takes in place of the text encoder(s): seeded random tensors of the encoders'
shapes (width read from the transformer's config, length the pipeline's padded length), hashed from the prompt,
with the attention masks, pooled embeddings and negative embeddings that `__call__` requires. Tokenizers and text
encoders are None. Image-conditioned pipelines get a seeded random image (and pose / face videos for Wan-Animate)
and, where the pipeline refuses precomputed image embeddings, its image encoder (CLIP ViT-H/14, SigLIP so400m) at
the real config with seeded random weights. The transformer is the registry's (real config, seeded random
weights). At the release sizes the VAE decodes tiled, as the model cards do. Random weights give meaningless
videos; every tensor has the real shape and every module does the real work. Nothing is downloaded.

The "tiny" preset: the registry's tiny transformer, a VAE of the same compression factors at CPU width, tiny
image encoders, 2 steps, a few frames (CPU tests).

Where the pipeline would load a component that has no place in a random-weight build, the adapter says what stands
in (`substitute`): ConsisID gets the face models' outputs as seeded random tensors (and its class from its module:
diffusers' top-level name is an opencv placeholder), Cosmos 1.0 a pass-through guardrail (RandomWeightsGuardrail,
in this build only), Cosmos3 a byte-level tokenizer built here (`byte_chat_tokenizer`), the SANA-WM refiner a seeded
stage-1 latent and Gemma-3 hidden-state stand-ins through its own connectors; the modular pipelines (MiniMax-H3,
Wan-Animate-2) are assembled from diffusers' blocks without their text-encoder step (`assemble`). A family without
an adapter would have its stated reason in LEFT_OUT (`why_not(name)`); today every registry family has one.
"""
from __future__ import annotations

import hashlib
import inspect
import math
from dataclasses import dataclass, field
from typing import Callable

import torch

from . import cached, registry
from .families import Size
from .wan import PipelineError

# ------------------------------------------------------------------------------------------------ text stand-ins


def _seed(text: str, salt: str) -> int:
    return int.from_bytes(hashlib.sha256(f"{salt}\0{text}".encode()).digest()[:8], "little") & ((1 << 63) - 1)


def _valid_tokens(text: str, length: int) -> int:
    """About how many tokens a tokenizer gives `text` (4 bytes a token, at least 1): the mask's valid prefix."""
    return max(1, min(length, math.ceil(len(text.encode("utf-8")) / 4) + 1))


@dataclass(frozen=True)
class Text:
    """One prompt-embedding keyword of a pipeline's `__call__` (its negative is `negative_` + the name).

    width(cfg): the encoder's width, read from the transformer config; tokens: the sequence length the pipeline
    pads to (None: the registry's text length; "tiny" runs use the registry's tiny length); pooled: a (B, width)
    vector; mask: the keyword of its attention mask (long 0/1 over the padded length; `mask_dtype` where the
    pipeline wants another dtype); zero_pad: positions past the prompt are zeros (encoders that pad with zeros)."""
    name: str
    width: Callable[[dict], int]
    tokens: int | None = None
    pooled: bool = False
    mask: str | None = None
    mask_dtype: torch.dtype = torch.long
    zero_pad: bool = False


def _embed(text: str, spec: Text, width: int, tokens: int, device, dtype) -> dict:
    g = torch.Generator(device="cpu").manual_seed(_seed(text, spec.name))
    if spec.pooled:
        return {spec.name: (torch.randn(1, width, generator=g) * 0.25).to(device=device, dtype=dtype)}
    emb = torch.randn(1, tokens, width, generator=g) * 0.25
    n = _valid_tokens(text, tokens)
    if spec.zero_pad:
        emb[:, n:] = 0
    out = {spec.name: emb.to(device=device, dtype=dtype)}
    if spec.mask:
        m = torch.zeros(1, tokens, dtype=torch.long)
        m[:, :n] = 1
        out[spec.mask] = m.to(device=device, dtype=spec.mask_dtype)
    return out


def _text_kwargs(texts: tuple, cfg: dict, prompt: str, negative: str, tokens: int, device, dtype,
                 negatives: bool) -> dict:
    out = {}
    for t in texts:
        w, n = int(t.width(cfg)), t.tokens or tokens
        out.update(_embed(prompt, t, w, n, device, dtype))
        if negatives:
            out.update({f"negative_{k}": v for k, v in _embed(negative, t, w, n, device, dtype).items()})
    return out


# ---------------------------------------------------------------------------------------------------- adapters
@dataclass(frozen=True)
class Adapter:
    family: str
    pipeline: str                   # diffusers pipeline class
    vae: str                        # diffusers VAE class
    vae_config: dict                # the released VAE's keys over the class defaults ({}: the defaults are it)
    vae_tiny: dict                  # CPU-sized VAE of the same compression factors
    vae_note: str
    scheduler: str
    texts: tuple                    # Text specs of the prompt embeddings
    scheduler_config: dict = field(default_factory=dict)
    negatives: bool = True          # __call__ takes negative embeddings (CFG)
    tiny_size: Size = Size(64, 64, 9)
    tiny_transformer: dict = field(default_factory=dict)  # keys over the registry's tiny config (VAE channels)
    extra: Callable | None = None   # (pipe, preset, size, seed, device, dtype) -> extra __call__ keywords
    components: Callable | None = None  # (preset, device, dtype, seed) -> extra pipeline components
    call: dict = field(default_factory=dict)        # fixed __call__ keywords (the pipeline's defaults otherwise)
    tiny_call: dict = field(default_factory=dict)
    frames_key: str = "num_frames"
    fps: float = 16.0
    vae_dtype: torch.dtype | None = torch.float32   # None: the transformer's dtype
    post: Callable | None = None    # (pipe) -> None: a setting the pipeline needs after it is built
    min_steps: tuple = (1, "")      # (fewest denoising steps the pipeline takes, why)
    pipeline_cls: Callable | None = None  # () -> the class, where `diffusers.<pipeline>` is a placeholder
    substitute: str | None = None   # what stands in for a component the pipeline would otherwise load (docs)
    prompt: bool = False            # __call__ takes the prompt text (tokenized in the call by a stand-in tokenizer)
    sized: bool = True              # __call__ takes height / width / frames (False: `extra` sizes its inputs)
    steps_key: str | None = "num_inference_steps"  # None: the pipeline's fixed schedule (no steps keyword)
    assemble: Callable | None = None  # (parts) -> pipeline, in place of pipeline_cls(**parts) (modular pipelines)


def _td(key, default=None):
    return lambda cfg: cfg.get(key, default) if cfg.get(key) is not None else default


# Wan lineage: UMT5 (4096 wide, 512 tokens, zeros past the prompt), the Wan 2.1 VAE (AutoencoderKLWan's class
# defaults are Wan2.1's vae/config.json; pipelines/wan.py TINY_VAE is the same compression at CPU width).
_UMT5 = (Text("prompt_embeds", _td("text_dim", 4096), zero_pad=True),)
_WAN_VAE_NOTE = "AutoencoderKLWan class defaults = Wan2.1 vae/config.json"
_WAN_TINY_VAE = {"base_dim": 8, "num_res_blocks": 1}


def _wan_adapter(name, pipeline, scheduler, *, z: int = 4, texts=_UMT5, **kw) -> Adapter:
    """`z`: the tiny transformer's latent channels (the tiny VAE's z_dim, with neutral latent statistics)."""
    tiny = {**_WAN_TINY_VAE, "z_dim": z, "latents_mean": [0.0] * z, "latents_std": [1.0] * z}
    return Adapter(name, pipeline, "AutoencoderKLWan", {}, tiny, _WAN_VAE_NOTE, scheduler, texts, **kw)


def _flow_shift(shift):
    return {"flow_shift": shift} if shift is not None else {}


# Wan2.1 scheduler/scheduler_config.json (pipelines/wan.py), at 480p's flow shift
from .wan import WAN21_UNIPC as _WAN_UNIPC  # noqa: E402


def _rand_image(size: Size, seed: int):
    """A seeded random RGB image of the video size (the conditioning frame of image-conditioned pipelines)."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    return Image.fromarray(rng.integers(0, 256, (size.height, size.width, 3), dtype=np.uint8))


def _image(pipe, preset, size, seed, device, dtype):
    return {"image": _rand_image(size, seed + 12)}


# laion/CLIP-ViT-H-14 (the image encoder of Wan I2V and ChronoEdit): 32 layers, 1280 wide, 16 heads, 224 px,
# patch 14 -> 257 tokens. Tiny: the same structure at 2 layers, the tiny transformer's image_dim wide.
CLIP_VIT_H14 = dict(hidden_size=1280, intermediate_size=5120, num_hidden_layers=32, num_attention_heads=16,
                    image_size=224, patch_size=14, projection_dim=1024, hidden_act="gelu")
CLIP_TINY = dict(hidden_size=16, intermediate_size=32, num_hidden_layers=2, num_attention_heads=2, image_size=32,
                 patch_size=8, projection_dim=16, hidden_act="gelu")


def _clip_vision(preset, device, dtype, seed):
    """The pipeline's CLIP image encoder (the ChronoEdit pipeline refuses precomputed image embeddings together
    with the image it VAE-encodes) with seeded random weights, and its image processor at the encoder's size."""
    from transformers import CLIPImageProcessor, CLIPVisionConfig, CLIPVisionModel

    from .families import _cast

    cfg = CLIP_TINY if preset == "tiny" else CLIP_VIT_H14
    enc = _seeded(lambda: CLIPVisionModel(CLIPVisionConfig(**cfg)), {}, seed + 5, device)
    _cast(enc, dtype).eval().requires_grad_(False)
    px = cfg["image_size"]
    proc = CLIPImageProcessor(size={"shortest_edge": px}, crop_size={"height": px, "width": px})
    return {"image_encoder": enc, "image_processor": proc}


# lllyasviel/flux_redux_bfl image_encoder (FramePack's): SigLIP so400m, patch 14 at 384 px -> 729 tokens of 1152.
SIGLIP_SO400M = dict(hidden_size=1152, intermediate_size=4304, num_hidden_layers=27, num_attention_heads=16,
                     image_size=384, patch_size=14)


def _siglip(preset, device, dtype, seed):
    from transformers import SiglipImageProcessor, SiglipVisionConfig, SiglipVisionModel

    from .families import _cast

    if preset == "tiny":  # the tiny transformer's image_proj_dim wide, 16 tokens
        cfg = dict(hidden_size=registry.config_for("framepack", "tiny")["image_proj_dim"], intermediate_size=32,
                   num_hidden_layers=2, num_attention_heads=2, image_size=32, patch_size=8)
    else:
        cfg = SIGLIP_SO400M
    enc = _seeded(lambda: SiglipVisionModel(SiglipVisionConfig(**cfg)), {}, seed + 5, device)
    _cast(enc, dtype).eval().requires_grad_(False)
    px = cfg["image_size"]
    return {"image_encoder": enc, "feature_extractor": SiglipImageProcessor(size={"height": px, "width": px})}


def _cu_seqlens(pipe, preset, size, seed, device, dtype):
    """Kandinsky 5 packs the Qwen tokens of a batch: one prompt of the full padded length."""
    n = registry.entry("kandinsky5").tiny_text if preset == "tiny" else registry.entry("kandinsky5").text
    cu = torch.tensor([0, n], dtype=torch.int32, device=device)
    return {"prompt_cu_seqlens": cu, "negative_prompt_cu_seqlens": cu.clone()}


def _cfg_guider(scale: float | None = None):
    from diffusers.guiders import ClassifierFreeGuidance

    return ClassifierFreeGuidance() if scale is None else ClassifierFreeGuidance(guidance_scale=scale)


ADAPTERS: dict[str, Adapter] = {}


def _add(a: Adapter) -> None:
    ADAPTERS[a.family] = a


_add(_wan_adapter("skyreels_v2", "SkyReelsV2Pipeline", "UniPCMultistepScheduler",
                  # Skywork/SkyReels-V2-*-Diffusers scheduler/scheduler_config.json: UniPC with flow sigmas
                  scheduler_config={"prediction_type": "flow_prediction", "use_flow_sigmas": True,
                                    "flow_shift": 8.0}, z=16, fps=24))
# AnyFlow folds guidance into its weights (guidance 1.0) and batches any negative embeddings it is given.
# Its guidance stays 1.0 (a --guidance above 1 would need negative embeddings the weights were not trained with).
_add(_wan_adapter("anyflow", "AnyFlowPipeline", "FlowMapEulerDiscreteScheduler", negatives=False,
                  call={"guidance_scale": 1.0}))
# VACE control channels: the inactive/reactive latents of the (empty) control video (2 z) and the 8x8 mask (64).
# AnyFlow-FAR: chunks of latent frames (1 + 3 x 6 + 2 at 81 frames, its default); tiny: 1-frame chunks.
_add(_wan_adapter("anyflow_far", "AnyFlowFARPipeline", "FlowMapEulerDiscreteScheduler", negatives=False,
                  call={"guidance_scale": 1.0}, tiny_call={"chunk_partition": [1, 1, 1]}))
_add(_wan_adapter("wan_vace", "WanVACEPipeline", "UniPCMultistepScheduler", scheduler_config=_WAN_UNIPC,
                  tiny_transformer={"vace_in_channels": 2 * 4 + 64}))
# HeliosPipeline runs one stage (the class default, 3 stages, is the pyramid pipeline's schedule).
_add(_wan_adapter("helios", "HeliosPipeline", "HeliosScheduler", scheduler_config={"stages": 1}, fps=24))
# Wan's I2V attention splits the image keys off the text by the 512-token text length: tiny runs keep all 512.
_add(_wan_adapter("chronoedit", "ChronoEditPipeline", "FlowMatchEulerDiscreteScheduler", extra=_image,
                  texts=(Text("prompt_embeds", _td("text_dim", 4096), tokens=512, zero_pad=True),),
                  components=_clip_vision, tiny_transformer={"in_channels": 4 + 4 + 4}))
_add(Adapter("sana_video", "SanaVideoPipeline", "AutoencoderKLWan", {},
             {**_WAN_TINY_VAE, "z_dim": 4, "latents_mean": [0.0] * 4, "latents_std": [1.0] * 4},
             "SANA-Video 2B decodes with the Wan2.1 VAE (its transformer reads 16 channels): AutoencoderKLWan class "
             "defaults", "DPMSolverMultistepScheduler",
             (Text("prompt_embeds", _td("caption_channels", 2304), mask="prompt_attention_mask"),),
             # the tiny size is in no aspect-ratio bin; the default size is one
             tiny_call={"use_resolution_binning": False}, frames_key="frames"))
_add(Adapter("motif_video", "MotifVideoPipeline", "AutoencoderKLWan", {},
             {**_WAN_TINY_VAE, "z_dim": 4, "latents_mean": [0.0] * 4, "latents_std": [1.0] * 4},
             "Motif-Video decodes with the Wan2.1 VAE (16 latent channels): AutoencoderKLWan class defaults",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("text_embed_dim", 4096), mask="prompt_attention_mask",
                   mask_dtype=torch.bool),),
             components=lambda *a: {"guider": _cfg_guider()}, tiny_transformer={"in_channels": 4 + 4 + 1}, fps=24))


# ------------------------------------------------------------------------------------------------------- build
def generating() -> list[str]:
    """Families whose full pipeline is built here (wan, wan14b: pipelines/wan.py; ltx2: pipelines/ltx2.py)."""
    return ["wan", "wan14b", "ltx2", *ADAPTERS]


def adapter(name: str) -> Adapter:
    if name not in ADAPTERS:
        raise PipelineError(f"--family {name}: {why_not(name)}")
    return ADAPTERS[name]


def why_not(name: str) -> str:
    """Why `name` does not generate here ("" where it does)."""
    if name in generating():
        return ""
    if name in LEFT_OUT:
        return LEFT_OUT[name]
    if name not in registry.ENTRIES:
        return f"unknown family (families: {', '.join(registry.names())})"
    return registry.entry(name).generate or "no offline pipeline adapter"


def _seeded(cls, kwargs: dict, seed: int, device):
    with torch.random.fork_rng(devices=[device] if torch.device(device).type == "cuda" else []):
        torch.manual_seed(seed)
        if torch.device(device).type == "cuda":
            torch.cuda.manual_seed(seed)
        with torch.device(device):
            return cls(**kwargs)


def vae_config(name: str, preset: str = "default") -> dict:
    a = adapter(name)
    return {**a.vae_config, **(a.vae_tiny if preset == "tiny" else {})}


def build_family_pipeline(name: str, preset: str = "default", *, device="cpu", dtype=torch.bfloat16,
                          seed: int = 0):
    """The family's diffusers pipeline: the registry's transformer, the VAE at its released (or tiny) config and
    the scheduler, all with seeded random weights on `device`; tokenizers and text encoders None."""
    import diffusers

    from .families import _cast

    a = adapter(name)
    device = torch.device(device)
    tiny = preset == "tiny"
    transformer = registry.build_model(name, "tiny" if tiny else "default", device=device, dtype=dtype, seed=seed,
                                       overrides=(a.tiny_transformer or None) if tiny else None)
    vae = _seeded(getattr(diffusers, a.vae), vae_config(name, preset), seed + 2, device)
    _cast(vae, a.vae_dtype or dtype).eval().requires_grad_(False)
    scheduler = getattr(diffusers, a.scheduler)(**a.scheduler_config)
    cls = a.pipeline_cls() if a.pipeline_cls is not None else getattr(diffusers, a.pipeline)
    params = {} if a.assemble is not None else inspect.signature(cls.__init__).parameters
    parts = {k: None for k in params if k.startswith(("text_encoder", "tokenizer", "image_encoder",
                                                        "image_processor", "feature_extractor"))}
    parts.update(transformer=transformer, vae=vae, scheduler=scheduler)
    if a.components is not None:
        parts.update(a.components(preset, device, dtype, seed))
    if a.assemble is not None:
        pipe = a.assemble(parts)
    else:
        pipe = cls(**{k: v for k, v in parts.items() if k in params})
    if not tiny and hasattr(vae, "enable_tiling"):
        # what the model cards do at the release sizes (a 720p HunyuanVideo or 163-frame Mochi decode does not fit
        # otherwise); it changes the VAE's memory, not the transformer's work
        vae.enable_tiling()
    if a.post is not None:
        a.post(pipe)
    pipe.set_progress_bar_config(disable=True)
    return pipe


def default_size(name: str, preset: str = "default") -> Size:
    return adapter(name).tiny_size if preset == "tiny" else registry.size_for(name)


def _call_params(pipe) -> dict:
    """The keywords a pipeline call takes: a modular pipeline's are its blocks' inputs (no signature defaults)."""
    blocks = getattr(pipe, "blocks", None)
    if blocks is not None and hasattr(blocks, "inputs"):
        return {p.name: None for p in blocks.inputs if p.name}
    return dict(inspect.signature(type(pipe).__call__).parameters)


def family_call(name: str, pipe, prompt: str, negative_prompt: str, *, preset: str = "default", device,
                dtype, size: Size | None = None, steps: int | None = None, guidance: float | None = None,
                seed: int = 0) -> dict:
    """The keyword arguments of one `pipe(...)` generation at the family's default size (or `size`): the
    prompt embeddings, size, steps (the pipeline's default; tiny: 2), guidance (the pipeline's default) and the
    family's own keywords; `generator` and `output_type` are the caller's."""
    a = adapter(name)
    tiny = preset == "tiny"
    size = size or default_size(name, preset)
    e = registry.entry(name)
    cfg = dict(pipe.transformer.config)
    negatives = a.negatives
    call = _text_kwargs(a.texts, cfg, prompt, negative_prompt, e.tiny_text if tiny else e.text, device, dtype,
                        negatives)
    if a.prompt:
        call["prompt"] = prompt
        if "negative_prompt" in _call_params(pipe):
            call["negative_prompt"] = negative_prompt
    if a.sized:
        call.update(height=size.height, width=size.width)
        call[a.frames_key] = size.frames
    params = _call_params(pipe)
    if a.steps_key is None:
        if steps is not None:
            raise PipelineError(f"--steps {steps}: {a.pipeline} runs its own fixed schedule ({a.min_steps[1]})")
    elif steps is not None:
        if steps < a.min_steps[0]:
            raise PipelineError(f"--steps {steps}: {a.pipeline} needs at least {a.min_steps[0]} ({a.min_steps[1]})")
        call["num_inference_steps"] = steps
    elif tiny:
        call["num_inference_steps"] = 2
    if guidance is not None:
        if "guidance_scale" in params:
            call["guidance_scale"] = guidance
        elif getattr(pipe, "guider", None) is not None:
            # pipelines that guide through a guider component (HunyuanVideo 1.5, Motif) take the scale there
            pipe.register_modules(guider=_cfg_guider(guidance))
    neg = params.get("negative_prompt")
    if negatives and not a.prompt and neg is not None and neg.default not in (None, inspect.Parameter.empty):
        call["negative_prompt"] = None  # its default text would conflict with the embeddings given
    call.update(a.call)
    if tiny:
        call.update(a.tiny_call)
    if a.extra is not None:
        call.update(a.extra(pipe, preset, size, seed, device, dtype))
    unknown = sorted(k for k in call if k not in params)
    if unknown:
        raise PipelineError(f"{a.pipeline}.__call__ takes no {', '.join(unknown)} (diffusers changed?)")
    return call



# ----------------------------------------------------------------------------------------- the other lineages
_HY_VAE_TINY = {"latent_channels": 4, "block_out_channels": (8, 8, 8, 8), "layers_per_block": 1,
                "norm_num_groups": 4}
# HunyuanVideo: Llama-3 hidden states (4096 wide, 256 tokens with the prompt mask) and CLIP-L pooled text (768);
# embedded guidance, true CFG off by default: no negative embeddings.
_add(Adapter("hunyuan_video", "HunyuanVideoPipeline", "AutoencoderKLHunyuanVideo", {}, _HY_VAE_TINY,
             "AutoencoderKLHunyuanVideo class defaults = hunyuanvideo-community/HunyuanVideo vae/config.json",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("text_embed_dim", 4096), mask="prompt_attention_mask"),
              Text("pooled_prompt_embeds", _td("pooled_projection_dim", 768), pooled=True)),
             scheduler_config={"shift": 7.0}, negatives=False, fps=24, vae_dtype=None))
# HunyuanVideo 1.5: Qwen2.5-VL hidden states (3584 wide, 1000 tokens) and ByT5 glyph text (1472 wide, 256 tokens),
# each with its mask (float, as encode_prompt returns them); CFG through the ClassifierFreeGuidance guider.
_add(Adapter("hunyuan_video15", "HunyuanVideo15Pipeline", "AutoencoderKLHunyuanVideo15", {},
             {"latent_channels": 4, "block_out_channels": (8, 8, 8, 8, 8), "layers_per_block": 1},
             "AutoencoderKLHunyuanVideo15 class defaults = HunyuanVideo-1.5 vae/config.json (32 channels, 16x)",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("text_embed_dim", 3584), mask="prompt_embeds_mask",
                   mask_dtype=torch.float32),
              Text("prompt_embeds_2", _td("text_embed_2_dim", 1472), tokens=256, mask="prompt_embeds_mask_2",
                   mask_dtype=torch.float32)),
             scheduler_config={"shift": 5.0}, components=lambda *a: {"guider": _cfg_guider()},
             tiny_size=Size(128, 128, 9), fps=24, vae_dtype=None))
# CogVideoX-5b: T5-XXL (4096 wide, 226 tokens); the release's VAE scales latents by 0.7 (the class default,
# 1.15258426, is the 2b's); CogVideoXDPMScheduler as in THUDM/CogVideoX-5b scheduler/scheduler_config.json.
_add(Adapter("cogvideox", "CogVideoXPipeline", "AutoencoderKLCogVideoX", {"scaling_factor": 0.7},
             {"latent_channels": 4, "block_out_channels": (8, 8, 8, 8), "layers_per_block": 1,
              "norm_num_groups": 2},
             "AutoencoderKLCogVideoX class defaults with the 5b's scaling_factor 0.7",
             "CogVideoXDPMScheduler",
             (Text("prompt_embeds", _td("text_embed_dim", 4096), zero_pad=True),),
             scheduler_config={"beta_schedule": "scaled_linear", "beta_start": 0.00085, "beta_end": 0.012,
                               "clip_sample": False, "prediction_type": "v_prediction", "rescale_betas_zero_snr":
                               True, "set_alpha_to_one": True, "timestep_spacing": "trailing",
                               "snr_shift_scale": 1.0},
             fps=8, vae_dtype=None))
# LTX-Video 0.9: T5-XXL (4096, 128 tokens with the mask); the VAE's class defaults are the 0.9.0 release's.
_add(Adapter("ltx", "LTXPipeline", "AutoencoderKLLTXVideo", {},
             {"latent_channels": 8, "block_out_channels": (8, 8, 8, 8), "decoder_block_out_channels": (8, 8, 8, 8),
              "layers_per_block": (1, 1, 1, 1, 1), "decoder_layers_per_block": (1, 1, 1, 1, 1)},
             "AutoencoderKLLTXVideo class defaults = Lightricks/LTX-Video 0.9.0 vae/config.json",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("caption_channels", 4096), mask="prompt_attention_mask"),),
             tiny_size=Size(128, 128, 9), fps=25, vae_dtype=None))
# Mochi 1: T5-XXL (4096, 256 tokens with the mask). Its latents take the prompt embeddings' dtype and reach the
# VAE uncast (as Latte's), so its VAE takes the transformer's dtype too.
_add(Adapter("mochi", "MochiPipeline", "AutoencoderKLMochi", {},
             {"encoder_block_out_channels": (32, 32, 32, 32),  # its norms: 32 groups
              "decoder_block_out_channels": (32, 32, 32, 32), "layers_per_block": (1, 1, 1, 1, 1)},
             "AutoencoderKLMochi class defaults = genmo/mochi-1-preview vae/config.json",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("text_embed_dim", 4096), mask="prompt_attention_mask"),),
             # the pipeline un-normalises exactly 12 latent channels: the tiny transformer reads 12 too
             tiny_size=Size(64, 64, 7), tiny_transformer={"in_channels": 12}, fps=30,
             min_steps=(2, "its linear-quadratic sigma schedule divides by zero at 1 step"), vae_dtype=None))
# Allegro: T5-XXL (4096, 512 tokens with the mask); its VAE decodes only tiled (diffusers has no untiled path),
# in tiles of 24 frames x sample_size pixels: the tiny size is one tile.
_add(Adapter("allegro", "AllegroPipeline", "AutoencoderKLAllegro", {},
             {"latent_channels": 4, "block_out_channels": (8, 8, 8, 8), "layers_per_block": 1,
              "norm_num_groups": 2, "sample_size": 128},
             "AutoencoderKLAllegro class defaults = rhymes-ai/Allegro vae/config.json; tiled decoding on",
             "EulerAncestralDiscreteScheduler",
             (Text("prompt_embeds", _td("caption_channels", 4096), mask="prompt_attention_mask"),),
             call={"clean_caption": False}, tiny_size=Size(128, 128, 24), fps=15,
             post=lambda pipe: pipe.vae.enable_tiling()))
# Latte-1 and EasyAnimate hand the transformer-dtype latents to the VAE uncast (their model cards load the whole
# pipeline in one dtype), so their VAE takes the transformer's dtype: an fp32 VAE fails on bf16 latents.
# Latte-1: T5-XXL (4096, 120 tokens); the VAE is Stable Diffusion's (sd-vae-ft-ema: 4 levels 128-512, 2 layers),
# not AutoencoderKL's one-level class defaults. `mask_feature` trims text it tokenized itself: not here.
_add(Adapter("latte", "LattePipeline", "AutoencoderKL",
             {"down_block_types": ("DownEncoderBlock2D",) * 4, "up_block_types": ("UpDecoderBlock2D",) * 4,
              "block_out_channels": (128, 256, 512, 512), "layers_per_block": 2, "sample_size": 512},
             {"block_out_channels": (8, 8, 8, 8), "layers_per_block": 1, "norm_num_groups": 2, "sample_size": 64},
             "AutoencoderKL at Stable Diffusion's VAE config (sd-vae-ft-ema), the one Latte-1 ships",
             "DDIMScheduler",
             (Text("prompt_embeds", _td("caption_channels", 4096)),),
             scheduler_config={"beta_schedule": "linear", "beta_start": 0.0001, "beta_end": 0.02,
                               "clip_sample": False},
             call={"clean_caption": False, "mask_feature": False}, frames_key="video_length",
             tiny_size=Size(64, 64, 4), fps=8, vae_dtype=None))
# EasyAnimate V5.1: Qwen2-VL hidden states (the transformer's text width, 256 tokens with the mask).
_add(Adapter("easyanimate", "EasyAnimatePipeline", "AutoencoderKLMagvit", {},
             {"latent_channels": 4, "block_out_channels": [8, 8, 8, 8], "layers_per_block": 1,
              "norm_num_groups": 2},
             "AutoencoderKLMagvit class defaults (the EasyAnimate V5.1 VAE as diffusers ports it)",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("text_embed_dim", 3584), mask="prompt_attention_mask"),),
             fps=8, vae_dtype=None))
# Kandinsky 5 Lite: Qwen2.5-VL hidden states (3584, 512 tokens, packed: cu_seqlens) and CLIP-L pooled (768); the
# VAE is HunyuanVideo's.
_add(Adapter("kandinsky5", "Kandinsky5T2VPipeline", "AutoencoderKLHunyuanVideo", {}, _HY_VAE_TINY,
             "AutoencoderKLHunyuanVideo class defaults (Kandinsky 5 decodes with HunyuanVideo's VAE)",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds_qwen", _td("in_text_dim", 3584)),
              Text("prompt_embeds_clip", _td("in_text_dim2", 768), pooled=True)),
             scheduler_config={"shift": 10.0}, extra=_cu_seqlens, fps=24, vae_dtype=None))
# Kandinsky 6 (text to video; no audio VAE/vocoder: the pipeline makes no audio without them): Qwen hidden states
# and CLIP pooled text.
_add(Adapter("kandinsky6", "Kandinsky6TI2VAPipeline", "AutoencoderKLHunyuanVideo", {}, _HY_VAE_TINY,
             "AutoencoderKLHunyuanVideo class defaults", "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("in_text_dim", 3584)),
              Text("pooled_prompt_embeds", _td("in_text_dim2", 768), pooled=True)),
             call={"sample_audio": False}, fps=24, vae_dtype=None))
def _animate_inputs(pipe, preset, size, seed, device, dtype):
    """Wan-Animate (animate mode): the reference image, a pose video of the size's frames, and face crops at the
    motion encoder's size, all seeded random."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed + 13)
    fs = pipe.transformer.config.motion_encoder_size

    def frames(h, w):
        return [Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)) for _ in range(size.frames)]

    return {"image": _rand_image(size, seed + 12), "pose_video": frames(size.height, size.width),
            "face_video": frames(fs, fs)}


# HunyuanVideo-FramePack (I2V): HunyuanVideo's text side and VAE, the conditioning image through a SigLIP image
# encoder with seeded random weights; sections of 9 latent frames (tiny: 2) with their history latents.
_add(Adapter("framepack", "HunyuanVideoFramepackPipeline", "AutoencoderKLHunyuanVideo", {}, _HY_VAE_TINY,
             "AutoencoderKLHunyuanVideo class defaults = HunyuanVideo's vae/config.json",
             "FlowMatchEulerDiscreteScheduler",
             (Text("prompt_embeds", _td("text_embed_dim", 4096), mask="prompt_attention_mask"),
              Text("pooled_prompt_embeds", _td("pooled_projection_dim", 768), pooled=True)),
             negatives=False, extra=_image, components=lambda *a: _siglip(*a), tiny_call={"latent_window_size": 2},
             fps=30, vae_dtype=None))
# Wan2.2-Animate: one segment of the size's frames (77); the CLIP image encoder as ChronoEdit's; guidance 1.0 by
# default (the negative embeddings are read only under CFG).
_add(_wan_adapter("wan_animate", "WanAnimatePipeline", "UniPCMultistepScheduler",
                  scheduler_config=_WAN_UNIPC, extra=_animate_inputs, components=_clip_vision,
                  texts=(Text("prompt_embeds", _td("text_dim", 4096), tokens=512, zero_pad=True),),
                  frames_key="segment_frame_length"))

def _consisid_cls():
    # diffusers exports ConsisIDPipeline as a placeholder without opencv; its module imports cv2 only when present
    # and uses it only to draw face keypoints (`kps_cond`, for configs with is_kps: not the released preview's).
    from diffusers.pipelines.consisid.pipeline_consisid import ConsisIDPipeline

    return ConsisIDPipeline


def _consisid_inputs(pipe, preset, size, seed, device, dtype):
    """The conditioning image, and in place of the face models (insightface + EVA-CLIP) what they hand the
    pipeline: the identity embedding (LFE_id_dim) and the ViT's hidden states (LFE_num_scale x 577 tokens x
    LFE_vit_dim), seeded random."""
    cfg = pipe.transformer.config
    g = torch.Generator(device="cpu").manual_seed(seed + 14)
    n = 5 if preset == "tiny" else 577
    vit = [(torch.randn(1, n, cfg.LFE_vit_dim, generator=g) * 0.25).to(device, dtype)
           for _ in range(cfg.LFE_num_scale)]
    return {"image": _rand_image(size, seed + 12), "id_cond": (torch.randn(1, cfg.LFE_id_dim, generator=g) * 0.25)
            .to(device, dtype), "id_vit_hidden": vit}


# ConsisID (CogVideoX-5B I2V base): T5 226 tokens, CogVideoX's VAE at the 5b's scaling factor, its DPM scheduler;
# the face models' outputs as seeded random tensors.
_add(Adapter("consisid", "ConsisIDPipeline", "AutoencoderKLCogVideoX", {"scaling_factor": 0.7},
             {"latent_channels": 4, "block_out_channels": (8, 8, 8, 8), "layers_per_block": 1,
              "norm_num_groups": 2},
             "AutoencoderKLCogVideoX class defaults with the 5b's scaling_factor 0.7",
             "CogVideoXDPMScheduler", (Text("prompt_embeds", _td("text_embed_dim", 4096), zero_pad=True),),
             scheduler_config=ADAPTERS["cogvideox"].scheduler_config, extra=_consisid_inputs, fps=8, vae_dtype=None,
             pipeline_cls=_consisid_cls,
             substitute="the face models' outputs (identity embedding, 5 ViT hidden states) as seeded random tensors; "
                        "the pipeline class imported from its module (diffusers' top-level name is an opencv "
                        "placeholder)"))

class RandomWeightsGuardrail:
    """Stands in for Cosmos' safety checker (cosmos_guardrail: a text blocklist and classifier and a video
    classifier with face blurring, each with its own downloaded models) in the random-weight architecture build
    only: a prompt passes, a video comes back unchanged. Random weights make noise, which there is nothing in to
    filter. A real Cosmos checkpoint (`--model DIR`) loads with its own checker, which this never replaces."""

    def to(self, *args, **kwargs):
        return self

    def check_text_safety(self, prompt) -> bool:
        return True

    def check_video_safety(self, video):
        return video


def _cosmos_components(preset, device, dtype, seed):
    return {"safety_checker": RandomWeightsGuardrail()}


# Cosmos-1.0 Text2World: T5-11B (1024 wide, 512 tokens, zeros past the prompt, no mask kept by the transformer);
# the Cosmos tokenizer VAE (8x8x8, 16 channels: AutoencoderKLCosmos' class defaults); EDM Euler.
_add(Adapter("cosmos", "CosmosTextToWorldPipeline", "AutoencoderKLCosmos", {},
             {"latent_channels": 4, "encoder_block_out_channels": (8, 8, 8, 8),
              "decode_block_out_channels": (8, 8, 8, 8), "num_layers": 1, "attention_resolutions": (),
              "latents_mean": None, "latents_std": None},
             "AutoencoderKLCosmos class defaults = Cosmos-1.0 tokenizer CV8x8x8 (16 channels)",
             "EDMEulerScheduler", (Text("prompt_embeds", _td("text_embed_dim", 1024), zero_pad=True),),
             components=_cosmos_components, fps=30, vae_dtype=None,
             substitute="the safety checker (cosmos_guardrail and its models) replaced by a pass-through "
                        "(RandomWeightsGuardrail) in the random-weight build only"))


# Qwen2's special tokens that Cosmos3OmniPipeline's prompt path uses (ChatML turns, the end of text, the start of
# the generated video).
QWEN2_SPECIALS = ("<|im_end|>", "<|endoftext|>", "<|im_start|>", "<|vision_start|>", "<|vision_end|>")
_CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n{% endfor %}"
           "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")


def byte_chat_tokenizer():
    """A byte-level BPE tokenizer built here with no merges: one token per UTF-8 byte (ids 0-255), Qwen2's special
    tokens after them (ids 256-260) and a ChatML chat template, the format Qwen2's tokenizer applies. It stands in
    for the release's Qwen2 tokenizer (vocab.json and merges.txt, which are not here): the ids are not the
    release's, and a prompt takes about 4x the release's token count (Qwen2 merges ~4 bytes of English a token)."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    vocab = {c: i for i, c in enumerate(pre_tokenizers.ByteLevel.alphabet())}
    tk = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    tok = PreTrainedTokenizerFast(tokenizer_object=tk, eos_token=QWEN2_SPECIALS[0], pad_token=QWEN2_SPECIALS[1],
                                  additional_special_tokens=list(QWEN2_SPECIALS[2:]))
    tok.chat_template = _CHATML
    return tok


BYTE_VOCAB = 256 + len(QWEN2_SPECIALS)


def _cosmos3_components(preset, device, dtype, seed):
    # `enable_safety_checker=False` is the pipeline's own switch: its default would build CosmosSafetyChecker
    # (cosmos_guardrail and its downloaded models); a real checkpoint through --model DIR keeps its checker.
    return {"text_tokenizer": byte_chat_tokenizer(), "enable_safety_checker": False}


# Wan2.2-TI2V-5B's VAE (Cosmos3 decodes with it: 48 channels, 16x16 spatial through a 2x2 patch, 4x temporal); its
# 48 per-channel latent statistics are neutral here (zeros and ones: random weights give no latent distribution).
_WAN22_VAE = {"base_dim": 160, "decoder_base_dim": 256, "z_dim": 48, "is_residual": True, "in_channels": 12,
              "out_channels": 12, "patch_size": 2, "scale_factor_spatial": 16, "scale_factor_temporal": 4,
              "latents_mean": [0.0] * 48, "latents_std": [1.0] * 48}

# Cosmos3-Omni text to video: the pipeline tokenizes the prompt itself (chat template + duration and resolution
# templates) and the transformer embeds the token ids; no text encoder. UniPC at its class defaults (the release's
# scheduler config is not here; the pipeline sets its own timesteps).
_add(Adapter("cosmos3", "Cosmos3OmniPipeline", "AutoencoderKLWan", _WAN22_VAE,
             {**_WAN22_VAE, "base_dim": 8, "decoder_base_dim": 8, "z_dim": 2, "num_res_blocks": 1,
              "latents_mean": [0.0] * 2, "latents_std": [1.0] * 2},
             "AutoencoderKLWan at Wan2.2-TI2V-5B's config (48 channels, 16x spatial), neutral latent statistics",
             "UniPCMultistepScheduler", (), negatives=False, prompt=True, components=_cosmos3_components,
             tiny_size=Size(32, 32, 5), tiny_transformer={"vocab_size": BYTE_VOCAB}, fps=24, vae_dtype=None,
             call={"fps": 24.0},
             substitute="the release's Qwen2 tokenizer replaced by a byte-level one built here (one token per UTF-8 "
                        "byte, Qwen2's special tokens, a ChatML template): prompts are about 4x the release's "
                        "token count; the safety checker off through the pipeline's enable_safety_checker=False"))


def _refiner_encode_prompt(pipe, prompt: str, *, device, dtype):
    """In place of SanaWMLTX2Refiner._encode_prompt's Gemma-3 tokenizer and encoder: seeded stand-ins for Gemma-3's
    stacked hidden states of `prompt` (pipelines/ltx2.py's, left-padded to the pipeline's text length as its
    tokenizer pads), packed and normalised as the pipeline packs them, then the pipeline's own text connectors."""
    from diffusers.pipelines.sana_wm.refiner import _pack_text_embeds

    from .ltx2 import ltx2_prompt_embeds

    tokens = pipe.text_max_sequence_length
    n = _valid_tokens(prompt, tokens)
    emb, mask = ltx2_prompt_embeds(pipe, prompt, tokens=tokens, device=device, dtype=dtype, valid=n)
    mask = mask.flip(-1)  # left padding
    cfg = pipe.connectors.config
    hidden = emb.flip(1).unflatten(2, (cfg.caption_channels, cfg.text_proj_in_factor))
    packed = _pack_text_embeds(hidden, mask.sum(-1), device=device, padding_side="left").to(dtype)
    out, _, out_mask = pipe.connectors(packed, mask)
    return out.to(device=device, dtype=dtype), out_mask.to(device)


def _refiner_post(pipe):
    import types

    pipe._encode_prompt = types.MethodType(_refiner_encode_prompt, pipe)


def _refiner_components(preset, device, dtype, seed):
    from diffusers.pipelines.ltx2 import LTX2TextConnectors

    from .families import _cast
    from .ltx2 import TINY_CONNECTORS

    tiny = preset == "tiny"
    con = _seeded(LTX2TextConnectors, TINY_CONNECTORS if tiny else {}, seed + 1, device)
    _cast(con, dtype).eval().requires_grad_(False)
    # the distilled sigmas pass through unshifted (the pipeline's docstring: shift=1.0)
    return {"connectors": con, "text_max_sequence_length": registry.entry("sana_wm_refiner").tiny_text if tiny
            else registry.entry("sana_wm_refiner").text}


def _refiner_latent(pipe, preset, size, seed, device, dtype):
    """Stand-in for the SANA-WM base model's output (stage 1, which the refiner refines): seeded random latents of
    the LTX-2 VAE's shape at this video size ((F - 1) / 8 + 1 latent frames, 32x spatial, its channels)."""
    vae = pipe.vae
    t = (size.frames - 1) // vae.temporal_compression_ratio + 1
    h, w = size.height // vae.spatial_compression_ratio, size.width // vae.spatial_compression_ratio
    g = torch.Generator(device="cpu").manual_seed(seed + 15)
    return {"sana_latent": torch.randn(1, vae.config.latent_channels, t, h, w, generator=g).to(device, dtype)}


# SANA-WM refiner (stage 2): the LTX-2 video VAE (pipelines/ltx2.py's release config), LTX-2's text connectors,
# FlowMatchEuler at shift 1; its own distilled 3-sigma schedule per AR block (block_size 3, 1 sink + 10 history).
from .ltx2 import DEFAULT_VAE as _LTX2_VAE, TINY_VAE as _LTX2_TINY_VAE  # noqa: E402

_add(Adapter("sana_wm_refiner", "SanaWMLTX2Refiner", "AutoencoderKLLTX2Video", _LTX2_VAE,
             # the tiny VAE compresses 2x (one level): its ratios stated, which the class does not derive
             {**_LTX2_TINY_VAE, "spatial_compression_ratio": 2, "temporal_compression_ratio": 2},
             "AutoencoderKLLTX2Video class defaults at LTX-2's 32x / 8x compression (SANA-WM decodes with it)",
             "FlowMatchEulerDiscreteScheduler", (), scheduler_config={"shift": 1.0}, negatives=False, prompt=True,
             sized=False, steps_key=None, extra=_refiner_latent, components=_refiner_components,
             post=_refiner_post, tiny_size=Size(32, 32, 9), fps=cached.REFINER_FPS,
             call={"fps": cached.REFINER_FPS}, tiny_call={"block_size": 1, "kv_max_frames": 2},
             min_steps=(1, "3 distilled sigmas per AR block"), vae_dtype=None,
             substitute="the stage-1 input (a SANA-WM base-model latent) as seeded random latents of the LTX-2 "
                        "VAE's shape; Gemma-3's tokenizer and hidden states as seeded random stacked hidden states "
                        "(as LTX-2's), through the pipeline's own text connectors"))


def _minimax_assemble(parts: dict):
    """MiniMax-H3's modular pipeline assembled here from diffusers' own blocks (MiniMaxH3Blocks) and components
    with seeded random weights, in place of the release repository's modular model index. Its text encoder step
    (Qwen3-VL, read after its 50th layer) is left out of the blocks: its outputs, the prompt embeddings and their
    per-row text tags, are inputs of the blocks after it, given as seeded stand-ins."""
    from diffusers.modular_pipelines import MiniMaxH3Blocks

    blocks = MiniMaxH3Blocks()
    blocks.sub_blocks.pop("text_encoder")
    pipe = blocks.init_pipeline()
    pipe.update_components(**{k: parts[k] for k in ("transformer", "vae", "audio_vae", "scheduler",
                                                    "audio_scheduler")})
    return pipe


def _minimax_components(preset, device, dtype, seed):
    import diffusers

    from .families import _cast

    tiny = preset == "tiny"
    c = registry.config_for("minimax_h3", "tiny")["audio_in_channels"] if tiny else 32
    # AutoencoderKLMiniMaxH3Audio's class defaults; its latent statistics (None in the class) neutral
    cfg = {"latents_mean": [0.0] * c, "latents_std": [1.0] * c}
    if tiny:
        cfg.update(encoder_dim=4, latent_dim=4 * c, latent_channels=c, num_attention_heads=2, decoder_dim=128)
    audio_vae = _seeded(diffusers.AutoencoderKLMiniMaxH3Audio, cfg, seed + 3, device)
    _cast(audio_vae, dtype).eval().requires_grad_(False)
    return {"audio_vae": audio_vae, "audio_scheduler": diffusers.MiniMaxH3Scheduler()}


def _minimax_tags(pipe, preset, size, seed, device, dtype):
    e = registry.entry("minimax_h3")
    n = e.tiny_text if preset == "tiny" else e.text
    from diffusers.modular_pipelines.minimax_h3.modular_pipeline import MINIMAX_H3_TEXT_TAG

    # On the CPU whatever the pipeline's device, as the pipeline's own text step makes them: the layout step indexes
    # its CPU-built tag row with them and moves the result to the device itself (tags on the GPU failed there with
    # "Expected all tensors to be on the same device").
    return {"text_token_tags": torch.full((n,), MINIMAX_H3_TEXT_TAG, dtype=torch.long)}


# MiniMax-H3 text to video + audio (t2va): guidance-distilled (no negative prompt, one call a step); Qwen3-VL
# hidden states (text_dim 5120 wide) with their text tags; the video VAE (24 channels, 16x, 17n+5 frames) and the
# audio VAE at their class defaults; 124 frames (5.2 s at 24 fps: the pipeline takes 5 to 15 s).
_add(Adapter("minimax_h3", "MiniMaxH3ModularPipeline", "AutoencoderKLMiniMaxH3", {},
             {"latent_channels": 4, "block_out_channels": (8,) * 6, "layers_per_block": 1, "norm_num_groups": 4,
              "decoder_num_layers": 1, "decoder_num_attention_heads": 2, "decoder_attention_head_dim": 8,
              "latents_mean": (0.0,) * 4, "latents_std": (1.0,) * 4},
             "AutoencoderKLMiniMaxH3 class defaults (its neutral latent statistics)", "MiniMaxH3Scheduler",
             (Text("prompt_embeds", _td("text_dim", 5120)),), negatives=False, extra=_minimax_tags,
             components=_minimax_components, assemble=_minimax_assemble, tiny_size=Size(32, 32, 124), fps=24,
             vae_dtype=None, min_steps=(2, "its scheduler's set_timesteps refuses 1 step without explicit sigmas"),
             substitute="assembled from diffusers' MiniMaxH3Blocks without the Qwen3-VL text encoder step (the "
                        "release's modular model index is not here); the audio VAE's latent statistics neutral"))


def _wan_animate2_assemble(parts: dict):
    """Wan-Animate-2's modular pipeline assembled here from diffusers' own blocks (WanAnimate2Blocks) and components
    with seeded random weights, in place of the release repository's modular model index. Its text encoder step
    (UMT5) is left out of the blocks: its outputs (the prompt, negative and reference-prompt embeddings) are inputs
    of the blocks after it, given as seeded stand-ins."""
    from diffusers.modular_pipelines import WanAnimate2Blocks

    blocks = WanAnimate2Blocks()
    blocks.sub_blocks.pop("text_encoder")
    pipe = blocks.init_pipeline()
    pipe.update_components(**{k: parts[k] for k in ("transformer", "vae", "image_encoder", "scheduler")})
    return pipe


def _wan_animate2_components(preset, device, dtype, seed):
    from transformers import CLIPVisionConfig, CLIPVisionModel

    from .families import _cast

    # The transformer's image embedding reads CLIP ViT-H/14's 1280-wide tokens at 224 px (the blocks resize to it):
    # the tiny encoder keeps that width and size, with one narrow layer.
    cfg = CLIP_VIT_H14 if preset != "tiny" else {**CLIP_VIT_H14, "intermediate_size": 64, "num_hidden_layers": 1,
                                                   "num_attention_heads": 2}
    enc = _seeded(lambda: CLIPVisionModel(CLIPVisionConfig(**cfg)), {}, seed + 5, device)
    _cast(enc, dtype).eval().requires_grad_(False)
    return {"image_encoder": enc}


def _wan_animate2_inputs(pipe, preset, size, seed, device, dtype):
    """The reference character image and a driving video of the size's frames, seeded random; the UMT5 embeddings
    of the reference prompt (the blocks' `prompt_ref`, a fixed text) as a seeded stand-in too."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed + 13)
    video = [Image.fromarray(rng.integers(0, 256, (size.height, size.width, 3), dtype=np.uint8))
             for _ in range(size.frames)]
    e = registry.entry("wan_animate2")
    spec = _UMT5[0]
    ref = _embed("\u4eba\u7269\u52a8\u4f5c\u7684\u53c2\u8003\u89c6\u9891", spec,
                 int(spec.width(dict(pipe.transformer.config))), e.tiny_text if preset == "tiny" else e.text, device,
                 dtype)
    return {"image": _rand_image(size, seed + 12), "driving_video": video, "prompt_ref_embeds": ref["prompt_embeds"]}


# Wan-Animate-2 (14B): one segment of the size's frames (the blocks' segment_frame_length) driven by a random video;
# UMT5 embeddings (4096 wide, 512 tokens), CFG through the blocks' guider; the Wan2.1 VAE; FlowMatchEuler at its
# class defaults (the blocks pass a generator to the scheduler's step, which UniPC does not take).
_add(_wan_adapter("wan_animate2", "WanAnimate2ModularPipeline", "FlowMatchEulerDiscreteScheduler", z=16,
                  extra=_wan_animate2_inputs, components=_wan_animate2_components, assemble=_wan_animate2_assemble,
                  frames_key="segment_frame_length", fps=24,
                  substitute="assembled from diffusers' WanAnimate2Blocks without the UMT5 text encoder step (the "
                             "release's modular model index is not here); the reference prompt's embeddings seeded "
                             "as the prompt's"))

# Seeded call inputs that stay on the CPU whatever the pipeline's device, because the pipeline's own step that makes
# them makes them there and the step reading them mixes them with CPU tensors (every other seeded tensor goes to the
# pipeline's device; tests/test_generate_families.py checks both on the meta device).
HOST_INPUTS: dict[str, tuple[str, ...]] = {"minimax_h3": ("text_token_tags",)}

# Families that do not generate here, and why.
LEFT_OUT: dict[str, str] = {
}


def generate_family(pipe, call: dict, *, fps: float, generator=None):
    """Run one family generation (`call` from family_call, passed as is: a None there is meant) and return the
    video as pipelines.generic.Generated ((F, H, W, 3) in [0, 1]; MiniMax-H3's soundtrack as its audio track)."""
    import numpy as np

    from .generic import Generated, _frames

    with torch.no_grad():
        out = pipe(**call, generator=generator, output_type="np")
    if hasattr(out, "get") and hasattr(out, "values") and not isinstance(out, dict):  # a modular PipelineState
        audio, rate = out.get("audio"), out.get("sampling_rate")
        return Generated(_frames(out.get("videos")), None if audio is None else audio[0].float().cpu(), rate, fps)
    # Cosmos3OmniPipelineOutput names its frames `video`; the SANA-WM refiner returns the array itself
    video = out if isinstance(out, (torch.Tensor, np.ndarray)) else getattr(out, "frames", None)
    return Generated(_frames(video if video is not None else out.video), None, None, fps)
