#!/usr/bin/env python3
"""End-to-end report: the same Wan 2.1 generation under SDPA and under vidattn, timed and compared.

    python scripts/e2e_report.py                       # 1.3B architecture, 480x832x81, 4 steps (GPU)
    python scripts/e2e_report.py --forward-only        # one transformer forward at full size, both paths
    python scripts/e2e_report.py --preset tiny         # CPU smoke run (what CI does)
    python scripts/e2e_report.py --model-family hunyuan_video   # another family: one forward, both paths
    python scripts/e2e_report.py --family ltx2 --generate       # LTX-2 full generation (video + audio), both paths
    python scripts/e2e_report.py --family hunyuan_video --generate   # any generating family: full generation
    python scripts/e2e_report.py --model DIR                    # any local diffusers video pipeline folder
    python scripts/e2e_report.py --list                         # every --family with its default size

`--family NAME` (`--model-family`; every family vidattn routes, pipelines/registry.py: `--list`) builds that
family's transformer from the real config of its released checkpoint with seeded random weights, offline, and the
inputs its pipeline gives one transformer call at the pipeline's default size (height, width, frames, text
length), and runs the forward-only measurement under SDPA and under vidattn: CUDA-event median, torch.profiler
attention share, output relative L2, and a census of which attention calls ran the kernel, fell back to SDPA (with
the reasons) or stayed stock. `--tiny` runs the family's tiny config (CPU). Full video generation is reported for
Wan (the default, without --family), `--family NAME --generate` for every family whose pipeline is built offline
(pipelines/generate.py; `--list`: generate "yes") and `--model DIR`; the rest run forward-only. Wan-Animate-2
and the SANA-WM refiner take a KV cache their pipelines fill in an earlier pass: their forward is timed after that
pass, which runs untimed first. scripts/family_table.py runs every family on the GPU in two groups (the cross-model
table).

One pipeline is built (seeded random weights, or `--model DIR`); the SDPA run uses diffusers' default processors,
the vidattn run installs vidattn's with `vidattn.apply(pipe)` on the same object (shared weights), then
`vidattn.restore(pipe)`. Both runs get the same prompt embeddings and initial latents. The report defaults to
4 denoising steps (a 50-step video is projected from the per-step median); step 0 is warm-up and excluded
from the step statistics (it is still in the total).

Writes to --out-dir (default bench/results/e2e_<preset>_<date>/; a tiny run, whose numbers are a smoke test and no
result, to the git-ignored out/ under the same name): report.json, report.md, latency.png (not for
`--generate` / `--model DIR` pipeline reports), sdpa.mp4 / vidattn.mp4 (the first --sample-frames frames of each
video) and first_frames.png.
"""
from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
import warnings
from pathlib import Path

_STARTED = time.perf_counter()  # --budget-s counts the imports too when run as a script

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402

from pipelines.measure import timed_call  # noqa: E402  (the one timed forward of this script and family_table.py)

from generate_video import (DTYPES, _is_wan_dir, attention_paths, build_from_args, note_cpu,  # noqa: E402
                            positive_float, positive_int, prepare_pipeline, resolve, resolve_device)

PATHS = ("sdpa", "vidattn")
# --precision and the anchor add paths: "vidattn" is the exact kernel, "vidattn_8bit" the same processors under
# vidattn.use_precision("8bit"), "sage2" the same processors with their plain calls sent to SageAttention2
# (fidelity_8bit.attention_path, which also serves scripts/fidelity_8bit.py).
# "sdpa_proc" (--processor-baseline): vidattn's processors with their attention calls sent to torch's SDPA, which
# separates what the processors change (the fused RoPE) from what the kernels do.
PATH_LABELS = {"sdpa": "SDPA", "sdpa_proc": "SDPA in vidattn's processors", "vidattn": "vidattn",
               "vidattn_8bit": "vidattn 8-bit", "sage2": "SageAttention2"}
_ATTENTION_PATH = {"sdpa_proc": "sdpa_proc", "vidattn": "exact", "vidattn_8bit": "8bit", "sage2": "sage2"}
COLORS = {"sdpa": "tab:blue", "sdpa_proc": "tab:cyan", "vidattn": "tab:orange", "vidattn_8bit": "tab:green",
          "sage2": "tab:red"}


def select_paths(args) -> tuple:
    """The paths of a run from --precision (exact: SDPA and vidattn, as before; 8bit: SDPA, vidattn 8-bit and
    SageAttention2 where installed; both: all four) and --sage2; sets args.paths, args.sage_impl, args.sage_reason."""
    prec = getattr(args, "precision", "exact") or "exact"
    paths = ["sdpa"]
    if getattr(args, "processor_baseline", False):
        paths.append("sdpa_proc")
    if prec in ("exact", "both"):
        paths.append("vidattn")
    if prec in ("8bit", "both"):
        paths.append("vidattn_8bit")
    impl, reason = None, "not requested (--precision exact or --sage2 off)"
    if prec in ("8bit", "both") and getattr(args, "sage2", "auto") != "off":
        from fidelity_8bit import sage2_impl

        impl, reason = sage2_impl()
        if impl is not None:
            paths.append("sage2")
        else:
            log(f"NOTE: SageAttention2 left out: {reason}")
    args.paths, args.sage_impl, args.sage_reason = tuple(paths), impl, reason
    return args.paths


def _sage2_field(args) -> dict:
    """The report's "sage2": whether the run has the path, why not, and which build it ran."""
    field = {"in_run": "sage2" in args.paths, "reason": args.sage_reason}
    if field["in_run"]:
        field["build"] = sage2_build()
    return field


def primary(paths) -> str:
    """The path the single-valued fields (speedup, fidelity, fallback) describe: vidattn, else vidattn 8-bit."""
    return "vidattn" if "vidattn" in paths else next((p for p in paths if p not in ("sdpa", "sdpa_proc")), "vidattn")


def log_fallback(fb: dict, warn: bool = True) -> None:
    """The fallback summary on the log; framed as a WARNING when vidattn fell back on every call."""
    if warn and fb["all_fallback"]:
        log("=" * 100)
        log(f"WARNING: {fb['summary']}")
        log("=" * 100)
    else:
        log(fb["summary"])


def default_out_dir(name: str, tiny: bool) -> Path:
    """The report's folder without --out-dir: bench/results/ for a measurement; the git-ignored out/ for a tiny run,
    a CPU smoke test whose numbers must not look like a result beside the committed ones."""
    return ROOT / ("out" if tiny else "bench/results") / name


def log(msg: str) -> None:
    print(f"[e2e] {msg}", flush=True)


def log_run(meta: dict) -> None:
    """What ran, on one log line: the log comes back from the GPU machine even when the JSON does not."""
    log(f"run: commit {meta.get('git_commit')}; torch {meta.get('torch')}, CUDA {meta.get('cuda')}, cuDNN "
        f"{meta.get('cudnn')}, diffusers {meta.get('diffusers')}, python {meta.get('python')}; GPU "
        f"{meta.get('gpu') or 'none'}; command: {meta.get('command')}")


def sage2_build() -> dict:
    """Which SageAttention2 the sage2 path ran: the unpacked anchors' build description (scripts/anchor_impls.py
    versions(): source commit, compiler, what it was built against) and the installed package version."""
    try:
        import anchor_impls

        info = anchor_impls.versions()
    except Exception as exc:  # noqa: BLE001 - a description never takes the run down
        return {"error": f"{type(exc).__name__}: {exc}"}
    return {k: info[k] for k in ("sage2", "compiler", "built_against", "packages", "error") if k in info}


