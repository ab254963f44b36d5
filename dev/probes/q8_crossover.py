#!/usr/bin/env python3
"""Where precision="8bit" starts to pay: the exact kernel against the 8-bit path (its quantization pre-pass included,
as a user's call runs it) on self-attention, B=1, per head dim and key count; what vidattn.quant8's short-key routing
(SHORT_KV_EXACT_MAX) should be. The threshold in the library came from the first 8-bit kernel (device run 2, D=128
only); the kernel has been rewritten since (dev/NOTES_8bit.md v8-v12).

    python3 dev/probes/q8_crossover.py [--lengths 4096,8192,...] [--rounds 5] [--reps 10] [--json PATH]
    python3 dev/probes/q8_crossover.py --sq 32760 --head-dims 128 --lengths 2048,4096,8192   # queries fixed

Each round times, per shape, both paths back to back (the order alternating between rounds), `--reps` calls each
between two CUDA events after a warm-up call; the table gives the medians over rounds and, per shape, the rounds in
which the 8-bit path was faster. Heads: 48 at D=64 (CogVideoX, EasyAnimate), 24 at D=128 (HunyuanVideo, Mochi).
--sq fixes the query length (the routing reads only the key count): a long query sequence over few keys.
The routing is bypassed by setting quant8.SHORT_KV_EXACT_MAX = 0 in this process; a check call per shape compares the
8-bit output to the exact one (rel L2 must be under 0.08, the 8-bit path's error on random inputs being ~4e-2).
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(os.path.dirname(HERE)))

HEADS = {64: 48, 128: 24}
LENGTHS = (4096, 6144, 8192, 10240, 12288, 13568, 14336, 16384, 20480, 24576, 32768)


def parse_lengths(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SystemExit(f"error: --lengths takes comma-separated integers, got {text!r}") from None
    if not out or any(n < 1 for n in out):
        raise SystemExit(f"error: --lengths takes positive integers, got {text!r}")
    return out


def crossover(rows: list[dict], min_gain: float = 0.01) -> int | None:
    """The smallest length from which the 8-bit path is faster by at least `min_gain` (median ratio) at that length
    and every longer one measured; None when it never is. `rows`: one head dim's rows, each with `keys` and
    `ratio` (exact time / 8-bit time)."""
    best = None
    for r in sorted(rows, key=lambda r: r["keys"], reverse=True):
        if r["ratio"] >= 1.0 + min_gain:
            best = r["keys"]
        else:
            break
    return best


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--lengths", default=",".join(map(str, LENGTHS)))
    ap.add_argument("--head-dims", default="64,128")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=10)
    ap.add_argument("--sq", type=int, default=None, help="query length (default: the key count, self-attention)")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    if args.sq is not None and args.sq < 1:
        raise SystemExit("error: --sq must be >= 1")
    lengths = parse_lengths(args.lengths)
    dims = parse_lengths(args.head_dims)
    if any(d not in HEADS for d in dims):
        raise SystemExit(f"error: --head-dims takes {sorted(HEADS)}")
    if args.rounds < 1 or args.reps < 1:
        raise SystemExit("error: --rounds and --reps must be >= 1")

    import torch

    if not torch.cuda.is_available():
        raise SystemExit("error: needs a CUDA GPU (Hopper)")
    import vidattn
    from vidattn import quant8

    library = {str(d): quant8.short_kv_exact_max(d) for d in dims}  # what a user's call routes by, before the override
    quant8.SHORT_KV_EXACT_MAX = 0  # the 8-bit kernel at every length measured
    shapes = [(d, n) for d in dims for n in lengths]
    data, checks = {}, {}
    g = torch.Generator(device="cuda").manual_seed(0)
    inputs = {}
    for d, n in shapes:
        q, k, v = (torch.randn(1, (args.sq or n) if i == 0 else n, HEADS[d], d, device="cuda", dtype=torch.bfloat16,
                               generator=g) for i in range(3))
        inputs[(d, n)] = (q, k, v)
        ref = vidattn.attention(q, k, v, precision="exact").float()
        out = vidattn.attention(q, k, v, precision="8bit").float()
        err = ((out - ref).norm() / ref.norm()).item()
        why = vidattn.explain(q, k, v, precision="8bit")
        checks[f"D{d} {n}"] = {"rel_l2_vs_exact": err, "explain_8bit": why}
        if why is not None or not err < 0.08:
            print(f"check failed at D={d} N={n}: explain {why!r}, rel L2 {err:.3e}", file=sys.stderr)
            return 1
        data[(d, n)] = {"exact": [], "8bit": []}

    def timed(fn, reps):
        fn()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b) / reps

    for rnd in range(args.rounds):
        order = ("exact", "8bit") if rnd % 2 == 0 else ("8bit", "exact")
        for d, n in shapes:
            q, k, v = inputs[(d, n)]
            for p in order:
                data[(d, n)][p].append(timed(lambda: vidattn.attention(q, k, v, precision=p), args.reps))
        print(f"round {rnd + 1}/{args.rounds} done", flush=True)

    rows = []
    for d, n in shapes:
        e, q8 = data[(d, n)]["exact"], data[(d, n)]["8bit"]
        me, m8 = statistics.median(e), statistics.median(q8)
        flops = 4.0 * HEADS[d] * (args.sq or n) * n * d
        rows.append({"head_dim": d, "heads": HEADS[d], "queries": args.sq or n, "keys": n, "exact_ms": me, "q8_ms": m8, "ratio": me / m8,
                     "exact_tflops": flops / me / 1e9, "q8_tflops": flops / m8 / 1e9,
                     "rounds_8bit_faster": sum(y < x for x, y in zip(e, q8)), "rounds": args.rounds,
                     "exact_all_ms": e, "q8_all_ms": q8})
    result = {"rows": rows, "checks": checks,
              "crossover": {str(d): crossover([r for r in rows if r["head_dim"] == d]) for d in dims},
              "library_threshold": library,
              "sq": args.sq, "rounds": args.rounds, "reps": args.reps, "gpu": torch.cuda.get_device_name(),
              "torch": torch.__version__, "commit": os.environ.get("VIDATTN_GIT_COMMIT")}
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=1)
    what = "self-attention" if args.sq is None else f"{args.sq} queries"
    print(f"\n== 8-bit against exact, {what}, B=1 (medians over rounds; quantization included)")
    print("| D | heads | keys | exact ms | 8-bit ms | exact TFLOPS | 8-bit TFLOPS | exact / 8-bit | rounds 8-bit faster |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['head_dim']} | {r['heads']} | {r['keys']} | {r['exact_ms']:.3f} | {r['q8_ms']:.3f} | "
              f"{r['exact_tflops']:.0f} | {r['q8_tflops']:.0f} | {r['ratio']:.3f} | "
              f"{r['rounds_8bit_faster']}/{r['rounds']} |")
    for d in dims:
        print(f"D={d}: the 8-bit path >= 1% faster from {result['crossover'][str(d)]} keys on (every longer length "
              f"measured too)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
