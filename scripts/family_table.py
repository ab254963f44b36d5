#!/usr/bin/env python3
"""The cross-model table on the GPU: one transformer forward per video DiT family at its pipeline's DEFAULT size
(no frames cut), random weights, SDPA against vidattn.

    python3 scripts/family_table.py --group 1 --out-dir bench/results/family_table_<date> --budget-s 500
    python3 scripts/family_table.py --group 2 --out-dir bench/results/family_table_<date> --budget-s 500
    python3 scripts/family_table.py --only helios cosmos --out-dir DIR      # some families
    python3 scripts/family_table.py --plan                                  # groups and estimated seconds
    python3 scripts/family_table.py --tiny --device cpu --out-dir DIR       # CPU plumbing check (tests)

Per family (pipelines/registry.py: the real config of the released checkpoint, the inputs its pipeline hands one
transformer call at the default height, width, frames and text length):
  1. a 1-block copy of the model (the same attention shapes, every block count set to 1) runs one warm-up and one
     timed forward under SDPA and under vidattn: the kernels' and cuDNN's first calls, the allocator's first
     allocations, and a measured per-block time that guards the budget;
  2. the full model is built directly on the GPU (seeded init there, cast to bf16; never on the CPU);
  3. ONE timed forward per path (CUDA events; no repeat: the JSON says so), during which every attention call is
     timed between CUDA events where the model makes it (attention share) and, under vidattn, counted by the
     census (kernel / fallback with the reason / stock);
  4. output rel-L2 of vidattn against SDPA; the model is freed before the next family.
A family whose estimate exceeds what is left of --budget-s is skipped with the reason; a family that fails is
recorded with its error and the run goes on. Writes <out-dir>/<family>.json per family, and table.md + table.json
over every <family>.json in the folder (both groups, when both ran into the same folder).
"""
from __future__ import annotations

import argparse
import datetime
import gc
import json
import sys
import time
import traceback
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

# Two groups for two device calls of at most 540 s (H200), each estimated at <= 480 s with the kernel build
# (~75 s on 16 cores when VIDATTN_CACHE_DIR holds no build yet) and the interpreter's start; `--plan` prints the
# estimates. Balanced on the estimates (the two heaviest, Motif-Video and HunyuanVideo, in different groups); cheap
# families first in each group, so a budget cut short still measures most of them.
GROUPS = {
    1: ["latte", "sana_video", "skyreels_v2", "cogvideox", "easyanimate", "ltx2", "anyflow", "chronoedit", "cosmos",
        "hunyuan_video15", "minimax_h3", "kandinsky6", "motif_video"],
    2: ["ltx", "anyflow_far", "wan", "kandinsky5", "consisid", "helios", "wan14b", "cosmos3", "framepack", "wan_vace", "allegro",
        "mochi", "wan_animate", "hunyuan_video"],
}
# Families whose timed call reads a KV cache that a filling pass (run first, untimed) fills: pipelines/cached.py.
# Their own group, so one device call can add just these rows to a folder that holds the others.
CACHED = ["sana_wm_refiner", "wan_animate2"]
GROUPS[3] = CACHED
NOT_RUN: list[str] = []
KERNEL_BUILD_S = 75.0
STARTUP_S = 15.0  # python, torch, diffusers imports, the CUDA context
PATHS = ("sdpa", "vidattn")


def log(msg: str) -> None:
    print(f"[family-table] {msg}", flush=True)


def _sync(device):
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _free(device):
    # A full collection costs ~0.7 s with diffusers loaded: worth it only where GPU memory is at stake.
    if device.type == "cuda":
        gc.collect()
        torch.cuda.empty_cache()


def _attention_ms(groups: list[dict]) -> float:
    return sum(g["ms"] for g in groups)


