#!/usr/bin/env python3
"""Generate a video offline using vidattn or SDPA attention: Wan 2.1 (default), any family vidattn routes whose
pipeline is built offline (`--family NAME`; LTX-2 with its audio track), or any local diffusers video pipeline
folder (`--model DIR`).

    python scripts/generate_video.py --prompt "a red fox running through snow" --out fox.mp4
    python scripts/generate_video.py --family hunyuan_video --out hv.mp4   # 13B architecture, 720x1280x129
    python scripts/generate_video.py --family ltx2 --out ltx2.mp4          # 19B architecture, video + audio
    python scripts/generate_video.py --family cogvideox --tiny --steps 2   # the tiny config on the CPU
    python scripts/generate_video.py --model /path/to/pipeline --out v.mp4  # model_index.json picks the pipeline
    python scripts/generate_video.py --list                                 # every family, and which generate

`--family NAME` builds the family's diffusers pipeline (pipelines/registry.py, pipelines/generate.py): the
transformer from the real config of its released checkpoint, the VAE at its released config, the pipeline's
scheduler, all with seeded random weights, offline; no text encoder: the prompt becomes seeded random embeddings of
the text encoders' shapes (with the masks, pooled and negative embeddings the pipeline takes). Size, steps and
guidance are the pipeline's defaults unless given. Families whose pipeline cannot be built that way (`--list`:
generate "no") stop with the reason and name what measures them instead: `scripts/e2e_report.py --family NAME`
(one transformer forward at the pipeline's default size, SDPA vs vidattn), or `--model DIR` with a local folder.

Defaults: the Wan2.1-T2V-1.3B architecture with seeded random weights (no download), 480x832, 81 frames, 50 steps,
guidance 5.0, vidattn attention, bf16 on CUDA. `--model DIR` loads every component of the folder, its text encoder
included, and the prompt is encoded by it; only a Wan folder saved without a text encoder takes the Wan path above
(the prompt hashed into embeddings, per-forward timings).
Without a GPU and without an explicit --preset, it runs the tiny preset on the CPU in fp32 instead.
Random weights give noise-like videos; the timings are those of the real architecture.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
# Families with a full offline pipeline here (the rest: e2e_report.py --family NAME measures their transformer).
from pipelines.registry import GENERATES as GENERATE_FAMILIES  # noqa: E402


def log(msg: str) -> None:
    print(f"[generate] {msg}", flush=True)


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (0 would otherwise read as "the default" further on)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a whole number, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be a number, got {text!r}") from None
    if not (0 < value < float("inf")):
        raise argparse.ArgumentTypeError(f"must be > 0, got {text}")
    return value


def check_out_path(out: str) -> Path:
    """The --out file, checked before any model is built (a bad path used to fail after the whole generation): an
    .mp4 name whose folder exists or can be made and is writable."""
    path = Path(out)
    if path.is_dir():
        raise SystemExit(f"error: --out {out!r} is a folder; name the .mp4 file to write")
    if path.suffix.lower() != ".mp4":
        raise SystemExit(f"error: --out must name an .mp4 file, got {out!r}")
    folder = path.parent
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise SystemExit(f"error: --out: cannot make the folder {str(folder)!r} ({exc.strerror or exc})") from None
    if not os.access(folder, os.W_OK):
        raise SystemExit(f"error: --out: the folder {str(folder)!r} is not writable")
    from pipelines import PipelineError, check_video_writer

    try:
        check_video_writer()
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None
    return path


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default="A red fox trots through fresh snow in a quiet birch forest at dawn.",
                   help="text prompt (encoded by the folder's text encoder with --model DIR; otherwise hashed into "
                        "seeded random embeddings: the built pipelines have no text encoder)")
    p.add_argument("--negative-prompt", default=None, help="negative prompt (default: Wan's)")
    p.add_argument("--out", default="out/video.mp4", help="output mp4 path (default: out/video.mp4)")
    p.add_argument("--preset", choices=["1.3b", "14b", "tiny"], default=None,
                   help="architecture with random weights (default 1.3b; tiny on a machine without CUDA)")
    p.add_argument("--model", default=None, metavar="DIR",
                   help="local diffusers video pipeline folder (real weights; model_index.json picks the class)")
    p.add_argument("--family", default=None, metavar="NAME",
                   help="architecture with random weights (default wan): every family --list marks generate "
                        "'yes'; the others stop with the reason and the command that measures their transformer")
    p.add_argument("--list", action="store_true", help="print the families with their default sizes and exit")
    p.add_argument("--tiny", action="store_true", help="the family's tiny CPU-sized config (tests)")
    p.add_argument("--height", type=positive_int, default=None,
                   help="multiple of 16 (default 480; tiny: 64; --family NAME: the family's default, --list)")
    p.add_argument("--width", type=positive_int, default=None, help="multiple of 16 (default 832; tiny: 96)")
    p.add_argument("--frames", type=positive_int, default=None, help="4k+1 (default 81; tiny: 9)")
    p.add_argument("--steps", type=positive_int, default=None,
                   help="denoising steps (default 50; --family NAME and --model: the pipeline's default; --tiny: 2)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and initial noise (default 0)")
    p.add_argument("--guidance", type=float, default=None,
                   help="CFG scale; <= 1 disables CFG (default 5.0; --family NAME and --model: the pipeline's "
                        "default)")
    p.add_argument("--flow-shift", type=positive_float, default=None,
                   help="scheduler shift, Wan path (default 3.0 at 480p, 5.0 at 720p)")
    p.add_argument("--attn", choices=["sdpa", "vidattn"], default="vidattn", help="attention (default vidattn)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available)")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="transformer dtype (default bf16 on CUDA, "
                                                                      "fp32 on CPU)")
    p.add_argument("--fps", type=positive_int, default=None,
                   help="output frame rate (default: 16 on the Wan path, the pipeline's own with --family / --model)")
    p.add_argument("--no-progress", action="store_true", help="hide the per-step progress bar")
    return p


def resolve_device(requested, cuda_available: bool):
    """(device string, torch.device) for --device: CUDA when there is one and nothing was asked; a clean
    SystemExit for a malformed device, one that is neither CUDA nor CPU, or CUDA on a machine without it."""
    requested = requested or ("cuda" if cuda_available else "cpu")
    try:
        dev = torch.device(requested)
    except RuntimeError:
        raise SystemExit(f"error: --device {requested!r} is not a valid torch device") from None
    if dev.type not in ("cuda", "cpu"):
        raise SystemExit(f"error: --device must be cuda[:N] or cpu, got {requested!r}")
    if dev.type == "cuda" and not cuda_available:
        raise SystemExit("error: --device cuda requested but CUDA is not available on this machine "
                         "(use --device cpu with --preset tiny)")
    return requested, dev


def resolve(args: argparse.Namespace, cuda_available: bool | None = None) -> argparse.Namespace:
    """Fill defaults that depend on the machine and validate everything; raises SystemExit(message) on errors.

    Shared with e2e_report.py.
    """
    from pipelines import PRESETS, PipelineError, validate_size
    from pipelines.wan import check_model_dir

    if cuda_available is None:
        cuda_available = torch.cuda.is_available()
    args.notes = []
    args.device, dev = resolve_device(args.device, cuda_available)
    on_cpu = dev.type == "cpu"

    if args.model is not None:
        try:
            check_model_dir(args.model)
        except PipelineError as exc:
            raise SystemExit(f"error: {exc}") from None
        if args.preset is not None:
            raise SystemExit("error: pass either --model DIR or --preset, not both")
        args.preset_used = "model"
        if on_cpu:
            args.notes.append("running a full-size local model on the CPU: expect this to be very slow")
    elif args.preset is None:
        if on_cpu:
            args.preset_used = "tiny"
            args.notes.append("no CUDA device: using the tiny preset on the CPU in fp32 "
                              "(pass --preset tiny to silence this; attention falls back to SDPA on CPU)")
        else:
            args.preset_used = "1.3b"
    else:
        args.preset_used = args.preset
        if on_cpu and args.preset in ("1.3b", "14b"):
            raise SystemExit(f"error: the {args.preset} preset needs a CUDA GPU (480x832x81 on {args.preset} "
                             f"would take hours on a CPU); use --preset tiny on CPU")

    spec = PRESETS["1.3b" if args.preset_used == "model" else args.preset_used]
    args.height = spec.height if args.height is None else args.height
    args.width = spec.width if args.width is None else args.width
    args.frames = spec.frames if args.frames is None else args.frames
    try:
        validate_size(args.height, args.width, args.frames)
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.steps is None:
        args.steps = 50
    if args.guidance is None:
        args.guidance = 5.0
    if not args.guidance >= 0:
        raise SystemExit(f"error: --guidance must be >= 0, got {args.guidance}")
    if getattr(args, "fps", 16) is None:
        args.fps = 16

    if args.dtype is None:
        args.dtype = "fp32" if on_cpu else "bf16"
    if on_cpu and args.dtype != "fp32":
        args.notes.append(f"{args.dtype} on CPU is slow and only partly supported; consider --dtype fp32")
    if args.flow_shift is None:
        from pipelines import flow_shift_for
        args.flow_shift = flow_shift_for(args.height, args.width)
    if on_cpu and getattr(args, "attn", "vidattn") == "vidattn":
        args.notes.append("the vidattn kernel runs on Hopper GPUs only: on the CPU every attention call "
                          "falls back to SDPA")
    return args


def attention_paths(pipe, height: int, width: int, frames: int, device, dtype) -> dict:
    """`vidattn.explain` on this run's self-attention and cross-attention shapes: None (kernel) or the reason."""
    import vidattn
    from pipelines import token_count

    cfg = pipe.transformer.config
    s = token_count(height, width, frames, tuple(cfg.patch_size))
    h, d = cfg.num_attention_heads, cfg.attention_head_dim
    q = torch.empty(1, s, h, d, device=device, dtype=dtype)
    kv_text = torch.empty(1, 512, h, d, device=device, dtype=dtype)
    out = {}
    for name, (qq, kk) in {"self_attn": (q, q), "cross_attn": (q, kv_text)}.items():
        try:
            reason = vidattn.explain(qq, kk, kk)
        except Exception as exc:  # explain must never take a run down
            reason = f"explain() failed: {type(exc).__name__}: {exc}"
        out[name] = {"shape_q": list(qq.shape), "shape_kv": list(kk.shape),
                     "path": "kernel" if reason is None else "sdpa-fallback",
                     "reason": reason}
    return out


