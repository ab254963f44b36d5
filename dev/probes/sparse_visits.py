"""What each block-sparse lever could save, counted on the CPU: the warpgroup-visits sparse.tables' two-warpgroup
tiles make on sparse_bench's masks, against the two designs the notes name for D=64 (dev/NOTES.md, "Fortieth
sitting"). No GPU and no timing: counts, priced by the visit probes' measured costs.

- "now": every warpgroup of a tile visits every entry of the tile's list (the union of its two 64-row blocks'
  128-key blocks). A warpgroup with work in the entry pays a visit; one with none pays EMPTY_VISIT of a visit. That is
  the thirty-ninth sitting's "rows" probe: one warpgroup the whole block, the other nothing, 0.862 of "full"'s time,
  so 2 x 0.862 - 1 = 0.724. A first-half-only visit is priced at a whole one ("halves" 0.995 of "full").
- "own lists": each warpgroup visits only the 128-key blocks its own 64 rows need, and an empty visit costs nothing.
- "64-key own": each warpgroup visits only its own 64 x 64 blocks, as flex's 64 x 64 tiles do, each priced at HALF a
  128-key visit. That is a bound: it assumes a visit's price scales with its keys, which the visit probes measured
  only for the exponentials.

The ratios are the most each design could take off the present kernel's visits, with no schedule effects counted.

    python3 dev/probes/sparse_visits.py [--seq 32768] [--heads 2]
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

EMPTY_VISIT = 2 * 0.862 - 1  # the "rows" visit probe (dev/NOTES.md, "Calls P95-P97: outcome", P97 on the landed tree)


def visits(blocks) -> dict:
    """Warpgroup-visit counts for a boolean (B, H, nq, nk) block mask under two-warpgroup tiles: `entries` (the
    tables' union lists), `busy` / `empty` (warpgroup-visits with and without work in them), `now` (busy plus empty
    at EMPTY_VISIT), `own` (each warpgroup's own 128-key blocks) and `own64` (each warpgroup's own 64-key blocks)."""
    import torch
    from vidattn import sparse
    tab = sparse.tables(blocks, 2)
    listed = torch.arange(tab.entries.shape[-2]) < tab.count[..., None]
    bits = tab.entries[..., 1]
    busy = int((((bits & 0b0011) != 0) & listed).sum() + (((bits & 0b1100) != 0) & listed).sum())
    entries = int(tab.count.sum())
    empty = 2 * entries - busy
    b, h, nq, nk = blocks.shape
    pairs = torch.zeros(b, h, nq, 2 * ((nk + 1) // 2), dtype=torch.bool)
    pairs[..., :nk] = blocks
    own = int(pairs.view(b, h, nq, -1, 2).any(-1).sum())
    return {"entries": entries, "busy": busy, "empty": empty, "now": busy + EMPTY_VISIT * empty, "own": own,
            "own64": int(blocks.sum())}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seq", type=int, default=32768, help="tokens (sparse_bench's D=64 shape: 32768)")
    ap.add_argument("--heads", type=int, default=2, help="heads drawn (the scattered masks differ per head)")
    args = ap.parse_args(argv)
    import sparse_bench as sb
    print(f"{'mask':9s} {'density':>7s} {'entries':>8s} {'busy':>8s} {'empty':>8s} {'now':>9s} "
          f"{'own lists':>15s} {'64-key own':>16s}")
    for kind, dens in sb.MASKS + (sb.FULL,):
        v = visits(sb.nabla_like(1, args.heads, args.seq, dens, "cpu", seed=0, kind=kind))
        print(f"{kind:9s} {dens!s:>7s} {v['entries']:8d} {v['busy']:8d} {v['empty']:8d} {v['now']:9.0f} "
              f"{v['own']:8d} {v['now'] / v['own']:5.2f}x {v['own64']:8d} {v['now'] / (0.5 * v['own64']):5.2f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