def ready_kernel(device, paths) -> dict | None:
    """Load (building if it must) the kernel library before the first timed path, so that a build lands neither in
    a path's forwards nor in its share of --budget-s (a first build takes minutes; the budget then cuts the later
    paths with the reason). Only on CUDA: on the CPU every vidattn path is SDPA and nothing is loaded."""
    if device.type != "cuda" or not any(p in _ATTENTION_PATH for p in paths):
        return None
    from vidattn import _ext

    t0 = time.perf_counter()
    lib = _ext.load()
    info = {"seconds": time.perf_counter() - t0, "error": None if lib is not None else _ext.build_error()}
    log(f"kernel library ready in {info['seconds']:.1f} s" if lib is not None else
        f"kernel library unavailable ({info['error']}): the vidattn paths run SDPA")
    return info


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--tiny", action="store_const", const="tiny", dest="preset",
                   help="the tiny preset (CPU tests): same as --preset tiny")
    p.add_argument("--preset", choices=["1.3b", "14b", "tiny", "default", "540p", "short"], default=None,
                   help="architecture with random weights (default 1.3b; tiny on a machine without CUDA); with "
                        "--model-family: default (real config, the pipeline's default size), tiny, or a "
                        "family's smaller size (hunyuan_video: 540p)")
    p.add_argument("--model-family", "--family", dest="model_family", default=None, metavar="NAME",
                   help="forward-only report for any family vidattn routes (pipelines/registry.py; --list prints "
                        "them with their default sizes)")
    p.add_argument("--list", action="store_true", help="print the families with their default sizes and exit")
    p.add_argument("--batch", type=int, default=None,
                   help="with --model-family: batch of the forward (default: what the pipeline passes, 2 where it "
                        "batches CFG)")
    p.add_argument("--model", default=None, metavar="DIR",
                   help="local diffusers video pipeline folder (real weights; model_index.json picks the class): "
                        "a Wan folder runs the Wan report, any other the full-generation pipeline report")
    p.add_argument("--generate", action="store_true",
                   help="with --family NAME (any family generate_video.py --list marks generate): the "
                        "full-generation report (seconds per video, PSNR/SSIM; LTX-2 with audio) instead of one "
                        "transformer forward")
    p.add_argument("--negative-prompt", default=None, help="negative prompt (pipeline reports)")
    p.add_argument("--height", type=positive_int, default=None, help="multiple of 16 (default 480; tiny: 64)")
    p.add_argument("--width", type=positive_int, default=None, help="multiple of 16 (default 832; tiny: 96)")
    p.add_argument("--frames", type=positive_int, default=None, help="4k+1 (default 81; tiny: 9)")
    p.add_argument("--steps", type=positive_int, default=4, help="denoising steps (default 4 for the report; a 50-step "
                                                         "video is projected from the per-step median)")
    p.add_argument("--warmup-steps", type=int, default=1,
                   help="leading steps excluded from the step statistics (default 1)")
    p.add_argument("--seed", type=int, default=0, help="seed for weights, embeddings and noise (default 0)")
    p.add_argument("--guidance", type=float, default=5.0, help="CFG scale (default 5.0: 2 forwards per step)")
    p.add_argument("--flow-shift", type=float, default=None, help="scheduler shift (default 3.0 at 480p)")
    p.add_argument("--prompt", default="A red fox trots through fresh snow in a quiet birch forest at dawn.")
    p.add_argument("--device", default=None, help="cuda, cuda:N or cpu (default: cuda if available)")
    p.add_argument("--dtype", choices=list(DTYPES), default=None, help="default bf16 on CUDA, fp32 on CPU")
    p.add_argument("--out-dir", default=None, help="default bench/results/e2e_<preset>_<date>/ (out/... for a tiny run)")
    p.add_argument("--no-video", action="store_true", help="do not write the sample mp4s")
    p.add_argument("--ssim-frames", type=positive_int, default=21,
                   help="SSIM on this many evenly spaced frames (CPU cost; PSNR uses all frames; default 21)")
    p.add_argument("--sample-frames", type=positive_int, default=17, help="frames per sample mp4 (default 17)")
    p.add_argument("--forward-only", action="store_true",
                   help="time one transformer forward at the full size under both paths (no scheduler, no VAE)")
    p.add_argument("--iters", type=positive_int, default=10,
                   help="timed forwards per path in --forward-only (default 10)")
    p.add_argument("--warmup", type=int, default=2, help="untimed forwards per path in --forward-only (default 2)")
    p.add_argument("--no-profile", action="store_true", help="skip the torch.profiler attention-share forward")
    p.add_argument("--budget-s", type=positive_float, default=None,
                   help="with --family NAME --forward-only: seconds for the whole run, from the start. Each path "
                        "runs its census forward, then as many of --warmup/--iters as fit beside at least two "
                        "forwards for every path after it (one timed, fewest first); a path whose two forwards "
                        "no longer fit is left out (paths run in the order sdpa, vidattn, vidattn_8bit, sage2). "
                        "The report lists what was cut")
    p.add_argument("--interleave", type=int, default=0, metavar="N",
                   help="with --family NAME --forward-only: after every path's own forwards, N rounds of one timed "
                        "forward per path, the order reversed every other round, so that clock and thermal drift "
                        "between paths cancels; the report adds each path's per-round ratios (default 0: none)")
    p.add_argument("--precision", choices=["exact", "8bit", "both"], default="exact",
                   help="vidattn paths beside SDPA: exact (default), 8bit (vidattn 8-bit and SageAttention2 when "
                        "scripts/anchor_impls.py has it), both (exact, 8-bit and SageAttention2)")
    p.add_argument("--sage2", choices=["auto", "off"], default="auto",
                   help="with --precision 8bit/both: SageAttention2 inside the model when installed (auto, default)")
    p.add_argument("--processor-baseline", action="store_true",
                   help="add the path 'SDPA in vidattn's processors' (vidattn.apply with the attention calls sent to "
                        "torch SDPA): what the processors alone change, apart from the kernels")
    return p


# ----------------------------------------------------------------------------------------------- helpers
class AttnSwitch:
    """Switch one pipeline between diffusers' SDPA processors and vidattn's, collecting fallback warnings."""

    def __init__(self, pipe, quiet_reasons: tuple = (), sage=None, baseline=None):
        self.pipe = pipe
        # (model) -> restore: what the "sdpa" path runs where the stock processors cannot run at this size
        # (registry Entry.baseline); None: the stock processors
        self.baseline = baseline
        self.sage = sage  # SageAttention2's callable for the "sage2" path
        self.routes: dict = {}  # path -> what the sage2 route ran (its calls, the exact ones with reasons)
        self.warnings: list[str] = []
        self.quiet_reasons = quiet_reasons  # fallback reasons already said once on the log
        try:
            import vidattn
        except Exception as exc:
            raise SystemExit(f"error: cannot import vidattn ({type(exc).__name__}: {exc})") from None
        self.vidattn = vidattn

    def run(self, path: str, fn):
        if path == "sdpa":
            if self.baseline is None:
                return fn()
            restore = self.baseline(self.pipe)
            try:
                return fn()
            finally:
                restore()
        from fidelity_8bit import attention_path

        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            with attention_path(_ATTENTION_PATH[path], self.pipe, sage=self.sage) as info:
                result = fn()
        if info.get("route"):
            acc = self.routes.setdefault(path, {"impl_calls": 0, "exact_calls": 0, "exact_reasons": {},
                                                "split_kv_lens": 0})
            acc["impl_calls"] += info["route"]["impl_calls"]
            acc["exact_calls"] += info["route"]["exact_calls"]
            acc["split_kv_lens"] += info["route"].get("split_kv_lens", 0)
            for r, n in info["route"]["exact_reasons"].items():
                acc["exact_reasons"][r] = acc["exact_reasons"].get(r, 0) + n
        for w in caught:
            msg = str(w.message)
            if "vidattn" in msg.lower() and msg not in self.warnings:
                self.warnings.append(msg)
                if not any(r in msg for r in self.quiet_reasons):
                    log(f"warning: {msg}")
        return result


def mem_reset(device):
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats(device)


def mem_peak_gib(device):
    return torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None


def _nulled(value):
    """The same keys with every number None (a withheld speedup keeps its shape for readers of the JSON)."""
    if isinstance(value, dict):
        return {k: _nulled(v) for k, v in value.items()}
    return None


def has_speedup(sp) -> bool:
    """Whether a speedup field holds any number (a withheld one holds only None)."""
    if isinstance(sp, dict):
        return any(has_speedup(v) for v in sp.values())
    return sp is not None


def withhold_speedup(report: dict) -> None:
    """A run where every vidattn call fell back timed SDPA against SDPA: its ratios are no speedup. They move to
    `sdpa_vs_sdpa_timing` (kept for the record), and `speedup`, `speedup_by_path` and the per-call rows' ratios keep
    their keys with None for every number, so neither the report nor a plot of it shows a speedup."""
    if not (report.get("fallback") or {}).get("all_fallback"):
        return
    timing = {}
    for key in ("speedup", "speedup_by_path"):
        if report.get(key) is not None:
            timing[key] = report[key]
            report[key] = _nulled(report[key])
    for row in (report.get("attention_per_call") or {}).values():
        for key in ("speedup", "speedup_by_path"):
            if row.get(key) is not None:
                row[key] = _nulled(row[key])
    if timing:
        report["sdpa_vs_sdpa_timing"] = timing


def fallback_summary(paths: dict | None, profiles: dict, device, path: str = "vidattn") -> dict:
    """Did the vidattn run use the kernel? From explain() on the run's shapes and, on CUDA, the profiler of the
    `path` run."""
    kernel_paths = [k for k, v in (paths or {}).items() if v["path"] == "kernel"]
    seen = profiles.get(path, {}).get("vidattn_kernel_seen")
    all_fallback = not kernel_paths
    if device.type == "cuda" and seen is False and kernel_paths:
        all_fallback = True  # explain() said kernel, but no vidattn kernel showed up in the profile
    partial = bool(kernel_paths) and len(kernel_paths) < len(paths or {})
    if all_fallback:
        reasons = sorted({v["reason"] for v in (paths or {}).values() if v["reason"]}) or \
            ["explain() reported the kernel, but the profiler saw no vidattn kernel"]
        text = ("vidattn FELL BACK TO SDPA for every attention call: " + "; ".join(reasons) +
                ". Both runs used SDPA: no speedup is reported.")
    elif partial:
        fb = [k for k in paths if k not in kernel_paths]
        text = f"vidattn kernel ran for {', '.join(kernel_paths)}; SDPA fallback for {', '.join(fb)}"
    else:
        text = "vidattn kernel ran for every attention call"
    return {"all_fallback": all_fallback, "partial_fallback": partial, "kernel_for": kernel_paths,
            "vidattn_kernel_seen_in_profile": seen, "summary": text}


def fmt(x, nd=1, unit=""):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if x != x:
        return "nan"
    if x == float("inf"):
        return "inf"
    return f"{x:.{nd}f}{unit}"


def calls_cell(path: str, c: dict) -> str:
    """A path's census of attention calls for the log and the tables. The routed paths (SageAttention2, SDPA in
    vidattn's processors) send every plain call vidattn's op receives elsewhere, so their census counts calls that
    reached the op, not kernel launches."""
    if path in ("sage2", "sdpa_proc"):
        return f"{c['kernel'] + c['fallback']} routed to {PATH_LABELS[path]} / {c['stock']} stock"
    return f"{c['kernel']} / {c['fallback']} / {c['stock']}"


def ratio(a, b):
    return (a / b) if (a is not None and b) else None


