"""How a backend's round time in bench_kernel.py depends on where in the round it ran, or after what, pooled over
benchmark JSONs.

bench_kernel.py times every backend once per round, the rounds taking their backends in the orders its config
records (`round_orders`; Williams order: every backend in every position equally often). On the power-limited long
shapes a kernel's time depends on how long the card has been under load: this prints, per shape and backend, the
median round time at each position of the round and the ratio of the last position's to the first's; with
`--by predecessor`, at each backend that ran right before it (the previous round's last for a round's first;
"setup" for the first round, which follows the shape's inputs and correctness check). Only runs whose config
records the round orders count (older JSONs lack them).

    python3 dev/probes/round_positions.py bench/results/kernel_2026-12-01_*williams*.json
    python3 dev/probes/round_positions.py --by predecessor --backends vidattn,cudnn --shapes Wan FILES...
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path


def position_times(runs: list[dict], backends: list[str], by: str = "position") -> dict[tuple[str, str], dict]:
    """{(shape name, backend): {key: [ms of each round with that key]}}, pooled over runs; the key is the position
    in the round (by="position") or the backend timed just before (by="predecessor"; "setup" before round 0)."""
    out: dict[tuple[str, str], dict] = {}
    for run in runs:
        orders = run.get("config", {}).get("round_orders")
        if not orders:
            continue
        for res in run.get("results", []):
            for backend in backends:
                times = res.get("ms_rounds", {}).get(backend, [])
                for i, ms in enumerate(times):
                    order = orders[i % len(orders)]
                    if backend not in order:
                        continue
                    pos = order.index(backend)
                    if by == "position":
                        key = pos
                    elif pos:
                        key = order[pos - 1]
                    else:
                        key = orders[(i - 1) % len(orders)][-1] if i else "setup"
                    out.setdefault((res["name"], backend), {}).setdefault(key, []).append(ms)
    return out


def table(times: dict[tuple[str, str], dict], shapes: list[str] | None = None) -> list[str]:
    """Markdown rows: shape, backend, the median ms under each key (rounds pooled; their count in brackets); for
    positions also the last position's over the first's."""
    keys = sorted({k for per in times.values() for k in per}, key=lambda k: (isinstance(k, str), str(k).zfill(4)))
    by_position = all(isinstance(k, int) for k in keys)
    head = [f"position {k}" if isinstance(k, int) else f"after {k}" for k in keys]
    lines = ["| shape | backend | " + " | ".join(head) + (" | last / first |" if by_position else " |"),
             "|---|---|" + "---|" * (len(keys) + by_position)]
    for (name, backend), per in times.items():
        if shapes and not any(s.lower() in name.lower() for s in shapes):
            continue
        med = {k: statistics.median(per[k]) for k in per}
        cells = [f"{med[k]:.3f} ({len(per[k])})" if k in med else "-" for k in keys]
        ratio = ""
        if by_position:
            first, last = med.get(keys[0]), med.get(keys[-1])
            ratio = f" {last / first:.3f} |" if first and last else " - |"
        lines.append(f"| {name} | {backend} | " + " | ".join(cells) + " |" + ratio)
    return lines


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("files", nargs="+", help="bench_kernel.py JSONs")
    ap.add_argument("--backends", default="vidattn,cudnn")
    ap.add_argument("--shapes", help="comma-separated substrings of shape names (default: all)")
    ap.add_argument("--by", choices=("position", "predecessor"), default="position")
    args = ap.parse_args(argv)
    runs = [json.loads(Path(f).read_text()) for f in args.files]
    used = sum(1 for r in runs if r.get("config", {}).get("round_orders"))
    if not used:
        print("no file records its round orders (config.round_orders)", file=sys.stderr)
        return 1
    times = position_times(runs, [b.strip() for b in args.backends.split(",") if b.strip()], args.by)
    shapes = [s.strip() for s in args.shapes.split(",")] if args.shapes else None
    print(f"{used} of {len(runs)} runs record their round orders; median ms per {args.by} (rounds pooled)")
    print("\n".join(table(times, shapes)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
