"""Run the kernel on one anchor shape a few times and stop: the target program for a profiler.

    ncu --clock-control none -k regex:flash_fwd --launch-skip 3 --launch-count 1 --set full \
        -o out/ncu_wan_cross python3 dev/probes/kernel_once.py wan_cross

Shapes: every anchor shape of bench/anchor_shapes.py, by key, or `custom` with `--dims B H SQ SKV D` (the head-dim
shapes the anchors table lacks). Honours VIDATTN_LIBRARY and VIDATTN_D64_WARPGROUPS like every other script.
`--precision 8bit` launches through `vidattn.attention(..., precision="8bit")`, so the pre-pass kernels run too (match
the profiler's kernel regex to `q8_fwd_kernel` to profile the attention kernel alone).
`--backend cudnn` runs SDPA's cuDNN kernel on the same inputs instead (as bench_kernel.py calls it), so that a
profiler can read the same counters for both. `--causal` masks top-left aligned (either backend); `--kv-lens L ...`
passes each batch's valid keys to the exact kernel (text-padded cross-attention); `--hd-narrow N` holds
`_ext.hd_narrow(N)` around the launches (D=192/256: 1 is the narrow build, the causal builds' width).
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # bench_kernel's inputs
from vidattn import _ext  # noqa: E402
from bench.anchor_shapes import SHAPES as ANCHORS, Shape  # noqa: E402
from bench_kernel import make_inputs  # noqa: E402

SHAPES = [s.as_tuple() for s in ANCHORS]


def main():
    names = [s[0] for s in SHAPES]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shape", choices=names + ["custom"])
    ap.add_argument("--dims", type=int, nargs=5, metavar=("B", "H", "SQ", "SKV", "D"),
                    help="the shape when SHAPE is custom")
    ap.add_argument("--precision", choices=("bf16", "8bit"), default="bf16")
    ap.add_argument("--launches", type=int, default=5, help="kernel launches (profile one after a few warm ones)")
    ap.add_argument("--backend", choices=("vidattn", "cudnn"), default="vidattn")
    ap.add_argument("--causal", action="store_true", help="a top-left causal mask")
    ap.add_argument("--kv-lens", type=int, nargs="+", default=None, metavar="L",
                    help="each batch's valid keys (the exact kernel's kv_lens; one length per batch)")
    ap.add_argument("--hd-narrow", type=int, default=None, metavar="N", help="_ext.hd_narrow(N) around the launches")
    args = ap.parse_args()
    if args.causal and args.precision == "8bit":
        ap.error("--causal: the 8-bit path has no causal mask")
    if args.hd_narrow is not None and (args.backend != "vidattn" or args.precision != "bf16"):
        ap.error("--hd-narrow picks among the exact kernel's builds: vidattn bf16 only")
    if args.kv_lens is not None and (args.backend != "vidattn" or args.precision != "bf16"):
        ap.error("--kv-lens: the exact kernel's launch only (vidattn bf16)")
    if args.shape == "custom":
        if not args.dims:
            ap.error("custom needs --dims B H SQ SKV D")
        shape = Shape("custom", *args.dims, key="custom")
    else:
        if args.dims:
            ap.error("--dims goes with the custom shape only")
        shape = ANCHORS[names.index(args.shape)]
    _, b, h, sq, skv, d = shape.as_tuple()
    if args.kv_lens is not None and (len(args.kv_lens) != b or not all(0 <= n <= skv for n in args.kv_lens)):
        ap.error(f"--kv-lens: {b} lengths in [0, {skv}], one a batch; got {args.kv_lens}")
    reason = None if torch.cuda.is_available() else "no CUDA device"
    if reason is None:
        (q, k, v), = make_inputs(shape, 1, torch.Generator(device="cuda").manual_seed(0))
        if args.backend == "vidattn":
            reason = _ext.kernel_reason(q, k, v, None, d ** -0.5,
                                        _ext.CAUSAL_TOP_LEFT if args.causal else _ext.CAUSAL_NONE)
    if reason:
        sys.exit(f"kernel_once: the kernel cannot run here: {reason}")
    if args.backend == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            for _ in range(args.launches):
                torch.nn.functional.scaled_dot_product_attention(qt, kt, vt, is_causal=args.causal)
    elif args.precision == "8bit":
        import vidattn
        for _ in range(args.launches):
            vidattn.attention(q, k, v, precision="8bit")
    else:
        import contextlib
        out = torch.empty_like(q)
        causal = _ext.CAUSAL_TOP_LEFT if args.causal else _ext.CAUSAL_NONE
        kv_lens = (torch.tensor(args.kv_lens, dtype=torch.int32, device="cuda")
                   if args.kv_lens is not None else None)
        with _ext.hd_narrow(args.hd_narrow) if args.hd_narrow is not None else contextlib.nullcontext():
            for _ in range(args.launches):
                _ext.forward(q, k, v, out, None, kv_lens, d ** -0.5, causal=causal)
    torch.cuda.synchronize()
    print(f"kernel_once: {args.backend} {args.precision} {args.shape} B{b} H{h} {sq}x{skv} D{d}"
          f"{' causal' if args.causal else ''}{f' kv_lens {args.kv_lens}' if args.kv_lens else ''}: "
          f"{args.launches} launches")


if __name__ == "__main__":
    main()