def attention_per_call(paths: dict | None, calls: dict, run_paths=PATHS) -> dict:
    """Per attention call of the model (self_attn, cross_attn): its time per call inside one forward under each path
    (pipelines.measure.attention_call_times: the calls whose q and k shapes are this call's, in either layout), and
    SDPA's over vidattn's. The attention timed where the model runs it, between its GEMMs, where bench_kernel.py
    times it back to back."""
    out = {}
    for name, p in (paths or {}).items():
        want = (sorted(p["shape_q"]), sorted(p["shape_kv"]))
        row = {}
        for path in run_paths:
            groups = [g for g in calls.get(path) or [] if (sorted(g["q_shape"]), sorted(g["k_shape"])) == want]
            n = sum(g["calls"] for g in groups)
            row[path] = {"calls": n, "ms_per_call": sum(g["ms"] for g in groups) / n if n else None}
        others = [q for q in run_paths if q != "sdpa"]
        row["speedup"] = ratio(row["sdpa"]["ms_per_call"], row[primary(run_paths)]["ms_per_call"])
        if len(others) > 1:
            row["speedup_by_path"] = {q: ratio(row["sdpa"]["ms_per_call"], row[q]["ms_per_call"]) for q in others}
        out[name] = row
    return out


def per_call_lines(report: dict) -> list[str]:
    rows = report.get("attention_per_call") or {}
    paths = tuple(report.get("paths") or PATHS)
    others = [p for p in paths if p != "sdpa"]
    if not any(r[p]["calls"] for r in rows.values() for p in paths if p in r):
        return []
    lines = ["| attention call, timed inside one forward | "
             + " | ".join(f"{PATH_LABELS[p]} (ms per call)" for p in paths) + " | calls | "
             + " | ".join(f"SDPA / {PATH_LABELS[p]}" for p in others) + " |",
             "|---|" + "---|" * (len(paths) + 1 + len(others))]
    for k, r in rows.items():
        by = r.get("speedup_by_path") or {primary(paths): r["speedup"]}
        lines.append(f"| {k} | " + " | ".join(fmt(r[p]["ms_per_call"], 3) for p in paths) + " | "
                     + " / ".join(str(r[p]["calls"]) for p in paths) + " | "
                     + " | ".join(fmt(by.get(p), 3, "x") for p in others) + " |")
    return lines + [""]


# ------------------------------------------------------------------------------------------- full run
def run_generation(args, pipe, device, dtype, switch: AttnSwitch) -> dict:
    from pipelines import decode_latents, denoise, initial_latents, prompt_pair, token_count, transformer_inputs
    from pipelines.measure import ForwardTimer, Stopwatch, attention_call_times, attention_share, spread

    prompt_embeds, negative_embeds = prompt_pair(pipe, args.prompt)
    latents = initial_latents(pipe, args.height, args.width, args.frames, args.seed, device)
    n_tok = token_count(args.height, args.width, args.frames, tuple(pipe.transformer.config.patch_size))
    fwd_inputs = transformer_inputs(latents, prompt_embeds, dtype)
    results, finals, videos, profiles, calls = {}, {}, {}, {}, {}
    run_paths = getattr(args, "paths", PATHS)

    for path in run_paths:
        log(f"[{path}] warm-up forward ...")
        mem_reset(device)

        def one_forward():
            with torch.no_grad():
                return pipe.transformer(**fwd_inputs)[0]

        with Stopwatch(device) as sw_warm:
            switch.run(path, one_forward)
        log(f"[{path}] warm-up forward {sw_warm.ms:.1f} ms; denoising {args.steps} steps ...")
        timer = ForwardTimer(pipe.transformer, device)

        def on_step_end(_pipe, i, t, kw):
            timer.mark_step()
            return {}

        def gen():
            return denoise(pipe, prompt_embeds=prompt_embeds, negative_prompt_embeds=negative_embeds,
                           latents=latents.clone(), height=args.height, width=args.width, frames=args.frames,
                           steps=args.steps, guidance=args.guidance, callback=on_step_end, progress=True)

        with Stopwatch(device) as sw_denoise:
            final = switch.run(path, gen)
        timer.close()
        finals[path] = final.float().cpu()
        fwd, steps = timer.forward_ms(), timer.step_ms()
        w = min(args.warmup_steps, max(len(steps) - 1, 0))
        per_step = timer.forwards_per_step()
        fwd_after = fwd[sum(per_step[:w]):]
        peak_denoise = mem_peak_gib(device)
        log(f"[{path}] denoise {sw_denoise.ms / 1e3:.2f} s; decoding with the VAE ...")
        mem_reset(device)
        with Stopwatch(device) as sw_decode:
            frames = decode_latents(pipe, final)[0]
        videos[path] = (frames.clip(0, 1) * 255 + 0.5).astype("uint8")
        peak_decode = mem_peak_gib(device)
        results[path] = {
            "warmup_forward_ms": sw_warm.ms,
            "forward_ms": fwd, "step_ms": steps, "forwards_per_step": per_step,
            "warmup_steps_excluded": w,
            "forward_stats_ms": spread(fwd_after), "step_stats_ms": spread(steps[w:]),
            "transformer_total_ms": sum(fwd), "denoise_ms": sw_denoise.ms, "decode_ms": sw_decode.ms,
            "peak_mem_denoise_gib": peak_denoise, "peak_mem_decode_gib": peak_decode,
            "latents_finite": bool(torch.isfinite(final).all()),
        }
        s = results[path]["step_stats_ms"]["median"]
        log(f"[{path}] transformer {fmt(results[path]['forward_stats_ms']['median'])} ms/forward (median), "
            f"{fmt(s)} ms/step; VAE decode {sw_decode.ms / 1e3:.2f} s")
        if not args.no_profile:
            log(f"[{path}] profiling one transformer forward ...")
            profiles[path] = switch.run(path, lambda: attention_share(one_forward, device))
            log(f"[{path}] attention share {fmt(100 * (profiles[path]['attention_share'] or 0))} % "
                f"({profiles[path]['basis']})")
        calls[path] = switch.run(path, lambda: attention_call_times(one_forward, device))

    from pipelines.measure import rel_l2, video_fidelity
    s = results["sdpa"]
    fid_by, speed_by = {}, {}
    for path in run_paths[1:]:
        fid_by[path] = {"latent_rel_l2": rel_l2(finals[path], finals["sdpa"]),
                        **video_fidelity(videos[path], videos["sdpa"], ssim_frames=args.ssim_frames)}
        v = results[path]
        speed_by[path] = {
            "per_forward_median": ratio(s["forward_stats_ms"]["median"], v["forward_stats_ms"]["median"]),
            "per_step_median": ratio(s["step_stats_ms"]["median"], v["step_stats_ms"]["median"]),
            "denoise_total": ratio(s["denoise_ms"], v["denoise_ms"]),
            "denoise_plus_decode": ratio(s["denoise_ms"] + s["decode_ms"], v["denoise_ms"] + v["decode_ms"]),
        }
    main_path = primary(run_paths)
    fidelity, speed = fid_by[main_path], speed_by[main_path]
    projected = {}
    for path in run_paths:
        med = results[path]["step_stats_ms"]["median"]
        projected[path] = {"steps": 50, "seconds": (50 * med + results[path]["decode_ms"]) / 1e3 if med else None}
    return {"tokens": n_tok, "results": results, "profiles": profiles, "attention_calls": calls, "fidelity": fidelity,
            "speedup": speed, "projected_50_step_video": projected, "_videos": videos,
            **({"speedup_by_path": speed_by, "fidelity_by_path": fid_by} if len(run_paths) > 2 else {})}


# ----------------------------------------------------------------------------------------- forward only
def run_forward_only(args, pipe, device, dtype, switch: AttnSwitch) -> dict:
    from pipelines import initial_latents, prompt_pair, token_count, transformer_inputs
    from pipelines.measure import attention_call_times, attention_share, spread, sync

    prompt_embeds, _ = prompt_pair(pipe, args.prompt)
    latents = initial_latents(pipe, args.height, args.width, args.frames, args.seed, device)
    inputs = transformer_inputs(latents, prompt_embeds, dtype)
    n_tok = token_count(args.height, args.width, args.frames, tuple(pipe.transformer.config.patch_size))
    results, outputs, profiles, calls = {}, {}, {}, {}
    run_paths = getattr(args, "paths", PATHS)

    def one_forward():
        with torch.no_grad():
            return pipe.transformer(**inputs)[0]

    for path in run_paths:
        mem_reset(device)

        def timed():
            for _ in range(args.warmup):
                one_forward()
            sync(device)
            times, out = [], None
            for _ in range(args.iters):
                ms, out = timed_call(one_forward, device)
                times.append(ms)
            return times, out

        log(f"[{path}] {args.warmup} warm-up + {args.iters} timed forwards ({n_tok} tokens) ...")
        times, out = switch.run(path, timed)
        outputs[path] = out.float().cpu()
        results[path] = {"forward_ms": times, "forward_stats_ms": spread(times), "peak_mem_gib": mem_peak_gib(device),
                         "output_finite": bool(torch.isfinite(out).all())}
        log(f"[{path}] {fmt(results[path]['forward_stats_ms']['median'])} ms/forward (median)")
        if not args.no_profile:
            profiles[path] = switch.run(path, lambda: attention_share(one_forward, device))
            log(f"[{path}] attention share {fmt(100 * (profiles[path]['attention_share'] or 0))} %")
        calls[path] = switch.run(path, lambda: attention_call_times(one_forward, device))
    return {"tokens": n_tok, "results": results, "profiles": profiles, "attention_calls": calls,
            **_forward_comparison(results, outputs, run_paths)}


