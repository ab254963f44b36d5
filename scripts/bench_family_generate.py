#!/usr/bin/env python3
"""Short full generations per video DiT family, SDPA against vidattn: seconds per video and transformer seconds.

    python3 scripts/bench_family_generate.py --out-dir DIR --budget-s 200        # the sweep (H200)
    python3 scripts/bench_family_generate.py --only ltx cogvideox --out-dir DIR
    python3 scripts/bench_family_generate.py --families latte,mochi --out-dir DIR     # the same, comma-separated
    python3 scripts/bench_family_generate.py --resume OLD.json --out-dir DIR --budget-s 240  # what OLD lacks
    python3 scripts/bench_family_generate.py --merge OLD.json NEW.json --out-dir DIR  # one table of several runs
    python3 scripts/bench_family_generate.py --plan                              # sizes, steps, estimated seconds
    python3 scripts/bench_family_generate.py --tiny --device cpu --out-dir DIR   # CPU plumbing check (tests)

Per family (pipelines/generate.py: the family's diffusers pipeline with the registry's transformer at the real
config, the VAE at the release config, seeded random weights, random prompt embeddings; nothing downloaded): one
pipeline build, then the same generation under SDPA (diffusers' processors) and under vidattn (`vidattn.apply`):
`--steps` denoising steps (default 2) and the VAE decode, timed as a whole (wall clock, device synchronised) with
every transformer forward timed between CUDA events. The first family also runs one generation per path
first, untimed (cuDNN's and the allocator's first calls). Nothing is written but the JSON and the table: no video
files (the device has no ffmpeg), frames compared between the paths instead (rel-L2; random weights: a
sanity check, not a fidelity figure).

Sizes: the family's default height and width, with fewer frames where the default is long (BENCH_FRAMES; the
JSON and the table say which); FramePack, the dearest by far, also at a smaller height and width (BENCH_HW). Families are run cheapest first by the estimate; one whose estimate exceeds what is
left of --budget-s is skipped with the reason, one that fails is recorded with its error and the sweep goes on.
wan and wan14b generate through scripts/generate_video.py's own Wan path (timed by scripts/e2e_report.py), not here.
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import os
import subprocess
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402

STEPS = 2
# Frames of the sweep where the default is long: 17 for the 4x and 8x temporal VAEs (5 or 3 latent frames), Mochi's
# pipeline default (19). Families not listed keep their default frames (short already, ConsisID's learned positions,
# or a pipeline whose frame count is tied to its chunking: FramePack's section, Helios' chunk, AnyFlow-FAR's chunk
# partition, Wan-Animate's segment, Latte's 16 frames without temporal compression).
BENCH_FRAMES = {"skyreels_v2": 17, "anyflow": 17, "wan_vace": 17, "chronoedit": 17, "hunyuan_video": 17,
                "hunyuan_video15": 17, "cogvideox": 17, "ltx": 17, "ltx2": 17, "mochi": 19, "allegro": 16,
                "easyanimate": 17, "sana_video": 17, "kandinsky5": 17, "kandinsky6": 17, "motif_video": 17,
                "wan_animate": 17, "cosmos": 17, "cosmos3": 17,
                # the refiner: 7 latent frames = the sink + two 3-frame AR blocks (the second reads history)
                "sana_wm_refiner": 49,
                # 9 (3 latent frames + the reference slot), to fit a short device stage: at 17 the SDPA side took
                # 61.7 s, ~42 s of it the block mask's compile (now untimed, PREPARE), and ~10 s the pipeline's VAE
                # and CLIP work per side (bench/results/h200_2026-12-02_pm/call_h/fam.log)
                "wan_animate2": 9}
# Height and width below the default where the family alone would take a fifth of a sweep's budget (FramePack's
# 720x1280 section: ~4 s per forward at 2 steps x 2 paths); frames keep the section. Labelled reduced in the output.
BENCH_HW = {"framepack": (480, 832),
            # MiniMax-H3 takes 5 to 15 s of video (124 frames at least): half its canvas instead, same 16:9 shape
            "minimax_h3": (384, 672)}
SKIP = {"wan": "generates through generate_video.py's Wan path (scripts/e2e_report.py times it)",
        "wan14b": "generates through generate_video.py's Wan path (scripts/e2e_report.py times it)"}
PATHS = ("sdpa", "vidattn")


def _prepare_wan_animate2(pipe, run) -> dict:
    from pipelines import cached

    h, w, f = run["size"]
    return cached.prebuild_block_mask(pipe.transformer, f, h, w)


# One-off work of the model's that the first timed path would pay and the second find done, run untimed before both:
# Wan-Animate-2's cached pass compiles its flex block mask on first use (~47 s of the first step on a fresh H200,
# which neither timed path reads beyond checking it is the model's).
PREPARE = {"wan_animate2": (_prepare_wan_animate2, "its in-context block mask built before both timed paths "
                                                   "(pipelines/cached.py prebuild_block_mask)")}
STARTUP_S = 15.0


def log(msg: str) -> None:
    print(f"[gen-bench] {msg}", flush=True)


def families() -> list[str]:
    from pipelines.registry import GENERATES

    return [n for n in GENERATES if n not in SKIP]


def bench_size(name: str, tiny: bool):
    """The sweep's size (None with `tiny`: generate_video.py's tiny defaults for the family)."""
    from pipelines import registry
    from pipelines.families import Size

    if tiny:
        return None
    d = registry.size_for(name)
    h, w = BENCH_HW.get(name, (d.height, d.width))
    return Size(h, w, min(d.frames, BENCH_FRAMES.get(name, d.frames)))


# Cosmos3-Omni runs its conditional and unconditional branches as two calls per step (its registry row times one).
CALLS_PER_STEP = {"cosmos3": 2}
# Forwards of a generation that takes no steps: the SANA-WM refiner at BENCH_FRAMES (the sink's capture pass, then
# per 3-frame AR block 3 denoising calls and 1 capture pass, each about the registry's cached block call).
FIXED_FORWARDS = {"sana_wm_refiner": 1 + 2 * 4}


def _calls_per_step(name: str) -> int:
    from pipelines import registry

    if name in CALLS_PER_STEP:
        return CALLS_PER_STEP[name]
    note = registry.entry(name).note.lower()
    return 2 if ("two batch-1 calls" in note or "separate batch-1" in note) else 1


# Calibration from the first H200 sweep (bench/results/h200_2026-12-02_envelope/families/generate): the measured
# forwards were 1.4-4.9x the registry's FLOP estimate (SDPA; vidattn less), the VAE decode and the pipeline's own
# work 0.1-1.6 s per generation, the build 0.1-3 s, a family 2.5-7 s in all where it was estimated at 12-16 s.
FORWARD_FACTOR = 2.5
DECODE_S = 1.5


def estimate_s(name: str, steps: int = STEPS) -> float | None:
    """Estimated wall seconds of the family on an H200: build (seeded init on the GPU), and per path the steps'
    forwards (the registry's default-size forward estimate scaled to the sweep's tokens: attention quadratically,
    the rest linearly; times FORWARD_FACTOR, measured) plus DECODE_S for the VAE decode and the pipeline's own
    work. For the budget guard, not a result."""
    from pipelines import registry

    est = registry.estimate(name)
    if not est.get("forward_s"):
        return None
    e = registry.entry(name)
    s = bench_size(name, False)
    r = (registry.video_tokens(name, s, registry.full_config(name)) /
         max(registry.video_tokens(name, e.size, registry.full_config(name)), 1))
    fwd = est["attention_s"] * r * r + (est["forward_s"] - est["attention_s"]) * r
    build = 1 + 0.1 * est["params"] / 1e9
    n = FIXED_FORWARDS.get(name, steps * _calls_per_step(name))
    return build + 2 * (n * fwd * FORWARD_FACTOR + DECODE_S)


def git_commit() -> str | None:
    if os.environ.get("VIDATTN_COMMIT", "").strip():
        return os.environ["VIDATTN_COMMIT"].strip()
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True,
                              timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def metadata(argv) -> dict:
    from vidattn.envinfo import run_metadata

    meta = run_metadata(argv)
    meta["git_commit"] = git_commit()
    meta["command"] = " ".join(["python3", "scripts/bench_family_generate.py"] + list(argv))
    return meta


def _frames(out) -> torch.Tensor:
    f = out.frames
    return torch.as_tensor(f).float() if not isinstance(f, torch.Tensor) else f.float()


def _rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    den = torch.linalg.vector_norm(b.double()).item()
    num = torch.linalg.vector_norm((a - b).double()).item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def _one(pipe, run, path: str, steps: int, device):
    """(total ms, transformer ms per forward, output, apply counts) of one generation on `path`."""
    import vidattn
    from generate_video import run_generate
    from pipelines.measure import ForwardTimer, Stopwatch

    handle = vidattn.apply(pipe) if path == "vidattn" else None
    # where stock cannot run (Wan-Animate-2's eager flex pass), the SDPA path is the family's stated baseline
    restore = run["baseline"](pipe.transformer) if path == "sdpa" and run.get("baseline") else None
    call = run["call"]
    saved = call.get("num_inference_steps")
    fixed = _fixed_schedule(run)
    if not fixed:
        call["num_inference_steps"] = steps
    timer = ForwardTimer(pipe.transformer, device)
    try:
        with Stopwatch(device) as sw:
            out = run_generate(pipe, run, run["seed"])
    finally:
        timer.close()
        if restore is not None:
            restore()
        if not fixed:
            call["num_inference_steps"] = saved
        if handle is not None:
            vidattn.restore(pipe)
    return sw.ms, timer.forward_ms(), out, (None if handle is None else handle.counts())


def _fixed_schedule(run: dict) -> bool:
    """The pipeline runs its own schedule and takes no steps (the SANA-WM refiner's distilled sigmas per block)."""
    return run.get("fixed_schedule", False)


def _fixed(name: str) -> str | None:
    from pipelines.generate import ADAPTERS

    a = ADAPTERS.get(name)
    return a.min_steps[1] if a is not None and a.steps_key is None else None


def bench_family(name: str, args, device, warm: bool) -> dict:
    import generate_video as gv
    from pipelines import registry

    e = registry.entry(name)
    size = bench_size(name, args.tiny)
    d = e.size
    rec = {"family": name, "model": e.display + (" (tiny)" if args.tiny else ""), "pipeline": e.pipeline,
           "steps": args.steps, "default_size": None if args.tiny else [d.height, d.width, d.frames],
           "reduced": size is not None and (size.height, size.width, size.frames) != (d.height, d.width, d.frames), "device": str(device),
           "weights": f"random (seed {args.seed})"}
    t0 = time.perf_counter()
    stage = "build"
    try:
        argv = ["--family", name, "--device", str(device), "--seed", str(args.seed)]
        if _fixed(name) is None:
            argv += ["--steps", str(args.steps)]
        else:
            rec["steps"] = f"its own schedule ({_fixed(name)})"
        if size is not None:
            argv += ["--height", str(size.height), "--width", str(size.width), "--frames", str(size.frames)]
        if args.tiny:
            argv.append("--tiny")
        pargs = gv.build_parser().parse_args(argv)
        pipe, run = gv.prepare_pipeline(pargs)
        run["fixed_schedule"] = _fixed(name) is not None
        if e.baseline is not None and not args.tiny:
            run["baseline"] = e.baseline
            rec["sdpa_path"] = e.baseline_note
        rec["height"], rec["width"], rec["frames"] = run["size"]
        if device.type == "cuda":
            torch.cuda.synchronize(device)
        rec["build_s"] = time.perf_counter() - t0
        if name in PREPARE:
            stage = "prepare"
            t1 = time.perf_counter()
            rec["prepare"] = {**PREPARE[name][0](pipe, run), "note": PREPARE[name][1],
                              "s": time.perf_counter() - t1}
            log(f"  {name}: prepared in {rec['prepare']['s']:.1f} s: {PREPARE[name][1]}")
        rec["size_text"] = gv.size_text(run)
        if warm:
            stage = "warm-up"
            for path in PATHS:
                _one(pipe, run, path, args.steps, device)  # steps as timed: some pipelines need 2+
        outs = {}
        for path in PATHS:
            stage = f"{path} generation"
            ms, fwd, out, counts = _one(pipe, run, path, args.steps, device)
            outs[path] = _frames(out)
            rec[path] = {"total_s": ms / 1e3, "transformer_s": sum(fwd) / 1e3, "forwards": len(fwd),
                         "forward_ms": fwd, "apply": counts,
                         "finite": bool(torch.isfinite(outs[path]).all())}
            log(f"  {name} [{path}] {ms / 1e3:.2f} s, transformer {sum(fwd) / 1e3:.2f} s over {len(fwd)} forwards")
        s, v = rec["sdpa"], rec["vidattn"]
        rec["speedup"] = s["total_s"] / v["total_s"] if v["total_s"] else None
        rec["transformer_speedup"] = s["transformer_s"] / v["transformer_s"] if v["transformer_s"] else None
        rec["frames_rel_l2"] = _rel_l2(outs["vidattn"], outs["sdpa"])
        rec["frames_shape"] = list(outs["sdpa"].shape)
        rec["status"] = "ok"
    except BaseException as exc:  # noqa: BLE001 - SystemExit from the shared builder included; the sweep goes on
        if isinstance(exc, KeyboardInterrupt):
            raise
        rec.update(status="failed", failed_at=stage, error=f"{type(exc).__name__}: {str(exc)[:1200]}",
                   oom="out of memory" in str(exc).lower(), traceback=traceback.format_exc()[-2500:])
    finally:
        pipe = run = None  # noqa: F841
        if device.type == "cuda":
            gc.collect()
            torch.cuda.empty_cache()
        rec["wall_s"] = time.perf_counter() - t0
    return rec


def _f(x, nd=2, unit=""):
    return "—" if not isinstance(x, (int, float)) or isinstance(x, bool) else f"{x:.{nd}f}{unit}"


def table(recs: list[dict], meta: dict) -> str:
    lines = ["# Short generations per family: SDPA against vidattn", "",
             f"{meta.get('gpu') or 'CPU'}; commit {str(meta.get('git_commit'))[:12]}; {meta.get('date_utc')}; torch "
             f"{meta.get('torch')}, diffusers {meta.get('diffusers')}; random weights; `{meta.get('command')}`.",
             "One generation per path (wall clock, device synchronised): the denoising steps and the VAE decode; "
             "transformer s = the sum of its forwards (CUDA events). Sizes marked * are smaller than the "
             "pipeline's default (its frames, or its full size, in brackets). rel-L2: decoded frames, vidattn against SDPA.", "",
             "| family | H×W×frames | steps | SDPA s | vidattn s | speedup | transformer s SDPA → vidattn | "
             "transformer speedup | rel-L2 |", "|---|---|---|---|---|---|---|---|---|"]
    for r in recs:
        if r.get("status") != "ok":
            continue
        size = f"{r['height']}×{r['width']}×{r['frames']}"
        if r.get("reduced"):
            dh, dw, df = r["default_size"]
            size += f"* ({df})" if (dh, dw) == (r["height"], r["width"]) else f"* ({dh}×{dw}×{df})"
        s, v = r["sdpa"], r["vidattn"]
        lines.append(f"| {r['family']} | {size} | {r['steps']} | {_f(s['total_s'])} | {_f(v['total_s'])} | "
                     f"**{_f(r['speedup'], 3, '×')}** | {_f(s['transformer_s'])} → {_f(v['transformer_s'])} | "
                     f"{_f(r['transformer_speedup'], 3, '×')} | {r['frames_rel_l2']:.2e} |")
    untimed = [r for r in recs if r.get("status") == "ok" and r.get("prepare")]
    if untimed:
        lines += ["", "Untimed, before both paths:", ""]
        lines += [f"- {r['family']}: {r['prepare']['note']} ({_f(r['prepare']['s'], 1, ' s')})" for r in untimed]
    rest = [r for r in recs if r.get("status") != "ok"]
    if rest:
        lines += ["", "Not measured:", ""]
        lines += [f"- {r['family']} ({r['status']}): {r.get('reason') or str(r.get('error'))[:300]}" for r in rest]
    return "\n".join(lines) + "\n"


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="+", default=None, metavar="FAMILY", help="these families")
    p.add_argument("--families", default=None, metavar="A,B,...", help="these families (comma-separated)")
    p.add_argument("--resume", default=None, metavar="JSON", help="leave out the families an earlier "
                   "generate_bench.json measured (status ok); the output holds this run's rows (--merge joins them)")
    p.add_argument("--merge", nargs="+", default=None, metavar="JSON", help="write one generate_bench.json/.md "
                   "under --out-dir from several runs' JSON (a later measured row replaces an earlier one); no GPU")
    p.add_argument("--out-dir", default=None, help="where generate_bench.json and generate_bench.md go")
    p.add_argument("--budget-s", type=float, default=None, help="wall seconds for the sweep; a family whose "
                   "estimate exceeds what is left is skipped with the reason")
    p.add_argument("--steps", type=int, default=STEPS, help=f"denoising steps per generation (default {STEPS})")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--tiny", action="store_true", help="tiny configs (CPU tests)")
    p.add_argument("--device", default=None, help="cuda (default when present) or cpu (only with --tiny)")
    p.add_argument("--plan", action="store_true", help="print sizes, steps and estimated seconds, and exit")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    return p


