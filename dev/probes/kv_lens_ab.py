"""Kernel libraries against the first one on calls with kv_lens (and a control without), in one process.

Built for the V rows past kv_lens zeroed in the stage (csrc/sm90/flash_fwd.cuh, zero_v_rows): every tile whose last
key block is partial under kv_lens now stores zeros there before its last P V, so calls whose keys are short (text
cross-attention with its padding as kv_lens) pay it most often. kernel_ab_time.py times plain self-attention only.
Each shape times every library in rounds (a Williams order: bench/round_order.py) with triton's do_bench median; the
table gives each library's median and, per round, each later library's time over the first's (median, range, rounds
it was faster). Every library's output must equal the first's bit for bit (finite inputs), or the shape is not timed;
with --tolerance R, within relative L2 R of it instead (a change that moves which rows a block computes, as the
shifted partial block does, changes the tensor cores' summation order), the distance recorded per shape.

    python3 dev/probes/kv_lens_ab.py old=.build/vcache/libvidattn_sm90-61ea039cf9359cb4.so \\
        new=.build/vcache/libvidattn_sm90-f9da556edb3dfb18.so --rounds 8 --json ab.json
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

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vidattn import _ext  # noqa: E402
from kernel_ab_time import time_interleaved  # noqa: E402
from pipelines.measure import rel_l2  # noqa: E402

# (name, B, H, Sq, Skv, D, kv_lens or None, causal: _ext.CAUSAL_*)
SHAPES = [
    ("wan cross, text padded", 1, 12, 32760, 512, 128, [333], _ext.CAUSAL_NONE),
    ("ltx cross, text padded", 2, 32, 24576, 128, 64, [100, 77], _ext.CAUSAL_NONE),
    ("self 16K padded (D128)", 1, 24, 16384, 16640, 128, [16500], _ext.CAUSAL_NONE),
    ("d256 8K padded", 2, 8, 8192, 8192, 256, [8000, 7001], _ext.CAUSAL_NONE),
    ("d64 1K ragged", 8, 8, 1024, 1024, 64, [1000, 900, 1024, 777, 1000, 513, 1023, 999], _ext.CAUSAL_NONE),
    # causal with kv_lens: every diagonal tile's last block is partial at its kv_end (D=256: 128-row tiles, 80-key
    # blocks), one batch at full length
    ("causal d256 8K padded", 2, 8, 8192, 8192, 256, [8192, 7001], _ext.CAUSAL_TOP_LEFT),
    ("control: wan 1.3B self, no kv_lens", 1, 12, 32760, 32760, 128, None, _ext.CAUSAL_NONE),
]


def parse_libs(items: list[str]) -> dict:
    """name=path items as {name: path}, in order; malformed, repeated or fewer than two refused."""
    libs = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            raise SystemExit(f"kv_lens_ab: a library is name=path, got {item!r}")
        if name in libs:
            raise SystemExit(f"kv_lens_ab: the name {name!r} is given twice")
        libs[name] = path
    if len(libs) < 2:
        raise SystemExit(f"kv_lens_ab: give at least two libraries (name=path), got {len(libs)}")
    return libs


def paired(times: dict, a: str, b: str) -> dict:
    ratios = [tb / ta for ta, tb in zip(times[a], times[b])]
    return {"median": statistics.median(ratios), "min": min(ratios), "max": max(ratios),
            "rounds_faster": sum(r < 1.0 for r in ratios), "rounds": len(ratios)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("libs", nargs="+", help="name=path, two or more: the first is the reference")
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--rep-ms", type=float, default=60.0)
    ap.add_argument("--json", type=Path, default=None)
    ap.add_argument("--tolerance", type=float, default=0.0,
                    help="relative L2 a later library's output may differ from the first's by (default 0: bit for bit)")
    ap.add_argument("--shapes", nargs="+", default=None, metavar="TEXT",
                    help="time only the shapes whose name contains one of these (default: all)")
    args = ap.parse_args(argv)
    paths = parse_libs(args.libs)
    if args.rounds < 1 or args.rep_ms <= 0 or not 0 <= args.tolerance < 1:
        raise SystemExit("kv_lens_ab: --rounds must be >= 1, --rep-ms > 0 and --tolerance in [0, 1)")
    shapes = [s for s in SHAPES if args.shapes is None or any(t in s[0] for t in args.shapes)]
    if not shapes:
        raise SystemExit(f"kv_lens_ab: no shape's name contains any of {args.shapes}; "
                         f"the shapes: {', '.join(s[0] for s in SHAPES)}")
    if not torch.cuda.is_available():
        raise SystemExit("kv_lens_ab: needs a CUDA GPU")
    libs = {n: _ext.open_library(p) for n, p in paths.items()}
    names = list(libs)
    a, others = names[0], names[1:]
    g = torch.Generator(device="cuda").manual_seed(0)
    results = {}
    print(f"{'shape':38s} " + " ".join(f"{n:>9s}" for n in names) + "  "
          + "  ".join(f"{n}/{a} median [min, max] (rounds faster)" for n in others))
    for name, bsz, h, sq, skv, d, lens, causal in shapes:
        q, k, v = (torch.randn(bsz, s, h, d, device="cuda", generator=g).bfloat16() for s in (sq, skv, skv))
        kv_lens = torch.tensor(lens, dtype=torch.int32, device="cuda") if lens is not None else None
        out = torch.empty_like(q)
        scale = 1.0 / math.sqrt(d)
        fns = {n: (contextlib.nullcontext,
                   (lambda lib=lib: _ext.forward(q, k, v, out, None, kv_lens, scale, lib=lib, causal=causal)))
               for n, lib in libs.items()}
        outs, failed = {}, None
        for n, (_, fn) in fns.items():  # a wrong answer is not timed; O poisoned first, so an unwritten one shows
            out.fill_(float("nan"))
            try:
                fn()
                torch.cuda.synchronize()
            except _ext.KernelLaunchError as e:
                failed = f"{n}: {e}"
                break
            outs[n] = out.clone()
        if failed is not None:
            print(f"{name:38s} launch failed ({failed}): not timed")
            results[name] = {"error": f"launch failed: {failed}"}
            continue
        if not torch.isfinite(outs[a]).all():
            print(f"{name:38s} {a}'s output is not finite: not timed")
            results[name] = {"error": f"{a}'s output is not finite"}
            continue
        dist = {n: rel_l2(outs[n], outs[a]) for n in others}
        differ = [n for n in others if not (torch.equal(outs[a], outs[n]) or dist[n] <= args.tolerance)]
        if differ:
            diff = max((outs[a].float() - outs[n].float()).abs().max().item() for n in differ)
            print(f"{name:38s} {', '.join(differ)} differ from {a} (max |diff| {diff:.3e}, rel-L2 "
                  f"{max(dist[n] for n in differ):.2e}): not timed")
            results[name] = {"error": f"{', '.join(differ)} differ from {a}, max |diff| {diff:.3e}"}
            continue
        times = time_interleaved(fns, args.rounds, args.rep_ms)
        pairs = {n: paired(times, a, n) for n in others}
        results[name] = {"shape": [bsz, h, sq, skv, d], "kv_lens": lens, "causal": causal, "ms": times,
                         "paired": pairs, "rel_l2_to_first": dist}
        print(f"{name:38s} " + " ".join(f"{statistics.median(times[n]):9.4f}" for n in names) + "  " + "  ".join(
            f"{p['median']:.4f} [{p['min']:.4f}, {p['max']:.4f}] ({p['rounds_faster']}/{p['rounds']})"
            for p in pairs.values()), flush=True)
    if args.json is not None:
        meta = {"libs": paths,
                "gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rounds": args.rounds,
                "rep_ms": args.rep_ms, "argv": list(argv) if argv is not None else sys.argv[1:]}
        args.json.write_text(json.dumps({"meta": meta, "results": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