def _forward_comparison(results: dict, outputs: dict, run_paths) -> dict:
    """speedup / fidelity of the primary path against SDPA (the fields earlier reports have), and, with more than
    one vidattn path, speedup_by_path / fidelity_by_path: SDPA's median forward over each path's, and each output's
    relative L2 and cosine against SDPA's."""
    from fidelity_8bit import cosine
    from pipelines.measure import rel_l2

    sd = results["sdpa"]["forward_stats_ms"]["median"]
    speed_by = {p: {"per_forward_median": ratio(sd, results[p]["forward_stats_ms"]["median"])}
                for p in run_paths[1:] if p in results}
    fid_by = {p: {"output_rel_l2": rel_l2(outputs[p], outputs["sdpa"]), "output_cosine": cosine(outputs[p],
                                                                                                 outputs["sdpa"])}
              for p in run_paths[1:] if p in outputs}
    main_path = primary(run_paths)
    body = {"speedup": speed_by[main_path], "fidelity": {"output_rel_l2": fid_by[main_path]["output_rel_l2"]}}
    if len(run_paths) > 2:
        body.update(speedup_by_path=speed_by, fidelity_by_path=fid_by)
    return body


# ------------------------------------------------------------------------------------------------ output
def plot_latency(report: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4), dpi=120)
    forward_only = report["mode"] == "forward-only"
    for name in report.get("paths") or PATHS:
        if name not in report["results"]:
            continue
        color = COLORS.get(name)
        r = report["results"][name]
        ys = r["forward_ms"] if forward_only else r["step_ms"]
        ax.plot(range(len(ys)), ys, marker="o", color=color, label=name)
        med = r["forward_stats_ms"]["median"] if forward_only else r["step_stats_ms"]["median"]
        if med:
            ax.axhline(med, color=color, linestyle="--", linewidth=0.8, label=f"{name} median ({med:.1f} ms)")
    if not forward_only:
        w = report["results"]["sdpa"]["warmup_steps_excluded"]
        if w:
            ax.axvspan(-0.5, w - 0.5, color="0.9", label="warm-up (excluded)")
    ax.set_xlabel("timed forward" if forward_only else "denoising step")
    ax.set_ylabel("ms per forward" if forward_only else "transformer ms per step")
    prefix = "" if report.get("model_family") else "Wan "
    ax.set_title(f"{prefix}{report['model']} {report['height']}x{report['width']}x{report['frames']} "
                 f"({report['tokens']} tokens) on {report['metadata'].get('gpu') or report['device']}", fontsize=9)
    from matplotlib.ticker import MaxNLocator
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_ylim(bottom=0)
    ax.legend()
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def write_first_frames(videos: dict, path: Path) -> None:
    """The first frame under SDPA, under vidattn (else the first other path), and their |difference| x10, side by
    side, each panel labelled."""
    import numpy as np
    from PIL import Image, ImageDraw

    other = primary(list(videos))
    a, b = videos["sdpa"][0], videos[other][0]
    diff = np.clip(np.abs(a.astype(np.int16) - b.astype(np.int16)) * 10, 0, 255).astype(np.uint8)
    h, w = a.shape[:2]
    band = 14  # PIL's default bitmap font is 11 px tall
    canvas = Image.new("RGB", (3 * w, h + band), "white")
    draw = ImageDraw.Draw(canvas)
    for i, (img, label) in enumerate(((a, "SDPA"), (b, PATH_LABELS.get(other, other)), (diff, "|difference| x10"))):
        canvas.paste(Image.fromarray(img), (i * w, band))
        draw.text((i * w + 2, 1), label, fill="black")
    canvas.save(path)


def markdown(report: dict) -> str:
    r, sp = report["results"], report["speedup"]
    fb = report["fallback"]
    lines = [f"# vidattn end-to-end report: Wan {report['model']}, {report['mode']}", ""]
    if fb["all_fallback"]:
        lines += [f"> **WARNING: {fb['summary']}**", ""]
    elif fb["partial_fallback"]:
        lines += [f"> **Note: {fb['summary']}**", ""]
    m = report["metadata"]
    lines += [f"- GPU: {m.get('gpu') or 'none (' + report['device'] + ')'}; torch {m.get('torch')}, CUDA "
              f"{m.get('cuda')}, cuDNN {m.get('cudnn')}, diffusers {m.get('diffusers')}",
              f"- commit `{m.get('git_commit')}`, {m.get('date_utc')}",
              f"- command: `{m.get('command')}`",
              f"- video {report['height']}x{report['width']}, {report['frames']} frames = {report['tokens']} tokens; "
              f"dtype {report['dtype']}; weights: {report['weights']}", ""]
    lines += ["| attention call | path | reason |", "|---|---|---|"]
    for k, v in (report.get("attention_paths") or {}).items():
        lines.append(f"| {k} q{tuple(v['shape_q'])} kv{tuple(v['shape_kv'])} | {v['path']} | {v['reason'] or ''} |")
    lines.append("")
    if report["mode"] == "forward-only":
        lines += ["| path | forward median (ms) | p10 / p90 | peak mem (GiB) | attention share |",
                  "|---|---|---|---|---|"]
        for p in report.get("paths") or PATHS:
            st = r[p]["forward_stats_ms"]
            share = report["profiles"].get(p, {}).get("attention_share")
            lines.append(f"| {p} | {fmt(st['median'])} | {fmt(st['p10'])} / {fmt(st['p90'])} | "
                         f"{fmt(r[p]['peak_mem_gib'], 2)} | {fmt(100 * share if share is not None else None, 1, ' %')} |")
        main_path = primary(report.get("paths") or PATHS)
        said = (f"**{fmt(sp['per_forward_median'], 3, 'x')}**" if has_speedup(sp) else
                "none (both paths ran SDPA)")
        lines += ["", f"Speedup (SDPA / {main_path}, median forward): {said}; "
                      f"output relative L2 difference {report['fidelity']['output_rel_l2']:.2e}.", ""]
        lines += by_path_lines(report)
    else:
        lines += [f"{report['steps']} denoising steps, guidance {report['guidance']} "
                  f"({r['sdpa']['forwards_per_step'][0] if r['sdpa']['forwards_per_step'] else '?'} forwards/step); "
                  f"the first {r['sdpa']['warmup_steps_excluded']} step(s) are excluded from the step statistics.", "",
                  "| path | forward median (ms) | forward p10 / p90 | step median (ms) | step min / max | "
                  "denoise total (s) | VAE decode (s) | attention share | projected 50-step video (s) |",
                  "|---|---|---|---|---|---|---|---|---|"]
        for p in report.get("paths") or PATHS:
            f, s = r[p]["forward_stats_ms"], r[p]["step_stats_ms"]
            share = report["profiles"].get(p, {}).get("attention_share")
            proj = report["projected_50_step_video"][p]["seconds"]
            lines.append(f"| {p} | {fmt(f['median'])} | {fmt(f['p10'])} / {fmt(f['p90'])} | {fmt(s['median'])} | "
                         f"{fmt(s['min'])} / {fmt(s['max'])} | {fmt(r[p]['denoise_ms'] / 1e3, 2)} | "
                         f"{fmt(r[p]['decode_ms'] / 1e3, 2)} | "
                         f"{fmt(100 * share if share is not None else None, 1, ' %')} | {fmt(proj, 1)} |")
        fi = report["fidelity"]
        lines += ["", "| speedup (SDPA / vidattn) | value |", "|---|---|"]
        if has_speedup(sp):
            for k, v in sp.items():
                lines.append(f"| {k.replace('_', ' ')} | {fmt(v, 3, 'x')} |")
        else:
            lines.append("| none | both paths ran SDPA |")
        lines += ["", "| fidelity (vidattn vs SDPA) | value |", "|---|---|",
                  f"| decoded video PSNR | {fmt(fi['psnr_db'], 2, ' dB')} |",
                  f"| decoded video SSIM (mean over {len(fi['ssim_frames'])} frames) | {fmt(fi['ssim'], 5)} |",
                  f"| max abs pixel difference (0-255) | {fi['max_abs_diff_u8']} |",
                  f"| final latents relative L2 | {fi['latent_rel_l2']:.3e} |", ""]
        lines += by_path_lines(report)
    lines += per_call_lines(report)
    for p in report.get("paths") or PATHS:
        prof = report["profiles"].get(p)
        if prof:
            names = ", ".join(f"`{x['name'][:80]}`" for x in (prof["matched_kernels"] or prof["matched_ops"])[:4])
            lines.append(f"- {p}: attention {fmt(prof['attention_ms'], 1)} of {fmt(prof['total_ms'], 1)} ms "
                         f"({prof['basis']}); matched: {names or 'nothing'}")
    if report.get("vidattn_warnings"):
        lines += ["", "vidattn warnings:"] + [f"- {w}" for w in report["vidattn_warnings"]]
    lines += ["", "Random weights: the videos are not meaningful, the timings and the SDPA-vs-vidattn agreement "
                  "are." if report["weights"].startswith("random") else ""]
    return "\n".join(lines).rstrip() + "\n"


def by_path_lines(report: dict) -> list[str]:
    """With more than one vidattn path: each path's speedup over SDPA and its agreement with SDPA, in one table."""
    sp, fi = report.get("speedup_by_path"), report.get("fidelity_by_path")
    if not sp:
        return []
    keys = list(next(iter(sp.values())).keys())
    fkeys = [k for k in next(iter(fi.values())).keys() if k in ("output_rel_l2", "output_cosine", "psnr_db", "ssim",
                                                                 "latent_rel_l2")] if fi else []
    lines = ["| path | " + " | ".join(f"SDPA / path, {k.replace('_', ' ')}" for k in keys) + " | "
             + " | ".join(k.replace("_", " ") + " vs SDPA" for k in fkeys) + " |",
             "|---|" + "---|" * (len(keys) + len(fkeys))]
    for p, row in sp.items():
        f = (fi or {}).get(p, {})
        lines.append(f"| {PATH_LABELS.get(p, p)} | " + " | ".join(fmt(row[k], 3, "x") for k in keys) + " | "
                     + " | ".join(_fid_fmt(k, f.get(k)) for k in fkeys) + " |")
    routes = report.get("sage2_route")
    if routes:
        lines += ["", f"SageAttention2 inside the model: {routes['impl_calls']} calls; "
                      f"{routes['exact_calls']} ran the exact kernel instead"
                  + (f" ({'; '.join(f'{r}: {n}' for r, n in routes['exact_reasons'].items())})"
                     if routes["exact_reasons"] else "") + "."]
    return lines + [""]