def set_attention(pipe, attn: str):
    """Install vidattn processors (returns the handle) or leave diffusers' default SDPA ones (returns None)."""
    if attn == "sdpa":
        return None
    try:
        import vidattn
        return vidattn.apply(pipe)
    except ImportError as exc:
        raise SystemExit(f"error: --attn vidattn but vidattn cannot be imported ({exc}); use --attn sdpa") from None


def build_from_args(args, device: torch.device, dtype: torch.dtype):
    """The Wan pipeline the resolved arguments name (a preset, or `--model DIR`); a user-facing problem
    (pipelines.PipelineError) ends the script with its one-line message."""
    from pipelines import PipelineError, build_pipeline

    try:
        return build_pipeline(args.preset_used if args.preset_used != "model" else "1.3b", model_dir=args.model,
                              device=device, dtype=dtype, seed=args.seed, flow_shift=args.flow_shift)
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None


def _model_index(model_dir: str) -> dict | None:
    import json

    try:
        return json.loads((Path(model_dir) / "model_index.json").read_text())
    except (OSError, ValueError):
        return None


def _is_wan_dir(model_dir: str) -> bool:
    """Whether model_index.json names a Wan pipeline (an unreadable one counts: the Wan path's checks say what is
    wrong)."""
    info = _model_index(model_dir)
    return info is None or str(info.get("_class_name", "")).startswith("Wan")