def run_path(path: str, built, device) -> dict:
    """One timed forward under `path` ("sdpa": diffusers' processors; "vidattn": vidattn.apply), with every
    attention call timed where it runs and, under vidattn, the census."""
    import vidattn
    from pipelines.census import AttentionCensus
    from pipelines.measure import attention_call_times, timed_call

    handle, restore = _enter(path, built.name, built.model)
    box = {}
    try:
        def fwd():
            with AttentionCensus() as census:
                box["ms"], box["out"] = timed_call(built.forward, device)
            box["census"] = census.summary()

        groups = attention_call_times(fwd, device)
    finally:
        restore()
    attn = _attention_ms(groups)
    c = box["census"]
    return {"forward_ms": box["ms"], "attention_ms": attn,
            "attention_share": attn / box["ms"] if box["ms"] else None,
            "census": {k: c[k] for k in ("calls", "kernel", "fallback", "stock", "fallback_reasons")},
            "census_shapes": c["shapes"], "attention_calls": groups,
            "output_finite": bool(torch.isfinite(box["out"]).all()),
            "apply": None if handle is None else handle.counts(), "_out": box["out"]}


def _enter(path: str, name: str, model):
    """Put `model` on `path`: vidattn.apply for "vidattn"; for "sdpa" the stock processors, or the family's stated
    baseline where stock cannot run at this size (registry Entry.baseline). Returns (vidattn handle, restore)."""
    import vidattn
    from pipelines import registry

    if path == "vidattn":
        handle = vidattn.apply(model)
        return handle, lambda: vidattn.restore(model)
    base = registry.entry(name).baseline
    if base is not None:
        return None, base(model)
    return None, lambda: None


def warm_one_block(name: str, preset: str, device, dtype, seed: int) -> dict:
    """Both paths on a 1-block copy at the full input size: a warm-up forward, then a timed one."""
    from pipelines import registry
    from pipelines.measure import timed_call

    over = registry.one_block_overrides(name)
    built = registry.build(name, preset, device=device, dtype=dtype, seed=seed, overrides=over)
    res = {}
    try:
        for path in PATHS:
            _, restore = _enter(path, name, built.model)
            try:
                first, _ = timed_call(built.forward, device)
                again, _ = timed_call(built.forward, device)
            finally:
                restore()
            res[path] = {"first_ms": first, "ms": again}
    finally:
        del built
        if torch.device(device).type == "cuda":
            gc.collect()  # the copy's weights go back to the allocator's cache (kept: same sizes come next)
    return res


def _rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    den = torch.linalg.vector_norm(b).item()
    num = torch.linalg.vector_norm(a - b).item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def predicted_speedup(share: float | None, attn_speedup: float | None) -> float | None:
    """The forward speedup if only the attention had changed: 1 / (1 - s + s / a)."""
    if share is None or not attn_speedup:
        return None
    return 1.0 / (1.0 - share + share / attn_speedup)


def estimate_for(name: str, tiny: bool) -> dict:
    """The H200 estimate of the family's default-size run (pipelines/registry.py); none for tiny configs."""
    from pipelines import registry

    return {"runner_s": None, "forward_s": None} if tiny else registry.estimate(name)


