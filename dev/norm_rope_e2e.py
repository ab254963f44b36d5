"""Device A/B, end to end, of the fused RMSNorm + Wan RoPE (vidattn.rotary.norm_rope; VIDATTN_NORM_ROPE): one Wan
forward through vidattn's processors at 8-bit precision (the one the Wan processor fuses at) with q/k norms and RoPE
as two steps (rotary.norm_rope_enabled False) against the same forward with them fused (True), in one process on one
model, beside SDPA.

    python3 dev/norm_rope_e2e.py [--family wan14b] [--height 720 --width 1280 --frames 81] [--rounds 3] [--sdpa 2]

The two settings alternate on one model (A B B A ...) after one untimed forward each, so their difference is the
fusion's and not the run-to-run spread of two processes. SDPA's forwards (`--sdpa`, after one untimed) give each
setting's speedup in the same run. Checks first: the fused forward launched the fused kernel twice per
self-attention (q and k) and the two-step forward never; the outputs' relative L2 difference is printed beside the
8-bit path's own run-to-run difference (its K sums' atomics order varies). JSON to $OUT/norm_rope_e2e.json; a table
last.
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

import torch  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--family", default="wan14b", choices=["wan14b", "wan"])
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--rounds", type=int, default=3, help="timed forwards per setting and precision (default 3)")
    p.add_argument("--precisions", nargs="+", default=["8bit"], choices=["8bit"])
    p.add_argument("--sdpa", type=int, default=2, help="timed SDPA forwards (default 2; 0: none)")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2

    from fidelity_8bit import attention_path
    from e2e_common import build_model, sdpa_forwards
    from pipelines.measure import timed_call
    from vidattn import rotary
    from vidattn.envinfo import run_metadata

    built, info, dev = build_model(args.family, args.height, args.width, args.frames)

    launches = {"n": 0}
    real_launch = rotary._norm_launch

    def counting(*a, **kw):
        launches["n"] += 1
        return real_launch(*a, **kw)

    rotary._norm_launch = counting

    def forward(path: str, fused: bool):
        rotary.norm_rope_enabled = fused
        with attention_path(path, built.model):
            return timed_call(built.forward, dev)

    report = {"metadata": run_metadata(), "command": "python3 dev/norm_rope_e2e.py " + " ".join(sys.argv[1:]),
              "family": args.family, "size": [args.height, args.width, args.frames], **info, "precisions": {}}
    ok = True
    blocks = len(built.model.blocks)
    try:
        for path in args.precisions:
            before = launches["n"]
            _, out_two = forward(path, False)
            two_launches = launches["n"] - before
            _, out_two_again = forward(path, False)
            before = launches["n"]
            _, out_fused = forward(path, True)
            fused_launches = launches["n"] - before

            def rel(a, b):
                return ((a.float() - b.float()).norm() / b.float().norm()).item()

            checks = {"two_step_launches": two_launches, "fused_launches": fused_launches,
                      "expected_fused_launches": 2 * blocks, "rel_l2_fused_vs_two": rel(out_fused, out_two),
                      "rel_l2_two_vs_two": rel(out_two_again, out_two)}
            del out_two, out_two_again, out_fused
            good = two_launches == 0 and fused_launches == 2 * blocks
            ok &= good
            print(f"[{path}] checks: fused-kernel launches two-step {two_launches}, fused {fused_launches} (expected "
                  f"{2 * blocks}); output rel L2 fused vs two-step {checks['rel_l2_fused_vs_two']:.2e}, two-step vs "
                  f"itself {checks['rel_l2_two_vs_two']:.2e} -> {'ok' if good else 'FAILED'}", flush=True)
            times = {"two_step": [], "fused": []}
            for r in range(args.rounds):
                order = (False, True) if r % 2 == 0 else (True, False)
                for fused in order:
                    ms, out = forward(path, fused)
                    del out
                    times["fused" if fused else "two_step"].append(ms)
                print(f"[{path}] round {r + 1}: two-step {times['two_step'][-1]:.1f} ms, fused "
                      f"{times['fused'][-1]:.1f} ms", flush=True)
            med = {k: statistics.median(v) for k, v in times.items()}
            wins = sum(f < t for f, t in zip(times["fused"], times["two_step"]))
            report["precisions"][path] = {"checks": checks, "checks_ok": good, "forward_ms": times,
                                          "median_ms": med, "fused_wins": wins,
                                          "saving_ms": med["two_step"] - med["fused"]}
    finally:
        rotary._norm_launch = real_launch
        rotary.norm_rope_enabled = rotary.norm_rope_from_env()

    sdpa = sdpa_forwards(built, dev, args.sdpa)
    sdpa_med = statistics.median(sdpa) if sdpa else None
    report.update(sdpa_ms=sdpa, checks_ok=ok)
    for r in report["precisions"].values():
        r["speedup_vs_sdpa"] = {k: sdpa_med / v for k, v in r["median_ms"].items()} if sdpa_med else None
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "norm_rope_e2e.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(f"\n| {args.family} {args.height}x{args.width}x{args.frames} | ms/forward (median) | x SDPA | fused won |")
    print("|---|---|---|---|")
    if sdpa_med:
        print(f"| SDPA | {sdpa_med:.1f} | 1.000 | |")
    for path, r in report["precisions"].items():
        for k in ("two_step", "fused"):
            sp = f"{sdpa_med / r['median_ms'][k]:.3f}" if sdpa_med else "-"
            label = "norm + RoPE fused" if k == "fused" else "norm, then RoPE"
            won = f"{r['fused_wins']}/{args.rounds}" if k == "fused" else ""
            print(f"| {path}, {label} | {r['median_ms'][k]:.1f} | {sp} | {won} |")
    for path, r in report["precisions"].items():
        print(f"[{path}] fused saves {r['saving_ms']:.1f} ms per forward")
    print(f"checks {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