def _wan_path_for_model(model_dir: str) -> bool:
    """Whether `generate_video.py --model DIR` takes the Wan path (per-forward timings; the prompt hashed into
    embeddings): a Wan folder with one transformer, saved without its text encoder. A folder with its text encoder
    and tokenizer (a snapshot of Wan-AI/Wan2.1-T2V-1.3B-Diffusers) or a second transformer (Wan 2.2 A14B) takes the
    pipeline path, which loads every component and encodes the prompt, as every other family's folder does."""
    info = _model_index(model_dir)
    if info is None:
        return True  # the Wan path's checks say what is wrong
    if not str(info.get("_class_name", "")).startswith("Wan"):
        return False

    def saved(name):
        entry = info.get(name)
        return isinstance(entry, list) and any(x is not None for x in entry) and (Path(model_dir) / name).is_dir()

    return not saved("transformer_2") and not (saved("text_encoder") and saved("tokenizer"))


def cpu_kernel_note(device) -> str | None:
    """One line saying why the kernel cannot run on this device, None where it can."""
    import vidattn

    q = torch.zeros(1, 128, 1, 64, dtype=torch.bfloat16, device=device)
    try:
        reason = vidattn.explain(q, q, q)
    except Exception as exc:  # noqa: BLE001 - a note must never take a run down
        reason = f"explain() failed: {type(exc).__name__}: {exc}"
    return None if reason is None else f"the vidattn kernel cannot run here ({reason}): every call runs SDPA"