def measure_family(name: str, args, device, dtype, deadline: float | None) -> dict:
    from pipelines import registry
    from pipelines.measure import jsonable
    from vidattn.envinfo import run_metadata

    e = registry.entry(name)
    preset = "tiny" if args.tiny else "default"
    size = registry.size_for(name, preset)
    rec = {"family": name, "model": e.display + (" (tiny)" if args.tiny else ""), "class": e.cls_name,
           "checkpoint": None if args.tiny else e.checkpoint, "pipeline": e.pipeline, "preset": preset,
           "route": e.route, "height": size.height, "width": size.width, "frames": size.frames,
           "text_tokens": e.tiny_text if args.tiny else e.text, "batch": e.batch, "inputs_note": e.note,
           "device": str(device), "dtype": str(dtype).replace("torch.", ""), "weights": f"random (seed {args.seed})",
           "timing": ("one timed forward per path (no repeats), CUDA events; the kernels warmed up on a 1-block copy "
                      "at the full input size; every attention call timed between CUDA events inside the forward "
                      "(attention share) and counted by the census (vidattn path)" if device.type == "cuda" else
                      "one timed forward per path, time.perf_counter (CPU: both paths run SDPA)"),
           "metadata": run_metadata()}
    est = estimate_for(name, args.tiny)
    rec["estimate"] = {k: est.get(k) for k in ("forward_s", "runner_s")}
    t_start = time.perf_counter()

    def left():
        return None if deadline is None else deadline - time.perf_counter()

    if (e.make is None and not registry.in_families(name)) or (e.measure is not None and not args.tiny):
        rec.update(status="not_run", reason=e.measure)
        return rec
    if left() is not None and est.get("runner_s") and est["runner_s"] > left():
        rec.update(status="skipped", reason=f"estimated {est['runner_s']:.0f} s for this family, {left():.0f} s of "
                                            f"--budget-s left")
        return rec
    stage = "build"
    out = {}
    built = None
    try:
        t0 = time.perf_counter()
        built = registry.build(name, preset, device=device, dtype=dtype, seed=args.seed)
        _sync(device)
        rec["build_s"] = time.perf_counter() - t0
        rec["constructed_in"] = getattr(built.model, "_vidattn_constructed_in", None)
        if e.fill is not None:
            from pipelines.cached import fill_ms

            rec["fill_pass_ms"] = fill_ms(built.inputs)  # inside build_s; the timed forwards read its cache
        if e.baseline_note:
            rec["sdpa_path"] = e.baseline_note
        info = built.info()
        rec.update({k: info[k] for k in ("tokens", "heads", "head_dim", "layers", "params", "input_shapes")})
        # The 1-block copy warms up after the full build, while the full model is resident: its activations (the
        # full input size) stay in the allocator's cache for both timed forwards, which then allocate nothing new.
        stage = "warm-up (1-block copy)"
        w = warm_one_block(name, preset, device, dtype, args.seed)
        rec["warmup_one_block"] = w
        nb = registry.n_blocks(name, preset)
        # The measured per-block time (both paths) decides whether the two full forwards still fit.
        proj = nb * (w["sdpa"]["ms"] + w["vidattn"]["ms"]) / 1e3
        rec["projected_full_forwards_s"] = proj
        if left() is not None and proj + 2 > left():
            rec.update(status="skipped", reason=f"the 1-block copy projects {proj:.0f} s for the two full forwards, "
                                                f"{left():.0f} s of --budget-s left")
            return json.loads(json.dumps(jsonable(rec)))
        for path in PATHS:
            stage = f"{path} forward"
            if device.type == "cuda":
                torch.cuda.reset_peak_memory_stats(device)
            r = run_path(path, built, device)
            out[path] = r.pop("_out")
            r["peak_mem_gib"] = torch.cuda.max_memory_allocated(device) / 2**30 if device.type == "cuda" else None
            rec[path] = r
            log(f"  {name} [{path}] {r['forward_ms']:.1f} ms, attention {r['attention_ms']:.1f} ms; calls: "
                f"{r['census']['kernel']} kernel, {r['census']['fallback']} fallback, {r['census']['stock']} stock")
        stage = "compare"
        rec["output_rel_l2"] = _rel_l2(out["vidattn"], out["sdpa"])
        s, v = rec["sdpa"], rec["vidattn"]
        c = v["census"]
        rec["all_fallback"] = c["kernel"] == 0
        rec["speedup"] = None if rec["all_fallback"] else s["forward_ms"] / v["forward_ms"]
        a_sp = s["attention_ms"] / v["attention_ms"] if v["attention_ms"] else None
        rec["attention_speedup"] = None if rec["all_fallback"] else a_sp
        rec["predicted_speedup"] = None if rec["all_fallback"] else predicted_speedup(s["attention_share"], a_sp)
        rec["non_attention_ms"] = {p: rec[p]["forward_ms"] - rec[p]["attention_ms"] for p in PATHS}
        rec["status"] = "ok"
    except Exception as exc:  # noqa: BLE001 - one family's failure is recorded; the run goes on
        oom = "out of memory" in str(exc).lower()
        rec.update(status="failed", failed_at=stage, oom=oom, error=f"{type(exc).__name__}: {str(exc)[:1500]}",
                   traceback=traceback.format_exc()[-3000:])
    finally:
        out.clear()
        built = None  # noqa: F841 - drop the model before the next family
        _free(device)
        rec["wall_s"] = time.perf_counter() - t_start
    return json.loads(json.dumps(jsonable(rec)))


