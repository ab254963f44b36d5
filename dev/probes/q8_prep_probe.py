"""The 8-bit pre-pass against the card's copy rate: how far each of its kernels is from moving its bytes at the rate
a plain device copy moves them.

Per shape (bf16 BSHD inputs, precision="8bit" through vidattn.attention, its default pre-pass): every kernel's device
time from torch.profiler over --calls calls (median per call), the bytes each pre-pass kernel must move at the least
(its 16-bit reads of the valid rows and its 8-bit writes; the scales and statistics are under 1%), and so its
effective rate; beside it, in the same process, torch's device copy of a buffer of the shape's K + V size (read and
write, L2 flushed before each) and a read-only reduction (amax) of it. The pre-pass share of the call and the time
it would take at the copy rate close the table:

    timeout 120 python3 dev/probes/q8_prep_probe.py --out $OUT/prep/q8_prep_probe.json

Kernels by name (csrc/sm90/q8_quant.cuh): q8_stats_q_kernel (K/V statistics and Q in one launch, the default
without LSE), q8_kv_stats_kernel / q8_q_kernel (the same as two launches), q8_kv2_kernel (K/V pass, D=128),
q8_kv_kernel (K/V pass, D=64), q8_fwd_kernel (attention; its tail twin and combine_kernel with it).
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from rope_probe import FLUSH_BYTES, time_ms  # noqa: E402  (events around each call, L2 flushed before it)

SHAPES = {  # B, H, S, D (self-attention: Sq = Skv)
    "seed8k": (4, 16, 8192, 128),
    "wan1.3b": (1, 12, 32760, 128),
    "cogvideox": (1, 48, 17776, 64),
    "ltx": (1, 32, 24576, 64),
}


def kernel_bytes(name: str, b: int, h: int, s: int, d: int) -> int | None:
    """The least bytes a pre-pass kernel moves: 16-bit reads of what it must read, 8-bit writes of what it writes."""
    row16 = b * h * s * d * 2
    row8 = b * h * s * d
    if "q8_stats_q_kernel" in name:
        return 2 * row16 + row16 + row8  # K and V read (statistics), Q read and written
    if "q8_kv_stats_kernel" in name:
        return 2 * row16
    if "q8_q_kernel" in name:
        return row16 + row8
    if "q8_kv2_kernel" in name or "q8_kv_kernel" in name:
        return 2 * row16 + 2 * row8
    return None


def kind(name: str) -> str:
    for k in ("q8_stats_q_kernel", "q8_kv_stats_kernel", "q8_q_kernel", "q8_kv2_kernel", "q8_kv_kernel",
              "q8_fwd_kernel", "combine_kernel"):
        if k in name:
            return k
    return "memset" if "memset" in name.lower() or "fill" in name.lower() else name[:40]


def profile_call(fn, calls: int) -> dict[str, float]:
    """Median device ms per call of each kernel kind (summed over the launches of that kind within a call)."""
    import torch
    from torch.profiler import ProfilerActivity, profile
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    per_kind: dict[str, list[float]] = {}
    for ev in prof.events():
        if str(getattr(ev, "device_type", "")).endswith("CUDA"):
            us = getattr(ev, "device_time", None)
            if us is None:
                us = getattr(ev, "cuda_time", 0.0)
            per_kind.setdefault(kind(ev.name), []).append(float(us) / 1e3)
    out = {}
    for k, v in per_kind.items():
        n = max(1, round(len(v) / calls))  # launches of this kind per call
        sums = [sum(v[i:i + n]) for i in range(0, len(v) - n + 1, n)]
        out[k] = statistics.median(sums)
    return out


def case(name: str, calls: int, reps: int, flush) -> dict:
    import torch
    import vidattn
    b, h, s, d = SHAPES[name]
    gen = torch.Generator(device="cuda").manual_seed(0)
    q, k, v = (torch.randn(b, s, h, d, dtype=torch.bfloat16, device="cuda", generator=gen) for _ in range(3))
    kernels = profile_call(lambda: vidattn.attention(q, k, v, precision="8bit"), calls)
    kv = torch.empty(2 * b * s * h * d, dtype=torch.bfloat16, device="cuda")
    dst = torch.empty_like(kv)
    kv.normal_()
    copy_ms = time_ms(lambda: dst.copy_(kv), reps, flush)
    read_ms = time_ms(lambda: torch.amax(kv), reps, flush)
    nbytes = kv.numel() * 2
    copy_tbs, read_tbs = 2 * nbytes / copy_ms / 1e9, nbytes / read_ms / 1e9
    rows = []
    prep_ms = prep_ideal = 0.0
    for kname, ms in sorted(kernels.items(), key=lambda kv_: -kv_[1]):
        nb = kernel_bytes(kname, b, h, s, d)
        row = {"kernel": kname, "ms": round(ms, 4)}
        if nb is not None:
            row.update(bytes=nb, tb_s=round(nb / ms / 1e9, 3), at_copy_rate_ms=round(nb / copy_tbs / 1e9, 4))
            prep_ms += ms
            prep_ideal += nb / copy_tbs / 1e9
        elif kname == "memset":
            prep_ms += ms
        rows.append(row)
    total = sum(kernels.values())
    del q, k, v, kv, dst
    torch.cuda.empty_cache()
    return dict(shape=name, dims=[b, h, s, d], kernels=rows, copy_tb_s=round(copy_tbs, 3),
                read_tb_s=round(read_tbs, 3), prep_ms=round(prep_ms, 4), call_ms=round(total, 4),
                prep_share=round(prep_ms / total, 4) if total else None, prep_at_copy_rate_ms=round(prep_ideal, 4))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="+", default=list(SHAPES), help=f"of {', '.join(SHAPES)}")
    ap.add_argument("--calls", type=int, default=10, help="profiled calls per shape")
    ap.add_argument("--reps", type=int, default=10, help="timed copies per rate")
    ap.add_argument("--out", type=Path, default=None, help="JSON of every row")
    args = ap.parse_args(argv)
    bad = [s for s in args.shapes if s not in SHAPES]
    if bad:
        raise SystemExit(f"q8_prep_probe: unknown shapes {bad}; known: {', '.join(SHAPES)}")
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("q8_prep_probe needs a CUDA GPU")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.uint8, device="cuda")
    results = []
    for name in args.shapes:
        r = case(name, args.calls, args.reps, flush)
        results.append(r)
        print(json.dumps(r), flush=True)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(dict(gpu=torch.cuda.get_device_name(), torch=torch.__version__,
                                            results=results), indent=1))
    print("\n| shape | kernel | ms | TB/s | at copy rate ms |")
    print("|---|---|---|---|---|")
    for r in results:
        for row in r["kernels"]:
            print(f"| {r['shape']} | {row['kernel']} | {row['ms']:.4f} | {row.get('tb_s', '')} | "
                  f"{row.get('at_copy_rate_ms', '')} |")
    print("\n| shape | copy TB/s | read TB/s | pre-pass ms | at copy rate | share of the call |")
    print("|---|---|---|---|---|---|")
    for r in results:
        print(f"| {r['shape']} | {r['copy_tb_s']} | {r['read_tb_s']} | {r['prep_ms']} | {r['prep_at_copy_rate_ms']} | "
              f"{r['prep_share']} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
