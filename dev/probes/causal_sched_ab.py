"""Device A/B of the causal tile schedule in one process: the dynamic schedule (the default, with the workspace)
against the static order (the same library called without a workspace: capi.cu then keeps every CTA's tiles fixed
by its index), interleaved round by round on the same inputs, CUDA-event timing, L2 flushed before every call.
Prints TFLOPS of the kept pairs (4 B H D S(S+1)/2) per policy, the ratio, and the simulated makespan / mean of each
(dev/probes/causal_schedule_sim.py), and checks the two outputs are equal bit for bit (a tile's arithmetic does not
depend on the CTA that runs it). Writes a JSON with --out.

    python3 dev/probes/causal_sched_ab.py --rounds 7 --out $OUT/causal_sched_ab.json

--sweep crossover times the short problems where the two meet (1K, 2K, 4K tokens at batch x heads that fill the
card, D=64 and D=128, and D=128 at 6K between the two lengths where it crossed): "dynamic" is then forced at every
length (vidattn_sm90_set_causal_dynamic_min_sq(0)), and a third policy, "auto", is the library's default routing
(static below VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64 / _D128 query rows, one threshold per causal build). The last lines
give, per head dim, the shortest length from which dynamic is at least as fast as static at every longer length
measured (`crossover`, on the median of the per-round ratios): the threshold capi.cu should ship for that build.

    python3 dev/probes/causal_sched_ab.py --sweep crossover --rounds 5 --out $OUT/causal/crossover.json
    python3 dev/probes/causal_sched_ab.py --replay bench/results/h200_2026-12-02_pm/call_g/causal/crossover.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402

_spec = importlib.util.spec_from_file_location("causal_schedule_sim", ROOT / "dev/probes/causal_schedule_sim.py")
sim = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(sim)

SHAPES = [(2, 16, 8192, 128), (1, 16, 32768, 128), (2, 32, 8192, 64), (1, 32, 32768, 64), (1, 16, 16384, 128),
          (4, 16, 1024, 128), (1, 12, 32760, 128)]
# Short problems, batch x heads chosen so that each length has several tiles per CTA (132 SMs; D=128 tiles are 128
# rows, D=64 192): 1K D=128 4x16 is the shape that measured 0.85-0.98x.
# D=128 has a second 4K shape and a 6K one: its 4K point read 0.83-1.05 from round to round, and its threshold sits
# between 4K and 8K.
CROSSOVER = [(4, 16, 1024, 128), (8, 16, 1024, 128), (8, 32, 1024, 64), (4, 16, 2048, 128), (4, 32, 2048, 64),
             (2, 16, 4096, 128), (4, 16, 4096, 128), (2, 32, 4096, 64), (2, 16, 6144, 128), (1, 16, 8192, 128),
             (1, 32, 8192, 64)]
# The causal builds a head dim runs on (capi.cu, causal_build_slot): one threshold each.
BUILD_HEAD_DIMS = (64, 128)


def crossover(points: list[tuple[int, float]], tol: float = 0.0) -> int | None:
    """The shortest length S such that dynamic / static >= 1 - tol at S and at every longer length measured
    (points: (seqlen, speedup) of one head dim); None if dynamic loses at the longest length."""
    best = None
    for s, x in sorted(points, reverse=True):
        if x < 1.0 - tol:
            break
        best = s
    return best


def paired_speedup(row: dict) -> float:
    """The median of the per-round static / dynamic ratios. The clocks drift between rounds (2x16x4K D=128: both
    policies 203 -> 282 us and back within one sweep) and each round times the policies back to back, so the ratio
    within a round cancels the drift that the ratio of the two medians keeps. Rows of older sweeps have only the
    ratio of medians."""
    xs = row.get("speedup_rounds")
    return statistics.median(xs) if xs else row["speedup"]


def recommended_min_sq(rows: list[dict], tol: float = 0.0) -> dict[int, int | None]:
    """The threshold per head dim (capi.cu has one per causal build): the crossover of that head dim's median
    paired speedup over the batch x heads measured at each length; None where dynamic loses at the longest."""
    by_d: dict[int, dict[int, list[float]]] = {}
    for r in rows:
        by_d.setdefault(r["d"], {}).setdefault(r["s"], []).append(paired_speedup(r))
    return {d: crossover([(s, statistics.median(xs)) for s, xs in per.items()], tol)
            for d, per in sorted(by_d.items())}


def library_min_sq(lib) -> dict[int, int]:
    """The library's default threshold per causal build (libraries with one threshold give it for both)."""
    if hasattr(lib, "vidattn_sm90_causal_dynamic_min_sq_for"):
        return {d: lib.vidattn_sm90_causal_dynamic_min_sq_for(d) for d in BUILD_HEAD_DIMS}
    return {d: lib.vidattn_sm90_causal_dynamic_min_sq() for d in BUILD_HEAD_DIMS}


def verdict(picks: dict[int, int | None], library: dict[int, int]) -> list[str]:
    """One line per head dim: the measured crossover against the library's default."""
    lines = []
    for d, pick in picks.items():
        lib_d = library.get(d)
        note = "" if lib_d is None or pick == lib_d else "  <- differs: ship the measured value"
        where = f"min_sq = {pick}" if pick is not None else "none (dynamic loses at the longest length)"
        lines.append(f"crossover D={d} (dynamic >= static from here on): {where}; library {lib_d}{note}")
    return lines


