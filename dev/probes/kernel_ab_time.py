"""A/B kernel builds side by side in one process: smoke-check each, then time them interleaved against cuDNN.

Separate processes per variant (what kernel_ab.sh did first) put run-to-run drift of several percent between
variants (the same D=64 build measured 0.904x and 0.973x cuDNN in two processes, bench/results/archive/kernel_ab_20261130).
Here every library is loaded at once and each shape is timed in rounds, variants in a Williams-design order
(bench/round_order.py: every name runs right after every other one equally often),
cuDNN timed in every round too; the table shows the median over rounds and the spread (max-min)/median of each.

    python3 dev/probes/kernel_ab_time.py base=.build/ab/lib_base.so ring=.build/ab/lib_ring_n176.so [--rounds 5]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vidattn import _ext  # noqa: E402
from bench import anchor_shapes  # noqa: E402
from bench.round_order import ORDERS, round_orders  # noqa: E402
import kernel_smoke  # noqa: E402
from clock_probe import parse_shapes  # noqa: E402

# (key, B, H, Sq, Skv, D): the anchor shapes below or near 1.00x cuDNN, long ones as guards, and the two longest,
# which run at the card's power limit (dev/NOTES.md, fifth session).
SHAPES = anchor_shapes.by_key(["wan_cross", "fa1k_d128", "fa1k_d64", "fa8k_d64", "ltx_d64", "cogvideox_d64", "seed4k",
                               "seed16k", "seed8k", "wan13b_self", "wan14b_self", "hunyuan_720p"])


def time_interleaved(fns: dict, rounds: int, rep_ms: float, warmup_ms: float = 20.0, order: str = "williams") -> dict:
    """Per-round times (ms, the median of `triton.testing.do_bench`) of each entry of `fns`, name -> (context,
    fn): `fn` takes no arguments and `context()` is entered around its measurement (an SDPA backend choice, a forced
    build). Round r takes the names in round_orders(fns, rounds, order)[r]: by default a Williams design, so that
    none always runs right after the same one (a rotated fixed order, `order="rotated"`, kept every neighbour)."""
    from triton.testing import do_bench

    times = {n: [] for n in fns}
    for names in round_orders(fns, rounds, order):
        for n in names:
            context, fn = fns[n]
            with context():
                times[n].append(do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median"))
    return times


def pick_best(times: dict, candidates: list[str]) -> tuple[str | None, dict]:
    """(the candidate with the best geometric-mean cuDNN/variant time ratio over the shapes that timed it, the
    scores); None when no candidate was timed (every build failed its smoke check, or the timing never ran): there
    is nothing to validate then. `times`: shape -> name -> per-round ms (this script's JSON)."""
    scores = {}
    for c in candidates:
        ratios = [statistics.median(t["cudnn"]) / statistics.median(t[c]) for t in times.values() if c in t]
        if ratios:
            scores[c] = math.exp(sum(map(math.log, ratios)) / len(ratios))
    return (max(scores, key=scores.get) if scores else None), scores


def paired_table(times: dict, names: list[str], reference: str | None = None) -> str:
    """Each variant against the reference (default: the first name), round by round (the same round's two times,
    which share its clock and temperature): in how many rounds it was faster, and the median and quartiles of the
    rounds' time ratios, reference time / variant time (> 1: faster; against "cudnn", the variant's speedup)."""
    ref = reference or names[0]
    rest = [n for n in names if n != ref]
    lines = [f"== paired rounds against {ref} (rounds faster / all, median [quartiles] of {ref} time / variant time)",
             f"{'shape':16s} " + " ".join(f"{n:>30s}" for n in rest)]
    for sname, t in times.items():
        cells = []
        for n in rest:
            if ref not in t or n not in t:
                cells.append(f"{'-':>30s}")
                continue
            r = [a / b for a, b in zip(t[ref], t[n])]
            q1, _, q3 = statistics.quantiles(r, n=4, method="inclusive") if len(r) > 1 else (r[0], 0, r[0])
            cells.append(f"{sum(x > 1 for x in r):>5d}/{len(r):<3d} {statistics.median(r):6.4f} [{q1:.4f}, {q3:.4f}]")
        lines.append(f"{sname:16s} " + " ".join(cells))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libs", nargs="*", help="name=path of a kernel library build")
    ap.add_argument("--pick", nargs=2, metavar=("JSON", "CANDIDATES"),
                    help="no timing: print the best of the comma-separated CANDIDATES in a JSON this script wrote")
    ap.add_argument("--paired", metavar="JSON",
                    help="no timing: print the paired-rounds table of a JSON this script wrote (its first variant "
                         "the reference, or --against's)")
    ap.add_argument("--against", metavar="NAME", help="--paired's reference, e.g. cudnn")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rep-ms", type=float, default=60.0, help="do_bench rep per measurement")
    ap.add_argument("--order", choices=ORDERS, default="williams", help="each round's order (bench/round_order.py)")
    ap.add_argument("--shapes", default="", help="comma-separated substrings of shape names (default: all)")
    ap.add_argument("--extra-shapes", nargs="*", default=[], metavar="BxHxSxD",
                    help="self-attention shapes beside the anchor list (clock_probe.py's form), e.g. 1x8x32768x256; "
                         "--shapes filters them by name too")
    ap.add_argument("--json", default="", help="write the per-round times here")
    ap.add_argument("--checked", action="store_true",
                    help="the builds passed dev/probes/kernel_smoke.py already (kernel_ab.sh runs it per build under a "
                         "timeout): skip the in-process smoke check")
    args = ap.parse_args()
    try:
        extra = parse_shapes(args.extra_shapes)
    except KeyError as exc:
        ap.error(str(exc))
    if args.paired:
        times = json.loads(Path(args.paired).read_text())["times_ms"]
        first = next(iter(times.values()), {})
        names = [n for n in first if n != "cudnn"] + (["cudnn"] if args.against == "cudnn" else [])
        if args.against and args.against not in names:
            ap.error(f"--against {args.against}: not in {args.paired} ({', '.join(first)})")
        print(paired_table(times, names, args.against))
        return
    if args.pick:
        try:
            times = json.loads(Path(args.pick[0]).read_text())["times_ms"]
        except (OSError, ValueError, KeyError):
            times = {}
        best, scores = pick_best(times, args.pick[1].split(","))
        for name, g in sorted(scores.items(), key=lambda kv: -kv[1]):
            print(f"[pick] {name}: geomean vidattn/cuDNN {g:.4f}", file=sys.stderr)
        if best is None:
            sys.exit(f"[pick] none of {args.pick[1]} was timed in {args.pick[0]} (smoke check failed or no timing): "
                     "nothing to validate")
        print(best)
        return
    if not args.libs:
        ap.error("name at least one library (name=path)")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    libs = {}
    for spec in args.libs:
        name, _, path = spec.partition("=")
        if not Path(path).is_file():
            print(f"[ab] {name}: {path} missing, skipped")
            continue
        libs[name] = _ext.open_library(path)
    torch.manual_seed(0)
    good = {}
    for name, lib in libs.items():
        if args.checked:
            good[name] = True
            continue
        fails = [c for c in kernel_smoke.CASES if not kernel_smoke.run_case(*c, lib=lib).startswith("ok")]
        good[name] = not fails
        print(f"[ab] {name}: {len(kernel_smoke.CASES) - len(fails)}/{len(kernel_smoke.CASES)} smoke cases ok"
              + (f"; FAILED {fails}" if fails else ""), flush=True)
    # diag_* builds (e.g. -DVIDATTN_DIAG_SKIP_O_STORE=1) compute wrong answers on purpose: timed regardless.
    names = [n for n in libs if good[n] or n.startswith("diag_")]
    pats = [p for p in args.shapes.split(",") if p]
    shapes = [s for s in SHAPES + extra if not pats or any(p in s[0] for p in pats)]
    record = {}
    for sname, b, h, sq, skv, d in shapes:
        q, k, v = kernel_smoke.bshd_inputs(b, h, sq, skv, d)
        out = torch.empty_like(q)
        scale = d ** -0.5
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        fns = {n: (contextlib.nullcontext, lambda lib=libs[n]: _ext.forward(q, k, v, out, None, None, scale, lib=lib))
               for n in names}
        fns["cudnn"] = (lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION),
                        lambda: F.scaled_dot_product_attention(qt, kt, vt))
        times = time_interleaved(fns, args.rounds, args.rep_ms, order=args.order)
        flops = 4 * b * h * sq * skv * d
        med = {n: statistics.median(ts) for n, ts in times.items()}
        record[sname] = times
        cells = []
        for n in names:
            spread = (max(times[n]) - min(times[n])) / med[n]
            cells.append(f"{n} {flops / med[n] / 1e9:4.0f}T {med['cudnn'] / med[n]:.3f}x (±{spread * 50:.1f}%)")
        print(f"{sname:14s} cudnn {flops / med['cudnn'] / 1e9:4.0f}T | " + " | ".join(cells), flush=True)
        del q, k, v, out, qt, kt, vt
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                               "rounds": args.rounds, "times_ms": record}, indent=1))
    print("== ratio table (cuDNN time / variant time, median over rounds)")
    print(f"{'shape':14s} " + " ".join(f"{n:>10s}" for n in names))
    for sname, times in record.items():
        cd = statistics.median(times["cudnn"])
        print(f"{sname:14s} " + " ".join(f"{cd / statistics.median(times[n]):10.3f}" for n in names))
    if len(names) > 1:
        print(paired_table(record, names))
    sys.exit(0 if all(ok or n.startswith("diag_") for n, ok in good.items()) else 1)


if __name__ == "__main__":
    main()
