#!/usr/bin/env python3
"""How far the 8-bit tail launch's LSE lies from the plain launch's (tests/test_8bit_tail_gpu.py's bound): the four
shapes of that test, bf16 normal inputs, --seeds draws each, LSE returned by both launches (quant8.set_tail(-1), then
set_tail(0)); per shape the key ranges the tail planned and the max and median over draws of max |LSE_tail - LSE_plain|.

    python3 dev/probes/q8_tail_lse.py [--seeds 12]

The two launches quantize P against different row maxima (a range's, the whole row's). D=128 sums each row in fp32
before rounding P, D=64 sums the rounded P on the tensor cores, so D=64's LSE moves by the rounding (dev/NOTES_8bit.md
"Call P31"). The short-key routing is bypassed (quant8.SHORT_KV_EXACT_MAX = 0) so every shape runs the 8-bit kernel.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

# (batch, heads, queries, keys): tests/test_8bit_tail_gpu.py's CASES with 133 heads for its SMS + 1 on an H200.
CASES = [(1, 1, 100, 2049), (2, 3, 577, 4097), (1, 133, 150, 2200), (3, 45, 192, 1500)]


def summary(diffs: list[float]) -> tuple[float, float]:
    """(max, median) of the per-draw max |dLSE|; the median of an even count is the upper middle draw."""
    if not diffs:
        raise ValueError("no draws")
    return max(diffs), sorted(diffs)[len(diffs) // 2]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seeds", type=int, default=12, help="draws per shape and head dim (default 12)")
    args = ap.parse_args(argv)
    if args.seeds < 1:
        raise SystemExit(f"error: --seeds must be at least 1, got {args.seeds}")
    import torch

    if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
        raise SystemExit("error: the 8-bit kernel needs an sm_90 (Hopper) GPU; none here")
    import vidattn
    from vidattn import quant8

    quant8.SHORT_KV_EXACT_MAX = 0
    print("head dim | batch x heads x queries x keys | tail ranges | max |dLSE| | median")
    try:
        for d in (128, 64):
            for b, h, sq, skv in CASES:
                diffs, splits = [], 0
                for seed in range(args.seeds):
                    g = torch.Generator(device="cuda").manual_seed(seed * 31 + d)
                    q, k, v = (torch.randn(b, n, h, d, device="cuda", generator=g).to(torch.bfloat16)
                               for n in (sq, skv, skv))
                    quant8.set_tail(-1)
                    _, lse_tail = vidattn.attention(q, k, v, precision="8bit", return_lse=True)
                    splits = quant8.last_tail_splits()
                    quant8.set_tail(0)
                    _, lse_plain = vidattn.attention(q, k, v, precision="8bit", return_lse=True)
                    diffs.append(float((lse_tail - lse_plain).abs().max()))
                top, mid = summary(diffs)
                print(f"{d} | {b}x{h}x{sq}x{skv} | {splits} | {top:.2e} | {mid:.2e}", flush=True)
    finally:
        quant8.set_tail(-1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
