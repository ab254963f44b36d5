#!/usr/bin/env python3
"""The cross-model table: one transformer forward per video DiT family, SDPA vs vidattn, from measured reports.

    python3 scripts/cross_model_table.py                 # bench/results/forward_*/report.json -> cross_model_*
    python3 scripts/cross_model_table.py --readme        # also fill the cross-model block of docs/results.md
    python3 scripts/cross_model_table.py --results DIR --out-dir DIR

Reads every `forward_*/report.json` under --results written by `scripts/e2e_report.py --model-family NAME`
(reports without `model_family`, such as the Wan-only `--forward-only` report, and tiny CPU presets are
ignored); when a family has several, the newest (metadata.date_utc) counts. Every number in the output is
read from those files: a family without a report is listed as not measured, and a report that failed (out of
memory, an error) is listed with its error instead of numbers.
"""
from __future__ import annotations

import argparse
import datetime
import json
import math
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- cross-model:begin -->", "<!-- cross-model:end -->"
# The families the table expects (pipelines/families.py FAMILIES, in the table's order); kept here as a
# plain list so the script needs neither torch nor diffusers.
FAMILY_ORDER = ["wan", "wan14b", "skyreels_v2", "hunyuan_video", "hunyuan_video15", "cogvideox", "ltx", "mochi",
                "allegro", "ltx2"]


def _num(x):
    """A finite float, or None (the JSON writes non-finite values as strings)."""
    if isinstance(x, bool) or x is None:
        return None
    if isinstance(x, (int, float)):
        return float(x) if math.isfinite(float(x)) else None
    return None


def fmt(x, nd=1, unit=""):
    x = _num(x)
    return "n/a" if x is None else f"{x:.{nd}f}{unit}"


def load_reports(results: Path, include_tiny: bool = False) -> tuple[dict, list[str]]:
    """{(family, preset): report} keeping the newest per key; plus notes on files skipped."""
    chosen: dict[tuple, dict] = {}
    notes = []
    for path in sorted(results.glob("forward_*/report.json")):
        try:
            rep = json.loads(path.read_text())
        except (OSError, json.JSONDecodeError) as exc:
            notes.append(f"{path}: unreadable ({exc})")
            continue
        fam = rep.get("model_family")
        if not fam:
            continue  # the Wan-only forward report (no family census)
        if rep.get("preset") == "tiny" and not include_tiny:
            continue
        rep["_path"] = str(path)
        key = (fam, rep.get("preset", "default"))
        old = chosen.get(key)
        if old is None or rep.get("metadata", {}).get("date_utc", "") >= old.get("metadata", {}).get("date_utc", ""):
            chosen[key] = rep
    return chosen, notes


def _order(key):
    fam, preset = key
    return (FAMILY_ORDER.index(fam) if fam in FAMILY_ORDER else len(FAMILY_ORDER), fam, preset != "default", preset)


