"""Block-sparse attention against what a diffusers user runs today for the same BlockMask: flex_attention compiled
with diffusers' kernel options (the `flex` backend Kandinsky 5's NABLA configs and Kandinsky 6 SR need; uncompiled,
flex materialises every score and does not fit these shapes), with the dense kernel and cuDNN SDPA on the
whole (unmasked) problem beside them for scale. NABLA-like masks: every 64-row block sees a band of neighbouring
64-key blocks (the sliding-tile prior) plus a random share of the rest, at a few densities.

    python3 dev/probes/sparse_bench.py --out $OUT/sparse [--rounds 8] [--target-ms 20]
    python3 dev/probes/sparse_bench.py --dry-run
    python3 dev/probes/sparse_bench.py --once 64 tile3d    # 4 block-sparse calls at the D=64 shape, for a profiler
    python3 dev/probes/sparse_bench.py --once 64 dense     # 4 dense vidattn calls at that shape
    python3 dev/probes/sparse_bench.py --masks full --head-dims 64   # the block-sparse kernel with every block kept
    python3 dev/probes/sparse_bench.py --masks full halves rows checker --head-dims 64   # what a kind of visit costs

Each side's output is checked against flex's before it is timed. Rounds alternate the sides (ABCD then DCBA) and
each round times back-to-back calls in one span; the table gives per-side medians, the effective TFLOPS of the
computed blocks (4 * D * the (query, key) pairs the mask keeps, per call) and each ratio from the same rounds.
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

SHAPES = [
    # name, batch, heads, seq, head dim
    ("K5-Pro-like 32x128 S=24576", 1, 32, 24576, 128),
    ("K6-SR-like 28x64 S=32768", 1, 28, 32768, 64),
]
# (kind, density): "scattered" = a band of BAND blocks either side of the diagonal (the sliding-tile prior) plus random
# far blocks up to the density, the worst case for 128 x 128 tiles; "band" = a band alone as wide as the density
# (neighbouring rows want the same keys: the best case); "tile3d" = NABLA's sliding-tile prior itself, whose density
# its window sets (None here): the 64-token blocks are 8 x 8 patches of a latent frame in NABLA's order (frame, patch
# row, patch column) on a (S / 4096, 8, 8) grid, and each sees the blocks within TILE3D // 2 of it on every axis
MASKS = (("scattered", 0.1), ("scattered", 0.25), ("band", 0.1), ("tile3d", None))
# "full": every block kept, asked for by name (--masks full): the block-sparse kernel on the dense problem, so that its
# time beside "vidattn dense" says what the block-sparse loop costs a key block with no sparsity in the way
FULL = ("full", 1.0)
# Visit probes, also asked for by name: half of the full mask's blocks each, laid out so that every 128-key entry of a
# two-warpgroup tile is one kind of visit (sparse.tables' bits, warpgroup 0 in the low pair): "halves" = the even
# 64-key blocks for every row (both warpgroups the first half, 0b0101); "rows" = the even row blocks see every key and
# the odd ones none (one warpgroup the whole block, the other nothing, 0b0011); "checker" = block (r, c) when r + c is
# even (one warpgroup the first half, the other the second, 0b1001). Their times over "full"'s, visit for visit, say
# what a narrowed or an empty warpgroup-visit saves (dev/NOTES.md, "What a visit costs").
PROBE_BITS = {"halves": 0b0101, "rows": 0b0011, "checker": 0b1001}
PROBES = tuple((kind, 0.5) for kind in PROBE_BITS)
# every row a run can name (dict(ALL_MASKS)[kind]: the density of a kind's last row)
ALL_MASKS = MASKS + (FULL,) + PROBES
MASK_KINDS = tuple(sorted({k for k, _ in ALL_MASKS}))
BAND = 8
TILE3D = 5


def nabla_like(b, h, s, density, device, seed=0, kind="scattered"):
    import torch
    n = (s + 63) // 64
    g = torch.Generator(device=device).manual_seed(seed)
    i = torch.arange(n, device=device)
    if kind == "band":
        half = max(0, int(round((density * n - 1) / 2)))
        return ((i[:, None] - i[None, :]).abs() <= half).expand(b, h, n, n).contiguous()
    if kind == "full":
        return torch.ones(b, h, n, n, dtype=torch.bool, device=device)
    if kind in PROBE_BITS:
        r, c = i[:, None], i[None, :]  # (a row or a column of the mask broadcasts to all of it)
        keep = c % 2 == 0 if kind == "halves" else r % 2 == 0 if kind == "rows" else (r + c) % 2 == 0
        return keep.expand(b, h, n, n).contiguous()
    if kind == "tile3d":
        if n % 64:
            raise ValueError(f"tile3d: {n} blocks are not whole 8 x 8 grids of frames")
        t, y, x = i // 64, (i // 8) % 8, i % 8  # (frame, patch row, patch column) of each block
        near = [(a[:, None] - a[None, :]).abs() <= TILE3D // 2 for a in (t, y, x)]
        return (near[0] & near[1] & near[2]).expand(b, h, n, n).contiguous()
    band = (i[:, None] - i[None, :]).abs() <= BAND
    rest = max(0.0, (density * n - band.sum(-1).float().mean().item()) / n)
    blocks = (torch.rand(b, h, n, n, device=device, generator=g) < rest) | band
    return blocks


def flex_mask(blocks):
    import torch
    from torch.nn.attention.flex_attention import BlockMask
    nb = blocks.sum(-1).to(torch.int32)
    idx = blocks.to(torch.int8).argsort(dim=-1, descending=True, stable=True).to(torch.int32)
    return BlockMask.from_kv_blocks(torch.zeros_like(nb), idx, nb, idx, BLOCK_SIZE=64, mask_mod=None)


def tile_warpgroups(sparse, d: int) -> int:
    """The consumer warpgroups of the block-sparse tile the package builds for head dim d (a package with
    sparse.warpgroups, an experiment's, may tile D=64 with three; before it, two)."""
    return getattr(sparse, "warpgroups", lambda _d: 2)(d)


def sparse_call(sparse, qs, ks, vs, blocks):
    """(tables, the block-sparse op's call) for the head dim of qs, with the tiles the package builds for it
    (tile_warpgroups)."""
    import torch
    wgs = tile_warpgroups(sparse, qs.shape[-1])
    extra = (wgs,) if wgs != 2 else ()  # (the shipped package's tables and op take no warpgroup count)
    tab = sparse.tables(blocks, *extra)
    return tab, lambda: torch.ops.vidattn.sparse_attention(qs, ks, vs, "bshd", None, tab.count, tab.entries, blocks,
                                                           False, *extra)


def span_ms(fn, reps):
    import torch
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / reps


def masks(kinds=None):
    """The (kind, density) rows to run: MASKS, or those of the named kinds (each of MASKS's kinds, or "full")."""
    if not kinds:
        return MASKS
    return tuple(m for m in ALL_MASKS if m[0] in kinds)


def run(args) -> dict:
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.nn.attention.flex_attention import flex_attention
    import vidattn
    from vidattn import sparse

    flex = torch.compile(flex_attention, dynamic=False)
    rows = []
    for name, b, h, s, d in SHAPES:
        if args.head_dims and d not in args.head_dims:
            continue
        for kind, dens in masks(args.masks):
            torch.manual_seed(0)
            # (B, S, H, D) as a diffusers processor holds them: vidattn reads them as they are, flex and SDPA get the
            # (B, H, S, D) views diffusers' backends hand them
            qs, ks, vs = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
            q, k, v = (t.transpose(1, 2) for t in (qs, ks, vs))
            blocks = nabla_like(b, h, s, dens, "cuda", kind=kind)
            bm = flex_mask(blocks)
            kept = sparse.density(blocks, s, s)
            flops_sparse = 4.0 * b * h * d * kept * s * s
            flops_dense = 4.0 * b * h * d * s * s
            tab, sparse_fn = sparse_call(sparse, qs, ks, vs, blocks)
            sides = {
                "vidattn sparse": sparse_fn,
                # tiles of the mask's 64 x 64 blocks: inductor refuses a mask block its tile does not divide (diffusers'
                # flex backend asks for BLOCK_M = 64 only, which torch 2.11 also refused here: its BLOCK_N default)
                "flex compiled": lambda: flex(q, k, v, block_mask=bm, kernel_options={"BLOCK_M": 64, "BLOCK_N": 64}),
                "vidattn dense": lambda: vidattn.attention(qs, ks, vs),
            }

            def cudnn():
                with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                    return F.scaled_dot_product_attention(q, k, v)
            sides["cuDNN dense"] = cudnn
            ref = sides["flex compiled"]().float()
            got = sides["vidattn sparse"]()[0].transpose(1, 2).float()
            err = float((got - ref).abs().max())
            rel = float((got - ref).norm() / ref.norm())
            ok = rel < 2e-2
            spans = {k_: [] for k_ in sides}
            reps = {}
            for k_, fn in sides.items():
                fn()
                torch.cuda.synchronize()
                t = span_ms(fn, 2)
                reps[k_] = max(2, int(args.target_ms / max(t, 1e-3)))
            order = list(sides)
            t0 = time.time()
            for r in range(args.rounds):
                for k_ in (order if r % 2 == 0 else order[::-1]):
                    spans[k_].append(span_ms(sides[k_], reps[k_]))
                if time.time() - t0 > args.budget_s:
                    break
            med = {k_: statistics.median(v_) for k_, v_ in spans.items()}
            ratio = [f / s_ for f, s_ in zip(spans["flex compiled"], spans["vidattn sparse"])]
            row = {"shape": name, "mask": kind, "b": b, "h": h, "s": s, "d": d, "density": kept, "max_abs_vs_flex": err,
                   "rel_l2_vs_flex": rel, "ok": ok, "rounds": len(spans["vidattn sparse"]), "median_ms": med,
                   "spans_ms": spans,
                   "tflops_sparse_pairs": {k_: flops_sparse / med[k_] / 1e9 for k_ in ("vidattn sparse", "flex compiled")},
                   "tflops_dense": {k_: flops_dense / med[k_] / 1e9 for k_ in ("vidattn dense", "cuDNN dense")},
                   "sparse_over_flex_median": statistics.median(ratio),
                   "sparse_over_flex_min": min(ratio),
                   "dense_over_sparse": med["vidattn dense"] / med["vidattn sparse"]}
            rows.append(row)
            print(json.dumps({k_: row[k_] for k_ in ("shape", "mask", "density", "rel_l2_vs_flex", "median_ms",
                                                      "sparse_over_flex_median")}), flush=True)
            del q, k, v, qs, ks, vs, blocks, bm, tab
            torch.cuda.empty_cache()
    return {"rows": rows, "torch": torch.__version__, "gpu": torch.cuda.get_device_name(),
            "vidattn": getattr(vidattn, "__version__", None), "command": " ".join(sys.argv)}


def once(d: int, kind: str, calls: int = 4) -> None:
    """`calls` launches of the block-sparse op (or, kind "dense", of the dense kernel) at the shape of head dim d with
    the ALL_MASKS entry of that kind, and nothing else on the GPU between them: for Nsight Compute's --launch-skip."""
    import torch
    import vidattn
    from vidattn import sparse
    name, b, h, s, _ = next(sh for sh in SHAPES if sh[4] == d)
    torch.manual_seed(0)
    qs, ks, vs = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if kind == "dense":
        call = lambda: vidattn.attention(qs, ks, vs)  # noqa: E731
    else:
        dens = dict(ALL_MASKS)[kind]
        blocks = nabla_like(b, h, s, dens, "cuda", kind=kind)
        _, call = sparse_call(sparse, qs, ks, vs, blocks)
        print(f"{name}, {kind}: kept {sparse.density(blocks, s, s):.3f}", flush=True)
    for _ in range(calls):
        call()
    torch.cuda.synchronize()


def table(res) -> str:
    lines = ["| shape | mask | kept | ok (rel L2 vs flex) | vidattn sparse ms | flex ms | x flex (median, min) | "
             "TFLOPS sparse / flex (kept pairs) | vidattn dense / cuDNN dense TFLOPS |", "|" + "---|" * 8]
    for r in res["rows"]:
        m = r["median_ms"]
        lines.append(f"| {r['shape']} | {r['mask']} | {r['density']:.3f} | {r['ok']} ({r['rel_l2_vs_flex']:.1e}) | "
                     f"{m['vidattn sparse']:.3f} | {m['flex compiled']:.3f} | {r['sparse_over_flex_median']:.2f}x, "
                     f"{r['sparse_over_flex_min']:.2f}x | {r['tflops_sparse_pairs']['vidattn sparse']:.0f} / "
                     f"{r['tflops_sparse_pairs']['flex compiled']:.0f} | {r['tflops_dense']['vidattn dense']:.0f} / "
                     f"{r['tflops_dense']['cuDNN dense']:.0f} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rounds", type=int, default=8)
    ap.add_argument("--target-ms", type=float, default=20.0)
    ap.add_argument("--budget-s", type=float, default=40.0, help="per shape and density, for the rounds")
    ap.add_argument("--head-dims", type=int, nargs="+", help="only the shapes of these head dims")
    ap.add_argument("--masks", nargs="+", choices=MASK_KINDS, help="only the masks of these kinds (default: every "
                    "kind of MASKS; \"full\", every block kept, and the visit probes halves, rows and checker only "
                    "when named)")
    ap.add_argument("--dry-run", action="store_true")
    ap.add_argument("--once", nargs=2, metavar=("HEAD_DIM", "MASK"), help="only a few calls, for a profiler (MASK: a "
                    "kind of MASKS, full, a visit probe, or dense)")
    args = ap.parse_args(argv)
    if args.once:
        d, kind = int(args.once[0]), args.once[1]
        if d not in {sh[4] for sh in SHAPES} or kind not in MASK_KINDS + ("dense",):
            ap.error(f"--once: head dim one of {sorted({sh[4] for sh in SHAPES})}, mask one of "
                     f"{sorted(MASK_KINDS + ('dense',))}")
        once(d, kind)
        return 0
    if args.dry_run:
        print(json.dumps({"shapes": SHAPES, "masks": masks(args.masks), "band": BAND, "rounds": args.rounds}))
        return 0
    res = run(args)
    text = table(res)
    print(text)
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "sparse_bench.json").write_text(json.dumps(res, indent=1))
        (args.out / "sparse_bench.md").write_text(text + "\n")
    return 0 if all(r["ok"] for r in res["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
