"""Device A/B of the causal tile schedule in one process: the dynamic schedule (the default, with the workspace)
against the static order (the same library called without a workspace: capi.cu then keeps every CTA's tiles fixed
by its index), interleaved round by round on the same inputs, CUDA-event timing, L2 flushed before every call.
Prints TFLOPS of the kept pairs (4 B H D S(S+1)/2) per policy, the ratio, and the simulated makespan / mean of each
(dev/probes/causal_schedule_sim.py), and checks the two outputs are equal bit for bit (a tile's arithmetic does not
depend on the CTA that runs it). Writes a JSON with --out.

    python3 dev/probes/causal_sched_ab.py --rounds 7 --out $OUT/causal_sched_ab.json

--sweep crossover times the short problems where the two meet (1K, 2K, 4K tokens at batch x heads that fill the
card, D=64 and D=128): "dynamic" is then forced at every length (vidattn_sm90_set_causal_dynamic_min_sq(0)), and a
third policy, "auto", is the library's default routing (static below VIDATTN_CAUSAL_DYNAMIC_MIN_SQ query rows). The
last lines give, per head dim, the shortest length from which dynamic is at least as fast as static at every longer
length measured: the threshold capi.cu should ship (`crossover`).

    python3 dev/probes/causal_sched_ab.py --sweep crossover --rounds 5 --out $OUT/causal/crossover.json
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
CROSSOVER = [(4, 16, 1024, 128), (8, 16, 1024, 128), (8, 32, 1024, 64), (4, 16, 2048, 128), (4, 32, 2048, 64),
             (2, 16, 4096, 128), (2, 32, 4096, 64), (1, 16, 8192, 128), (1, 32, 8192, 64)]


def crossover(points: list[tuple[int, float]], tol: float = 0.0) -> int | None:
    """The shortest length S such that dynamic / static >= 1 - tol at S and at every longer length measured
    (points: (seqlen, speedup) of one head dim); None if dynamic loses at the longest length."""
    best = None
    for s, x in sorted(points, reverse=True):
        if x < 1.0 - tol:
            break
        best = s
    return best


def recommended_min_sq(rows: list[dict], tol: float = 0.0) -> int | None:
    """One threshold for every head dim (capi.cu has one): the largest per-head-dim crossover, since below it some
    head dim loses; the median speedup over the batch x heads measured at each (length, head dim)."""
    by_d: dict[int, dict[int, list[float]]] = {}
    for r in rows:
        by_d.setdefault(r["d"], {}).setdefault(r["s"], []).append(r["speedup"])
    picks = [crossover([(s, statistics.median(xs)) for s, xs in per.items()], tol) for per in by_d.values()]
    if not picks or any(p is None for p in picks):
        return None
    return max(picks)


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
    args = ap.parse_args()
    shapes = {"bench": SHAPES, "crossover": CROSSOVER, "all": CROSSOVER + SHAPES}[args.sweep]
    real_ws = _ext.workspace
    lib = _ext.load()
    routed = lib is not None and hasattr(lib, "vidattn_sm90_set_causal_dynamic_min_sq")
    default_min_sq = lib.vidattn_sm90_causal_dynamic_min_sq() if routed else 0
    policies = ("dynamic", "static", "auto") if routed else ("dynamic", "static")
    print(f"library default: dynamic from {default_min_sq} query rows" if routed else
          "library without the short-problem routing: dynamic at every length", flush=True)
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
        rows.append(row)
        auto = f"  auto {row['tflops_auto']:6.1f}" if routed else ""
        print(f"{row['shape']:22s} group {row['group']:3d}  dynamic {row['tflops_dynamic']:6.1f}  static "
              f"{row['tflops_static']:6.1f}{auto} TFLOPS  x{row['speedup']:.3f} "
              f"[{min(row['speedup_rounds']):.3f}-{max(row['speedup_rounds']):.3f}]  (sim "
              f"{row['sim_ratio']['static']:.3f} -> {row['sim_ratio']['dynamic']:.3f})  equal={row['equal']}",
              flush=True)
        del q, k, v, outs
    pick = recommended_min_sq(rows)
    print(f"\ndynamic / static by length (median over the batch x heads measured), {args.rounds} rounds:")
    print("  D   " + "".join(f"{s:>9d}" for s in sorted({r['s'] for r in rows})))
    for d in sorted({r["d"] for r in rows}):
        cells = []
        for s in sorted({r["s"] for r in rows}):
            xs = [r["speedup"] for r in rows if r["d"] == d and r["s"] == s]
            cells.append(f"{statistics.median(xs):9.3f}" if xs else f"{'-':>9s}")
        print(f"  {d:<4d}" + "".join(cells))
    print(f"crossover (dynamic >= static from here on): min_sq = {pick}; library default {default_min_sq}"
          + ("" if pick is None or pick == default_min_sq else "  <- differs: ship the measured value"))
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows,
                                              "library_min_sq": default_min_sq, "crossover_min_sq": pick},
                                             indent=1))


if __name__ == "__main__":
    main()