def _family_preset(args, on_cpu: bool, architecture: str, config: str) -> str:
    """The preset a --family build takes: tiny under --tiny or --preset tiny, and on a CPU without --preset; the
    architecture's real size refused on a CPU."""
    preset = "tiny" if (args.tiny or args.preset == "tiny" or (on_cpu and args.preset is None)) else "default"
    if on_cpu and preset != "tiny":
        raise SystemExit(f"error: the {architecture} architecture needs a CUDA GPU; use --tiny on the CPU")
    if on_cpu and not args.tiny:
        log(f"NOTE: no CUDA device: the tiny {config} config on the CPU (pass --tiny to silence this)")
    return preset


def _asked_fps(args, call: dict, takes_rate: bool, default) -> float:
    """The video's frame rate: --fps where given, which a pipeline that takes a frame rate (`takes_rate`) generates
    at too (LTX: the audio's length, the conditioning), else `default`."""
    asked = getattr(args, "fps", None)
    if asked is not None and takes_rate:
        call["frame_rate"] = float(asked)
    return float(asked or default)


def prepare_pipeline(args):
    """`--family ltx2` or `--model DIR` (any diffusers video pipeline): (pipe, run) where run holds the device,
    dtype, preset, fps and the keyword arguments of the pipeline call. Shared with e2e_report.py."""
    from pipelines import PipelineError
    from pipelines.generic import call_defaults, check_pipeline_dir, frames_param, load_pipeline, prompt_kwargs

    device_str, device = resolve_device(args.device, torch.cuda.is_available())
    on_cpu = device.type == "cpu"
    dtype_name = args.dtype or ("fp32" if on_cpu else "bf16")
    dtype = DTYPES[dtype_name]
    try:
        if args.model is not None:
            if args.family is not None:
                raise SystemExit("error: pass either --model DIR or --family NAME, not both")
            check_pipeline_dir(args.model)
            log(f"loading local pipeline {args.model} ({dtype_name}, {device}) ...")
            pipe = load_pipeline(args.model, device=device, dtype=dtype)
            preset = "model"
        elif args.family != "ltx2":
            return _prepare_family(args, device, dtype_name, dtype)
        else:
            from pipelines.ltx2 import build_ltx2_pipeline

            preset = _family_preset(args, on_cpu, "LTX-2 19B", "LTX-2")
            log(f"building LTX-2 ({preset}, random weights; {dtype_name}, {device}) ...")
            pipe = build_ltx2_pipeline(preset, device=device, dtype=dtype, seed=args.seed)
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None
    defaults = call_defaults(pipe)
    tiny_size = {"height": 32, "width": 32, "num_frames": 9} if preset == "tiny" else {}
    height = args.height or tiny_size.get("height") or defaults["height"]
    width = args.width or tiny_size.get("width") or defaults["width"]
    frames = args.frames or tiny_size.get("num_frames") or defaults["num_frames"] or 121
    steps = args.steps or (2 if preset == "tiny" else defaults["num_inference_steps"] or 30)
    try:
        prompts = prompt_kwargs(pipe, args.prompt, args.negative_prompt or "", device=device, dtype=dtype,
                                tokens=16 if preset == "tiny" else None)
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None
    call = dict(height=height, width=width, **{frames_param(pipe): frames}, num_inference_steps=steps,
                guidance_scale=args.guidance if args.guidance is not None else defaults["guidance_scale"],
                frame_rate=defaults["frame_rate"], **prompts)
    if preset == "tiny" and type(pipe).__name__.startswith("LTX2"):
        call.update(stg_scale=0.0, audio_stg_scale=0.0, spatio_temporal_guidance_blocks=None)
    fps = _asked_fps(args, call, defaults["frame_rate"] is not None, defaults["frame_rate"] or 16)
    return pipe, dict(device=device, dtype=dtype_name, preset=preset, fps=fps, call=call, seed=args.seed,
                      size=(height, width, frames), generate=None)


