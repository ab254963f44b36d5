"""Why one kernel reads slower in bench_kernel.py than in kernel_ab_time.py: the same library timed both ways in one
process, round by round, on one anchor shape.

In every bench_kernel.py run of the seventh and eighth sessions vidattn's first round was its fastest (the later
rounds up to 3-8% slower on most shapes, Wan 14B 2-4%) while cuDNN's rounds stayed within about 1%, and the A/B
script read Wan 14B 1.21-1.23x where bench_kernel.py read 1.17-1.20x. The two differ in what runs beside vidattn
(bench_kernel.py also times default SDPA and FlashAttention-2) and in how vidattn is called (the custom op with a
fresh output per call, against `_ext.forward` into one preallocated output). This times, per round and in a rotated
order: the op, `_ext.forward` into a preallocated output, cuDNN, and (phase "with-fa2") FlashAttention-2; then the
same without FlashAttention-2. It prints each round's times and the op's output address, so that placement and
neighbours can be told apart.

    python3 dev/probes/harness_probe.py --shape wan14b_self [--rounds 5]
"""
from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import anchor_shapes
import kernel_smoke
from kernel_ab_time import time_interleaved

import vidattn
from vidattn import _ext


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", default="wan14b_self", help="anchor key (bench/anchor_shapes.py)")
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--json", default="")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        sys.exit("harness_probe: needs a CUDA GPU")
    from torch.nn.attention import SDPBackend, sdpa_kernel

    (name, b, h, sq, skv, d), = anchor_shapes.by_key([args.shape])
    q, k, v = kernel_smoke.bshd_inputs(b, h, sq, skv, d)
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    out = torch.empty_like(q)
    addrs = []

    def op():
        o = vidattn.attention(q, k, v, layout="bshd")
        addrs.append(o.data_ptr())
        return o

    fns = {
        "op": (contextlib.nullcontext, op),
        "prealloc": (contextlib.nullcontext, lambda: _ext.forward(q, k, v, out, None, None, d ** -0.5)),
        "cudnn": (lambda: sdpa_kernel(SDPBackend.CUDNN_ATTENTION), lambda: F.scaled_dot_product_attention(qt, kt, vt)),
        "fa2": (lambda: sdpa_kernel(SDPBackend.FLASH_ATTENTION), lambda: F.scaled_dot_product_attention(qt, kt, vt)),
    }
    flops = 4 * b * h * sq * skv * d
    record = {}
    for phase, names in (("with-fa2", ["op", "prealloc", "cudnn", "fa2"]), ("no-fa2", ["op", "prealloc", "cudnn"])):
        # bench_kernel.py's do_bench windows (warm-up 25 ms, rep 100 ms), not the A/B script's.
        # The rotated order its recorded runs used (eighth session): "op" always right after FlashAttention-2 there.
        times = time_interleaved({n: fns[n] for n in names}, args.rounds, rep_ms=100, warmup_ms=25, order="rotated")
        record[phase] = times
        med = {n: statistics.median(t) for n, t in times.items()}
        print(f"== {name} {phase}: ms per round (rotated order), median TFLOPS, cuDNN/x")
        for n, t in times.items():
            print(f"  {n:9s} " + " ".join(f"{x:7.2f}" for x in t)
                  + f"  | {flops / med[n] / 1e9:5.0f}T  {med['cudnn'] / med[n]:.3f}x", flush=True)
    distinct = sorted(set(addrs))
    print(f"op output addresses: {len(distinct)} distinct over {len(addrs)} calls: "
          + ", ".join(f"{a:#x} (mod 2 MiB {a % (2 << 20):#x})" for a in distinct[:6]))
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": name, "gpu": torch.cuda.get_device_name(),
                                               "times_ms": record, "op_addresses": distinct}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
