"""Where the exact kernel's tail launch spends its time (dev/NOTES.md "A balanced tail at D=256"): per shape and per
tail setting (vidattn._ext.set_tail_rounds), each launch of one call on the device timeline from torch.profiler
(median over --calls calls): the main launch, the tail (split) launch, the merge (combine_kernel), the gaps between
them, and the call's span from the first launch's start to the last one's end. Beside them the main launch's time
per key block of one CTA (main ms / (its rounds x the tile's key blocks)), the tail launch in those block times, and
the plan's blocks a CTA (the balanced chunk u, or a range's ceil(nb / s)), so that a tail launch slower than its plan
shows as blocks of overhead:

    timeout 120 python3 dev/probes/tail_probe.py --modes 1 3 --out $OUT/tail_probe.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

SHAPES = {  # B, H, S, D (self-attention) and the build's key-block width
    "D256 8K": (2, 8, 8192, 256, 80),
    "D256 32K": (1, 8, 32768, 256, 80),
    "Mochi": (1, 24, 22230, 128, 176),
}
BLOCK_M = 128  # every build these shapes run (tile_config.cuh: two consumer warpgroups of 64 rows)


def launches(fn, calls: int) -> list[list[tuple[str, float, float]]]:
    """Per call, its kernels as (name, start us, end us) in start order."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    per_call = []
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
            torch.cuda.synchronize()  # calls apart on the timeline, so each event belongs to one call
    evs = []
    for ev in prof.events():
        if str(getattr(ev, "device_type", "")).endswith("CUDA") and ("flash_fwd" in ev.name or "combine" in ev.name):
            start = ev.time_range.start
            evs.append((ev.name, float(start), float(ev.time_range.end)))
    evs.sort(key=lambda e: e[1])
    n = len(evs) // calls
    for i in range(calls):
        per_call.append(evs[i * n:(i + 1) * n])
    return per_call


def summarize(per_call, shape, splits: int, mode: int, sms: int) -> dict:
    from dev.stress import budget
    b, h, s, d, bn = shape
    tiles = b * h * math.ceil(s / BLOCK_M)
    nb = math.ceil(s / bn)
    r = tiles % sms
    n = len(per_call[0])
    row = {"mode": mode, "splits": splits, "launches": n, "tiles": tiles, "nb": nb, "r": r}
    med = lambda xs: statistics.median(xs)  # noqa: E731
    dur = [med([(c[i][2] - c[i][1]) / 1e3 for c in per_call]) for i in range(n)]
    row["span_ms"] = med([(c[-1][2] - c[0][1]) / 1e3 for c in per_call])
    row["main_ms"] = dur[0]
    tail = n >= 3
    main_rounds = (tiles - (r if tail else 0)) // sms + (0 if tail or r == 0 else 1)
    per_block_us = dur[0] * 1e3 / (main_rounds * nb)
    row["main_rounds"] = main_rounds
    row["block_us"] = per_block_us
    if tail:
        row["split_ms"], row["combine_ms"] = dur[1], dur[2]
        row["gap_main_split_us"] = med([c[1][1] - c[0][2] for c in per_call])
        row["gap_split_combine_us"] = med([c[2][1] - c[1][2] for c in per_call])
        row["split_blocks"] = dur[1] * 1e3 / per_block_us
        u = budget.balanced_tail_chunk(r, nb, sms, budget.EXACT_TAIL_MIN_BLOCKS) if mode == 3 else 0
        row["plan_blocks"] = u if u else -(-nb // max(splits, 1))
    else:
        row["last_round_blocks"] = nb
    return row


def main(argv=None) -> int:
    import torch
    import vidattn
    from vidattn import _ext
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--modes", type=int, nargs="+", default=[1, 3])
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES))
    ap.add_argument("--calls", type=int, default=10)
    ap.add_argument("--out", default=None)
    a = ap.parse_args(argv)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for name in a.shapes:
        b, h, s, d, _ = SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
        for mode in a.modes:
            _ext.set_tail_rounds(mode)
            try:
                fn = lambda: vidattn.attention(q, k, v)  # noqa: E731
                fn()
                splits = _ext.last_tail_splits()
                row = summarize(launches(fn, a.calls), SHAPES[name], splits, mode, sms)
            finally:
                _ext.set_tail_rounds(-1)
            row["shape"] = name
            rows.append(row)
            print(json.dumps(row), flush=True)
    print("\n| shape | mode | launches | span ms | main ms (rounds) | block us | split ms | in blocks | plan blocks "
          "| combine ms | gaps us |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        tail = r["launches"] >= 3
        print(f"| {r['shape']} | {r['mode']} | {r['launches']} | {r['span_ms']:.4f} | {r['main_ms']:.4f} "
              f"({r['main_rounds']}) | {r['block_us']:.3f} | "
              + (f"{r['split_ms']:.4f} | {r['split_blocks']:.1f} | {r['plan_blocks']} | {r['combine_ms']:.4f} | "
                 f"{r['gap_main_split_us']:.1f} / {r['gap_split_combine_us']:.1f} |" if tail else
                 f"- | (last round {r['last_round_blocks']}) | - | - | - |"))
    if a.out:
        Path(a.out).parent.mkdir(parents=True, exist_ok=True)
        Path(a.out).write_text(json.dumps({"device": torch.cuda.get_device_name(0), "sms": sms, "rows": rows},
                                          indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
