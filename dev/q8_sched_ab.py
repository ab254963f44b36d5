"""Device A/B of the 8-bit kernel's schedules (csrc/sm90/q8_fwd.cuh q8_consumer_seq, csrc/capi_8bit.cuh),
dev/NOTES_8bit.md v8. Call Q timed schedule 3 (round-robin turns around the exponentials, one warpgroup at a time on
MUFU) and schedule 2 (turns around the S issues) against schedule 1 (sequential, no turns); schedule 3 won at D=128
and is its default now, schedule 2 and schedule 3 at D=64 are no longer built. This re-measures the flip:
- D=128: the default (schedule 3, conversion 2) against the earlier default, schedule 1 with conversion 2, forced;
- D=64: the default (schedule 1) against itself forced: the same kernel twice, the passes' noise floor.

    python3 dev/q8_sched_ab.py [--passes 6] [--reps 20] [--budget 60]

Per variant dev/q8_prep_ab.py's checks (odd lengths, kv_lens tails with LSE, fp16, a shared key offset, V = ones
against fp64; the launch ran the schedule and conversion it names), then `--passes` alternating passes (the order
reversed every other pass) on Wan 1.3B self, seed 8K, CogVideoX and LTX: TFLOPS with the quantization synced per call
and queued, and kernel-only from torch.profiler. The table (printed last) gives medians, and per pass the ratio to
the default's figure of the same pass (synced with quantization, and kernel-only), with the count of passes a variant
won: the paired comparison the v7 decision used. JSON to $OUT/q8_sched_ab.json.
"""
import argparse
import importlib.util
import json
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location("q8_prep_ab", os.path.join(HERE, "q8_prep_ab.py"))
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)

OUT = os.environ.get("OUT", "/tmp")

# (name, head dim, schedule, row-sum mode, conversion, pre-pass) as q8_prep_ab.py's; the first of each head dim is
# the shipped default (every selector -1), the reference of the ratios.
VARIANTS = [("d128 default (seq 3, cvt 2)", 128, -1, -1, -1, -1),
            ("d128 old default (seq 1, cvt 2)", 128, 1, -1, -1, -1),
            ("d64 default (seq 1, cvt 1)", 64, -1, -1, -1, -1),
            ("d64 seq 1 forced (same kernel)", 64, 1, -1, -1, -1)]


def table(results):
    print("== 8-bit schedules A/B: medians of TFLOPS synced per call | queued | kernel only; per-pass ratios to "
          "the default (synced with quantization; kernel only); rel L2 vs fp64 ==")
    for r in results["timing"]:
        names = list(r["synced"])
        base = names[0]
        kern = {n: [r["flops"] / ms / 1e9 if ms else float("nan") for ms in r["kernel_ms"][n]] for n in names}
        for n in names:
            syn, que = statistics.median(r["synced"][n]), statistics.median(r["queued"][n])
            line = (f"{r['shape']:14s} {n:31s} {syn:5.0f} | {que:5.0f} | {statistics.median(kern[n]):5.0f} | "
                    f"{r['rel_l2'][n]:.2e}")
            if n != base:
                rs = [a / b for a, b in zip(r["synced"][n], r["synced"][base])]
                rk = [a / b for a, b in zip(kern[n], kern[base])]
                line += (f"  synced x {' '.join(f'{x:.3f}' for x in rs)} (won {sum(x > 1 for x in rs)}/{len(rs)})"
                         f"  kernel x {' '.join(f'{x:.3f}' for x in rk)} (won {sum(x > 1 for x in rk)}/{len(rk)})")
            print(line)
    bad = [c["variant"] for c in results["checks"] if not c["ok"]]
    print("checks:", "all ok" if not bad else f"FAILED: {bad}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds from the start; no pass starts after it")
    a = ap.parse_args()
    t0 = time.time()
    ab.quant8.SHORT_KV_EXACT_MAX = 0  # the 8-bit kernel at every length (seed 8K is routed to exact otherwise)
    results = {"checks": [], "timing": [], "passes": a.passes, "variants": VARIANTS}
    ok = ab.checks(VARIANTS, results)
    live = [vt for vt in VARIANTS if ok.get(vt[0]) or vt[2:] == (-1, -1, -1, -1)]  # a default always runs
    ab.timing(live, a.passes, a.reps, results, t0 + a.budget)
    with open(os.path.join(OUT, "q8_sched_ab.json"), "w") as f:
        json.dump(results, f, indent=1)
    table(results)
    print(f"q8_sched_ab done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
