"""Host-side cost of one attention call: vidattn.attention against F.scaled_dot_product_attention at one shape.

At small token counts a call's kernel is shorter than its launch path, and the model waits on the CPU: the e2e GPU
test's reduced Wan 1.3B (1560 tokens) ran its vidattn forward in 88 ms against SDPA's 42 ms (thirteenth session,
call 4). Per path this measures, over --calls calls on (B, S, H, D) inputs as the diffusers processors hold them:

- host: CPU time per call with the GPU queue kept full (a sleep kernel launched first), so launches never wait;
- loop: wall time per call of a plain loop of calls, synchronised at the end (what a model sees when it is
  launch-bound);
- gpu: device time per call, CUDA events around each call behind the sleep kernel (the kernels alone).

"vidattn" is the public call, which in eager mode runs the op's body directly; "vidattn (custom op)" goes through
`torch.ops.vidattn.attention`, the route torch.compile traces (and every eager call took before).

--profile adds cProfile's top functions for the vidattn calls.

    python3 dev/probes/call_overhead.py --shape 1,1560,12,128 --calls 300 --profile
"""
from __future__ import annotations

import argparse
import cProfile
import io
import pstats
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def parse_shape(text: str) -> tuple[int, int, int, int]:
    parts = tuple(int(x) for x in text.split(","))
    if len(parts) != 4 or min(parts) < 1:
        raise argparse.ArgumentTypeError(f"--shape wants B,S,H,D (four positive integers), got {text!r}")
    return parts


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shape", type=parse_shape, default=(1, 1560, 12, 128), help="B,S,H,D (default 1,1560,12,128)")
    ap.add_argument("--calls", type=int, default=300)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--profile", action="store_true", help="cProfile the vidattn calls (top 20 by cumulative time)")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F

    import vidattn
    from pipelines import measure

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    b, s, h, d = args.shape
    dtype = torch.bfloat16 if cuda else torch.float32
    q, k, v = (torch.randn(b, s, h, d, device=dev, dtype=dtype) for _ in range(3))
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))
    paths = {"vidattn": lambda: vidattn.attention(q, k, v, layout="bshd"),
             "vidattn (custom op)": lambda: torch.ops.vidattn.attention(q, k, v, "bshd", None, None, False),
             "sdpa": lambda: F.scaled_dot_product_attention(qt, kt, vt)}

    def sync():
        measure.sync(dev)

    def fill_queue(us):
        measure.queue_ahead(dev, us * 1e-6)

    rows = []
    for name, fn in paths.items():
        for _ in range(20):
            fn()
        sync()
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn()
        sync()
        loop_us = (time.perf_counter() - t0) / args.calls * 1e6
        # the loop's pace bounds the host time per call; the sleep needs to outlast the launches only (<= 1 ms each)
        ahead = min(2 * loop_us, 1000.0) * args.calls
        fill_queue(ahead)
        t0 = time.perf_counter()
        for _ in range(args.calls):
            fn()
        host_us = (time.perf_counter() - t0) / args.calls * 1e6
        sync()
        gpu_us = float("nan")
        if cuda:
            ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True))
                  for _ in range(args.calls)]
            fill_queue(ahead)
            for a, z in ev:
                a.record()
                fn()
                z.record()
            sync()
            gpu_us = statistics.median(a.elapsed_time(z) for a, z in ev) * 1e3
        rows.append((name, host_us, loop_us, gpu_us))
    b_, s_, h_, d_ = args.shape
    print(f"shape (B, S, H, D) = ({b_}, {s_}, {h_}, {d_}), {dtype}, {dev}, {args.calls} calls per measurement")
    print("| path | host us/call | loop us/call | gpu us/call |")
    print("|---|---|---|---|")
    for name, host, loop, gpu in rows:
        print(f"| {name} | {host:.1f} | {loop:.1f} | {gpu:.1f} |")
    if args.profile:
        prof = cProfile.Profile()
        fill_queue(min(2 * rows[0][2], 1000.0) * args.calls)
        prof.enable()
        for _ in range(args.calls):
            paths["vidattn"]()
        prof.disable()
        sync()
        text = io.StringIO()
        pstats.Stats(prof, stream=text).sort_stats("cumulative").print_stats(20)
        print(text.getvalue())
    return 0


if __name__ == "__main__":
    sys.exit(main())
