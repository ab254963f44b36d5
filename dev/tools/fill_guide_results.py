"""Write the measured lineage numbers into the guide and the results page, from a bench_lineage JSON.

    python3 dev/tools/fill_guide_results.py bench/results/lineage_<date>_<commit>.json

Fills three kinds of marked blocks, so that every figure in them is read from the JSON (never typed by hand):
  docs/guide/README.md   <!-- lineage-results:begin/end -->   the whole table
  docs/guide/NN_*.md     <!-- step-result:begin/end -->       the step's first line ("Lineage step: ...")
  docs/results.md        <!-- lineage:begin/end -->           the whole table
A step page keeps whatever follows its first line inside the block (e.g. the matching production version's
measurement on another shape).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _replace_block(text: str, tag: str, body: str) -> str:
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    i, j = text.find(begin), text.find(end)
    if i < 0 or j < i:
        raise ValueError(f"markers {begin} / {end} not found")
    return text[: i + len(begin)] + "\n" + body.rstrip("\n") + "\n" + text[j:]


def _block(text: str, tag: str) -> str:
    begin, end = f"<!-- {tag}:begin -->", f"<!-- {tag}:end -->"
    i, j = text.find(begin), text.find(end)
    return text[i + len(begin): j] if 0 <= i < j else ""


def summarize(data: dict) -> list[dict]:
    """One row per step: TFLOPS, % of cuDNN and of the production kernel, gain over the previous step."""
    refs = data["references"]
    cudnn = refs["cudnn"]["tflops"] if refs.get("cudnn", {}).get("ok") else None
    final = refs["production"]["tflops"] if refs.get("production", {}).get("ok") else None
    rows, prev = [], None
    for st in data["steps"]:
        t = st.get("tflops") if st.get("ok") else None
        rows.append({
            "num": st["num"], "name": st["name"], "change": st["change"], "status": st["status"], "tflops": t,
            "pct_cudnn": 100.0 * t / cudnn if t and cudnn else None,
            "pct_final": 100.0 * t / final if t and final else None,
            "gain": t / prev if t and prev else None,
        })
        prev = t if t else prev
    return rows


def _fmt(x, spec):
    return "-" if x is None else format(x, spec)


def table(data: dict, link_prefix: str) -> str:
    meta, cfg = data["metadata"], data["config"]["canonical_shape"]
    refs = data["references"]
    lines = [
        f"Measured on {meta['gpu']} ({meta['date_utc'][:10]}, torch {meta['torch']}, cuDNN {meta['cudnn']}, commit "
        f"`{meta['git_commit'][:7]}`) at the canonical shape B={cfg['b']}, H={cfg['h']}, S={cfg['s']}, D={cfg['d']}, "
        f"bf16, with `{meta['command']}`; cuDNN SDPA and the production kernel timed in the same run. "
        "Every step passed its check against an fp32 reference unless its status says otherwise.",
        "",
        "| step | change | TFLOPS | × previous step | % of cuDNN | % of final | status |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in summarize(data):
        lines.append(f"| [{r['name']}]({link_prefix}{r['name']}.md) | {r['change']} | {_fmt(r['tflops'], '.1f')} | "
                     f"{_fmt(r['gain'], '.2f')} | {_fmt(r['pct_cudnn'], '.1f')} | {_fmt(r['pct_final'], '.1f')} | "
                     f"{r['status']} |")
    for key, label in (("cudnn", "cuDNN SDPA"), ("production", "vidattn (the shipped kernel)"),
                       ("production_8bit", 'vidattn precision="8bit" (the shipped 8-bit path, beside step 16)')):
        if key == "production_8bit" and key not in refs:  # runs without an 8-bit step have no such row
            continue
        ref = refs.get(key, {})
        lines.append(f"| {label} | reference | {_fmt(ref.get('tflops'), '.1f')} | | | | "
                     f"{'ok' if ref.get('ok') else ref.get('error')} |")
    return "\n".join(lines)


def step_line(r: dict, source: str) -> str:
    if r["tflops"] is None:
        return f"Lineage step: {r['status']} in `{source}`."
    gain = f", {r['gain']:.2f}x the previous step" if r["gain"] else ""
    return (f"Lineage step, canonical shape: **{r['tflops']:.1f} TFLOPS**{gain}, {r['pct_cudnn']:.1f} % of cuDNN, "
            f"{r['pct_final']:.1f} % of the shipped kernel (source: `{source}`).")


def fill(json_path: Path, root: Path = ROOT) -> list[Path]:
    data = json.loads(json_path.read_text())
    source = json_path.relative_to(root).as_posix() if json_path.is_relative_to(root) else json_path.name
    changed = []
    guide = root / "docs" / "guide"
    index = guide / "README.md"
    index.write_text(_replace_block(index.read_text(), "lineage-results", table(data, "")))
    changed.append(index)
    results = root / "docs" / "results.md"
    results.write_text(_replace_block(results.read_text(), "lineage", table(data, "guide/")))
    changed.append(results)
    for r in summarize(data):
        page = guide / f"{r['name']}.md"
        if not page.is_file():
            continue
        text = page.read_text()
        old = _block(text, "step-result").strip("\n").split("\n")
        # Keep everything after the first paragraph (e.g. the production version's measurement).
        rest = "\n".join(old[next((i for i, l in enumerate(old) if not l.strip()), len(old)):]).strip("\n")
        body = step_line(r, source) + ("\n\n" + rest if rest else "")
        page.write_text(_replace_block(text, "step-result", body))
        changed.append(page)
    return changed


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("json", type=Path, help="a bench/results/lineage_*.json written by scripts/bench_lineage.py")
    args = ap.parse_args(argv)
    if not args.json.is_file():
        sys.exit(f"error: {args.json}: no such file")
    for p in fill(args.json.resolve()):
        print(f"updated {p.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