def _prepare_family(args, device, dtype_name: str, dtype):
    """`--family NAME` with an adapter (pipelines/generate.py): the pipeline and the call, as prepare_pipeline."""
    from pipelines import PipelineError
    from pipelines.families import Size
    from pipelines.generate import adapter, build_family_pipeline, default_size, family_call, generate_family
    from pipelines.registry import entry

    name = args.family
    e = entry(name)
    on_cpu = device.type == "cpu"
    preset = _family_preset(args, on_cpu, e.display, name)
    d = default_size(name, preset)
    size = Size(args.height or d.height, args.width or d.width, args.frames or d.frames)
    from pipelines.families import FamilyError
    from pipelines.registry import check_size

    try:
        check_size(name, size, preset)
    except FamilyError as exc:
        raise SystemExit(f"error: {exc}") from None
    log(f"building {e.display} ({e.pipeline}, {preset}, random weights; {dtype_name}, {device}) ...")
    try:
        pipe = build_family_pipeline(name, preset, device=device, dtype=dtype, seed=args.seed)
        call = family_call(name, pipe, args.prompt, args.negative_prompt or "", preset=preset, device=device,
                           dtype=dtype, size=size, steps=args.steps, guidance=args.guidance, seed=args.seed)
    except PipelineError as exc:
        raise SystemExit(f"error: {exc}") from None
    fps = _asked_fps(args, call, "frame_rate" in call, adapter(name).fps)
    steps = call.get("num_inference_steps")
    if steps is None:
        steps = inspect_default(pipe, "num_inference_steps")
    return pipe, dict(device=device, dtype=dtype_name, preset=preset, fps=fps, call=call, seed=args.seed,
                      size=(size.height, size.width, size.frames), steps=steps,
                      generate=lambda p, c, g: generate_family(p, c, fps=fps, generator=g))


def inspect_default(pipe, name: str):
    import inspect

    p = inspect.signature(type(pipe).__call__).parameters.get(name)
    return None if p is None or p.default is inspect.Parameter.empty else p.default


def run_generate(pipe, run: dict, seed: int):
    """One generation of a prepared pipeline (prepare_pipeline's `run`): pipelines.generic.Generated."""
    from pipelines.generic import generate

    g = torch.Generator(device="cpu").manual_seed(seed)
    if run.get("generate") is not None:
        return run["generate"](pipe, run["call"], g)
    return generate(pipe, {**run["call"], "generator": g}, fps=run["fps"])


def size_text(run: dict) -> str:
    h, w, f = run["size"]
    steps = run.get("steps", run["call"].get("num_inference_steps"))
    return f"{h}x{w}, {f} frames, {steps} steps"


def note_cpu(device) -> None:
    """Say once why the kernel cannot run here (and silence the per-reason fallback warnings that would repeat it)."""
    note = cpu_kernel_note(device)
    if note:
        import warnings

        import vidattn
        log(f"NOTE: {note}")
        warnings.filterwarnings("ignore", category=vidattn.VidattnFallbackWarning)


