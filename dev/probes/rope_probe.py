"""Fused RoPE (vidattn.rope, csrc/common/rope.cuh) against diffusers' eager RoPE at real model shapes.

Per shape: the stock eager code (diffusers' own arithmetic: WanAttnProcessor's nested function, or
diffusers.models.embeddings.apply_rotary_emb as the processor calls it) and the fused call, each timed alone between
CUDA events with L2 flushed before every call (a 256 MiB buffer zeroed), median of --reps; the fused kernel's
achieved bandwidth, counted two ways: 4 bytes per element of x (read bf16, write bf16: the brief's figure) and the
bytes it really moves (plus the fp32 cos/sin rows, read once per position); and a bitwise check (torch.equal) of the
fused output against the stock one on fresh random inputs. Last, a table, and the per-forward saving: (stock - fused)
x 2 calls (q and k) x the model's layer count.

Shapes (B, S, H, D; bf16; fp32 tables as diffusers builds them):
  wan1.3b     1 x 32760 x 12 x 128, Wan's (1, S, 1, D) tables, "wan" mode (30 layers: self-attention only)
  wan1.3b_qkv the same, x a chunk of a fused to_qkv output (seq stride 3*H*D)
  wan14b_720p 1 x 75600 x 40 x 128 (40 layers)
  cogvideox   CogVideoX-5B 720x480x49: (2, 48, 226 + 17550, 64) bhsd, "pairs" on [:, :, 226:] written back in place
              as the processor does (42 layers)
  hunyuan     HunyuanVideo 720x1280x129: (1, 118800, 24, 128) bshd, "pairs" (60 layers: 20 double + 40 single)

    timeout 300 python3 dev/probes/rope_probe.py --out $OUT/rope/rope_probe.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

FLUSH_BYTES = 256 << 20
SHAPES = {
    "wan1.3b": dict(x=(1, 32760, 12, 128), mode="wan", layers=30),
    "wan1.3b_qkv": dict(x=(1, 32760, 12, 128), mode="wan", layers=30, qkv=True),
    "wan14b_720p": dict(x=(1, 75600, 40, 128), mode="wan", layers=40),
    "cogvideox": dict(x=(2, 48, 226 + 17550, 64), mode="pairs", layers=42, text=226),
    "hunyuan": dict(x=(1, 118800, 24, 128), mode="pairs", layers=60),
}


def time_ms(fn, reps: int, flush) -> float:
    import torch
    for _ in range(3):
        fn()
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


def case(name: str, spec: dict, reps: int, flush) -> dict:
    import torch
    from diffusers.models.embeddings import apply_rotary_emb as stock_apply, get_1d_rotary_pos_embed

    import vidattn
    from vidattn import rotary

    g = torch.Generator(device="cuda").manual_seed(torch.seed() % (1 << 31))
    b, s_or_h, h_or_s, d = spec["x"]
    if spec["mode"] == "wan":
        s, h = s_or_h, h_or_s
        pos = torch.arange(s, dtype=torch.float64)
        cos, sin = get_1d_rotary_pos_embed(d, pos, 10000.0, use_real=True, repeat_interleave_real=True,
                                           freqs_dtype=torch.float64)
        cos, sin = cos.float().cuda()[None, :, None, :], sin.float().cuda()[None, :, None, :]
        if spec.get("qkv"):
            x = torch.randn(b, s, 3 * h * d, device="cuda", generator=g).bfloat16().chunk(3, -1)[1].unflatten(2, (h, d))
        else:
            x = torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16()
        # diffusers WanAttnProcessor's own torch ops, in its order (tests/test_rope.py pins rope_reference to them)
        stock = lambda: rotary.rope_reference(x, cos, sin, "wan")  # noqa: E731
        fused = lambda: vidattn.rope(x, cos, sin)  # noqa: E731
        explain = vidattn.rope_explain(x, cos, sin)
        out_s, out_f = stock(), fused()
        numel, table_rows = x.numel(), s
    elif "text" in spec:  # CogVideoX: (B, H, S, D), RoPE on the video tokens, written back into the slice
        t = spec["text"]
        h, s = s_or_h, h_or_s - t
        q = torch.randn(b, h, t + s, d, device="cuda", generator=g).bfloat16()
        freqs = (torch.randn(s, d, device="cuda", generator=g), torch.randn(s, d, device="cuda", generator=g))
        qs, qf = q.clone(), q.clone()

        def stock():
            qs[:, :, t:] = stock_apply(qs[:, :, t:], freqs)

        def fused():
            qf[:, :, t:] = rotary.apply_rotary_emb(qf[:, :, t:], freqs)

        explain = vidattn.rope_explain(qf[:, :, t:], *freqs, mode="pairs", layout="bhsd")
        qs.copy_(q), qf.copy_(q)
        stock(), fused()
        out_s, out_f = qs, qf
        numel, table_rows = b * h * s * d, s
    else:  # HunyuanVideo: (B, S, H, D), sequence_dim=1
        s, h = s_or_h, h_or_s
        x = torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16()
        freqs = (torch.randn(s, d, device="cuda", generator=g), torch.randn(s, d, device="cuda", generator=g))
        stock = lambda: stock_apply(x, freqs, sequence_dim=1)  # noqa: E731
        fused = lambda: rotary.apply_rotary_emb(x, freqs, sequence_dim=1)  # noqa: E731
        explain = vidattn.rope_explain(x, *freqs, mode="pairs")
        out_s, out_f = stock(), fused()
        numel, table_rows = x.numel(), s
    bitwise = bool(torch.equal(out_s, out_f))
    ms_stock = time_ms(stock, reps, flush)
    ms_fused = time_ms(fused, reps, flush)
    table_bytes = 2 * table_rows * d * 4 * b  # cos and sin rows, read once per batch index (grid.y)
    row = dict(name=name, shape=list(spec["x"]), mode=spec["mode"], layers=spec["layers"], explain=explain,
               bitwise=bitwise, stock_ms=ms_stock, fused_ms=ms_fused, speedup=ms_stock / ms_fused,
               tbps_4b=4 * numel / ms_fused / 1e9, tbps_real=(4 * numel + table_bytes) / ms_fused / 1e9,
               saved_ms_per_forward=(ms_stock - ms_fused) * 2 * spec["layers"])
    if "text" in spec:
        row["note"] = "both columns include the copy back into q[:, :, 226:] (the processor's assignment)"
    print(json.dumps(row), flush=True)
    return row


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shapes", default=",".join(SHAPES), help="comma-separated: " + ", ".join(SHAPES))
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--out", type=Path, default=None, help="JSON file for the rows")
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("rope_probe.py needs a CUDA GPU")
    names = [n.strip() for n in args.shapes.split(",") if n.strip()]
    unknown = [n for n in names if n not in SHAPES]
    if unknown:
        raise SystemExit(f"unknown shapes {unknown}; known: {', '.join(SHAPES)}")
    flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
    rows = [case(n, SHAPES[n], args.reps, flush) for n in names]
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(rows, indent=1))
    print(f"\n{'shape':12s} {'stock ms':>9s} {'fused ms':>9s} {'x':>6s} {'TB/s 4B':>8s} {'TB/s all':>8s} "
          f"{'bitwise':>7s} {'saved ms/fwd':>12s}  kernel")
    for r in rows:
        print(f"{r['name']:12s} {r['stock_ms']:9.3f} {r['fused_ms']:9.3f} {r['speedup']:6.2f} {r['tbps_4b']:8.2f} "
              f"{r['tbps_real']:8.2f} {str(r['bitwise']):>7s} {r['saved_ms_per_forward']:12.1f}  "
              f"{'yes' if r['explain'] is None else 'NO: ' + r['explain']}")
    return 0 if all(r["bitwise"] and r["explain"] is None for r in rows) else 1


if __name__ == "__main__":
    sys.exit(main())
