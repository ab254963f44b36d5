#!/usr/bin/env python3
"""Where a kernel's warps wait, per SASS instruction, from an Nsight Compute source-page export.

    ncu --import out/ncu_wan_cross.ncu-rep --page source --csv --print-source sass > src.csv   # (ncu_profile.sh does it)
    python3 dev/probes/ncu_stalls.py src.csv.gz [--top 30]

Prints the total of each stall reason over all sampled instructions, then the instructions with the most samples,
each with its share and its top three reasons. Plain or gzip CSV. Caveat when reading it: the producer warp's
mbarrier waits show up as long-scoreboard stalls on its try-wait branches; look at the consumer code's lines.
"""
from __future__ import annotations

import argparse
import collections
import csv
import gzip
import sys
from pathlib import Path


def read_rows(path: Path) -> tuple[list[str], list[list[str]]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt", newline="") as f:
        rows = list(csv.reader(f))
    start = next((i for i, r in enumerate(rows) if "Address" in r and "Source" in r), None)
    if start is None:
        sys.exit(f"{path}: no header row with 'Address' and 'Source' (is it `--page source --csv` output?)")
    return rows[start], [r for r in rows[start + 1:] if len(r) == len(rows[start])]


def summarise(header: list[str], rows: list[list[str]], top: int) -> str:
    samples = header.index("Warp Stall Sampling (All Samples)")
    src, addr = header.index("Source"), header.index("Address")
    reasons = [i for i, h in enumerate(header) if h.startswith("stall_") and "Not Issued" not in h]

    def n(row, i):
        try:
            return int(float(row[i] or 0))
        except ValueError:
            return 0

    total = sum(n(r, samples) for r in rows) or 1
    per_reason = collections.Counter()
    for r in rows:
        for i in reasons:
            per_reason[header[i]] += n(r, i)
    out = [f"{len(rows)} instructions, {total} samples",
           "by reason: " + ", ".join(f"{k[6:]} {100 * v / total:.1f}%" for k, v in per_reason.most_common(10))]
    for r in sorted(rows, key=lambda r: -n(r, samples))[:top]:
        why = sorted(((n(r, i), header[i][6:]) for i in reasons), reverse=True)[:3]
        why_s = ", ".join(f"{name} {cnt}" for cnt, name in why if cnt)
        out.append(f"{n(r, samples):7d} {100 * n(r, samples) / total:5.1f}%  {r[addr][-5:]}  "
                   f"{r[src].strip()[:64]:64s} {why_s}")
    return "\n".join(out)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("csv", type=Path)
    ap.add_argument("--top", type=int, default=30)
    args = ap.parse_args()
    print(summarise(*read_rows(args.csv), args.top))


if __name__ == "__main__":
    main()
