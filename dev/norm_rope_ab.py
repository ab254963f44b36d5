"""Device A/B of the fused RMSNorm + Wan RoPE (vidattn.rotary.norm_rope; VIDATTN_NORM_ROPE) per tensor: the two steps
Wan's attention runs today (`torch.nn.RMSNorm` over the (B, S, H*D) row, then vidattn.rope) against the one fused
kernel, on q-shaped bf16 inputs (contiguous, as Wan's to_q writes them; --chunk: a fused-qkv chunk) with Wan's fp32
(1, S, 1, D) tables.

    python3 dev/norm_rope_ab.py [--passes 6] [--reps 20] [--shapes wan14b wan13b] [--schedules 1 3] [--chunk]

Checks first, per shape and schedule (`--schedules`: norm_rope.cuh's NormRopeSchedule, 0 the library's): the
fused call ran the kernel (norm_rope_reason None), is within 2e-3 relative L2 of the two steps and >= 99.9% bit for
bit; then `--passes` alternating passes (order reversed every other
pass), each timing `--reps` calls of each path between CUDA events. Prints per shape the median ms per call, the
bandwidth the fused call reached (read x, write out: 4 bytes per element), the saving per forward (2 tensors x
layers: 40 for Wan 14B, 30 for 1.3B), the passes the fused call won, and each later schedule's time
against the first listed one's with the passes it was faster in. JSON to $OUT/norm_rope_ab.json.
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

import torch  # noqa: E402

from vidattn import rotary as R  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
# (batch, tokens, heads, head dim, layers per forward): Wan 2.1 14B at 1280x720x81, 1.3B at 832x480x81.
SHAPES = {"wan14b": (1, 75600, 40, 128, 40), "wan13b": (1, 32760, 12, 128, 30)}


def tables(s, d):
    pos = torch.arange(s, dtype=torch.float64)[:, None]
    freqs = pos / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))[None, :]
    return tuple(f.repeat_interleave(2, dim=-1).float().cuda()[None, :, None, :] for f in (freqs.cos(), freqs.sin()))


def time_calls(fn, reps):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) / reps


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--passes", type=int, default=6)
    p.add_argument("--reps", type=int, default=20)
    p.add_argument("--shapes", nargs="+", default=list(SHAPES), choices=list(SHAPES))
    p.add_argument("--schedules", type=int, nargs="+", default=[0], choices=sorted(R.NORM_ROPE_SCHEDULES),
                   help="the kernel's schedules to time (norm_rope.cuh NormRopeSchedule; 0 is the library's)")
    p.add_argument("--chunk", action="store_true", help="x a fused-qkv chunk (rows 3C apart; torch's norm then copies "
                   "it first) instead of a contiguous projection output")
    args = p.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    R.norm_rope_enabled = True
    torch.manual_seed(0)
    report, ok = {"passes": args.passes, "reps": args.reps, "chunk": args.chunk, "shapes": {}}, True
    for name in args.shapes:
        b, s, h, d, layers = SHAPES[name]
        n = h * d
        if args.chunk:
            qkv = torch.randn(b, s, 3 * n, device="cuda").bfloat16()
            x = qkv.chunk(3, dim=-1)[0]  # a fused projection's q: rows 3n apart
        else:
            qkv = x = torch.randn(b, s, n, device="cuda").bfloat16()  # to_q's output (diffusers' Wan default)
        norm = torch.nn.RMSNorm(n, eps=1e-6, device="cuda").bfloat16().requires_grad_(False)
        with torch.no_grad():
            norm.weight.copy_(1 + 0.1 * torch.randn(n, device="cuda"))
        cos, sin = tables(s, d)

        def two_steps():
            return R.rope(norm(x).unflatten(-1, (h, -1)), cos, sin, mode="wan")

        def fused_schedule(v):
            def fn():
                R.set_norm_rope_schedule(v)
                return R.norm_rope(norm, x, h, cos, sin)
            return fn

        paths = [("two_steps", two_steps)] + [(f"fused_s{v}", fused_schedule(v)) for v in args.schedules]
        checks = {}
        with torch.no_grad():
            reason = R.norm_rope_reason(norm, x, h, cos, sin)
            a = two_steps()
            for key, fn in paths[1:]:
                f = fn()
                exact = (a == f).float().mean().item()
                rel = ((a.float() - f.float()).norm() / a.float().norm()).item()
                good = reason is None and rel < 2e-3 and exact > 0.999
                ok &= good
                checks[key] = {"bit_exact": exact, "rel_l2": rel, "ok": good}
                print(f"{name} {key}: check reason={reason} bit for bit {exact:.4%} rel_l2(fused, two steps)={rel:.2e}"
                      f" -> {'ok' if good else 'FAILED'}", flush=True)
                del f
            del a
            times = {key: [] for key, _ in paths}
            for i in range(args.passes):
                for key, fn in (paths if i % 2 == 0 else paths[::-1]):
                    times[key].append(time_calls(fn, args.reps))
            R.set_norm_rope_schedule(0)
        med = {k: statistics.median(v) for k, v in times.items()}
        row = {"shape": [b, s, h, d], "layers": layers, "reason": reason, "checks": checks, "ms": times,
               "median_ms": med, "schedules": {}}
        for key, _ in paths[1:]:
            wins = sum(f < t for f, t in zip(times[key], times["two_steps"]))
            gbs = 4 * b * s * n / (med[key] * 1e-3) / 1e9
            saved = (med["two_steps"] - med[key]) * 2 * layers
            first = paths[1][0]
            vs_first = sum(f < t for f, t in zip(times[key], times[first])) if key != first else None
            row["schedules"][key] = {"gbs": gbs, "saved_ms_per_forward": saved, "wins": wins,
                                     "wins_vs_first": vs_first}
            against = (f"; against {first} {med[key] / med[first]:.3f}x the time, faster in {vs_first}/{args.passes}"
                       if vs_first is not None else "")
            print(f"{name}: two steps {med['two_steps']:.3f} ms, {key} {med[key]:.3f} ms per tensor ({gbs:.0f} GB/s); "
                  f"saves {saved:.1f} ms per forward (q and k, {layers} layers); won {wins}/{args.passes} passes"
                  f"{against}", flush=True)
        report["shapes"][name] = row
        del qkv, x
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "norm_rope_ab_chunk.json" if args.chunk else "norm_rope_ab.json"), "w") as fh:
        json.dump(report, fh, indent=2)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
