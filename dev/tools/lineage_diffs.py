#!/usr/bin/env python3
"""Writes docs/guide/diffs/NN.diff: the unified diff of lineage step NN-1 -> NN (docs/guide/lineage/NN_*.cu).

Every guide page links its step's diff against the predecessor, so the reader sees exactly what one optimization
changed. Steps whose predecessor file is missing get no diff; diffs for steps that no longer exist are removed.
Pure Python (difflib), no GPU.

    python3 dev/tools/lineage_diffs.py            # (re)write docs/guide/diffs/*.diff
    python3 dev/tools/lineage_diffs.py --check    # exit 1 if any diff is missing or stale; writes nothing
"""
from __future__ import annotations

import argparse
import difflib
import re
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
LINEAGE = REPO / "docs" / "guide" / "lineage"
DIFFS = REPO / "docs" / "guide" / "diffs"
STEP_FILE = re.compile(r"^(\d\d)_[A-Za-z0-9_]+\.cu$")
NO_NEWLINE = "\\ No newline at end of file\n"


def step_files(lineage: Path = LINEAGE) -> dict[int, Path]:
    """Step number -> its .cu file (the first one in name order if a number were ever used twice)."""
    steps: dict[int, Path] = {}
    for path in sorted(lineage.glob("*.cu")):
        m = STEP_FILE.match(path.name)
        if m:
            steps.setdefault(int(m.group(1)), path)
    return steps


def _lines(text: str) -> list[str]:
    lines = text.splitlines(keepends=True)
    # Like git: a last line without a newline gets the marker, so the diff still applies with `patch`.
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n" + NO_NEWLINE
    return lines


def unified_diff(old: Path, new: Path, context: int = 3, root: Path = REPO) -> str:
    """The unified diff old -> new, with git-style a/ b/ paths relative to the repository."""
    def rel(p: Path) -> str:
        try:
            return p.resolve().relative_to(root.resolve()).as_posix()
        except ValueError:
            return p.name
    return "".join(difflib.unified_diff(_lines(old.read_text(encoding="utf-8")),
                                        _lines(new.read_text(encoding="utf-8")),
                                        fromfile=f"a/{rel(old)}", tofile=f"b/{rel(new)}", n=context))


def expected_diffs(lineage: Path = LINEAGE, context: int = 3, root: Path = REPO) -> dict[str, str]:
    """File name (NN.diff) -> content, for every step > 01 whose predecessor exists."""
    steps = step_files(lineage)
    out = {}
    for n, path in sorted(steps.items()):
        if n > 1 and n - 1 in steps:
            out[f"{n:02d}.diff"] = unified_diff(steps[n - 1], path, context, root)
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--check", action="store_true", help="report missing or stale diffs (exit 1), write nothing")
    ap.add_argument("--out", type=Path, default=DIFFS, help="output folder (default docs/guide/diffs)")
    ap.add_argument("--lineage", type=Path, default=LINEAGE, help="folder of NN_*.cu steps (default docs/guide/lineage)")
    ap.add_argument("--context", type=int, default=3, help="lines of context per hunk (default 3)")
    args = ap.parse_args(argv)

    want = expected_diffs(args.lineage, args.context)
    have = {p.name for p in args.out.glob("[0-9][0-9].diff")} if args.out.is_dir() else set()
    stale = sorted(name for name, text in want.items()
                   if not (args.out / name).is_file() or (args.out / name).read_text(encoding="utf-8") != text)
    extra = sorted(have - set(want))
    if args.check:
        for name in stale:
            print(f"stale or missing: {args.out / name}")
        for name in extra:
            print(f"no such step pair any more: {args.out / name}")
        if stale or extra:
            print("run: python3 dev/tools/lineage_diffs.py")
            return 1
        print(f"lineage_diffs: {len(want)} diffs up to date")
        return 0
    args.out.mkdir(parents=True, exist_ok=True)
    for name in stale:
        (args.out / name).write_text(want[name], encoding="utf-8")
    for name in extra:
        (args.out / name).unlink()
    for name, text in sorted(want.items()):
        added = sum(1 for l in text.splitlines() if l.startswith("+") and not l.startswith("+++"))
        removed = sum(1 for l in text.splitlines() if l.startswith("-") and not l.startswith("---"))
        mark = "written" if name in stale else "unchanged"
        print(f"{args.out / name}: +{added} -{removed} ({mark})")
    for name in extra:
        print(f"{args.out / name}: removed (no such step pair)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
