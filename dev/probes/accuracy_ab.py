"""Error against an fp64 reference of several kernel library builds, of cuDNN and of SDPA's flash backend, on reduced anchor shapes (few
heads, so the chunked fp64 reference stays cheap), for plain and shifted (+0.5) random inputs: the accuracy side
of an A/B (dev/probes/kernel_ab_time.py is the speed side).

    python dev/probes/accuracy_ab.py ship=.build/ab/lib_ship.so cur=.build/ab/lib_cur.so
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
from vidattn import _ext  # noqa: E402

SHAPES = [  # (name, B, H, Sq, Skv, D)
    ("wan_self_h1", 1, 1, 32760, 32760, 128),
    ("wan_cross_h2", 1, 2, 32760, 512, 128),
    ("seed4k_h2", 1, 2, 4096, 4096, 128),
    ("cogvideox_h1", 1, 1, 17776, 17776, 64),
    ("fa1k_d64", 2, 4, 1024, 1024, 64),
    ("777_d64", 2, 3, 777, 777, 64),
]


def reference(q, k, v, scale):
    """fp64 attention, (B, S, H, D) in and out, chunked over query rows."""
    qb, kb, vb = (t.transpose(1, 2).double() for t in (q, k, v))
    out = torch.empty_like(qb)
    rows = max(1, (1 << 29) // (qb.shape[0] * qb.shape[1] * kb.shape[2] * 8))
    for i in range(0, qb.shape[2], rows):
        s = (qb[:, :, i:i + rows] @ kb.transpose(-1, -2)) * scale
        out[:, :, i:i + rows] = torch.softmax(s, -1) @ vb
    return out.transpose(1, 2)


def err(x, ref):
    d = x.double() - ref
    return (d.norm() / ref.norm()).item(), d.abs().max().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("libs", nargs="+", help="name=path of a kernel library build")
    args = ap.parse_args()
    libs = {n: _ext.open_library(p) for n, _, p in (s.partition("=") for s in args.libs)}
    from torch.nn.attention import SDPBackend, sdpa_kernel
    torch.manual_seed(0)
    print(f"{'shape':14s} {'input':6s} " + " ".join(f"{n + ' relL2/maxabs':>24s}" for n in [*libs, "cudnn", "flash"]))
    for name, b, h, sq, skv, d in SHAPES:
        for shift in (0.0, 0.5):
            q, k, v = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) + shift for s in (sq, skv, skv))
            scale = d ** -0.5
            ref = reference(q, k, v, scale)
            cells = []
            for n, lib in libs.items():
                out = torch.full_like(q, float("nan"))
                _ext.forward(q, k, v, out, None, None, scale, lib=lib)
                cells.append(err(out, ref))
            for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
                with sdpa_kernel(backend):
                    o = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v))).transpose(1, 2)
                cells.append(err(o, ref))
            print(f"{name:14s} {'+0.5' if shift else 'randn':6s} "
                  + " ".join(f"{r:11.3e}/{m:11.3e}" for r, m in cells), flush=True)
            del q, k, v, ref
            torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
