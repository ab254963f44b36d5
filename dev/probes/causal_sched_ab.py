"""Device A/B of the causal tile schedule in one process: the dynamic schedule (the default, with the workspace)
against the static order (the same library called without a workspace: capi.cu then keeps every CTA's tiles fixed
by its index), interleaved round by round on the same inputs, CUDA-event timing, L2 flushed before every call.
Prints TFLOPS of the kept pairs (4 B H D S(S+1)/2) per policy, the ratio, and the simulated makespan / mean of each
(dev/probes/causal_schedule_sim.py), and checks the two outputs are equal bit for bit (a tile's arithmetic does not
depend on the CTA that runs it). Writes a JSON with --out.

    python3 dev/probes/causal_sched_ab.py --rounds 7 --out $OUT/causal_sched_ab.json
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
    args = ap.parse_args()
    real_ws = _ext.workspace
    flush = torch.empty(256 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for b, h, s, d in SHAPES:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
        flops = 4 * b * h * d * s * (s + 1) / 2
        outs = {}

        def run(policy):
            _ext.workspace = real_ws if policy == "dynamic" else (lambda lib, dev: None)
            try:
                return vidattn.attention(q, k, v, causal=True)
            finally:
                _ext.workspace = real_ws

        for policy in ("dynamic", "static"):
            outs[policy] = run(policy)
        ms = {"dynamic": [], "static": []}
        for r in range(args.rounds):
            for policy in (("dynamic", "static") if r % 2 == 0 else ("static", "dynamic")):
                ms[policy].append(time_ms(lambda: run(policy), args.reps, flush))
        simr = sim.simulate(b, h, s, d)
        row = {"shape": f"{b}x{h}x{s} D{d}", "equal": bool(torch.equal(outs["dynamic"], outs["static"])),
               "ms": ms, "group": sim.group_heads(b, h, s, d),
               "sim_ratio": {"dynamic": simr["dynamic_grouped"]["ratio"], "static": simr["static_snake"]["ratio"]}}
        for policy in ms:
            row[f"tflops_{policy}"] = flops / (statistics.median(ms[policy]) * 1e-3) / 1e12
        row["speedup"] = statistics.median(ms["static"]) / statistics.median(ms["dynamic"])
        rows.append(row)
        print(f"{row['shape']:22s} group {row['group']:3d}  dynamic {row['tflops_dynamic']:6.1f}  static "
              f"{row['tflops_static']:6.1f} TFLOPS  x{row['speedup']:.3f}  (sim {row['sim_ratio']['static']:.3f} -> "
              f"{row['sim_ratio']['dynamic']:.3f})  equal={row['equal']}", flush=True)
        del q, k, v, outs
    if args.out:
        Path(args.out).write_text(json.dumps({"gpu": torch.cuda.get_device_name(), "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
