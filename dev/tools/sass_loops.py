#!/usr/bin/env python3
"""The key loops of a kernel's SASS: every backward branch whose body holds both HGMMA and MUFU.EX2, smallest first,
with the counts that say what a key block issues (instructions, HGMMA, MUFU.EX2, branches, shuffles, FMNMX).

The innermost such loop is a key loop; a kernel has one per instantiation of it (the mainloop's start stages, the
fixed-reference and online passes). Read it against another build's: e.g. the block-sparse D=64 loop against the
dense one (dev/NOTES.md, "The block-sparse fixed reference"). No GPU:

    cuobjdump -sass -fun '<mangled kernel name>' lib.so > k.sass
    python3 dev/tools/sass_loops.py k.sass [other.sass ...] [--top 8]
"""
from __future__ import annotations

import argparse
import re
from collections import namedtuple
from pathlib import Path

Loop = namedtuple("Loop", "instrs hgmma mufu_ex2 branches shuffles fmnmx start end")
_INSTR = re.compile(r"/\*([0-9a-f]{4,6})\*/\s+(.*?);")
_BRA = re.compile(r"\bBRA\b.*?(0x[0-9a-f]+)")
_BRA_OP = re.compile(r"\bBRA\b")


def parse(text: str) -> list[tuple[int, str]]:
    """(address, instruction) of each SASS line of cuobjdump's output."""
    return [(int(m.group(1), 16), m.group(2).strip()) for m in map(_INSTR.search, text.splitlines()) if m]


def key_loops(ins: list[tuple[int, str]]) -> list[Loop]:
    """Backward branches whose body (target .. branch) holds HGMMA and MUFU.EX2, smallest body first."""
    at = {a: i for i, (a, _) in enumerate(ins)}
    out = []
    for i, (a, text) in enumerate(ins):
        m = _BRA.search(text)
        target = int(m.group(1), 16) if m else a
        if target >= a or target not in at:
            continue
        body = [t for _, t in ins[at[target]:i + 1]]
        n_hg, n_mu = sum("HGMMA" in t for t in body), sum("MUFU.EX2" in t for t in body)
        if n_hg and n_mu:
            out.append(Loop(len(body), n_hg, n_mu, sum(bool(_BRA_OP.search(t)) for t in body),
                            sum("SHFL" in t for t in body), sum("FMNMX" in t for t in body), target, a))
    return sorted(out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("sass", nargs="+", type=Path)
    ap.add_argument("--top", type=int, default=8, help="loops to print per file (smallest first)")
    args = ap.parse_args(argv)
    for path in args.sass:
        loops = key_loops(parse(path.read_text()))
        print(f"{path}: {len(loops)} key loops (instructions, HGMMA, MUFU.EX2, BRA, SHFL, FMNMX, start-end)")
        for lp in loops[:args.top]:
            print(f"  {lp.instrs:6d} {lp.hgmma:5d} {lp.mufu_ex2:5d} {lp.branches:5d} {lp.shuffles:5d} {lp.fmnmx:5d}  "
                  f"{lp.start:#x}-{lp.end:#x}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
