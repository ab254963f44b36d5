"""Where a small Wan forward's time goes under SDPA and under vidattn: wall time, host time, kernel count, top host
functions.

The e2e GPU test's reduced Wan 1.3B (240x416, 21 frames: 1560 tokens) ran a forward in 88 ms under vidattn and in
42 ms under SDPA (thirteenth session, call 4), where one attention call's host path costs about 95 us more than
SDPA's (dev/probes/call_overhead.py): 60 calls explain 6 ms of the 46. Per path this builds the forward once and
reports: wall ms per forward (synchronised), host ms per forward (the GPU queue kept full by a 0.5 s sleep kernel
first; Wan's forward waits for the GPU somewhere inside, so on the H200 this read 0.5 s plus the forward and says
only that), the device kernels one forward launches and their summed time (torch.profiler, annotation ranges left
out), cProfile's top functions by own time, and the garbage collections per timed forward (--no-gc times with the
collector off). The thirteenth session read 81.4 against 61.9 ms here, every host builtin slower under vidattn; the
fourteenth found none of it vidattn's: the same SDPA path read 32.2 and 53.9 ms in one process, and interleaved
(`--paths sdpa,vidattn,sdpa,vidattn,sdpa,vidattn --iters 20`) the two read 42.4-48.1 and 43.4-46.2 ms.

`--paths` picks the paths and their order, to tell the suspects apart: `sdpa` (diffusers' own processor),
`vidattn`, `vidattn-nolaunch` (vidattn's processors and Python path, but the library is never called: the output is
left as allocated, garbage), `vidattn-sdpa` (the same, with SDPA computing the output in the library's place). A path
may repeat (`sdpa,vidattn,sdpa`: does the second run of a path read slower whatever it is?).

    python3 dev/probes/forward_overhead.py --preset 1.3b --height 240 --width 416 --frames 21
    python3 dev/probes/forward_overhead.py --paths sdpa,vidattn,vidattn-nolaunch,vidattn-sdpa,sdpa
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


PATHS = ("sdpa", "vidattn", "vidattn-nolaunch", "vidattn-sdpa")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", default="1.3b")
    ap.add_argument("--height", type=int, default=240)
    ap.add_argument("--width", type=int, default=416)
    ap.add_argument("--frames", type=int, default=21)
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--no-gc", action="store_true", help="time with Python's garbage collector off (gc.disable)")
    ap.add_argument("--paths", default="sdpa,vidattn",
                    help=f"comma-separated, in run order, repeats allowed; from {', '.join(PATHS)}")
    args = ap.parse_args(argv)
    paths = [x.strip() for x in args.paths.split(",") if x.strip()]
    unknown = sorted(set(paths) - set(PATHS))
    if unknown or not paths:
        ap.error(f"--paths: unknown {unknown or 'empty list'}; choose from {', '.join(PATHS)}")
    import torch

    from pipelines import build_pipeline, initial_latents, prompt_pair, transformer_inputs
    from pipelines.measure import sync as sync_device

    dev = torch.device(args.device)
    cuda = dev.type == "cuda"
    dtype = torch.bfloat16 if cuda else torch.float32
    pipe = build_pipeline(args.preset, device=dev, dtype=dtype)
    latents = initial_latents(pipe, args.height, args.width, args.frames, 0, dev)
    embeds, _ = prompt_pair(pipe, "a fox in the snow")
    inputs = transformer_inputs(latents, embeds, dtype)

    def sync():
        sync_device(dev)

    def forward():
        with torch.no_grad():
            return pipe.transformer(**inputs)[0]

    from vidattn import _ext

    launch = _ext.forward

    def no_launch(q, k, v, out, lse, kv_lens, scale, lib=None):
        return None

    def sdpa_launch(q, k, v, out, lse, kv_lens, scale, lib=None):
        o = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                             v.transpose(1, 2), scale=scale)
        out.copy_(o.transpose(1, 2))

    try:
        for path in paths:
            run_path(path, pipe, forward, sync, dev, args, {"vidattn-nolaunch": no_launch,
                                                            "vidattn-sdpa": sdpa_launch}.get(path, launch))
    finally:
        _ext.forward = launch
    return 0


def run_path(path, pipe, forward, sync, dev, args, launch_fn) -> None:
    """Time and profile one path (see the module docstring) and print its block. `launch_fn` stands in for
    `vidattn._ext.forward` meanwhile; the caller puts the real one back. The path's processors are undone after."""
    import gc

    from torch.profiler import ProfilerActivity, profile

    import vidattn
    from pipelines.measure import device_kernels, queue_ahead
    from vidattn import _ext

    cuda = dev.type == "cuda"
    if path != "sdpa":
        vidattn.apply(pipe)
    _ext.forward = launch_fn
    try:
        for _ in range(3):
            forward()
        sync()
        wall = []
        collections0 = [g["collections"] for g in gc.get_stats()]
        if args.no_gc:
            gc.disable()
        try:
            for _ in range(args.iters):
                t0 = time.perf_counter()
                forward()
                sync()
                wall.append((time.perf_counter() - t0) * 1e3)
        finally:
            gc.enable()
        # collections per forward by generation: a path that allocates more tracked objects triggers more of them
        per_fwd = [(g["collections"] - c0) / args.iters for g, c0 in zip(gc.get_stats(), collections0)]
        host = []
        for _ in range(args.iters):
            queue_ahead(dev, 0.5)
            t0 = time.perf_counter()
            forward()
            host.append((time.perf_counter() - t0) * 1e3)
            sync()
        acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        with profile(activities=acts) as prof:
            forward()
            sync()
        kernels = device_kernels(list(prof.events()))
        dev_ms = sum(e.device_time_total for e in kernels) / 1e3
        cp = cProfile.Profile()
        cp.enable()
        forward()
        cp.disable()
        sync()
    finally:
        if path != "sdpa":
            vidattn.restore(pipe)
    text = io.StringIO()
    pstats.Stats(cp, stream=text).sort_stats("tottime").print_stats(args.top)
    print(f"## {path}: wall {statistics.median(wall):.1f} ms/forward, host {statistics.median(host):.1f} ms, "
          f"{len(kernels)} kernels, {dev_ms:.1f} ms of kernel time; gc collections per forward (gen 0/1/2) "
          f"{' / '.join(f'{x:.2f}' for x in per_fwd)}{' (gc off while timing)' if args.no_gc else ''}")
    print(text.getvalue())


if __name__ == "__main__":
    sys.exit(main())
