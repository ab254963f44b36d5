#!/usr/bin/env python3
"""Generate a video with Wan 2.1 (offline) using vidattn or SDPA attention.

    python scripts/generate_video.py --prompt "a red fox running through snow" --out fox.mp4

Defaults: the Wan2.1-T2V-1.3B architecture with seeded random weights (no download; `--model DIR` loads a
local diffusers Wan folder), 480x832, 81 frames, 50 steps, guidance 5.0, vidattn attention, bf16 on CUDA.
Without a GPU and without an explicit --preset, it runs the tiny preset on the CPU in fp32 instead.
Random weights give noise-like videos; the timings are those of the real architecture.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def log(msg: str) -> None:
    print(f"[generate] {msg}", flush=True)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--prompt", default="A red fox trots through fresh snow in a quiet birch forest at dawn.",
                   help="text prompt (hashed into seeded random embeddings: there is no text encoder)")
    p.add_argument("--negative-prompt", default=None, help="negative prompt (default: Wan's)")
    p.add_argument("--out", default="out/video.mp4", help="output mp4 path (default: out/video.mp4)")
    p.add_argument("--preset", choices=["1.3b", "14b", "tiny"], default=None,
                   help="architecture with random weights (default 1.3b; tiny on a machine without CUDA)")
    p.add_argument("--model", default=None, metavar="DIR", help="local diffusers Wan folder (real weights)")
    p.add_argument("--height", type=int, default=None, help="multiple of 16 (default 480; tiny: 64)")
    p.add_argument("--width", type=int, default=None, help="multiple of 16 (default 832; tiny: 96)")
    p.add_argument("--frames", type=int, default=None, help="4k+1 (default 81; tiny: 9)")
    p.add_argument("--steps", type=int, default=50, help="denoising steps (default 50)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights and initial noise (default 0)")
    p.add_argument("--guidance", type=float, default=5.0, help="CFG scale; <= 1 disables CFG (default 5.0)")
    p.add_argument("--flow-shift", type=float, default=None, help="scheduler shift (default 3.0 at 480p, 5.0 at 720p)")
    p.add_argument("--attn", choices=["sdpa", "vidattn"], default="vidattn", help="attention (default vidattn)")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available)")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="transformer dtype (default bf16 on CUDA, "
                                                                      "fp32 on CPU)")
    p.add_argument("--fps", type=int, default=16, help="output frame rate (default 16)")
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
    if args.steps < 1:
        raise SystemExit(f"error: --steps must be >= 1, got {args.steps}")
    if not args.guidance >= 0:
        raise SystemExit(f"error: --guidance must be >= 0, got {args.guidance}")
    if getattr(args, "fps", 16) < 1:
        raise SystemExit(f"error: --fps must be >= 1, got {args.fps}")

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


def main(argv: list[str] | None = None) -> dict:
    args = resolve(build_parser().parse_args(argv))
    from pipelines import (DEFAULT_NEGATIVE_PROMPT, decode_latents, denoise, initial_latents, prompt_pair,
                           token_count, write_video)
    from pipelines.measure import ForwardTimer, Stopwatch

    for note in args.notes:
        log(f"NOTE: {note}")
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
