"""Small block-sparse kernel calls for compute-sanitizer (memcheck, racecheck, synccheck), as tests/sanitizer_cases.py
does for the dense kernel: no pytest, exit 0 only if every output is right.

    PYTORCH_NO_CUDA_MEMORY_CACHING=1 compute-sanitizer --tool memcheck --error-exitcode 1 \\
        python3 tests/sanitizer_sparse.py [--small]

Cases: both head dims (D=64 on both of its builds), an odd query length (a partial tile) and an odd key length (a
partial key block listed in the middle of a tile's list), tiles and block rows with no key, grouped K/V, several
tiles per CTA, fp16. The
reference is computed in float64 on the CPU. Exit codes: 0 all right, 1 a wrong result, 2 no usable GPU or the
kernel did not run."""
from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's vidattn (this script's folder is tests/)

REL_L2_MAX = 1e-2


def reference(q, k, v, blocks, scale):
    """fp64 on the CPU, (B, H, S, D); rows without keys 0."""
    q, k, v, blocks = q.double().cpu(), k.double().cpu(), v.double().cpu(), blocks.cpu()
    h = q.shape[1]
    k = k.repeat_interleave(h // k.shape[1], 1)
    v = v.repeat_interleave(h // v.shape[1], 1)
    sq, skv = q.shape[2], k.shape[2]
    mask = blocks.repeat_interleave(64, -2)[..., :sq, :].repeat_interleave(64, -1)[..., :skv]
    s = (q @ k.transpose(-1, -2)) * scale
    s = s.masked_fill(~mask, float("-inf"))
    m = s.amax(-1, keepdim=True)
    empty = torch.isinf(m)
    p = torch.exp(s - torch.where(empty, torch.zeros_like(m), m))
    z = p.sum(-1, keepdim=True)
    return ((p @ v) / torch.where(empty, torch.ones_like(z), z)).masked_fill(empty, 0.0)


CASES = [
    # name, batch, heads, kv heads, sq, skv, d, density, dtype, D=64 warpgroups (vidattn.sparse.D64_WARPGROUPS)
    ("d64 odd", 1, 2, 2, 333, 700, 64, 0.4, torch.bfloat16, 2),
    ("d64 odd 3wg", 1, 2, 2, 333, 700, 64, 0.4, torch.bfloat16, 3),
    ("d128 odd", 1, 2, 2, 333, 700, 128, 0.4, torch.bfloat16, 2),
    ("d128 gqa fp16", 2, 4, 2, 200, 450, 128, 0.5, torch.float16, 2),
    ("d64 many tiles", 1, 8, 8, 1100, 300, 64, 0.3, torch.bfloat16, 2),
    ("d64 many tiles 3wg", 1, 8, 8, 1100, 300, 64, 0.3, torch.bfloat16, 3),
]
SMALL = {"d64 odd", "d64 odd 3wg", "d128 odd"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--small", action="store_true", help="the cheap cases only (racecheck, synccheck)")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("no CUDA GPU")
        return 2
    import vidattn
    from vidattn import sparse
    bad = 0
    for name, b, h, hkv, sq, skv, d, dens, dtype, wgs in CASES:
        if args.small and name not in SMALL:
            continue
        g = torch.Generator().manual_seed(hash(name) % (1 << 31))
        q = torch.randn(b, h, sq, d, generator=g).to(dtype)
        k = torch.randn(b, hkv, skv, d, generator=g).to(dtype)
        v = torch.randn(b, hkv, skv, d, generator=g).to(dtype)
        blocks = torch.rand(b, h, (sq + 63) // 64, (skv + 63) // 64, generator=g) < dens
        blocks[0, 0, 0] = False
        if blocks.shape[2] >= wgs:
            blocks[0, -1, :wgs] = False  # a whole tile without keys (wgs row blocks)
        sparse.D64_WARPGROUPS = wgs
        scale = 1 / math.sqrt(d)
        want = reference(q, k, v, blocks, scale)
        qc, kc, vc, bc = (t.cuda() for t in (q, k, v, blocks))
        if vidattn.explain(qc, kc, vc, layout="bhsd", block_mask=bc) is not None:
            print(f"{name}: the kernel does not run: {vidattn.explain(qc, kc, vc, layout='bhsd', block_mask=bc)}")
            return 2
        out = vidattn.attention(qc, kc, vc, layout="bhsd", block_mask=bc)
        torch.cuda.synchronize()
        got = out.double().cpu()
        rel = float((got - want).norm() / want.norm().clamp_min(1e-30))
        ok = bool(torch.isfinite(got).all()) and rel <= REL_L2_MAX
        print(f"{name}: rel L2 {rel:.2e} {'ok' if ok else 'WRONG'}")
        bad += 0 if ok else 1
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