def interleaved_lines(report: dict) -> list[str]:
    """--interleave's rounds: each path against the first, and exact against 8-bit, each pair's per-round ratios'
    median and the rounds the second was faster in."""
    il = report.get("interleaved")
    if not il or not il["rounds"]:
        return []
    label = lambda p: PATH_LABELS.get(p, p)  # noqa: E731
    shown = [k for k in il.get("pairs", {}) if k.startswith(il["paths"][0] + "/") or k == "vidattn/vidattn_8bit"]
    parts = []
    for k in shown:
        a, b = k.split("/")
        r = il["pairs"][k]
        parts.append(f"{label(a)} / {label(b)} {fmt(r['median'], 3, 'x')} ({label(b)} faster in {r['faster_rounds']} "
                     f"of {il['rounds']})")
    return [f"Interleaved ({il['rounds']} of {il['asked']} rounds asked; one forward per path a round, the order "
            f"reversed every other round), the median of each round's time ratio: " + "; ".join(parts) + ".", ""]


def _fid_fmt(key: str, v) -> str:
    if v is None:
        return "n/a"
    if key == "psnr_db":
        return fmt(v, 2, " dB")
    if key in ("ssim", "output_cosine"):
        return fmt(v, 5)
    return f"{v:.3e}" if isinstance(v, float) and v == v else str(v)


# ------------------------------------------------------------------------------------ other model families
def _resolve_family(args) -> None:
    """Device, dtype, preset and size for a --model-family run; raises SystemExit(message) on errors."""
    from pipelines import registry

    args.notes = []
    cuda = torch.cuda.is_available()
    if args.model is not None:
        raise SystemExit("error: --model DIR loads a pipeline folder's weights; --model-family runs use random "
                         "weights: pass one or the other")
    args.device, dev = resolve_device(args.device, cuda)
    name = args.model_family
    e = registry.entry(name)
    if e.make is None and not registry.in_families(name):
        raise SystemExit(f"error: --family {name}: {e.measure}")
    if args.preset is None:
        args.preset = "tiny" if dev.type == "cpu" else "default"
        if dev.type == "cpu":
            args.notes.append(f"no CUDA device: the tiny {name} config on the CPU (pass --preset tiny to silence "
                              "this)")
    if args.preset in ("1.3b", "14b"):
        raise SystemExit(f"error: --preset {args.preset} is a Wan preset; --model-family takes "
                         f"{', '.join(registry.presets(name))}")
    if args.preset not in registry.presets(name):
        raise SystemExit(f"error: --model-family {name} has no preset {args.preset!r} "
                         f"(choose from {', '.join(registry.presets(name))})")
    if dev.type == "cpu" and args.preset != "tiny":
        raise SystemExit(f"error: the {name} {args.preset} preset needs a CUDA GPU; use --preset tiny on CPU")
    if e.measure is not None and args.preset != "tiny":
        args.notes.append(f"{name}: {e.measure}")
    base = registry.size_for(name, args.preset)
    args.size = registry.Size(args.height or base.height, args.width or base.width, args.frames or base.frames)
    args.height, args.width, args.frames = args.size.height, args.size.width, args.size.frames
    try:
        registry.check_size(name, args.size, args.preset)
    except registry.FamilyError as exc:
        raise SystemExit(f"error: {exc}") from None
    if args.batch is not None and args.batch < 1:
        raise SystemExit(f"error: --batch must be >= 1, got {args.batch}")
    if args.iters < 1 or args.warmup < 0:
        raise SystemExit("error: --iters must be >= 1 and --warmup >= 0")
    if args.dtype is None:
        args.dtype = "fp32" if dev.type == "cpu" else "bf16"
    if dev.type == "cpu":
        args.notes.append("CPU run: timings use time.perf_counter and the profiler's CPU activity; the vidattn kernel "
                          "cannot run, so both paths are SDPA")
    if args.steps != 4 or args.guidance != 5.0:
        args.notes.append("--steps/--guidance are ignored by --model-family runs (one transformer forward)")


def _is_oom(exc: BaseException) -> bool:
    oom = getattr(torch, "OutOfMemoryError", None) or getattr(torch.cuda, "OutOfMemoryError", None)
    return (oom is not None and isinstance(exc, oom)) or "out of memory" in str(exc).lower()


def _family_fallback(census: dict | None, profile: dict | None, device) -> dict:
    """Did the vidattn run use the kernel? From the census of one vidattn forward and, on CUDA, the profiler."""
    if not census:
        return {"all_fallback": None, "partial_fallback": None, "summary": "no vidattn census (the run failed)"}
    k, fb, st = census["kernel"], census["fallback"], census["stock"]
    seen = (profile or {}).get("vidattn_kernel_seen")
    all_fb = k == 0
    if device.type == "cuda" and seen is False and k > 0:
        all_fb = True
    reasons = "; ".join(f"{r} ({n} calls)" for r, n in census["fallback_reasons"].items())
    stock = f"; {st} call(s) in modules vidattn leaves stock" if st else ""
    if all_fb:
        text = ("vidattn FELL BACK TO SDPA for every attention call" + (f": {reasons}" if reasons else "") +
                (" (explain() said kernel, but the profiler saw no vidattn kernel)" if k > 0 else "") + stock +
                ". Both runs used SDPA: no speedup is reported.")
    elif fb:
        text = f"vidattn kernel ran {k} of {census['calls']} attention calls; SDPA fallback for {fb}: {reasons}{stock}"
    else:
        text = f"vidattn kernel ran all {k} vidattn attention calls{stock}"
    return {"all_fallback": all_fb, "partial_fallback": bool(k and fb), "kernel_calls": k, "fallback_calls": fb,
            "stock_calls": st, "vidattn_kernel_seen_in_profile": seen, "summary": text}


