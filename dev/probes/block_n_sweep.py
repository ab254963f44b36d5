"""Where the D=128 launcher should switch from the short-key build (N=128 as shipped) to N=176: both forced, timed
against cuDNN over a range of key counts, in one process, interleaved round by round (csrc/capi.cu,
pick_d128_block_n). `--builds` names the two widths of the library under test (a build with
-DVIDATTN_BLOCK_N_D128_SHORT=64 has 64 and 176).

The query side is fixed (B=1, H=24, Sq=16384: 3072 tiles, the same 23.3 rounds of 132 SMs as Wan 1.3B), so only the
key count changes between rows. Prints a table and, last, the largest key count at which the short build is
faster.

    python3 dev/probes/block_n_sweep.py [--rounds 5] [--builds 128,176] [--json bench/results/block_n_sweep_<date>.json]
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from vidattn import _ext, envinfo  # noqa: E402
import kernel_smoke  # noqa: E402
from kernel_ab_time import time_interleaved  # noqa: E402

KEYS = (256, 512, 768, 1024, 1536, 2048, 2560, 3072, 4096, 6144)
BUILDS = (128, 176)  # the shipped library's short-key and long-key widths


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--rep-ms", type=float, default=50.0, help="do_bench rep per measurement")
    ap.add_argument("--keys", default=",".join(map(str, KEYS)), help="comma-separated key counts")
    ap.add_argument("--builds", default=",".join(map(str, BUILDS)),
                    help="the library's two D=128 widths, short-key build first")
    ap.add_argument("--json", default="", help="write the per-round times here")
    args = ap.parse_args(argv)
    builds = tuple(int(x) for x in args.builds.split(","))
    if len(builds) != 2:
        ap.error("--builds takes two widths, the short-key build's first")
    if not torch.cuda.is_available():
        sys.exit("block_n_sweep: needs a CUDA GPU")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    lib = _ext.load()
    if lib is None:
        sys.exit(f"block_n_sweep: no kernel library: {_ext.build_error()}")
    b, h, sq, d = 1, 24, 16384, 128
    scale = d ** -0.5
    record, best_short = {}, None
    print(f"B{b} H{h} Sq{sq} D{d} bf16; ratio = cuDNN time / vidattn time (median of {args.rounds} rounds)")
    print(f"{'keys':>6s} {'cuDNN T':>8s} " + " ".join(f"{f'N={n}':>8s}" for n in builds) + "  faster")
    for skv in (int(x) for x in args.keys.split(",")):
        q, k, v = kernel_smoke.bshd_inputs(b, h, sq, skv, d)
        out = torch.empty_like(q)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        fns = {n: (lambda n=n: _ext.d128_block_n(n, lib),
                   lambda: _ext.forward(q, k, v, out, None, None, scale, lib=lib)) for n in builds}
        fns["cudnn"] = (lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION),
                        lambda: F.scaled_dot_product_attention(qt, kt, vt))
        times = time_interleaved(fns, args.rounds, args.rep_ms)
        med = {n: statistics.median(ts) for n, ts in times.items()}
        ratio = {n: med["cudnn"] / med[n] for n in builds}
        faster = max(builds, key=lambda n: ratio[n])
        if faster == builds[0]:
            best_short = skv
        flops = 4 * b * h * sq * skv * d
        print(f"{skv:6d} {flops / med['cudnn'] / 1e9:7.0f}T " + " ".join(f"{ratio[n]:8.3f}" for n in builds)
              + f"  N={faster}", flush=True)
        record[str(skv)] = {str(n): ts for n, ts in times.items()}
        del q, k, v, out, qt, kt, vt
        torch.cuda.empty_cache()
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        meta = envinfo.run_metadata(None if argv is None else ["dev/probes/block_n_sweep.py", *argv])
        Path(args.json).write_text(json.dumps({
            "meta": meta, "rounds": args.rounds, "rep_ms": args.rep_ms, "builds": list(builds),
            "shape": {"B": b, "H": h, "Sq": sq, "D": d, "dtype": "bf16"}, "times_ms": record,
        }, indent=1))
    print(f"largest key count where N={builds[0]} was faster: {best_short}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
