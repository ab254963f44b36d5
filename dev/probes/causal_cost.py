"""What a causal mask costs each implementation, in one process: causal against dense on the same inputs.

Issue 26's causal row at D=256 read 0.91-0.92x FlashAttention-3 (call P13, before the fourteenth sitting's producer
change), while the non-causal narrow build (the width the D=256 causal build shares, N=64) read 0.96x FA3's dense
rate in another call. This probe splits that gap
into what the width costs (dense narrow against dense FA3) and what the causal path costs (each implementation's
causal rate over its own dense rate), all sides interleaved round by round, so the two factors come from one run:

  vid_causal    the library's causal call (dynamic schedule, workspace)
  vid_static    the same without a workspace: the static tile order (capi.cu)
  vid_narrow    dense, forced onto the narrow build (hd_narrow(1); D >= 192 only: the causal build's width)
  vid_dense     dense, the default routing (D=256 8K/32K: the O-in-V build, N=80)
  fa3_causal, fa3_dense, cudnn_causal, cudnn_dense   the anchors, where importable

TFLOPS: dense 4 B H S^2 D, causal 4 B H D S(S+1)/2 (the kept pairs). Printed last: per shape, each side's median
TFLOPS, then rate ratios from the same rounds (median of the rounds' ratios and their range): causal / dense and
causal / narrow per implementation, narrow / FA3 dense, causal / FA3 causal, static / dynamic.

    python3 dev/probes/causal_cost.py --rounds 8 --json $OUT/causal_cost.json

With --libs name=path ... each library gets its own vidattn sides (NAME_causal, NAME_static, NAME_narrow,
NAME_dense) in the same rounds, and the paired table compares each library's causal side with the first's; --sides
keeps only the sides whose names end with one of its comma-separated suffixes (e.g. causal,narrow,fa3_causal).

    python3 dev/probes/causal_cost.py --libs base=.build/ab/lib_base.so new=.build/ab/lib_new.so \
        --sides causal,narrow,fa3_causal --rounds 12

A library named twice under two names (an A/A pair) reads the harness's own bias between sides.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vidattn import _ext  # noqa: E402
from bench.round_order import ORDERS, round_orders  # noqa: E402
import causal_sched_ab  # noqa: E402  (its Policy: the static order is a call without a workspace)
import hd_variants_ab as hv  # noqa: E402

# (name, B, H, S, D)
SHAPES = [("D256 8K", 2, 8, 8192, 256), ("D256 32K", 1, 8, 32768, 256), ("D192 8K", 2, 10, 8192, 192),
          ("D128 8K", 2, 16, 8192, 128), ("D128 32K", 1, 16, 32768, 128), ("D64 8K", 2, 32, 8192, 64),
          ("D64 32K", 1, 32, 32768, 64)]
# Short D=256 problems (batch x heads filling the card), only where --shapes names them ("short"): the N=80 causal
# build's short end, where tiles are few blocks long and its O-in-V boundary comes often.
SHORT = [("D256 1K short", 16, 8, 1024, 256), ("D256 2K short", 8, 8, 2048, 256), ("D256 4K short", 4, 8, 4096, 256)]


def sides_for(d: int, libs: dict, fa3) -> dict:
    """name -> (causal?, call(q, k, v, out)) for the sides that apply at head dim d: each library's, then the
    anchors'."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    scale = d ** -0.5
    sides = {}
    for name, lib in libs.items():
        def vid(causal: int, lib=lib):
            return lambda q, k, v, out: _ext.forward(q, k, v, out, None, None, scale, lib=lib, causal=causal)

        def vid_static(q, k, v, out, lib=lib):
            # the same library and build, called without a workspace: the launcher keeps the static tile order
            with causal_sched_ab.Policy(lib, "static", grouping=False):
                _ext.forward(q, k, v, out, None, None, scale, lib=lib, causal=_ext.CAUSAL_TOP_LEFT)

        def vid_narrow(q, k, v, out, lib=lib):
            with _ext.hd_narrow(1, lib=lib):
                _ext.forward(q, k, v, out, None, None, scale, lib=lib)

        sides[f"{name}_causal"] = (True, vid(_ext.CAUSAL_TOP_LEFT))
        sides[f"{name}_static"] = (True, vid_static)
        if d >= 192:
            sides[f"{name}_narrow"] = (False, vid_narrow)
        sides[f"{name}_dense"] = (False, vid(_ext.CAUSAL_NONE))

    def sdpa(causal: bool):
        def call(q, k, v, out):
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                torch.nn.functional.scaled_dot_product_attention(
                    q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=causal)
        return call

    if fa3 is not None:
        sides["fa3_causal"] = (True, lambda q, k, v, out: fa3(q, k, v, causal=True, scale=scale))
        sides["fa3_dense"] = (False, lambda q, k, v, out: fa3(q, k, v, causal=False, scale=scale))
    sides["cudnn_causal"] = (True, sdpa(True))
    sides["cudnn_dense"] = (False, sdpa(False))
    return sides


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--span-ms", type=float, default=40.0, help="work per timed span")
    ap.add_argument("--order", choices=ORDERS, default="williams",
                    help="each round's order (bench/round_order.py; call P15/P16 ran 'rotated', whose fixed neighbours "
                         "read two identical dense kernels 0.94-0.96 apart)")
    ap.add_argument("--shapes", default="", help="comma-separated substrings of the shape names (default: all but "
                    "the short D=256 ones, which a pattern holding 'short' adds)")
    ap.add_argument("--json", default="")
    ap.add_argument("--libs", nargs="*", default=[], metavar="NAME=PATH",
                    help="kernel libraries to time side by side (default: the one vidattn loads, as 'vid')")
    ap.add_argument("--sides", default="", help="comma-separated suffixes of the side names to keep (default: all)")
    args = ap.parse_args()
    libs = {}
    for spec in args.libs:
        name, _, path = spec.partition("=")
        libs[name] = _ext.open_library(path)
    if not libs:
        lib = _ext.load()
        if lib is None:
            sys.exit(f"causal_cost: no kernel library: {_ext.build_error()}")
        libs = {"vid": lib}
    first = next(iter(libs))
    keep = [x for x in args.sides.split(",") if x]
    try:
        import anchor_impls
        anchor_impls._require("fa3")
        fa3 = anchor_impls.fa3
    except Exception as exc:  # noqa: BLE001 - the anchors are optional here
        print(f"causal_cost: FlashAttention-3 left out ({exc})")
        fa3 = None
    pats = [p for p in args.shapes.split(",") if p]
    span = hv.CudaSpan()
    record, lines = {}, []
    for name, b, h, s, d in SHAPES + (SHORT if any("short" in p for p in pats) else []):
        if pats and not any(p in name for p in pats):
            continue
        gen = torch.Generator(device="cuda").manual_seed(0)
        sets = [tuple(torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16, generator=gen) for _ in range(3))
                for _ in range(2)]
        out = torch.empty_like(sets[0][0])
        sides = sides_for(d, libs, fa3)
        if keep:
            sides = {n: v for n, v in sides.items() if any(n.endswith(k) for k in keep)}
        # one call each to settle lazy setup, then calls per span from that call's time
        calls = {}
        for n, (_, fn) in sides.items():
            fn(*sets[0], out)
            torch.cuda.synchronize()
            one = hv.time_back_to_back(lambda i, fn=fn: fn(*sets[i % 2], out), 2, span)
            calls[n] = hv.calls_for(one, args.span_ms, 2)
        times = {n: [] for n in sides}
        names = list(sides)
        for order in round_orders(names, args.rounds, args.order):
            for n in order:
                fn = sides[n][1]
                times[n].append(hv.time_back_to_back(lambda i, fn=fn: fn(*sets[i % 2], out), calls[n], span))
        dense_flops = 4 * b * h * s * s * d
        causal_flops = 4 * b * h * d * s * (s + 1) // 2
        tf = {n: (causal_flops if sides[n][0] else dense_flops) / statistics.median(ts) / 1e9
              for n, ts in times.items()}
        record[name] = {"dims": [b, h, s, d], "times_ms": times, "tflops": tf}

        def per_round(a, c):
            return [times[c][i] / times[a][i] * (causal_flops if sides[a][0] else dense_flops)
                    / (causal_flops if sides[c][0] else dense_flops) for i in range(args.rounds)]

        cells = " ".join(f"{n} {t:.0f}" for n, t in tf.items())
        lines.append(f"{name}: {cells}")
        pairs = []
        for n in libs:
            pairs += [(f"{n}_causal", f"{n}_dense"), (f"{n}_causal", f"{n}_narrow"), (f"{n}_narrow", "fa3_dense"),
                      (f"{n}_causal", "fa3_causal"), (f"{n}_static", f"{n}_causal")]
            if n != first:
                pairs += [(f"{n}_causal", f"{first}_causal"), (f"{n}_narrow", f"{first}_narrow")]
        pairs += [("fa3_causal", "fa3_dense"), ("cudnn_causal", "cudnn_dense")]
        for a, c in pairs:
            if a in times and c in times:
                pr = per_round(a, c)
                lines.append(f"  {a}/{c}: median {statistics.median(pr):.3f} [{min(pr):.3f}, {max(pr):.3f}]")
        print(f"{name}: {cells}", flush=True)
        del sets, out
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
                                               "rounds": args.rounds, "shapes": record}, indent=1))
    print("== causal cost (TFLOPS: causal counts the kept pairs; ratios are rates, per round, median [range])")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
