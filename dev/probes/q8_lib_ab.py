#!/usr/bin/env python3
"""The 8-bit path of two kernel libraries side by side in one process: whether a change outside the variant under
test (a prologue, the kernel count) moved the launches it did not mean to move. Each side is a library, a tail
setting (quant8.set_tail on that library: 0 the plain launch, 1 the tail launch where planned, -1 the library's
default) and optionally a pre-pass mode (quant8.set_prep: -1, the default, or one of quant8.PREP_MODES); every side
runs quant8.forward_8bit (the pre-pass and the kernel, as a user's call) on the same inputs.

    python3 dev/probes/q8_lib_ab.py old=.build/oldlib/lib.so:-1 new0=.build/vcache/lib.so:0 new1=.build/vcache/lib.so:1
    python3 dev/probes/q8_lib_ab.py prep1=$LIB:-1:1 prep2=$LIB:-1:2     # one library, two pre-pass modes

Per shape: a check call per side (relative L2 against the first side's output under 0.08: both are ~4e-2 from
fp64), then `--rounds` rounds, the sides in a rotated order each round, `--reps` calls per side queued back to back
between two CUDA events. The table: medians (ms and TFLOPS) and, per side, the median of its per-round ratio to the
first side (> 1: faster) with the rounds it was faster in. JSON to --json.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

# (name, batch, heads, queries, keys, head dim): the short-key crossover's D=128 lengths of call P28 with no tail plan
# (5120, 6144, 7168, 8192 at 24 heads) and one with (6400), the A/B's controls and Wan 1.3B.
SHAPES = [("D128 24x5120", 1, 24, 5120, 5120, 128), ("D128 24x6144", 1, 24, 6144, 6144, 128),
          ("D128 24x6400", 1, 24, 6400, 6400, 128), ("D128 24x7168", 1, 24, 7168, 7168, 128),
          ("D128 24x8192", 1, 24, 8192, 8192, 128), ("seed 8K", 4, 16, 8192, 8192, 128),
          ("CogVideoX", 1, 48, 17776, 17776, 64), ("D64 48x13568", 1, 48, 13568, 13568, 64),
          ("Wan 1.3B self", 1, 12, 32760, 32760, 128)]


def parse_side(text: str):
    """name=path:tail[:prep] -> (name, path, tail, prep); prep -1 (the library's default) when not given, else one
    of quant8.PREP_MODES. The path may hold colons: a trailing ":T:P" is tail and prep only when T is a tail value."""
    from vidattn.quant8 import PREP_MODES

    name, _, rest = text.partition("=")
    path, _, tail = rest.rpartition(":")
    prep = "-1"
    head, _, maybe_tail = path.rpartition(":")
    if head and maybe_tail in ("-1", "0", "1"):
        path, tail, prep = head, maybe_tail, tail
    if not name or not path or tail not in ("-1", "0", "1") or prep not in {str(m) for m in PREP_MODES}:
        raise SystemExit(f"error: a side is name=library.so:tail[:prep] with tail -1, 0 or 1 and prep one of "
                         f"{PREP_MODES}, got {text!r}")
    return name, path, int(tail), int(prep)


def rotated(sides: list, r: int) -> list:
    return sides[r % len(sides):] + sides[:r % len(sides)]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("sides", nargs="+", help="name=library.so:tail (the first is the reference)")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--shapes", nargs="+", default=None, help="names from SHAPES (default: all)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    sides = [parse_side(s) for s in args.sides]
    if len(sides) < 2 or len({s[0] for s in sides}) != len(sides):
        raise SystemExit("error: two or more sides with different names")
    names = [s[0] for s in SHAPES]
    if args.shapes and any(s not in names for s in args.shapes):
        raise SystemExit(f"error: --shapes: names from {names}")

    import torch

    from vidattn import quant8

    libs = {}
    for name, path, _, _ in sides:
        libs.setdefault(path, ctypes.CDLL(os.path.abspath(path)))

    def call(side, q, k, v, out):
        _, path, tail, prep = side
        if tail != -1 or hasattr(libs[path], "vidattn_q8_set_tail"):  # (a library before the tail launch: -1 only)
            quant8.set_tail(tail, lib=libs[path])
        if prep != -1 or hasattr(libs[path], "vidattn_q8_set_prep"):
            quant8.set_prep(prep, lib=libs[path])
        quant8.forward_8bit(q, k, v, out, None, None, 1 / math.sqrt(q.shape[-1]), lib=libs[path])

    rows = []
    for shape, b, h, sq, skv, d in SHAPES:
        if args.shapes and shape not in args.shapes:
            continue
        g = torch.Generator(device="cuda").manual_seed(sq * 131 + h)
        q, k, v = (torch.randn(b, n, h, d, device="cuda", dtype=torch.bfloat16, generator=g)
                   for n in (sq, skv, skv))
        outs = {}
        for side in sides:
            outs[side[0]] = torch.empty_like(q)
            call(side, q, k, v, outs[side[0]])
        torch.cuda.synchronize()
        ref = outs[sides[0][0]].float()
        checks = {n: float((o.float() - ref).norm() / ref.norm()) for n, o in outs.items()}
        if any(not e < 0.08 for e in checks.values()):
            print(f"check failed at {shape}: {checks}", file=sys.stderr)
            return 1
        times = {s[0]: [] for s in sides}
        for r in range(args.rounds):
            for side in rotated(sides, r):
                out = outs[side[0]]
                call(side, q, k, v, out)
                torch.cuda.synchronize()
                a, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(args.reps):
                    call(side, q, k, v, out)
                e.record()
                e.synchronize()
                times[side[0]].append(a.elapsed_time(e) / args.reps)
        flops = 4.0 * b * h * sq * skv * d
        base = times[sides[0][0]]
        row = {"shape": shape, "dims": [b, h, sq, skv, d], "ms": times, "rel_l2_vs_first": checks, "sides": {}}
        for name, ts in times.items():
            ratios = [x / y for x, y in zip(base, ts)]
            row["sides"][name] = {"ms": statistics.median(ts), "tflops": flops / statistics.median(ts) / 1e9,
                                  "ratio": statistics.median(ratios), "faster": sum(x > 1 for x in ratios)}
        rows.append(row)
        print(f"{shape} done", flush=True)
    for path, lib in libs.items():
        if hasattr(lib, "vidattn_q8_set_tail"):
            quant8.set_tail(-1, lib=lib)
        if hasattr(lib, "vidattn_q8_set_prep"):
            quant8.set_prep(-1, lib=lib)
    print(f"== 8-bit path, library against library ({args.rounds} rounds of {args.reps} queued calls; ratio: the "
          f"first side's ms / this side's, median of the rounds, and the rounds this side was faster)")
    print("| shape | " + " | ".join(s[0] for s in sides) + " |")
    print("|---|" + "---|" * len(sides))
    for row in rows:
        cells = [f"{c['tflops']:.0f} ({c['ratio']:.3f}, {c['faster']}/{args.rounds})" for c in row["sides"].values()]
        print(f"| {row['shape']} | " + " | ".join(cells) + " |")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"sides": sides, "rounds": args.rounds, "reps": args.reps, "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