def run_family_forward(args, built, device, switch: AttnSwitch) -> dict:
    """SDPA, then vidattn: warm-up (the first one under the attention census), timed forwards, one profiled."""
    from pipelines.census import AttentionCensus
    from pipelines.measure import attention_share, spread, sync

    results, outputs, profiles, calls, failed = {}, {}, {}, {}, None
    n_tok = built.info()["tokens"]
    run_paths = getattr(args, "paths", PATHS)
    budget = RunBudget(getattr(args, "budget_s", None), getattr(args, "t0", None))
    per_path = 2 if args.no_profile else 3  # forwards a path needs at the least: census, one timed (, profile)
    for i, path in enumerate(run_paths):
        mem_reset(device)
        later = len(run_paths) - i - 1
        if i and budget.active and results:
            # the slowest steady forward so far stands for this path's (SDPA's, in practice: the slowest path)
            fwd_s = max(r["forward_stats_ms"]["median"] for r in results.values()) / 1e3
            need = per_path * fwd_s * budget.MARGIN
            if budget.left() < need:
                budget.skip(path, need)
                log(f"[{path}] left out for the budget: {need:.0f} s needed, {max(budget.left(), 0):.0f} s left")
                continue
        plan = {}

        def timed():
            with AttentionCensus() as census:
                t0 = time.perf_counter()
                out = built.forward()
                sync(device)
                first_ms = (time.perf_counter() - t0) * 1e3
            # the census forward (a first call: an overestimate of the steady one) prices the rest
            extra, iters = budget.plan(first_ms / 1e3, max(args.warmup - 1, 0), args.iters,
                                       reserve_forwards=later * per_path + per_path - 2)
            plan.update(warmup=1 + extra, iters=iters)
            if (1 + extra, iters) != (max(args.warmup, 1), args.iters):
                budget.reduced[path] = dict(plan)
                log(f"[{path}] for the budget: {1 + extra} warm-up + {iters} timed forwards "
                    f"({max(budget.left(), 0):.0f} s left, {later} path(s) after this one)")
            for _ in range(extra):
                built.forward()
            sync(device)
            times = []
            for _ in range(iters):
                ms, out = timed_call(built.forward, device)
                times.append(ms)
            return census.summary(), first_ms, times, out

        log(f"[{path}] {max(args.warmup, 1)} warm-up (the first one under the attention census) + {args.iters} "
            f"timed forwards ({n_tok} tokens, batch {built.batch}) ...")
        fail = None
        try:
            census, first_ms, times, out = switch.run(path, timed)
        except Exception as exc:  # noqa: BLE001 - an OOM or a model error becomes a failure report
            fail = {"failed_at": path, "error": f"{type(exc).__name__}: {str(exc)[:2000]}", "oom": _is_oom(exc),
                    "peak_mem_gib": mem_peak_gib(device)}
        if fail is not None:  # outside the except block, so the traceback's tensors are already freed
            failed = failed or fail
            log(f"[{path}] FAILED: {fail['error'][:300]}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue  # the other path may still run (e.g. vidattn where stock SDPA ran out of memory)
        calls[path] = census
        outputs[path] = out.float().cpu()
        results[path] = {"census_forward_ms": first_ms, "forward_ms": times, "forward_stats_ms": spread(times),
                         "warmup": plan["warmup"], "iters": plan["iters"],
                         "peak_mem_gib": mem_peak_gib(device), "output_finite": bool(torch.isfinite(out).all())}
        del out
        log(f"[{path}] {fmt(results[path]['forward_stats_ms']['median'])} ms/forward (median); attention calls "
            f"(kernel / fallback / stock): {calls_cell(path, census)}")
        if not args.no_profile:
            profiles[path] = switch.run(path, lambda: attention_share(built.forward, device))
            log(f"[{path}] attention share {fmt(100 * (profiles[path]['attention_share'] or 0))} %")
    body = {"results": results, "profiles": profiles, "attention_calls": calls}
    if not failed and getattr(args, "interleave", 0) > 0 and len(results) >= 2:
        body["interleaved"] = interleaved_rounds([p for p in run_paths if p in results], args.interleave,
                                                 lambda path: switch.run(path, lambda: timed_call(built.forward,
                                                                                                  device)[0]),
                                                 budget, results)
        for line in interleaved_lines(body)[:1]:
            log(line)
    if budget.active:
        body["budget"] = budget.summary()
    if failed:
        body.update(status="failed", failure=failed)
        return body
    ran = tuple(p for p in run_paths if p in results)
    if "sdpa" not in results or len(ran) < 2:
        body.update(status="failed", failure={"failed_at": "budget", "oom": False, "peak_mem_gib": None,
                                              "error": f"only {', '.join(ran) or 'nothing'} ran within --budget-s "
                                                       f"{budget.seconds:g}: nothing to compare"})
        return body
    body.update(status="ok", **_forward_comparison(results, outputs, ran))
    if ran != tuple(run_paths):
        body["paths_run"] = list(ran)
    return body


def interleaved_rounds(paths: list[str], rounds: int, timed_forward, budget, results: dict) -> dict:
    """`rounds` rounds of one timed forward per path (`timed_forward(path)` -> ms), in `paths`' order on even rounds
    and reversed on odd ones, stopping early when the budget cannot hold another round (each path's median from its
    own forwards prices it). Per path its ms per round; for every pair of paths a before b, the per-round ratios (a's ms
    over b's: above 1, b is faster) with their median and how many rounds b was faster in (`pairs`, keyed "a/b")."""
    from pipelines.measure import spread

    ms = {p: [] for p in paths}
    round_s = sum(results[p]["forward_stats_ms"]["median"] for p in paths) / 1e3 * budget.MARGIN
    done = 0
    for r in range(rounds):
        if budget.active and budget.left() < round_s:  # left() already keeps the tail back
            break
        for path in (paths if r % 2 == 0 else paths[::-1]):
            ms[path].append(timed_forward(path))
        done += 1
    pairs = {}
    for i, a in enumerate(paths):
        for b in paths[i + 1:]:
            per = [x / y for x, y in zip(ms[a], ms[b]) if y > 0]
            pairs[f"{a}/{b}"] = {"per_round": per, "median": spread(per)["median"],
                                 "faster_rounds": sum(x > 1 for x in per)}
    return {"paths": list(paths), "rounds": done, "asked": rounds, "forward_ms": ms, "pairs": pairs}


class RunBudget:
    """--budget-s for a forward-only run: seconds left since the run started, and how many forwards fit."""

    MARGIN = 1.1  # a forward's estimate is stretched by this much
    TAIL_S = 6.0  # the comparison, report and plot after the last forward

    def __init__(self, seconds: float | None, t0: float | None = None, clock=None):
        self.seconds, self.clock = seconds, clock or time.perf_counter
        self.t0 = self.clock() if t0 is None else t0
        self.skipped: list[dict] = []
        self.reduced: dict = {}

    @property
    def active(self) -> bool:
        return self.seconds is not None

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - self.TAIL_S - (self.clock() - self.t0)

    def plan(self, fwd_s: float, warmup: int, iters: int, reserve_forwards: int) -> tuple[int, int]:
        """(extra warm-ups, timed forwards) after a census forward of `fwd_s`, keeping `reserve_forwards` of the
        same length for what comes after. Timed forwards come first (at least one), then warm-ups."""
        if self.seconds is None:
            return warmup, iters
        n = int((self.left() - reserve_forwards * fwd_s * self.MARGIN) // (fwd_s * self.MARGIN))
        timed = max(1, min(iters, n))
        return max(0, min(warmup, n - timed)), timed

    def skip(self, what: str, need_s: float) -> None:
        self.skipped.append({"what": what, "need_s": need_s, "left_s": max(self.left(), 0.0)})

    def summary(self) -> dict:
        return {"budget_s": self.seconds, "elapsed_s": self.clock() - self.t0, "skipped": self.skipped,
                "reduced": self.reduced}


def _params_text(n) -> str:
    return "n/a" if n is None else (f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.2f}M")


def family_markdown(report: dict) -> str:
    m, fb = report["metadata"], report["fallback"]
    lines = [f"# vidattn forward-only report: {report['model']} (`--model-family {report['model_family']}`)", ""]
    if report["status"] != "ok":
        f = report["failure"]
        lines += [f"> **FAILED at {f['failed_at']}: {f['error'][:500]}**", ""]
    elif fb.get("all_fallback"):
        lines += [f"> **WARNING: {fb['summary']}**", ""]
    else:
        lines += [f"> {fb['summary']}", ""]
    lines += [f"- GPU: {m.get('gpu') or 'none (' + report['device'] + ')'}; torch {m.get('torch')}, CUDA "
              f"{m.get('cuda')}, cuDNN {m.get('cudnn')}, diffusers {m.get('diffusers')}",
              f"- commit `{m.get('git_commit')}`, {m.get('date_utc')}",
              f"- command: `{m.get('command')}`",
              f"- `{report['class']}`, "
              f"{'config of `' + report['checkpoint'] + '`' if report['checkpoint'] else 'tiny config (CPU tests)'}, "
              f"{_params_text(report['params'])} parameters, "
              f"{report['layers']} layers, {report['heads']} heads x {report['head_dim']}; "
              f"weights: {report['weights']}",
              f"- video {report['height']}x{report['width']}, {report['frames']} frames = {report['tokens']} video "
              f"tokens; batch {report['batch']}; dtype {report['dtype']}; inputs as `{report['pipeline']}` builds "
              f"them: {report['inputs_note']}", ""]
    if report.get("sdpa_path"):
        lines += [f"- the sdpa path: {report['sdpa_path']}", ""]
    r = report.get("results", {})
    if r:
        lines += ["| path | forward median (ms) | p10 / p90 | peak mem (GiB) | attention share | kernel / fallback / "
                  "stock calls |", "|---|---|---|---|---|---|"]
        for p in report.get("paths") or PATHS:
            if p not in r:
                continue
            st, c = r[p]["forward_stats_ms"], report["attention_calls"][p]
            share = report["profiles"].get(p, {}).get("attention_share")
            lines.append(f"| {p} | {fmt(st['median'])} | {fmt(st['p10'])} / {fmt(st['p90'])} | "
                         f"{fmt(r[p]['peak_mem_gib'], 2)} | {fmt(100 * share if share is not None else None, 1, ' %')} "
                         f"| {calls_cell(p, c)} |")
        lines.append("")
    b = report.get("budget") or {}
    if b.get("skipped") or b.get("reduced"):
        cut = [f"{s['what']} left out ({s['need_s']:.0f} s needed, {s['left_s']:.0f} s left)" for s in b["skipped"]]
        cut += [f"{p}: {r['warmup']} warm-up + {r['iters']} timed forwards" for p, r in b["reduced"].items()]
        lines += [f"For --budget-s {b['budget_s']:g} (--warmup {report['warmup']}, --iters {report['iters']} "
                  f"asked): " + "; ".join(cut) + ".", ""]
    if report["status"] == "ok":
        sp = (f"**{fmt(report['speedup']['per_forward_median'], 3, 'x')}**" if has_speedup(report["speedup"])
              else "none (both paths ran SDPA)")
        main_path = primary(report.get("paths_run") or report.get("paths") or PATHS)
        lines += [f"Speedup (SDPA / {main_path}, median forward): {sp}; "
                  f"output relative L2 difference {report['fidelity']['output_rel_l2']:.2e}.", ""]
        lines += by_path_lines(report)
        lines += interleaved_lines(report)
    census = report.get("attention_calls", {}).get(primary(report.get("paths_run") or report.get("paths") or PATHS))
    if census:
        lines += ["Attention calls of one vidattn forward:", "",
                  "| calls | path | via | layout | q | k | kv_lens | reason |", "|---|---|---|---|---|---|---|---|"]
        for g in census["shapes"]:
            lines.append(f"| {g['count']} | {g['kind']} | {g['via']} | {g['layout']} | {tuple(g['q'])} | "
                         f"{tuple(g['k'])} | {'yes' if g['kv_lens'] else ''} | {g['reason'] or ''} |")
        lines.append("")
    for p in report.get("paths") or PATHS:
        prof = report.get("profiles", {}).get(p)
        if prof:
            names = ", ".join(f"`{x['name'][:80]}`" for x in (prof["matched_kernels"] or prof["matched_ops"])[:4])
            lines.append(f"- {p}: attention {fmt(prof['attention_ms'], 1)} of {fmt(prof['total_ms'], 1)} ms "
                         f"({prof['basis']}); matched: {names or 'nothing'}")
    if report.get("apply"):
        a = report["apply"]
        lines += ["", f"`vidattn.apply`: {a['replaced']} attention modules replaced, {len(a['skipped'])} skipped"
                  + (f" ({', '.join(sorted({r for _, r in a['skipped']}))})" if a["skipped"] else "") + "."]
    if report.get("vidattn_warnings"):
        lines += ["", "vidattn warnings:"] + [f"- {w}" for w in report["vidattn_warnings"]]
    lines += ["", "Random weights and random text embeddings: the output means nothing; the timings and the "
                  "SDPA-vs-vidattn agreement do. Full video generation for this family is not measured here."]
    return "\n".join(lines).rstrip() + "\n"


def main_family(args) -> dict:
    """`--model-family NAME`: the forward-only report for one family; writes report.json/.md/latency.png."""
    from pipelines import registry
    from pipelines.measure import jsonable
    from vidattn.envinfo import run_metadata

    _resolve_family(args)
    select_paths(args)
    name = args.model_family
    if not args.forward_only and name not in ("wan", "wan14b"):
        log(f"NOTE: full video generation is only implemented for Wan; {name} runs --forward-only")
    for note in args.notes:
        log(f"NOTE: {note}")
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    date = datetime.datetime.now().strftime("%Y%m%d")
    tag = name if args.preset == "default" else f"{name}-{args.preset}"
    out_dir = Path(args.out_dir) if args.out_dir else default_out_dir(f"forward_{tag}_{date}", args.preset == "tiny")
    out_dir.mkdir(parents=True, exist_ok=True)
    fam = registry.entry(name)
    report = {"metadata": run_metadata(), "mode": "forward-only", "model_family": name,
              "model": fam.display if args.preset != "tiny" else f"{fam.display} (tiny)",
              "checkpoint": fam.checkpoint if args.preset != "tiny" else None, "class": fam.cls_name,
              "pipeline": fam.pipeline, "preset": args.preset, "device": str(device), "dtype": args.dtype,
              "weights": f"random (seed {args.seed})", "seed": args.seed, "height": args.height, "width": args.width,
              "frames": args.frames, "warmup": args.warmup, "iters": args.iters, "paths": list(args.paths),
              "precision": args.precision, "sage2": _sage2_field(args),
              "timing_method": "cuda events" if device.type == "cuda" else "time.perf_counter"}
    log_run(report["metadata"])
    log(f"building {fam.display} ({args.preset}, {args.dtype}, {device}) with random weights ...")
    t0 = time.perf_counter()
    mem_reset(device)
    try:
        built = registry.build(name, args.preset, device=device, dtype=dtype, seed=args.seed, size=args.size,
                               batch=args.batch)
    except Exception as exc:  # noqa: BLE001 - e.g. out of memory: recorded, not a traceback
        config = registry.full_config(name, args.preset)
        heads, head_dim = registry.heads_and_dim(name, config)
        report.update(status="failed", batch=args.batch or fam.batch,
                      tokens=registry.video_tokens(name, args.size, config, args.preset == "tiny"), heads=heads,
                      head_dim=head_dim, params=registry.param_count(name, args.preset),
                      layers=registry.layers_text(name, config), inputs_note=fam.note,
                      failure={"failed_at": "build", "error": f"{type(exc).__name__}: {str(exc)[:2000]}",
                               "oom": _is_oom(exc), "peak_mem_gib": mem_peak_gib(device)},
                      fallback=_family_fallback(None, None, device))
        log(f"build FAILED: {report['failure']['error'][:300]}")
        (out_dir / "report.json").write_text(json.dumps(jsonable(report), indent=2) + "\n")
        (out_dir / "report.md").write_text(family_markdown(report))
        report["out_dir"] = str(out_dir)
        return report
    report["build_s"] = time.perf_counter() - t0
    report.update(built.info())
    report["model"] = fam.display if args.preset != "tiny" else f"{fam.display} (tiny)"
    log(f"built in {report['build_s']:.1f} s: {_params_text(report['params'])} parameters, {report['tokens']} video "
        f"tokens, batch {built.batch}, {report['heads']} heads x {report['head_dim']}")
    switch = AttnSwitch(built.model, sage=args.sage_impl, baseline=fam.baseline)
    if fam.baseline is not None:
        report["sdpa_path"] = fam.baseline_note
        log(f"NOTE: the sdpa path is the family's stated baseline: {fam.baseline_note}")
    import vidattn
    handle = vidattn.apply(built.model)
    report["apply"] = {"replaced": len(handle.replaced), "skipped": [list(x) for x in handle.skipped]}
    vidattn.restore(built.model)
    log(f"vidattn.apply replaces {len(handle.replaced)} attention modules, skips {len(handle.skipped)}")
    kernel = ready_kernel(device, args.paths)
    if kernel is not None:
        report["kernel_library"] = kernel
    report.update(run_family_forward(args, built, device, switch))
    report["vidattn_warnings"] = switch.warnings
    if switch.routes.get("sage2"):
        report["sage2_route"] = switch.routes["sage2"]
    main_path = primary(report.get("paths_run") or args.paths)
    report["fallback"] = _family_fallback(report["attention_calls"].get(main_path),
                                          report["profiles"].get(main_path), device)
    withhold_speedup(report)
    log_fallback(report["fallback"], warn=report["status"] == "ok")
    (out_dir / "report.json").write_text(json.dumps(jsonable(report), indent=2) + "\n")
    (out_dir / "report.md").write_text(family_markdown(report))
    files = ["report.json", "report.md"]
    if report["status"] == "ok":
        try:  # the plot is a convenience: never lose a measured report to it
            plot_latency(report, out_dir / "latency.png")
            files.append("latency.png")
        except Exception as exc:  # noqa: BLE001
            log(f"latency.png not written ({type(exc).__name__}: {exc})")
        if report.get("fallback", {}).get("all_fallback"):
            log(f"both paths ran SDPA (no speedup to report); output rel L2 "
                f"{report['fidelity']['output_rel_l2']:.2e}")
        else:
            log(f"speedup (SDPA / {main_path}, median forward): "
                f"{fmt(report['speedup']['per_forward_median'], 3, 'x')}; "
                f"output rel L2 {report['fidelity']['output_rel_l2']:.2e}")
    log(f"wrote {', '.join(files)} to {out_dir}")
    report["out_dir"] = str(out_dir)
    return report


# ----------------------------------------------------------------------------------------- pipeline report
def main_pipeline_report(args) -> dict:
    """`--model DIR` (any diffusers video pipeline) or `--family NAME --generate`: the same full generation under
    SDPA and under vidattn (same seed, same prompt inputs): seconds per video, speedup, PSNR/SSIM of the decoded
    videos, the attention census of the vidattn run; report.json/.md, first_frames.png, sdpa.mp4/vidattn.mp4."""
    from pipelines.census import AttentionCensus
    from pipelines.ltx2 import write_video_with_audio
    from pipelines.measure import Stopwatch, jsonable, video_fidelity
    from vidattn.envinfo import run_metadata

    if args.precision != "exact":
        raise SystemExit(f"error: --precision {args.precision} is for Wan runs and --family forward runs; the "
                         "pipeline report (--model DIR, --family NAME --generate) compares SDPA and exact vidattn")
    args.family = None if args.model is not None else args.model_family
    args.tiny = args.preset == "tiny"
    args.fps = 24
    pipe, run = prepare_pipeline(args)
    device, call = run["device"], run["call"]
    from generate_video import cpu_kernel_note, run_generate, size_text

    note = cpu_kernel_note(device)
    quiet = (note.split("(", 1)[1].rsplit(")", 1)[0],) if note else ()
    switch = AttnSwitch(pipe, quiet_reasons=quiet)
    handle = switch.vidattn.apply(pipe)
    counts = handle.counts()
    log(f"vidattn.apply: {counts['kernel']} kernel processors, {counts['backend']} on the vidattn backend, "
        f"{counts['stock']} stock")
    switch.vidattn.restore(pipe)
    note_cpu(device)
    results, videos, audio, rates = {}, {}, {}, {}
    for path in PATHS:
        log(f"[{path}] generating {size_text(run)} ...")
        census = AttentionCensus()

        def one():
            with census:
                return run_generate(pipe, run, run["seed"])

        with Stopwatch(device) as sw:
            out = switch.run(path, one)
        videos[path], audio[path], rates[path] = out.frames, out.audio, out.sample_rate
        results[path] = {"seconds_per_video": sw.ms / 1e3, "attention_calls": census.summary()}
        log(f"[{path}] {sw.ms / 1e3:.2f} s per video")
    va = results["vidattn"]["attention_calls"]
    all_fallback = va.get("kernel", 0) == 0
    fidelity = video_fidelity(videos["vidattn"], videos["sdpa"], ssim_frames=args.ssim_frames)
    speedup = None if all_fallback else results["sdpa"]["seconds_per_video"] / results["vidattn"]["seconds_per_video"]
    report = {"metadata": run_metadata(), "mode": "generation", "pipeline": type(pipe).__name__,
              "model": args.model or args.family, "preset": run["preset"], "device": str(device),
              "dtype": run["dtype"], "height": run["size"][0], "width": run["size"][1], "frames": run["size"][2],
              "steps": run.get("steps", call.get("num_inference_steps")), "apply": counts, "results": results,
              "fidelity": fidelity, "speedup": speedup, "audio": audio["sdpa"] is not None,
              "all_fallback": all_fallback}
    out_dir = Path(args.out_dir) if args.out_dir else default_out_dir(
        f"e2e_{type(pipe).__name__.lower()}_{run['preset']}_{datetime.date.today():%Y%m%d}", args.tiny)
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "report.json").write_text(json.dumps(jsonable(report), indent=2) + "\n")
    (out_dir / "report.md").write_text(pipeline_markdown(report))
    write_first_frames({p: _u8(v) for p, v in videos.items()}, out_dir / "first_frames.png")
    if not args.no_video:
        for p in PATHS:
            write_video_with_audio(videos[p], audio[p], out_dir / f"{p}.mp4", run["fps"], rates[p] or 16000)
    if all_fallback:
        log("both paths ran SDPA: no speedup to report")
    else:
        log(f"speedup (SDPA / vidattn, seconds per video): {speedup:.3f}x")
    log(f"fidelity: PSNR {fmt(fidelity['psnr_db'], 2, ' dB')}, SSIM {fmt(fidelity['ssim'], 5)}")
    log(f"wrote report.json, report.md, first_frames.png{'' if args.no_video else ', sdpa.mp4, vidattn.mp4'} "
        f"to {out_dir}")
    report["out_dir"] = str(out_dir)
    return report


def _u8(frames):
    import numpy as np

    a = np.asarray(frames)
    return a if a.dtype == np.uint8 else (np.clip(a, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)


def pipeline_markdown(report: dict) -> str:
    r = report["results"]
    lines = [f"# vidattn end-to-end report: {report['pipeline']} ({report['model']}, {report['preset']})", "",
             f"{report['height']}x{report['width']}, {report['frames']} frames, {report['steps']} steps, "
             f"{report['dtype']} on {report['metadata'].get('gpu') or report['device']}; vidattn.apply: "
             f"{report['apply']['kernel']} kernel processors, {report['apply']['backend']} backend, "
             f"{report['apply']['stock']} stock.", ""]
    if report["all_fallback"]:
        lines += ["**The vidattn run fell back to SDPA for every attention call: both runs used SDPA, so no speedup "
                  "is reported.**", ""]
    lines += ["| | SDPA | vidattn |", "|---|---|---|",
              f"| seconds per video | {fmt(r['sdpa']['seconds_per_video'], 2)} | "
              f"{fmt(r['vidattn']['seconds_per_video'], 2)} |",
              f"| attention calls: kernel / fallback / stock | "
              f"{r['sdpa']['attention_calls'].get('kernel', 0)} / {r['sdpa']['attention_calls'].get('fallback', 0)}"
              f" / {r['sdpa']['attention_calls'].get('stock', 0)} | "
              f"{r['vidattn']['attention_calls'].get('kernel', 0)} / "
              f"{r['vidattn']['attention_calls'].get('fallback', 0)} / "
              f"{r['vidattn']['attention_calls'].get('stock', 0)} |", ""]
    if report["speedup"] is not None:
        lines.append(f"Speedup (SDPA / vidattn, seconds per video): {report['speedup']:.3f}x")
    fi = report["fidelity"]
    lines.append(f"Decoded video, vidattn against SDPA: PSNR {fmt(fi['psnr_db'], 2, ' dB')}, SSIM "
                 f"{fmt(fi['ssim'], 5)}" + ("; audio track in both mp4s" if report["audio"] else ""))
    return "\n".join(lines) + "\n"


# -------------------------------------------------------------------------------------------------- main
def main(argv: list[str] | None = None, started: float | None = None) -> dict:
    t0 = time.perf_counter() if started is None else started
    args = build_parser().parse_args(argv)
    if args.out_dir is not None and Path(args.out_dir).exists() and not Path(args.out_dir).is_dir():
        raise SystemExit(f"error: --out-dir {args.out_dir!r} is a file, not a folder")
    if not args.no_video and not args.list:
        from pipelines import PipelineError, check_video_writer

        try:
            check_video_writer()
        except PipelineError as exc:
            raise SystemExit(f"error: {exc} (or pass --no-video)") from None
    args.t0 = t0
    if args.list:
        from pipelines import registry

        registry.print_listing()
        return {"status": "ok", "families": registry.names()}
    from generate_video import GENERATE_FAMILIES

    if (args.model is not None and args.model_family is None and not _is_wan_dir(args.model)) or \
            (args.generate and args.model_family in GENERATE_FAMILIES and args.model_family not in ("wan", "wan14b")):
        return main_pipeline_report(args)
    if args.generate and args.model_family not in ("wan", "wan14b"):
        from pipelines.generate import why_not

        what = (f"--family {args.model_family} does not generate here ({why_not(args.model_family)})"
                if args.model_family else "--generate needs --family NAME")
        raise SystemExit(f"error: {what}; --generate takes {', '.join(GENERATE_FAMILIES)}; --model DIR reports any "
                         "pipeline folder")
    if args.interleave < 0:
        raise SystemExit(f"error: --interleave must be >= 0, got {args.interleave}")
    if args.interleave and not (args.model_family is not None and args.forward_only):
        raise SystemExit("error: --interleave is for --family NAME --forward-only runs")
    if args.model_family is not None:
        from pipelines import registry

        if args.model_family not in registry.ENTRIES:
            raise SystemExit(f"error: unknown --model-family {args.model_family!r} (choose from "
                             f"{', '.join(registry.names())}; `--list` prints them with their default sizes)")
        if args.forward_only or args.model_family not in ("wan", "wan14b"):
            return main_family(args)
        # Wan generation: the report below, with the family's preset
        if args.preset in (None, "default"):
            args.preset = "14b" if args.model_family == "wan14b" else (None if args.preset is None else "1.3b")
    if args.budget_s is not None:
        raise SystemExit("error: --budget-s is for --family NAME --forward-only runs")
    if args.preset not in (None, "1.3b", "14b", "tiny"):
        raise SystemExit(f"error: --preset {args.preset} is for --model-family runs (Wan presets: 1.3b, 14b, tiny)")
    if args.batch is not None:
        raise SystemExit("error: --batch is for --model-family runs")
    args.attn = "both"
    args = resolve(args)
    select_paths(args)
    if args.warmup_steps < 0 or args.iters < 1 or args.warmup < 0 or args.sample_frames < 1:
        raise SystemExit("error: --warmup-steps/--warmup must be >= 0, --iters/--sample-frames >= 1")
    if not args.forward_only and args.steps <= args.warmup_steps:
        log(f"NOTE: --steps {args.steps} <= --warmup-steps {args.warmup_steps}: statistics include warm-up steps")
    for note in args.notes:
        log(f"NOTE: {note}")
    device, dtype = torch.device(args.device), DTYPES[args.dtype]
    if device.type == "cpu":
        log("NOTE: CPU run: timings use time.perf_counter and the profiler's CPU activity; the vidattn kernel "
            "cannot run, so both paths are SDPA")
    from pipelines.measure import jsonable

    model = args.preset_used if args.preset_used != "model" else Path(args.model).name
    mode = "forward-only" if args.forward_only else "generation"
    date = datetime.datetime.now().strftime("%Y%m%d")
    out_dir = Path(args.out_dir) if args.out_dir else default_out_dir(
        f"{'forward' if args.forward_only else 'e2e'}_{model}_{date}", args.preset_used == "tiny")
    out_dir.mkdir(parents=True, exist_ok=True)

    from vidattn.envinfo import run_metadata
    log_run(run_metadata())
    log(f"building the pipeline once for both paths (model {model}, {args.dtype}, {device}) ...")
    t0 = time.perf_counter()
    pipe = build_from_args(args, device, dtype)
    build_s = time.perf_counter() - t0
    log(f"built in {build_s:.1f} s")
    switch = AttnSwitch(pipe, sage=args.sage_impl)
    paths = attention_paths(pipe, args.height, args.width, args.frames, device, dtype)
    for name, p in paths.items():
        log(f"vidattn.explain {name}: {p['path']}" + (f" ({p['reason']})" if p["reason"] else ""))
    kernel = ready_kernel(device, args.paths)

    body = run_forward_only(args, pipe, device, dtype, switch) if args.forward_only else \
        run_generation(args, pipe, device, dtype, switch)
    videos = body.pop("_videos", None)
    report = {
        "metadata": run_metadata(), "mode": mode, "model": model, "device": str(device), "dtype": args.dtype,
        "weights": f"local folder {args.model}" if args.model else f"random (seed {args.seed})",
        "height": args.height, "width": args.width, "frames": args.frames,
        "steps": None if args.forward_only else args.steps, "guidance": args.guidance,
        "flow_shift": args.flow_shift, "seed": args.seed, "prompt": args.prompt, "build_s": build_s,
        "timing_method": "cuda events" if device.type == "cuda" else "time.perf_counter",
        "attention_paths": paths, **body, "vidattn_warnings": switch.warnings, "paths": list(args.paths),
        "precision": args.precision, "sage2": _sage2_field(args),
    }
    if kernel is not None:
        report["kernel_library"] = kernel
    if switch.routes.get("sage2"):
        report["sage2_route"] = switch.routes["sage2"]
    main_path = primary(args.paths)
    report["fallback"] = fallback_summary(paths, report["profiles"], device, main_path)
    report["attention_per_call"] = attention_per_call(paths, report.get("attention_calls") or {}, args.paths)
    withhold_speedup(report)
    log_fallback(report["fallback"])
    for k, r in report["attention_per_call"].items():
        if r["speedup"] is not None:
            log(f"{k}: {fmt(r['sdpa']['ms_per_call'], 3)} ms (SDPA) vs {fmt(r[main_path]['ms_per_call'], 3)} ms "
                f"({main_path}) per call inside the forward: {fmt(r['speedup'], 3, 'x')}")

    (out_dir / "report.json").write_text(json.dumps(jsonable(report), indent=2) + "\n")
    (out_dir / "report.md").write_text(markdown(report))
    plot_latency(report, out_dir / "latency.png")
    files = ["report.json", "report.md", "latency.png"]
    if videos is not None:
        write_first_frames(videos, out_dir / "first_frames.png")
        files.append("first_frames.png")
        if not args.no_video:
            from pipelines import write_video
            for p in args.paths:
                write_video(videos[p][: args.sample_frames], out_dir / f"{p}.mp4", fps=16)
                files.append(f"{p}.mp4")
    sp = report["speedup"]
    if report.get("fallback", {}).get("all_fallback"):
        log("both paths ran SDPA: no speedup to report")
    else:
        log(f"speedup (SDPA / {main_path}, median forward): {fmt(sp['per_forward_median'], 3, 'x')}")
        for p, row in (report.get("speedup_by_path") or {}).items():
            log(f"speedup (SDPA / {p}, median forward): {fmt(row['per_forward_median'], 3, 'x')}")
    if "psnr_db" in report["fidelity"]:
        fi = report["fidelity"]
        log(f"fidelity: PSNR {fmt(fi['psnr_db'], 2, ' dB')}, SSIM {fmt(fi['ssim'], 5)}, "
            f"latent rel L2 {fi['latent_rel_l2']:.2e}")
    log(f"wrote {', '.join(files)} to {out_dir}")
    report["out_dir"] = str(out_dir)
    return report


if __name__ == "__main__":
    sys.exit(0 if main(started=_STARTED).get("status", "ok") == "ok" else 1)
