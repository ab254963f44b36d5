"""Does a backend's timing window depend on what ran right before it? One anchor shape, bench_kernel.py's windows.

Every full `bench_kernel.py` run of the twelfth session read vidattn's first Wan 1.3B round at 9.12-9.13 ms (1.27x
cuDNN) and its later rounds at 9.42-10.06 ms, while cuDNN's rounds stayed within 5% (dev/NOTES.md, lead 1). The
first round follows the correctness check; every later one follows another backend's 125 ms window. This probe
times pairs of windows, a predecessor then a target, for every predecessor in {idle, vidattn, cudnn, flash} and
every target in {vidattn, cudnn}. Each window is `triton.testing.do_bench` with bench_kernel.py's warm-up (25 ms)
and rep (100 ms); "idle" is --pause seconds of sleep. The pairs run --reps times, each repetition in a Williams order
(bench/round_order.py), while `nvidia-smi` samples the SM clock and power every 20 ms. The table gives, per pair,
the target's median time, the medians of the first and last quarter of its calls inside a window (does the
window start slow and speed up, or the other way?), and the median clock and power of the samples inside its windows.

    python3 dev/probes/neighbour_probe.py wan13b_self --reps 4 --json out/neighbour_wan13b.json

Honours VIDATTN_LIBRARY like every other script. Needs triton and `nvidia-smi` on the device.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import anchor_shapes  # noqa: E402
from clock_probe import sampling  # noqa: E402
from bench.round_order import round_orders  # noqa: E402

PREDECESSORS = ("idle", "vidattn", "cudnn", "flash")
TARGETS = ("vidattn", "cudnn")
WARMUP_MS, REP_MS = 25, 100  # bench_kernel.py's Timer (not --quick)


def pair_plan(reps: int, predecessors=PREDECESSORS, targets=TARGETS) -> list[tuple[str, str]]:
    """(predecessor, target) pairs in run order: every pair once per repetition, each repetition in the next row
    of a Williams design over the pairs, so that no pair always follows the same one."""
    pairs = [(p, t) for t in targets for p in predecessors]
    return [pair for order in round_orders(pairs, reps) for pair in order]


def samples_within(samples, windows) -> list[tuple]:
    """The samples (clock_probe.parse_timed_samples: time, clock, power, temperature) whose time falls inside any
    of the (start, end) windows (unix seconds); samples without a time are left out."""
    return [s for s in samples if s[0] is not None and any(a <= s[0] <= b for a, b in windows)]


def window_quarters(records: list[dict]) -> tuple[float, float]:
    """Median of the first and of the last quarter (at least one call) of each window's per-call times, pooled over
    the windows; NaN where no record kept its per-call times."""
    head, tail = [], []
    for r in records:
        times = r.get("times") or []
        if times:
            q = max(1, len(times) // 4)
            head += times[:q]
            tail += times[-q:]
    return (statistics.median(head) if head else float("nan"), statistics.median(tail) if tail else float("nan"))


def summarize(records: list[dict], samples) -> list[dict]:
    """Per (predecessor, target): the target's median ms over its windows, the first and last quarters of its calls
    (window_quarters), and the median clock and power of the samples inside the windows."""
    rows = []
    for p, t in dict.fromkeys((r["pred"], r["target"]) for r in records):
        mine = [r for r in records if (r["pred"], r["target"]) == (p, t)]
        inside = samples_within(samples, [(r["t0"], r["t1"]) for r in mine])
        head, tail = window_quarters(mine)
        rows.append({"pred": p, "target": t, "n": len(mine), "ms": statistics.median(r["ms"] for r in mine),
                     "ms_all": [r["ms"] for r in mine], "head_ms": head, "tail_ms": tail, "samples": len(inside),
                     "clock_mhz": statistics.median(s[1] for s in inside) if inside else float("nan"),
                     "power_w": statistics.median(s[2] for s in inside) if inside else float("nan")})
    return rows


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", help="anchor shape key (bench/anchor_shapes.py), e.g. wan13b_self")
    ap.add_argument("--reps", type=int, default=4, help="repetitions of the 8 pairs (default 4)")
    ap.add_argument("--pause", type=float, default=1.0, help="seconds of the idle predecessor")
    ap.add_argument("--json", default="", help="write the windows, samples and table here")
    args = ap.parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from triton.testing import do_bench

    import kernel_smoke
    from vidattn import _ext

    (key, b, h, sq, skv, d), = anchor_shapes.by_key([args.shape])
    q, k, v = kernel_smoke.bshd_inputs(b, h, sq, skv, d)
    out = torch.empty_like(q)
    qt, kt, vt = (x.transpose(1, 2) for x in (q, k, v))

    def sdpa(backend):
        def fn():
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(qt, kt, vt)
        return fn

    fns = {"vidattn": lambda: _ext.forward(q, k, v, out, None, None, d ** -0.5),
           "cudnn": sdpa(SDPBackend.CUDNN_ATTENTION), "flash": sdpa(SDPBackend.FLASH_ATTENTION)}
    for fn in fns.values():
        fn()
    torch.cuda.synchronize()

    def window(name):
        t0 = time.time()
        if name == "idle":
            time.sleep(args.pause)
            times = []
        else:
            times = list(do_bench(fns[name], warmup=WARMUP_MS, rep=REP_MS, return_mode="all"))
        return t0, time.time(), times

    records = []
    with sampling(period_ms=20) as samples:
        for pred, target in pair_plan(args.reps):
            window(pred)
            t0, t1, times = window(target)
            records.append({"pred": pred, "target": target, "t0": t0, "t1": t1, "ms": statistics.median(times),
                            "times": times})
    rows = summarize(records, samples)
    flops = 4 * b * h * sq * skv * d
    print(f"{key}: {len(records)} target windows, {len(samples)} nvidia-smi samples")
    print("| target | after | windows | median ms | first / last quarter ms | TFLOPS | SM clock (MHz) | power (W) "
          "| samples |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r in sorted(rows, key=lambda r: (r["target"], PREDECESSORS.index(r["pred"]))):
        print(f"| {r['target']} | {r['pred']} | {r['n']} | {r['ms']:.3f} | {r['head_ms']:.3f} / {r['tail_ms']:.3f} | "
              f"{flops / r['ms'] / 1e9:.0f} | {r['clock_mhz']:.0f} | {r['power_w']:.0f} | {r['samples']} |")
    if args.json:
        Path(args.json).write_text(json.dumps({"shape": key, "gpu": torch.cuda.get_device_name(),
                                               "torch": torch.__version__, "reps": args.reps, "pause_s": args.pause,
                                               "windows": records, "samples": samples, "table": rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