# ------------------------------------------------------------------------------------------------ the table
def _f(x, nd=1, unit=""):
    return "—" if not isinstance(x, (int, float)) or isinstance(x, bool) else f"{x:.{nd}f}{unit}"


def table(records: list[dict]) -> str:
    """Markdown of the per-family records (every number read from them)."""
    ok = [r for r in records if r.get("status") == "ok"]
    lines = ["# Cross-model table: one transformer forward per family at the pipeline's default size", ""]
    if ok:
        gpus = sorted({(r.get("metadata") or {}).get("gpu") or r.get("device") or "?" for r in ok})
        commits = sorted({str((r.get("metadata") or {}).get("git_commit") or "?")[:12] for r in ok})
        lines += [f"{', '.join(gpus)}; commit {', '.join(commits)}; random weights; "
                  f"{ok[0]['timing']}. Speedup = SDPA ms / vidattn ms of one forward; attention share = the SDPA "
                  "path's attention calls' time over its forward; predicted = the speedup if only the attention "
                  "had changed; other ms = forward minus attention, SDPA → vidattn (where time went outside the "
                  "attention).", ""]
    lines += ["| family | model | H×W×frames | batch | video tokens | heads × D | SDPA ms | vidattn ms | speedup | "
              "attention share | attention ms SDPA → vidattn | predicted | other ms SDPA → vidattn | "
              "kernel / fallback / stock calls | rel-L2 |",
              "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in ok:
        s, v = r["sdpa"], r["vidattn"]
        c = v["census"]
        sp = "n/a (SDPA both)" if r.get("all_fallback") else f"**{_f(r['speedup'], 3, '×')}**"
        na = r.get("non_attention_ms") or {}
        lines.append(
            f"| {r['family']} | {r['model']} | {r['height']}×{r['width']}×{r['frames']} | {r['batch']} | "
            f"{r.get('tokens', '—')} | {r.get('heads') or '—'}×{r.get('head_dim') or '—'} | {_f(s['forward_ms'])} | "
            f"{_f(v['forward_ms'])} | {sp} | {_f(100 * s['attention_share'] if s.get('attention_share') is not None else None, 1, ' %')} | "
            f"{_f(s['attention_ms'])} → {_f(v['attention_ms'])} | {_f(r.get('predicted_speedup'), 3, '×')} | "
            f"{_f(na.get('sdpa'))} → {_f(na.get('vidattn'))} | {c['kernel']} / {c['fallback']} / {c['stock']} | "
            f"{'—' if r.get('output_rel_l2') is None else format(r['output_rel_l2'], '.2e')} |")
    reasons = [f"- {r['family']}: {n} call(s) on SDPA: {why}" for r in ok
               for why, n in (r["vidattn"]["census"].get("fallback_reasons") or {}).items()]
    if reasons:
        lines += ["", "Fallbacks:", ""] + reasons
    rest = [r for r in records if r.get("status") != "ok"]
    if rest:
        lines += ["", "Not measured:", ""]
        for r in rest:
            why = r.get("reason") or f"failed at {r.get('failed_at')}: {str(r.get('error'))[:300]}"
            lines.append(f"- {r['family']} ({r.get('status')}): {why}")
    return "\n".join(lines) + "\n"


def write_table(out_dir: Path) -> list[dict]:
    recs = []
    for p in sorted(out_dir.glob("*.json")):
        if p.name == "table.json":
            continue
        try:
            r = json.loads(p.read_text())
        except (OSError, ValueError):
            continue
        if isinstance(r, dict) and "family" in r and "status" in r:
            recs.append(r)
    order = {n: i for i, n in enumerate(GROUPS[1] + GROUPS[2] + GROUPS[3] + NOT_RUN)}
    recs.sort(key=lambda r: (order.get(r["family"], 99), r["family"]))
    (out_dir / "table.md").write_text(table(recs))
    (out_dir / "table.json").write_text(json.dumps(
        {"generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
         "rows": [{k: v for k, v in r.items() if k not in ("traceback",)} for r in recs]}, indent=1) + "\n")
    return recs


def plan_rows() -> list[dict]:
    from pipelines import registry

    rows = []
    for g, names in GROUPS.items():
        for n in names:
            est = registry.estimate(n)
            rows.append({"group": g, "family": n, **{k: est.get(k) for k in ("forward_s", "runner_s", "params")}})
    return rows


def group_estimate(g: int, kernel_build: bool = True) -> float:
    return sum(r["runner_s"] or 0 for r in plan_rows() if r["group"] == g) + STARTUP_S + \
        (KERNEL_BUILD_S if kernel_build else 0)


def print_plan() -> None:
    print(f"{'group':>5} {'family':16} {'params':>8} {'est fwd':>8} {'est run':>8}")
    for r in plan_rows():
        print(f"{r['group']:>5} {r['family']:16} {(r['params'] or 0) / 1e9:7.2f}B "
              f"{_f(r['forward_s'], 2, 's'):>8} {_f(r['runner_s'], 0, 's'):>8}")
    for g in GROUPS:
        print(f"group {g}: estimated {group_estimate(g):.0f} s with the kernel build ({KERNEL_BUILD_S:.0f} s), "
              f"{group_estimate(g, False):.0f} s without")
    if NOT_RUN:
        print(f"not run: {', '.join(NOT_RUN)} (pipelines/registry.py says why)")
    print("Estimates from FLOPs counted on the meta device (attention at 600 TFLOPS, the rest at 650, +25 % "
          "elementwise): for budgeting, not measurements.")


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--group", type=int, choices=sorted(GROUPS), default=None, help="one of the two device groups")
    p.add_argument("--only", nargs="+", default=None, metavar="FAMILY", help="these families (registry names)")
    p.add_argument("--families", default=None, metavar="A,B",
                   help="these families, comma-separated (e.g. wan_animate2,sana_wm_refiner: the KV-cached rows)")
    p.add_argument("--out-dir", default=None, help="where <family>.json, table.md and table.json go (required to run)")
    p.add_argument("--budget-s", type=float, default=None,
                   help="wall seconds this run may take; a family whose estimate exceeds what is left is skipped "
                        "with the reason (default: no limit)")
    p.add_argument("--tiny", action="store_true", help="tiny configs (CPU tests)")
    p.add_argument("--device", default=None, help="cuda (default when present) or cpu (only with --tiny)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--plan", action="store_true", help="print the groups with estimated seconds and exit")
    p.add_argument("--table-only", action="store_true", help="rebuild table.md/.json from the JSONs in --out-dir")
    return p


def main(argv: list[str] | None = None) -> list[dict]:
    args = build_parser().parse_args(argv)
    t_begin = time.perf_counter()
    from pipelines import registry

    if args.plan:
        print_plan()
        return []
    if not args.out_dir:
        raise SystemExit("error: --out-dir DIR is required (or --plan)")
    out_dir = Path(args.out_dir)
    if args.table_only:
        if not out_dir.is_dir():
            raise SystemExit(f"error: --out-dir {out_dir} is not a folder")
        recs = write_table(out_dir)
        print((out_dir / "table.md").read_text())
        return recs
    if args.families is not None:
        if args.only:
            raise SystemExit("error: pass --only or --families, not both")
        args.only = [n.strip() for n in args.families.split(",") if n.strip()]
        if not args.only:  # an empty list would read as "every family": on a GPU, the whole sweep
            raise SystemExit(f"error: --families names no family (got {args.families!r}); --plan lists them")
    if args.group is not None and args.only:
        raise SystemExit("error: pass --group or --only/--families, not both")
    names = args.only or (GROUPS[args.group] if args.group else GROUPS[1] + GROUPS[2] + GROUPS[3])
    if not args.only and args.group in (None, 2):
        names = names + NOT_RUN  # recorded with the reason (instant), so the table names every routed family
    unknown = [n for n in names if n not in registry.ENTRIES]
    if unknown:
        raise SystemExit(f"error: unknown family {', '.join(unknown)} (choose from {', '.join(registry.names())})")
    device = registry.pick_device(args.device, args.tiny, "the default sizes")
    if args.budget_s is not None and args.budget_s <= 0:
        raise SystemExit(f"error: --budget-s must be > 0, got {args.budget_s}")
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    out_dir.mkdir(parents=True, exist_ok=True)
    deadline = None if args.budget_s is None else t_begin + args.budget_s
    import vidattn

    warnings.filterwarnings("ignore", category=vidattn.VidattnFallbackWarning)
    if device.type == "cuda":
        from vidattn import _ext

        t0 = time.perf_counter()
        lib = _ext.load()  # the kernel build (or the cached one) before any timing
        log(f"kernel library {'loaded' if lib is not None else 'NOT available'} in {time.perf_counter() - t0:.1f} s")
    est_total = sum((estimate_for(n, args.tiny).get("runner_s") or 0) for n in names)
    log(f"{len(names)} families; estimated {est_total:.0f} s" +
        ("" if deadline is None else f"; budget {args.budget_s:.0f} s"))
    recs = []
    for i, name in enumerate(names, 1):
        elapsed = time.perf_counter() - t_begin
        est = estimate_for(name, args.tiny).get("runner_s")
        rest = sum((estimate_for(n, args.tiny).get("runner_s") or 0) for n in names[i - 1:])
        log(f"[{i}/{len(names)}] {name} (elapsed {elapsed:.0f} s; estimate {_f(est, 0, ' s')}, ETA of the rest "
            f"{rest:.0f} s" + ("" if deadline is None else f"; {deadline - time.perf_counter():.0f} s of the budget "
                                                             f"left") + ")")
        rec = measure_family(name, args, device, dtype, deadline)
        (out_dir / f"{name}.json").write_text(json.dumps(rec, indent=1) + "\n")
        if rec["status"] == "ok":
            sp = "n/a (SDPA both)" if rec["all_fallback"] else f"{rec['speedup']:.3f}x"
            log(f"  {name}: SDPA {rec['sdpa']['forward_ms']:.1f} ms, vidattn {rec['vidattn']['forward_ms']:.1f} ms, "
                f"{sp}; rel-L2 {rec['output_rel_l2']:.2e}; {rec['wall_s']:.0f} s")
        else:
            log(f"  {name}: {rec['status']}: {rec.get('reason') or rec.get('error', '')[:300]}")
        recs.append(rec)
        write_table(out_dir)  # after every family: a run cut short by an outer timeout keeps its table
    log(f"done in {time.perf_counter() - t_begin:.0f} s: {sum(r['status'] == 'ok' for r in recs)} measured, "
        f"{sum(r['status'] == 'failed' for r in recs)} failed, "
        f"{sum(r['status'] in ('skipped', 'not_run') for r in recs)} skipped or not run; table in {out_dir}/table.md")
    return recs


if __name__ == "__main__":
    main()
