"""Two kernel libraries' D=256 paths at the power cap, from alternating clock_probe.py runs: per alternation, each
candidate path's TFLOPS over the reference path's, per shape, and the verdict of a rule fixed before the run.

Built for the energy levers of issue 26 (dev/NOTES.md "Next for issue 26 after the twenty-eighth sitting"): at 8K
and 32K the D=256 key loop already does all the tensor work a cycle allows, so a lever shows only as a higher clock
under the same power, i.e. as TFLOPS at the cap. Each alternation is one clock_probe.py run of the reference library
and one of the candidate library, back to back (the same shapes, the same seconds and pauses); a run's JSON is
named <label>_<i>.json, i the alternation. A row is (library label, path) such as base:vidattn_hd6.

    python3 dev/probes/clock_ab_verdict.py DIR --ref base:vidattn_hd6 --cand q4u:vidattn_hd8 \\
        --shapes 2x8x8192x256 1x8x32768x256 --min-median 1.015

Rule: the candidate wins a shape when the median of its per-alternation ratios is at least --min-median and no
more than one alternation reads under 1.0; it is routed when it wins every shape named. The table and the verdict are
printed; --json writes both.
"""
from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
from pathlib import Path


def load_runs(folder: Path) -> dict[str, dict[int, list[dict]]]:
    """{label: {alternation: rows}} from the <label>_<i>.json files of a folder."""
    runs: dict[str, dict[int, list[dict]]] = {}
    for f in sorted(folder.glob("*.json")):
        m = re.fullmatch(r"(\w+?)_(\d+)\.json", f.name)
        if m is None:
            continue
        runs.setdefault(m.group(1), {})[int(m.group(2))] = json.loads(f.read_text()).get("rows", [])
    return runs


def tflops(rows: list[dict], shape: str, path: str) -> float | None:
    """The TFLOPS of (shape, path) in one run; the mean where the path ran twice; None where it did not run."""
    got = [r["tflops"] for r in rows if r.get("shape") == shape and r.get("path") == path and r.get("tflops")]
    return statistics.fmean(got) if got else None


def ratios(runs: dict, ref: str, cand: str, shape: str) -> list[float]:
    """Per alternation present for both rows: cand's TFLOPS over ref's."""
    (rl, rp), (cl, cp) = ref.split(":", 1), cand.split(":", 1)
    out = []
    for i in sorted(set(runs.get(rl, {})) & set(runs.get(cl, {}))):
        a, b = tflops(runs[rl][i], shape, rp), tflops(runs[cl][i], shape, cp)
        if a and b:
            out.append(b / a)
    return out


def verdict(per_shape: dict[str, list[float]], min_median: float) -> dict:
    """The rule: every shape's median ratio >= min_median with at most one ratio under 1.0 (and at least two)."""
    shapes = {}
    for shape, rs in per_shape.items():
        ok = len(rs) >= 2 and statistics.median(rs) >= min_median and sum(r < 1.0 for r in rs) <= 1
        shapes[shape] = {"ratios": rs, "median": statistics.median(rs) if rs else None, "wins": ok}
    return {"shapes": shapes, "routed": bool(shapes) and all(s["wins"] for s in shapes.values())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("folder", type=Path)
    ap.add_argument("--ref", required=True, help="label:path of the reference row")
    ap.add_argument("--cand", required=True, nargs="+", help="label:path of each candidate row")
    ap.add_argument("--shapes", required=True, nargs="+")
    ap.add_argument("--min-median", type=float, default=1.015)
    ap.add_argument("--json", type=Path, default=None)
    args = ap.parse_args(argv)
    for row in [args.ref, *args.cand]:
        if ":" not in row:
            raise SystemExit(f"clock_ab_verdict: a row is label:path, got {row!r}")
    runs = load_runs(args.folder)
    if not runs:
        raise SystemExit(f"clock_ab_verdict: no <label>_<i>.json runs in {args.folder}")
    result = {}
    for cand in args.cand:
        per_shape = {s: ratios(runs, args.ref, cand, s) for s in args.shapes}
        result[cand] = verdict(per_shape, args.min_median)
        for s, r in result[cand]["shapes"].items():
            med = f"{r['median']:.4f}" if r["median"] is not None else "-"
            print(f"{cand:24s} / {args.ref:20s} {s:16s} median {med}  "
                  f"[{', '.join(f'{x:.4f}' for x in r['ratios'])}]  {'wins' if r['wins'] else 'does not win'}")
        print(f"{cand}: {'ROUTED by the rule' if result[cand]['routed'] else 'not routed'} "
              f"(median >= {args.min_median} with at most one alternation under 1.0, every shape)")
    if args.json is not None:
        args.json.write_text(json.dumps({"ref": args.ref, "min_median": args.min_median, "result": result}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
