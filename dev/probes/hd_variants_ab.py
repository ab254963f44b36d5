"""Device A/B of the head-dim variants in one process, at the shapes where the default builds miss their bars
(1.00x FlashAttention-3, 1.15x cuDNN): today's builds ("today") against D=96 on three consumer warpgroups
("d96_3wg", head dims 72..96), D=192 at N=64 with two Q buffers ("d192_n64"), the narrow D=192/256 builds
("narrow", the existing A/B partner), head dims 72..96 padded onto the D=128 build ("pad128": what the D=96 build
gains over padding, not yet measured), cuDNN through SDPA and FlashAttention-3 (scripts/anchor_impls.py, when
installed). Rounds interleaved, the backend order rotated each round, CUDA-event medians with L2 flushed before
every call; every vidattn side checked against cuDNN (relative L2) and its key-block width recorded, so a variant
that did not run cannot pass as one. TFLOPS at the shape's own D (4 B H S^2 D). Writes ab.json and prints the table
last.

    python3 dev/probes/hd_variants_ab.py --rounds 3 --out $OUT/hd
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

# (name, batch, heads, seqlen, head dim): the head-dim rows of scripts/bench_anchors.py (B = 16384 // S, H = 2048 // D
# so that the GPU is full), the misses first
SHAPES = [("D192 1K", 16, 10, 1024, 192), ("D192 8K", 2, 10, 8192, 192), ("D256 1K", 16, 8, 1024, 256),
          ("D256 32K", 1, 8, 32768, 256), ("Allegro D96", 1, 24, 79200, 96), ("D72 8K", 2, 28, 8192, 72),
          ("D192 32K", 1, 10, 32768, 192), ("D96 8K", 2, 21, 8192, 96), ("D80 8K", 2, 25, 8192, 80),
          ("D96 1K", 16, 21, 1024, 96)]
VIDATTN_SIDES = ("today", "d96_3wg", "d192_n64", "narrow", "pad128")
CHECK_REL_L2 = 2e-2


def applies(backend: str, d: int) -> bool:
    return {"d96_3wg": 64 < d <= 96, "d192_n64": 128 < d <= 192, "narrow": d > 128,
            "pad128": 64 < d <= 96}.get(backend, True)


def switch(backend: str):
    """The library setting a vidattn side runs under (today: every switch at its default)."""
    from vidattn import _ext
    if backend == "d96_3wg":
        return _ext.d96_warpgroups(3)
    if backend == "d192_n64":
        return _ext.d192_block_n(64)
    if backend == "narrow":
        return _ext.hd_narrow(1)
    if backend == "pad128":
        return _ext.d96_build(128)
    return contextlib.nullcontext()


def flops(b: int, h: int, s: int, d: int) -> float:
    return 4.0 * b * h * s * s * d


def make_call(backend: str, q, k, v):
    import torch.nn.functional as F
    if backend in VIDATTN_SIDES:
        import vidattn
        return lambda: vidattn.attention(q, k, v, layout="bshd")
    if backend == "cudnn":
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        return lambda: F.scaled_dot_product_attention(qt, kt, vt)
    if backend == "fa3":
        import anchor_impls
        return lambda: anchor_impls.fa3(q, k, v)
    raise KeyError(backend)


def backend_context(backend: str):
    if backend == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.CUDNN_ATTENTION)
    return switch(backend) if backend in VIDATTN_SIDES else contextlib.nullcontext()


def time_ms(fn, reps: int, flush) -> float:
    import torch
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


def rel_l2(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def table(rows: list[dict]) -> str:
    """Median TFLOPS per side, the best vidattn side and its ratios to today, FA3 and cuDNN."""
    head = ["shape", "today", "d96_3wg", "d192_n64", "narrow", "pad128", "fa3", "cudnn", "best", "best/today",
            "best/fa3", "best/cudnn", "today/fa3", "today/cudnn"]
    lines = [" | ".join(head)]
    for r in rows:
        t = r["tflops"]
        sides = {b: t[b] for b in VIDATTN_SIDES if t.get(b)}
        best = max(sides, key=sides.get) if sides else None

        def ratio(x, y):
            return f"{t[x] / t[y]:.3f}" if x and t.get(x) and t.get(y) else "-"
        cells = [r["shape"]] + [f"{t[b]:.0f}" if t.get(b) else "-" for b in head[1:8]]
        cells += [best or "-", ratio(best, "today"), ratio(best, "fa3"), ratio(best, "cudnn"), ratio("today", "fa3"),
                  ratio("today", "cudnn")]
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--target-ms", type=float, default=60.0, help="kernel time per measurement (sets its reps)")
    ap.add_argument("--shapes", nargs="*", help="names from SHAPES (default: all)")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("hd_variants_ab: needs a CUDA GPU")
    import anchor_impls
    from vidattn import _ext
    fa3_reason = anchor_impls.available().get("fa3")
    t_start = time.time()
    flush = torch.empty(128 << 20, dtype=torch.uint8, device="cuda")
    rows = []
    for name, b, h, s, d in SHAPES:
        if args.shapes and name not in args.shapes:
            continue
        g = torch.Generator(device="cuda").manual_seed(s + d)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
        backends = [x for x in VIDATTN_SIDES if applies(x, d)] + ["cudnn"]
        if fa3_reason is None and anchor_impls.supports("fa3", d, h, h) is None:
            backends.append("fa3")
        calls = {x: make_call(x, q, k, v) for x in backends}
        row = {"shape": name, "b": b, "h": h, "s": s, "d": d, "flops": flops(b, h, s, d), "ms": {}, "tflops": {},
               "block_n": {}, "rel_l2_vs_cudnn": {}, "errors": {}, "backends": backends}
        with backend_context("cudnn"):
            ref = calls["cudnn"]().transpose(1, 2)
        reps = {}
        for x in backends:  # warm-up, the correctness gate, the reps for the target time
            try:
                with backend_context(x):
                    out = calls[x]()
                    torch.cuda.synchronize()
                    if x in VIDATTN_SIDES:
                        row["block_n"][x] = _ext.last_block_n()
                    one = time_ms(calls[x], 1, flush)
                if x != "cudnn":
                    row["rel_l2_vs_cudnn"][x] = rel_l2(out, ref)
                    if not row["rel_l2_vs_cudnn"][x] < CHECK_REL_L2:
                        raise RuntimeError(f"relative L2 {row['rel_l2_vs_cudnn'][x]:.2e} against cuDNN")
                reps[x] = max(3, min(30, math.ceil(args.target_ms / max(one, 1e-3))))
            except Exception as exc:  # noqa: BLE001 - a side that fails is reported, the others still time
                row["errors"][x] = f"{type(exc).__name__}: {exc}"
        live = [x for x in backends if x not in row["errors"]]
        samples = {x: [] for x in live}
        for r in range(args.rounds):
            order = live[r % len(live):] + live[:r % len(live)] if live else []
            for x in order:
                with backend_context(x):
                    samples[x].append(time_ms(calls[x], reps[x], flush))
        for x in live:
            row["ms"][x] = samples[x]
            row["tflops"][x] = row["flops"] / (statistics.median(samples[x]) * 1e-3) / 1e12
        rows.append(row)
        print(f"{name}: " + ", ".join(f"{x} {row['tflops'][x]:.0f}" for x in live) +
              (f"; errors {row['errors']}" if row["errors"] else "") + f"; block_n {row['block_n']}", flush=True)
        del q, k, v, ref, calls
        torch.cuda.empty_cache()
    result = {"rounds": args.rounds, "fa3": fa3_reason or "available", "seconds": time.time() - t_start,
              "device": torch.cuda.get_device_name(), "rows": rows}
    text = table(rows)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ab.json").write_text(json.dumps(result, indent=1))
        (args.out / "ab_table.txt").write_text(text + "\n")
    print(f"\nhd_variants_ab: {args.rounds} rounds, {time.time() - t_start:.0f} s, FA3 {result['fa3']}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