def summary(rows: list[dict], library: dict[int, int], rounds: int) -> list[str]:
    """The table of paired speedups by head dim and length, then the verdict per head dim."""
    lengths = sorted({r["s"] for r in rows})
    lines = [f"dynamic / static by length (median of the per-round ratios; median over the batch x heads measured), "
             f"{rounds} rounds:", "  D   " + "".join(f"{s:>9d}" for s in lengths)]
    for d in sorted({r["d"] for r in rows}):
        cells = []
        for s in lengths:
            xs = [paired_speedup(r) for r in rows if r["d"] == d and r["s"] == s]
            cells.append(f"{statistics.median(xs):9.3f}" if xs else f"{'-':>9s}")
        lines.append(f"  {d:<4d}" + "".join(cells))
    return lines + verdict(recommended_min_sq(rows), library)


def replay(path: str) -> None:
    """The summary of a saved sweep (--out), without a GPU: the verdict of older sweeps by today's rule."""
    data = json.loads(Path(path).read_text())
    lib = data.get("library_min_sq", {})
    library = {int(d): n for d, n in lib.items()} if isinstance(lib, dict) else {d: lib for d in BUILD_HEAD_DIMS}
    rounds = len(data["rows"][0].get("speedup_rounds", [])) if data["rows"] else 0
    print("\n".join(summary(data["rows"], library, rounds)))


def time_ms(fn, reps: int, flush: torch.Tensor) -> float:
    times = []
    for _ in range(reps):
        flush.zero_()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        times.append(a.elapsed_time(b))
    return statistics.median(times)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--out")
    ap.add_argument("--sweep", choices=("bench", "crossover", "all"), default="bench")
    ap.add_argument("--replay", metavar="JSON", help="print the table and verdict of a saved sweep, then exit")
    args = ap.parse_args()
    if args.replay:
        replay(args.replay)
        return
    shapes = {"bench": SHAPES, "crossover": CROSSOVER, "all": CROSSOVER + SHAPES}[args.sweep]
    real_ws = _ext.workspace
    lib = _ext.load()
    routed = lib is not None and hasattr(lib, "vidattn_sm90_set_causal_dynamic_min_sq")
    default_min_sq = library_min_sq(lib) if routed else {d: 0 for d in BUILD_HEAD_DIMS}
    policies = ("dynamic", "static", "auto") if routed else ("dynamic", "static")
    print("library default: dynamic from " + ", ".join(f"{n} query rows at D={d}" for d, n in default_min_sq.items())
          if routed else "library without the short-problem routing: dynamic at every length", flush=True)
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for b, h, s, d in shapes:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * b * h * d * s * (s + 1) / 2
        outs = {}

        def run(policy):
            _ext.workspace = real_ws if policy != "static" else (lambda lib, dev: None)
            if routed:
                lib.vidattn_sm90_set_causal_dynamic_min_sq(0 if policy == "dynamic" else -1)
            try:
                return vidattn.attention(q, k, v, causal=True)
            finally:
                _ext.workspace = real_ws
                if routed:
                    lib.vidattn_sm90_set_causal_dynamic_min_sq(-1)

        for policy in policies:
            outs[policy] = run(policy)
        ms = {policy: [] for policy in policies}
        for r in range(args.rounds):  # interleaved, the order rotating from round to round
            for i in range(len(policies)):
                policy = policies[(i + r) % len(policies)]
                ms[policy].append(time_ms(lambda: run(policy), args.reps, flush))
        simr = sim.simulate(b, h, s, d)
        row = {"shape": f"{b}x{h}x{s} D{d}", "b": b, "h": h, "s": s, "d": d,
               "equal": all(torch.equal(outs["dynamic"], outs[p]) for p in policies),
               "ms": ms, "group": sim.group_heads(b, h, s, d),
               "sim_ratio": {"dynamic": simr["dynamic_grouped"]["ratio"], "static": simr["static_snake"]["ratio"]}}
        for policy in ms:
            row[f"tflops_{policy}"] = flops / (statistics.median(ms[policy]) * 1e-3) / 1e12
        row["speedup"] = statistics.median(ms["static"]) / statistics.median(ms["dynamic"])
        # per round, so that the spread between rounds shows next to the median
        row["speedup_rounds"] = [st / dy for st, dy in zip(ms["static"], ms["dynamic"])]
        row["speedup_paired"] = paired_speedup(row)
        rows.append(row)
        auto = f"  auto {row['tflops_auto']:6.1f}" if routed else ""
        print(f"{row['shape']:22s} group {row['group']:3d}  dynamic {row['tflops_dynamic']:6.1f}  static "
              f"{row['tflops_static']:6.1f}{auto} TFLOPS  x{row['speedup_paired']:.3f} "
              f"[{min(row['speedup_rounds']):.3f}-{max(row['speedup_rounds']):.3f}]  (sim "
              f"{row['sim_ratio']['static']:.3f} -> {row['sim_ratio']['dynamic']:.3f})  equal={row['equal']}",
              flush=True)
        del q, k, v, outs
    pick = recommended_min_sq(rows)
    print("\n" + "\n".join(summary(rows, default_min_sq, args.rounds)))
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows,
                                              "library_min_sq": {str(d): n for d, n in default_min_sq.items()},
                                              "crossover_min_sq": {str(d): n for d, n in pick.items()}},
                                             indent=1))


if __name__ == "__main__":
    main()