def plan_rows(names: list[str], steps: int) -> list[dict]:
    rows = []
    for n in names:
        s = bench_size(n, False)
        rows.append({"family": n, "size": [s.height, s.width, s.frames], "steps": steps, "est_s": estimate_s(n, steps)})
    return rows


def _write(out_dir: Path, meta: dict, steps, tiny: bool, recs: list[dict], extra: dict | None = None) -> None:
    doc = {"metadata": meta, "steps": steps, "tiny": tiny,
           "generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
           "rows": [{k: v for k, v in r.items() if k != "traceback"} for r in recs],
           "errors": {r["family"]: r["traceback"] for r in recs if "traceback" in r}}
    doc.update(extra or {})
    (out_dir / "generate_bench.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out_dir / "generate_bench.md").write_text(table(recs, meta))


def _load(path: str) -> dict:
    try:
        doc = json.loads(Path(path).read_text())
    except (OSError, ValueError) as exc:
        raise SystemExit(f"error: cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or not isinstance(doc.get("rows"), list):
        raise SystemExit(f"error: {path} is not a generate_bench.json (no 'rows' list)")
    return doc


def merge(paths: list[str], out_dir: Path) -> list[dict]:
    """One table from several runs: per family the row of the last run that measured it (status ok), else the last
    run's row (failed or skipped, with its reason); families in the order of the first run that has them. Every
    row names the run it comes from (`source`); the metadata lists the runs."""
    docs = [_load(p) for p in paths]
    tiny = {bool(d.get("tiny")) for d in docs}
    if len(tiny) > 1:
        raise SystemExit("error: --merge: tiny and full-size runs do not go in one table")
    steps = {d.get("steps") for d in docs}
    if len(steps) > 1:
        raise SystemExit(f"error: --merge: the runs used different --steps {sorted(steps, key=str)}: not one table")
    chosen: dict[str, dict] = {}
    for i, d in enumerate(docs):
        for r in d["rows"]:
            r = {**r, "source": i}
            if "traceback" not in r and r["family"] in d.get("errors", {}):
                r["traceback"] = d["errors"][r["family"]]
            old = chosen.get(r["family"])
            if old is None or r.get("status") == "ok" or old.get("status") != "ok":
                chosen[r["family"]] = r
    metas = [d.get("metadata") or {} for d in docs]
    commits = sorted({str(m.get("git_commit"))[:12] for m in metas})
    meta = {**metas[-1], "git_commit": ", ".join(commits), "date_utc": ", ".join(
        sorted({str(m.get("date_utc")) for m in metas})), "command": "; ".join(str(m.get("command")) for m in metas)}
    recs = list(chosen.values())
    out_dir.mkdir(parents=True, exist_ok=True)
    _write(out_dir, meta, steps.pop(), tiny.pop(), recs,
           {"merged_from": [{"path": p, "metadata": m} for p, m in zip(paths, metas)]})
    log(f"merged {len(paths)} runs: {sum(r.get('status') == 'ok' for r in recs)} of {len(recs)} families measured; "
        f"{out_dir}/generate_bench.md")
    return recs


def main(argv: list[str] | None = None) -> list[dict]:
    argv = list(sys.argv[1:] if argv is None else argv)
    args = build_parser().parse_args(argv)
    t_begin = time.perf_counter()
    if args.merge:
        if not args.out_dir:
            raise SystemExit("error: --merge needs --out-dir DIR")
        return merge(args.merge, Path(args.out_dir))
    if args.only and args.families:
        raise SystemExit("error: --only and --families say the same thing: give one")
    names = args.only or ([n.strip() for n in args.families.split(",") if n.strip()] if args.families else None) \
        or families()
    done: set[str] = set()
    if args.resume:
        prev = _load(args.resume)
        if bool(prev.get("tiny")) != args.tiny or prev.get("steps") != args.steps:
            raise SystemExit(f"error: --resume {args.resume}: tiny={prev.get('tiny')}, steps={prev.get('steps')}; "
                             f"this run tiny={args.tiny}, steps={args.steps}: not the same sweep")
        done = {r["family"] for r in prev["rows"] if r.get("status") == "ok"}
    allowed = set(families())
    bad = [n for n in names if n not in allowed]
    if bad:
        from pipelines.generate import why_not

        why = "; ".join(f"{n}: {SKIP.get(n) or why_not(n)}" for n in bad)
        raise SystemExit(f"error: not in the sweep: {why} (the sweep: {', '.join(families())})")
    if done:
        log(f"--resume: {len([n for n in names if n in done])} families measured in {args.resume} left out")
        names = [n for n in names if n not in done]
    if args.steps < 1:
        raise SystemExit(f"error: --steps must be >= 1, got {args.steps}")
    if not args.tiny:
        rows = sorted(plan_rows(names, args.steps), key=lambda r: (r["est_s"] is None, r["est_s"] or 0))
        names = [r["family"] for r in rows]
    if args.plan:
        for r in plan_rows(names, args.steps):
            print(f"{r['family']:16} {r['size'][0]}x{r['size'][1]}x{r['size'][2]:<4} {r['steps']} steps  "
                  f"est {_f(r['est_s'], 0, ' s')}")
        total = sum(r["est_s"] or 0 for r in plan_rows(names, args.steps))
        print(f"total estimated {total + STARTUP_S:.0f} s (estimates for budgeting, not measurements)")
        return []
    if not args.out_dir:
        raise SystemExit("error: --out-dir DIR is required (or --plan)")
    if args.budget_s is not None and args.budget_s <= 0:
        raise SystemExit(f"error: --budget-s must be > 0, got {args.budget_s}")
    from pipelines import registry

    device = registry.pick_device(args.device, args.tiny, "the family sizes")
    out_dir = Path(args.out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    import vidattn

    warnings.filterwarnings("ignore", category=vidattn.VidattnFallbackWarning)
    if device.type == "cuda":
        from vidattn import _ext

        t0 = time.perf_counter()
        lib = _ext.load()
        log(f"kernel library {'loaded' if lib is not None else 'NOT available'} in {time.perf_counter() - t0:.1f} s")
    meta = metadata(argv)
    deadline = None if args.budget_s is None else t_begin + args.budget_s
    bar = None
    if not args.no_progress:
        try:
            from tqdm import tqdm

            bar = tqdm(total=len(names), desc="families", unit="family", file=sys.stdout)
        except ImportError:
            bar = None
    recs = []
    for i, name in enumerate(names):
        est = None if args.tiny else estimate_s(name, args.steps)
        left = None if deadline is None else deadline - time.perf_counter()
        log(f"[{i + 1}/{len(names)}] {name} (elapsed {time.perf_counter() - t_begin:.0f} s; estimate "
            f"{_f(est, 0, ' s')}" + ("" if left is None else f"; {left:.0f} s of the budget left") + ")")
        if left is not None and est is not None and est > left:
            rec = {"family": name, "status": "skipped",
                   "reason": f"estimated {est:.0f} s, {left:.0f} s of --budget-s left"}
        else:
            rec = bench_family(name, args, device, warm=(i == 0 and device.type == "cuda"))
        rec["estimate_s"] = est
        if rec["status"] == "ok":
            log(f"  {name}: SDPA {rec['sdpa']['total_s']:.2f} s, vidattn {rec['vidattn']['total_s']:.2f} s, "
                f"{rec['speedup']:.3f}x (transformer {_f(rec['transformer_speedup'], 3, 'x')})")
        else:
            log(f"  {name}: {rec['status']}: {rec.get('reason') or rec.get('error', '')[:300]}")
        recs.append(rec)
        _write(out_dir, meta, args.steps, args.tiny, recs)
        if bar is not None:
            bar.update(1)
    if bar is not None:
        bar.close()
    log(f"done in {time.perf_counter() - t_begin:.0f} s: {sum(r['status'] == 'ok' for r in recs)} measured; "
        f"{out_dir}/generate_bench.md")
    return recs


if __name__ == "__main__":
    main()