def row_of(rep: dict) -> dict:
    res, prof = rep.get("results", {}), rep.get("profiles", {})
    calls = rep.get("attention_calls", {}).get("vidattn") or {}
    sdpa_calls = rep.get("attention_calls", {}).get("sdpa") or {}
    med = {p: _num(res.get(p, {}).get("forward_stats_ms", {}).get("median")) for p in ("sdpa", "vidattn")}
    share = {p: _num(prof.get(p, {}).get("attention_share")) for p in ("sdpa", "vidattn")}
    attn_ms = {p: _num(prof.get(p, {}).get("attention_ms")) for p in ("sdpa", "vidattn")}
    peak = {p: _num(res.get(p, {}).get("peak_mem_gib")) for p in ("sdpa", "vidattn")}
    m = rep.get("metadata", {})
    return {
        "model_family": rep["model_family"], "preset": rep.get("preset"), "model": rep.get("model"),
        "checkpoint": rep.get("checkpoint"), "status": rep.get("status", "ok"),
        "height": rep.get("height"), "width": rep.get("width"), "frames": rep.get("frames"),
        "batch": rep.get("batch"), "tokens": rep.get("tokens"), "heads": rep.get("heads"),
        "head_dim": rep.get("head_dim"), "layers": rep.get("layers"), "params": rep.get("params"),
        "sdpa_ms": med["sdpa"], "vidattn_ms": med["vidattn"],
        "speedup": _num(rep.get("speedup", {}).get("per_forward_median")),
        "attention_share_sdpa": share["sdpa"], "attention_share_vidattn": share["vidattn"],
        "attention_ms_sdpa": attn_ms["sdpa"], "attention_ms_vidattn": attn_ms["vidattn"],
        "output_rel_l2": _num(rep.get("fidelity", {}).get("output_rel_l2")),
        "kernel_calls": calls.get("kernel"), "fallback_calls": calls.get("fallback"),
        "stock_calls": calls.get("stock"), "sdpa_path_calls": sdpa_calls.get("calls"),
        "fallback_reasons": calls.get("fallback_reasons", {}),
        "peak_mem_gib_sdpa": peak["sdpa"], "peak_mem_gib_vidattn": peak["vidattn"],
        "iters": rep.get("iters"), "warmup": rep.get("warmup"), "dtype": rep.get("dtype"),
        "timing_method": rep.get("timing_method"), "gpu": m.get("gpu"), "device": rep.get("device"),
        "date_utc": m.get("date_utc"),
        "git_commit": m.get("git_commit"), "torch": m.get("torch"), "cudnn": m.get("cudnn"),
        "failure": rep.get("failure"), "report": rep.get("_path"),
    }


def _shorten_reason(r: str) -> str:
    r = re.sub(r"\s+", " ", r or "").strip()
    return r if len(r) <= 70 else r[:67] + "..."


def _calls_text(r: dict) -> str:
    if r["kernel_calls"] is None:
        return "n/a"
    txt = f"{r['kernel_calls']} / {r['fallback_calls']}"
    if r["stock_calls"]:
        txt += f" (+{r['stock_calls']} stock)"
    return txt


def _params_text(n) -> str:
    return "n/a" if not n else (f"{n / 1e9:.2f}B" if n >= 1e8 else f"{n / 1e6:.1f}M")


def _size_text(r: dict) -> str:
    return f"{r['height']}×{r['width']}×{r['frames']}"


