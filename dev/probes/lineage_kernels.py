"""Device time of each kernel one lineage step launches (its pre-pass and attention kernel apart), at the canonical
shape: torch.profiler over --calls calls after a warm-up, per kernel name the mean time per call.

    python3 dev/probes/lineage_kernels.py 16_int8_fp8 [--calls 20]
"""
from __future__ import annotations

import argparse
import ctypes
import math
import sys
from collections import defaultdict
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "scripts"))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("step", help="a lineage step's file stem (or a unique part of it), e.g. 16_int8_fp8")
    ap.add_argument("--calls", type=int, default=20)
    args = ap.parse_args(argv)
    import torch

    import bench_lineage as bl

    steps = bl.discover([args.step])
    if len(steps) != 1:
        raise SystemExit(f"error: {args.step!r} matches {[s.name for s in steps]}, not one step")
    step = steps[0]
    bl.build_all([step], jobs=1)
    if not step.build.get("ok"):
        raise SystemExit(f"error: {step.name} did not build: {step.build.get('error')}")
    lib = bl.load_step(step.so)
    s = bl.CANONICAL
    q, k, v = (torch.randn(s["b"], s["s"], s["h"], s["d"], device="cuda", dtype=torch.bfloat16) for _ in range(3))
    o = torch.empty_like(q)
    a = bl._args_for(q, k, v, o, s)
    stream = torch.cuda.current_stream().cuda_stream
    for _ in range(3):
        bl._call(lib, a, stream)
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(args.calls):
            bl._call(lib, a, stream)
        torch.cuda.synchronize()
    per = defaultdict(float)
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            per[e.name] += e.device_time_total / 1e3 / args.calls  # ms per call
    total = sum(per.values())
    flop = bl.flops(s)
    print(f"{step.name}: B={s['b']} H={s['h']} S={s['s']} D={s['d']}, {args.calls} calls")
    print("| kernel | ms per call | share |\n|---|---|---|")
    for name, ms in sorted(per.items(), key=lambda x: -x[1]):
        print(f"| {name[:70]} | {ms:.4f} | {100 * ms / total:.1f}% |")
    print(f"| all | {total:.4f} | {flop / (total * 1e-3) / 1e12:.1f} TFLOPS |")
    return 0 if math.isfinite(total) else 1


if __name__ == "__main__":
    sys.exit(main())
