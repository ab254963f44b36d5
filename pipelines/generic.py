"""Any local diffusers video pipeline folder: load it offline and run one generation, for generate_video.py and
e2e_report.py `--model DIR`.

`model_index.json` decides the pipeline class (`DiffusionPipeline.from_pretrained(..., local_files_only=True)`);
the folder's own components and the pipeline's own `__call__` defaults (size, frames) are used. The prompt goes to
the pipeline's text encoder when the folder has one; a folder saved without one (tokenizer and text encoder None)
gets seeded random prompt embeddings of the shape its transformer reads, for the families whose embedding shape is
known here (Wan, LTX-2); any other such folder is refused with the reason.
"""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from .wan import PipelineError, read_model_index


def check_pipeline_dir(model_dir: str | Path) -> tuple[Path, str]:
    """(folder, pipeline class name) for a local diffusers video pipeline folder; PipelineError otherwise."""
    p, name, _ = _checked_index(model_dir)
    return p, name


def _checked_index(model_dir: str | Path) -> tuple[Path, str, dict]:
    import diffusers

    p, info = read_model_index(model_dir, "pipeline folder")
    name = str(info.get("_class_name", ""))
    cls = getattr(diffusers, name, None)
    if cls is None:
        raise PipelineError(f"--model {model_dir}: model_index.json names {name or 'no class'}, which this "
                            f"diffusers ({diffusers.__version__}) does not have")
    if frames_param(cls) is None:
        raise PipelineError(f"--model {model_dir}: model_index.json describes {name}, not a video pipeline (its "
                            f"__call__ takes none of {', '.join(FRAME_PARAMS)})")
    if "transformer" not in info:
        raise PipelineError(f"--model {model_dir}: {name} has no transformer component (vidattn covers "
                            f"transformer video models)")
    return p, name, info


def load_pipeline(model_dir: str | Path, *, device, dtype):
    from diffusers import DiffusionPipeline
    from diffusers.utils import logging as dlogging

    path, _, info = _checked_index(model_dir)
    # Components saved as None (e.g. no text encoder) must be passed as None again.
    absent = {k: None for k, v in info.items()
              if not k.startswith("_") and isinstance(v, list) and all(x is None for x in v)}
    level = dlogging.get_verbosity()
    dlogging.set_verbosity_error()
    try:
        pipe = DiffusionPipeline.from_pretrained(str(path), local_files_only=True, dtype=dtype, **absent)
    finally:
        dlogging.set_verbosity(level)
    pipe.to(device)
    pipe.set_progress_bar_config(disable=True)
    return pipe


# How video pipelines name their frame count: most `num_frames`, Latte `video_length`, Sana-Video `frames`.
FRAME_PARAMS = ("num_frames", "video_length", "frames")


def frames_param(pipe_or_cls) -> str | None:
    """The name the pipeline's `__call__` takes its frame count by (FRAME_PARAMS), None for no video pipeline."""
    cls = pipe_or_cls if isinstance(pipe_or_cls, type) else type(pipe_or_cls)
    params = inspect.signature(cls.__call__).parameters
    return next((n for n in FRAME_PARAMS if n in params), None)


def call_defaults(pipe) -> dict:
    """The pipeline's own `__call__` defaults for height, width, num_frames (by whatever name it takes the frame
    count: `frames_param`), steps, guidance (None where absent)."""
    params = inspect.signature(type(pipe).__call__).parameters
    names = ("height", "width", "num_frames", "num_inference_steps", "guidance_scale", "frame_rate")
    alias = {"num_frames": frames_param(pipe) or "num_frames"}
    out = {}
    for n in names:
        key = alias.get(n, n)
        out[n] = params[key].default if key in params and params[key].default is not inspect.Parameter.empty \
            else None
    return out


def _has_text_encoder(pipe) -> bool:
    return getattr(pipe, "text_encoder", None) is not None and getattr(pipe, "tokenizer", None) is not None


def prompt_kwargs(pipe, prompt: str, negative_prompt: str, *, device, dtype, tokens: int | None = None) -> dict:
    """How the prompt reaches the pipeline: the text itself, or embeddings (module docstring)."""
    if _has_text_encoder(pipe):
        return {"prompt": prompt, "negative_prompt": negative_prompt}
    name = type(pipe).__name__
    if name.startswith("LTX2"):
        from .ltx2 import ltx2_prompt_embeds

        n = tokens or 1024
        e, m = ltx2_prompt_embeds(pipe, prompt, tokens=n, device=device, dtype=dtype)
        ne, nm = ltx2_prompt_embeds(pipe, negative_prompt, tokens=n, device=device, dtype=dtype)
        return dict(prompt_embeds=e, prompt_attention_mask=m, negative_prompt_embeds=ne,
                    negative_prompt_attention_mask=nm)
    if name.startswith("Wan"):
        from .wan import text_embeddings

        dim = pipe.transformer.config.text_dim
        return dict(prompt_embeds=text_embeddings(prompt, dim, device=device, dtype=dtype),
                    negative_prompt_embeds=text_embeddings(negative_prompt, dim, device=device, dtype=dtype))
    raise PipelineError(f"{name} was saved without a text encoder and tokenizer, and the shape of its prompt "
                        f"embeddings is not known here (Wan and LTX-2 are): save the folder with its text encoder")


@dataclass
class Generated:
    frames: np.ndarray          # (F, H, W, 3) float in [0, 1]
    audio: torch.Tensor | None  # (channels, samples) or None
    sample_rate: int | None
    fps: float


def _frames(video) -> np.ndarray:
    v = video[0] if isinstance(video, (list, tuple)) or (hasattr(video, "ndim") and video.ndim == 5) else video
    if isinstance(v, torch.Tensor):
        v = v.float().cpu().numpy()
    v = np.asarray(v)
    if v.ndim == 4 and v.shape[1] in (1, 3) and v.shape[-1] not in (1, 3):
        v = v.transpose(0, 2, 3, 1)  # (F, C, H, W) -> (F, H, W, C)
    return v


def generate(pipe, call: dict, *, fps: float) -> Generated:
    """Run the pipeline (`call`: keyword arguments, filtered to what its `__call__` takes) and return the video,
    with its audio track where the pipeline gives one."""
    params = inspect.signature(type(pipe).__call__).parameters
    kw = {k: v for k, v in call.items() if k in params and v is not None}
    kw["output_type"] = "np"
    with torch.no_grad():
        out = pipe(**kw)
    audio = getattr(out, "audio", None)
    rate = None
    if audio is not None:
        audio = audio[0] if audio.ndim == 3 else audio
        voc = getattr(pipe, "vocoder", None)
        rate = int(getattr(getattr(voc, "config", None), "output_sampling_rate", 0) or 16000)
    return Generated(_frames(out.frames), audio, rate, fps)