def table_lines(rows: list[dict]) -> list[str]:
    lines = ["| model | size (H×W×frames) | video tokens | batch | heads × D | params | SDPA ms/forward | "
             "vidattn ms/forward | speedup | attention share (SDPA) | attention ms, SDPA → vidattn | output rel-L2 | "
             "kernel / fallback calls | commit |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        sh = r["attention_share_sdpa"]
        a_s, a_v = r.get("attention_ms_sdpa"), r.get("attention_ms_vidattn")
        attn = "n/a" if a_s is None or a_v is None else f"{fmt(a_s)} → {fmt(a_v)}"
        # Where no call ran the kernel both paths ran SDPA: their ratio is noise, not a speedup.
        speed = ("n/a (SDPA both)" if r.get("kernel_calls") == 0 and (r.get("fallback_calls") or 0) > 0
                 else f"**{fmt(r['speedup'], 3, '×')}**")
        lines.append(
            f"| {r['model']} | {_size_text(r)} | {r['tokens']} | {r['batch']} | {r['heads']}×{r['head_dim']} | "
            f"{_params_text(r['params'])} | {fmt(r['sdpa_ms'])} | {fmt(r['vidattn_ms'])} | "
            f"{speed} | {fmt(None if sh is None else 100 * sh, 1, ' %')} | {attn} | "
            f"{'n/a' if r['output_rel_l2'] is None else format(r['output_rel_l2'], '.2e')} | {_calls_text(r)} | "
            f"`{(r['git_commit'] or '?')[:7]}` |")
    return lines


def render(chosen: dict, notes: list[str]) -> tuple[str, dict, str]:
    """(markdown file, json object, README block) from the chosen reports."""
    keys = sorted(chosen, key=_order)
    rows = [row_of(chosen[k]) for k in keys]
    ok = [r for r in rows if r["status"] == "ok"]
    failed = [r for r in rows if r["status"] != "ok"]
    measured_fams = {r["model_family"] for r in ok}
    missing = [f for f in FAMILY_ORDER if f not in {r["model_family"] for r in rows}]
    gpus = sorted({r["gpu"] or r["device"] or "?" for r in ok})
    dates = sorted({(r["date_utc"] or "")[:10] for r in ok if r["date_utc"]})
    commits = sorted({(r["git_commit"] or "?")[:7] for r in ok})
    torchs = sorted({str(r["torch"]) for r in ok})

    head = []
    if ok:
        dtypes = ", ".join(sorted({str(r["dtype"]) for r in ok}))
        timing = " / ".join(sorted({str(r["timing_method"]) for r in ok}))
        head.append(f"Measured on {', '.join(gpus)} ({', '.join(dates) or 'date unknown'}; torch {', '.join(torchs)}; "
                    f"commit {', '.join('`' + c + '`' for c in commits)}) with `python3 scripts/e2e_report.py "
                    f"--model-family NAME`: one transformer forward of each family's real architecture "
                    f"(random weights, {dtypes}) at its pipeline's default size unless the row says otherwise, with "
                    f"the inputs that pipeline gives one transformer call (batch 2 where it batches classifier-free "
                    f"guidance), under SDPA and under vidattn (`vidattn.apply(model)`) on the same weights. "
                    f"ms/forward: median of the timed forwards after warm-up ({timing}); attention share: "
                    f"torch.profiler, attention's share of one SDPA forward; attention ms: the attention kernels' "
                    f"device time in one profiled forward of each path; output rel-L2: vidattn's output against "
                    f"SDPA's; kernel / fallback calls: a census of one vidattn forward (`vidattn.explain` on every "
                    f"call; stock: modules vidattn leaves alone); commit: the kernel's source per row (rows measured "
                    f"at different commits ran different kernel versions). Full video generation is measured for Wan "
                    f"only.")
    else:
        head.append("No cross-model forward report has been measured yet.")
    body = table_lines(ok) if ok else []
    reasons = []
    for r in ok:
        for reason, n in (r["fallback_reasons"] or {}).items():
            reasons.append(f"- {r['model']}: {n} call(s) fell back to SDPA: {reason}")
    fail_lines = []
    for r in failed:
        f = r["failure"] or {}
        weights = f"; weights alone are {r['params'] * 2 / 2**30:.1f} GiB in bf16" if r.get("params") else ""
        peak = f"; peak allocated before the failure {fmt(f.get('peak_mem_gib'), 1, ' GiB')}" \
            if _num(f.get("peak_mem_gib")) is not None else ""
        where = "the model build" if f.get("failed_at") == "build" else f"the {f.get('failed_at')} forward"
        what = f"out of GPU memory in {where}" if f.get("oom") else f"failed in {where}"
        ran = [f"the {p} path ran: {fmt(r[p + '_ms'])} ms/forward" for p in ("sdpa", "vidattn")
               if r[p + "_ms"] is not None]
        ran_text = ("; " + ", ".join(ran)) if ran else ""
        fail_lines.append(f"- {r['model']} ({_size_text(r)}, {r['tokens']} video tokens, batch {r['batch']}) "
                          f"on {r['gpu'] or r['device']}: {what}: {_shorten_reason(f.get('error', ''))}{weights}{peak}"
                          f"{ran_text}")
    md = ["# Cross-model end to end: one transformer forward, SDPA vs vidattn", ""] + head + [""] + body
    if reasons:
        md += ["", "Fallbacks (by design or not):", ""] + reasons
    md += ["", "## Did not run to the end (out of memory on one GPU, or an error)", ""] + \
        (fail_lines or ["- none: every family with a report ran both paths"])
    md += ["", "## Not measured", ""] + ([f"- {f}: no report" for f in missing] or ["- none"])
    extra = [r for r in ok if r["preset"] != "default"]
    if extra:
        md += ["", "Rows at a preset other than the family's default size (their size column says which): " +
               ", ".join(f"{r['model']} ({r['preset']})" for r in extra) + "."]
    if rows:
        md += ["", "Per-row detail (timings p10/p90, peak memory, every attention call's shape and path) is in each "
                   "report's `report.md` next to its `report.json`:", ""]
    md += [f"- {r['model']}: `{Path(r['report']).relative_to(ROOT) if _under_root(r['report']) else r['report']}`"
           for r in rows]
    if notes:
        md += ["", "Skipped files:", ""] + [f"- {n}" for n in notes]
    md_text = "\n".join(md).rstrip() + "\n"

    readme = head[:1]
    if ok:
        readme = [head[0], ""] + body
        if reasons:
            readme += [""] + reasons
    if fail_lines:
        readme += ["", "Did not run to the end:", ""] + fail_lines
    if missing and ok:
        readme += ["", "Not measured yet: " + ", ".join(missing) + "."]
    readme_text = "\n".join(readme).rstrip() + "\n"
    data = {"generated_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "rows": ok, "failed": failed, "not_measured": missing, "skipped_files": notes,
            "measured_families": sorted(measured_fams)}
    return md_text, data, readme_text


def _under_root(p: str) -> bool:
    try:
        Path(p).resolve().relative_to(ROOT)
        return True
    except ValueError:
        return False


def fill_readme(path: Path, block: str) -> None:
    text = path.read_text()
    if text.count(BEGIN) != 1 or text.count(END) != 1 or text.index(BEGIN) > text.index(END):
        raise SystemExit(f"error: {path} needs exactly one {BEGIN} ... {END} block")
    a = text.index(BEGIN) + len(BEGIN)
    b = text.index(END)
    path.write_text(text[:a] + "\n" + block + text[b:])


def main(argv: list[str] | None = None) -> dict:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--results", default=str(ROOT / "bench" / "results"), help="folder holding forward_*/report.json")
    p.add_argument("--out-dir", default=None, help="where cross_model_<date>.md/.json go (default: --results)")
    p.add_argument("--date", default=None, help="YYYYMMDD in the file names (default: the newest report's date)")
    p.add_argument("--readme", nargs="?", const=str(ROOT / "docs" / "results.md"), default=None, metavar="PATH",
                   help="fill the cross-model block of docs/results.md (or PATH)")
    p.add_argument("--include-tiny", action="store_true", help="also tabulate tiny (CPU test) reports")
    args = p.parse_args(argv)
    results = Path(args.results)
    if not results.is_dir():
        raise SystemExit(f"error: --results {results} is not a folder")
    chosen, notes = load_reports(results, args.include_tiny)
    md, data, block = render(chosen, notes)
    date = args.date
    if date is None:
        stamps = [r.get("metadata", {}).get("date_utc", "") for r in chosen.values()]
        stamps = [s for s in stamps if s]
        date = max(stamps)[:10].replace("-", "") if stamps else datetime.datetime.now().strftime("%Y%m%d")
    out_dir = Path(args.out_dir) if args.out_dir else results
    out_dir.mkdir(parents=True, exist_ok=True)
    md_path, json_path = out_dir / f"cross_model_{date}.md", out_dir / f"cross_model_{date}.json"
    md_path.write_text(md)
    json_path.write_text(json.dumps(data, indent=2) + "\n")
    print(md)
    print(f"[cross-model] wrote {md_path} and {json_path} ({len(data['rows'])} measured, {len(data['failed'])} "
          f"failed, {len(data['not_measured'])} not measured)")
    if args.readme:
        fill_readme(Path(args.readme), block)
        print(f"[cross-model] filled the cross-model block of {args.readme}")
    return {"md": str(md_path), "json": str(json_path), **data}


if __name__ == "__main__":
    main(sys.argv[1:])