def _check_call(pipe, run: dict) -> None:
    """The pipeline's own argument checks (`check_inputs`: sizes it cannot take, ...) run before the generation, so
    a size the pipeline refuses ends in its one-line reason, not a traceback. Pipelines without it are left alone."""
    check = getattr(pipe, "check_inputs", None)
    if check is None:
        return
    import inspect

    params = inspect.signature(check).parameters
    kw = {k: v for k, v in run["call"].items() if k in params}
    if not {"height", "width"} <= set(kw):
        return
    for name, prm in params.items():
        if name in kw or prm.default is not inspect.Parameter.empty or prm.kind not in (
                prm.POSITIONAL_OR_KEYWORD, prm.KEYWORD_ONLY):
            continue
        if name not in ("prompt", "negative_prompt"):
            return  # a required argument the call does not name (FramePack's sampling_type): the pipeline checks it
        kw[name] = None  # the text the call leaves out, its embeddings given instead
    try:
        check(**kw)
    except TypeError:
        return  # a check that needs arguments the call does not name: the pipeline runs it itself
    except ValueError as exc:
        raise SystemExit(f"error: {type(pipe).__name__} refuses the call: {exc}") from None


def main_pipeline(args) -> dict:
    """`--family ltx2` or `--model DIR`: one generation, an mp4 with the audio track where the pipeline gives one."""
    if args.flow_shift is not None:
        raise SystemExit("error: --flow-shift sets the Wan path's scheduler; --family NAME and --model DIR run their "
                         "pipeline's own scheduler")
    from pipelines.ltx2 import write_video_with_audio
    from pipelines.measure import Stopwatch

    pipe, run = prepare_pipeline(args)
    if hasattr(pipe, "set_progress_bar_config"):  # the pipelines are built quiet; a generation shows its steps
        pipe.set_progress_bar_config(disable=args.no_progress, leave=False)
    device = run["device"]
    handle = set_attention(pipe, args.attn)
    if handle is not None:
        for line in str(handle).splitlines()[:12]:
            log(line)
        note_cpu(device)
    else:
        log("attention: diffusers' default (SDPA)")
    log(f"generating {size_text(run)} ...")
    try:
        _check_call(pipe, run)
        with Stopwatch(device) as sw:
            out = run_generate(pipe, run, run["seed"])
    finally:
        if handle is not None:
            import vidattn
            vidattn.restore(pipe)
    fps = run["fps"]
    path = write_video_with_audio(out.frames, out.audio, args.out, fps, out.sample_rate or 16000)
    log(f"generated in {sw.ms / 1e3:.2f} s; wrote {path} ({out.frames.shape[0]} frames of "
        f"{out.frames.shape[1]}x{out.frames.shape[2]}, {fps:g} fps"
        + (f", audio {out.audio.shape[-1] / out.sample_rate:.2f} s at {out.sample_rate} Hz)" if out.audio is not None
           else ", no audio track: the pipeline gives none)"))
    return {"out": str(path), "frames": int(out.frames.shape[0]), "height": int(out.frames.shape[1]),
            "width": int(out.frames.shape[2]), "total_ms": sw.ms, "audio": out.audio is not None,
            "pipeline": type(pipe).__name__, "preset": run["preset"], "device": str(device), "dtype": run["dtype"],
            "apply": None if handle is None else handle.counts()}


