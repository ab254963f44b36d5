"""Run the fused RMSNorm + Wan RoPE (vidattn.rotary.norm_rope) on one q-shaped tensor a few times and stop: the
target program for a profiler, as kernel_once.py is for the attention kernel.

    ncu --clock-control none -k regex:rms_norm_rope --launch-skip 2 --launch-count 1 --set full \
        -o out/ncu_norm_rope python3 dev/probes/norm_rope_once.py 1 75600 40 128

Arguments: batch, tokens, heads, head dim (Wan 14B at 720p: 1 75600 40 128); bf16 x, a bf16 affine RMSNorm over the
heads x head-dim row, fp32 (1, S, 1, D) tables as Wan's. `--schedule` forces the kernel's schedule (0: the library's).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("dims", type=int, nargs=4, metavar=("B", "S", "H", "D"))
    ap.add_argument("--launches", type=int, default=4)
    ap.add_argument("--schedule", type=int, default=0)
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2
    from vidattn import rotary as R

    b, s, h, d = args.dims
    n = h * d
    x = torch.randn(b, s, n, device="cuda").bfloat16()
    norm = torch.nn.RMSNorm(n, eps=1e-6, device="cuda", dtype=torch.bfloat16).requires_grad_(False)  # (forward-only)
    pos = torch.arange(s, dtype=torch.float64)[:, None]
    freqs = pos / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))[None, :]
    cos, sin = (f.repeat_interleave(2, dim=-1).float().cuda()[None, :, None, :] for f in (freqs.cos(), freqs.sin()))
    reason = R.norm_rope_reason(norm, x, h, cos, sin)
    if reason is not None:
        print(f"error: the fused kernel would not run: {reason}", file=sys.stderr)
        return 1
    R.set_norm_rope_schedule(args.schedule)
    with torch.no_grad():
        for _ in range(args.launches):
            R.norm_rope(norm, x, h, cos, sin)
    torch.cuda.synchronize()
    R.set_norm_rope_schedule(0)
    print(f"norm_rope x{args.launches} on {b}x{s}x{h}x{d}: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