def main(argv: list[str] | None = None) -> dict:
    args = build_parser().parse_args(argv)
    if not args.list:
        check_out_path(args.out)
    if args.list:
        from pipelines import registry

        registry.print_listing()
        return {"families": registry.names()}
    if args.family is not None and args.family not in GENERATE_FAMILIES:
        from pipelines import registry
        from pipelines.generate import why_not

        if args.family in registry.ENTRIES:
            e = registry.entry(args.family)
            measure = (f"scripts/e2e_report.py --family {args.family} measures its transformer forward at the "
                       f"pipeline's default size" if e.make is not None or registry.in_families(args.family) else
                       f"its transformer forward is not built either ({e.measure})")
            raise SystemExit(f"error: --family {args.family} ({e.display}, {e.pipeline}): {e.generate}: "
                             f"{why_not(args.family)}. Full generation is built offline for "
                             f"{', '.join(GENERATE_FAMILIES)}. {measure}; or pass --model DIR with a local "
                             f"{e.pipeline} folder")
        raise SystemExit(f"error: unknown --family {args.family!r} (families: {', '.join(registry.names())}; "
                         f"generation: {', '.join(GENERATE_FAMILIES)})")
    if args.tiny and args.preset not in (None, "tiny"):
        raise SystemExit(f"error: --tiny and --preset {args.preset} ask for two sizes; pass one")
    if (args.family is not None and args.family not in ("wan", "wan14b")) or \
            (args.model is not None and args.family is None and not _wan_path_for_model(args.model)):
        return main_pipeline(args)
    if args.family in ("wan", "wan14b"):
        if args.preset is not None and args.preset != "tiny":
            raise SystemExit("error: --family sets the architecture; --preset only takes tiny with it")
        args.preset = "tiny" if args.tiny else (args.preset or ("14b" if args.family == "wan14b" else None))
    elif args.tiny:
        args.preset = "tiny"
    args = resolve(args)
    from pipelines import (DEFAULT_NEGATIVE_PROMPT, decode_latents, denoise, initial_latents, prompt_pair,
                           token_count, write_video)
    from pipelines.measure import ForwardTimer, Stopwatch

    for note in args.notes:
        log(f"NOTE: {note}")
    if args.model is not None:
        log(f"NOTE: {args.model} was saved without a text encoder and tokenizer: the prompt is hashed into random "
            f"embeddings, so the video does not follow it")
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    what = f"local model {args.model}" if args.preset_used == "model" else f"preset {args.preset_used}"
    tokens = token_count(args.height, args.width, args.frames)
    log(f"building the Wan pipeline ({what}, {args.dtype}, {device}) ...")
    t0 = time.perf_counter()
    pipe = build_from_args(args, device, dtype)
    log(f"built in {time.perf_counter() - t0:.1f} s")

    handle = set_attention(pipe, args.attn)
    paths = attention_paths(pipe, args.height, args.width, args.frames, device, dtype) if args.attn == "vidattn" \
        else None
    if paths:
        for name, p in paths.items():
            log(f"attention {name}: {p['path']}" + (f" ({p['reason']})" if p["reason"] else ""))
    else:
        log("attention: diffusers' default (SDPA)")

    prompt_embeds, negative_embeds = prompt_pair(pipe, args.prompt, args.negative_prompt or DEFAULT_NEGATIVE_PROMPT)
    latents = initial_latents(pipe, args.height, args.width, args.frames, args.seed, device)
    cfg = args.guidance > 1.0
    log(f"denoising: {args.height}x{args.width}, {args.frames} frames ({tokens} tokens), {args.steps} steps, "
        f"guidance {args.guidance} ({'2 forwards' if cfg else '1 forward'} per step)")
    timer = ForwardTimer(pipe.transformer, device)

    def on_step_end(_pipe, i, t, kw):
        timer.mark_step()
        return {}

    try:
        with Stopwatch(device) as sw_denoise:
            final = denoise(pipe, prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_embeds,
                            latents=latents, height=args.height, width=args.width, frames=args.frames,
                            steps=args.steps, guidance=args.guidance, callback=on_step_end,
                            progress=not args.no_progress)
    finally:
        timer.close()
        if handle is not None:
            import vidattn
            vidattn.restore(pipe)
    if not torch.isfinite(final).all():
        log("WARNING: the final latents contain non-finite values")
    log("decoding with the VAE ...")
    with Stopwatch(device) as sw_decode:
        frames = decode_latents(pipe, final)[0]
    out = write_video(frames, args.out, fps=args.fps)

    fwd = timer.forward_ms()
    transformer_ms = sum(fwd)
    total_ms = sw_denoise.ms + sw_decode.ms
    log(f"transformer: {transformer_ms / 1e3:.2f} s over {len(fwd)} forwards "
        f"({transformer_ms / max(len(fwd), 1):.1f} ms/forward); denoise {sw_denoise.ms / 1e3:.2f} s; "
        f"VAE decode {sw_decode.ms / 1e3:.2f} s; total {total_ms / 1e3:.2f} s")
    log(f"wrote {out} ({frames.shape[0]} frames of {frames.shape[1]}x{frames.shape[2]} (HxW), {args.fps} fps)")
    return {"out": str(out), "frames": int(frames.shape[0]), "height": int(frames.shape[1]),
            "width": int(frames.shape[2]), "transformer_ms": transformer_ms, "forward_ms": fwd,
            "denoise_ms": sw_denoise.ms, "decode_ms": sw_decode.ms, "total_ms": total_ms,
            "attention_paths": paths, "preset": args.preset_used, "device": str(device), "dtype": args.dtype}


if __name__ == "__main__":
    main()
