"""Host-side simulation of the causal kernel's persistent tile schedule: per-CTA work and makespan for each policy.

A causal tile of Q block m runs n(m) key blocks (flash_fwd.cuh, tile_work: its keys end at its last row's diagonal);
a tile costs n(m) + `overhead` block times (the boundary: Q load, first block's exact softmax, epilogue). The
persistent grid has one CTA per SM. Policies:

- `static_rr`: plain round robin, CTA c runs tiles c, c + G, ... (the non-causal order, heaviest first per head).
- `static_snake`: the causal build up to now: heaviest first within each head, odd rounds in reverse CTA order.
- `dynamic`: a tile counter; each CTA takes the next tile of the same list (head-major, heaviest first within each
  head) when it is free; a CTA takes at most `cap` tiles (its redo marks are one bit per tile). This is list
  scheduling: the last tiles handed out are the last head's lightest, so the CTAs finish within about one light
  tile of each other.
- `dynamic_grouped`: the shipped causal schedule (flash_fwd.cuh, tile_coord and next_causal_tile; capi.cu picks the
  group): the same counter over a list ordered in groups of `group_heads` (batch, head) pairs whose K/V fits the L2
  budget, heaviest Q block first across the group. Head after head (`dynamic`) hands out each head's heaviest tiles
  late in the launch too, up to 6% over the mean at 8K; sorting across a group puts the light tiles last.
- `dynamic_short_first`: the grouped list with the short group (where the groups of the budget do not divide the
  pairs) first instead of last (capi.cu, VIDATTN_CAUSAL_GROUPING 1): the launch ends on a full group's light tiles.
  A short last group is the dynamic schedule's 6K D=128 loss (2 x 16 heads in groups of 5: 1.097 last, 1.011 first).
- `static_pairs`: block m paired with block M - 1 - m (equal work when Sq = Skv), pairs dealt round robin.

Makespan / mean is what a launch loses to imbalance (1.00: none). At 32K keys with 16 heads on 132 CTAs the snake
gives 1.51x: 256 Q blocks per head, and the snake's class pairing fails there.

    python3 dev/probes/causal_schedule_sim.py                 # the bench and video shapes, every policy
    python3 dev/probes/causal_schedule_sim.py --shape 1,16,32768,128 --overhead 1
"""
from __future__ import annotations

import argparse
import heapq
import math

SMS = 132
REDO_CAP = 32 * 64  # tiles a CTA can mark for a redo (tile_config.cuh, kRedoWords words of 32 bits)


def build_head_dim(d: int) -> int:
    """The causal build a head dim runs on (capi.cu: 72..128 on D=128's, 136..192 on D=192's, 200..256 on D=256's)."""
    return 64 if d <= 64 else 128 if d <= 128 else 192 if d <= 192 else 256


def block_sizes(d: int) -> tuple[int, int]:
    """(kBlockM, kBlockN) of the bf16 causal build of head dim d (capi.cu: D<=64 on three warpgroups, D=128 on N=128,
    D=192 on its narrow width, tile_config.cuh's VIDATTN_BLOCK_N_D192_NARROW 96, D=256 on the dense routed width,
    VIDATTN_BLOCK_N_D256 80, with O through the V stages: VIDATTN_CAUSAL_D256_OINV; fp16 D=256 runs N=64)."""
    return {64: (192, 128), 128: (128, 128), 192: (128, 96), 256: (128, 80)}[build_head_dim(d)]


def tile_blocks(m: int, bm: int, bn: int, sq: int, skv: int, bottom_right: bool = False) -> int:
    """Key blocks of Q block m: tile_work's kv_end = min(kv_len, (m + 1) bm + shift), in blocks of bn."""
    shift = skv - sq if bottom_right else 0
    kv_end = max(0, min(skv, (m + 1) * bm + shift))
    return -(-kv_end // bn)


def tile_list(b: int, h: int, sq: int, skv: int, d: int, bottom_right: bool = False) -> list[int]:
    """Key blocks of every tile in the kernel's list order: batch, head, then Q blocks last first (tile_coord)."""
    bm, bn = block_sizes(d)
    mb = -(-sq // bm)
    per_head = [tile_blocks(mb - 1 - i, bm, bn, sq, skv, bottom_right) for i in range(mb)]
    return per_head * (b * h)


GROUP_BYTES = 16 << 20  # capi.cu, kCausalGroupBytes


def group_heads(b: int, h: int, skv: int, d: int) -> int:
    """capi.cu's causal_group: (batch, head) pairs whose K/V (bf16, the build's head dim) fit GROUP_BYTES."""
    build_d = build_head_dim(d)
    return max(1, min(b * h, GROUP_BYTES // max(1, skv * build_d * 4)))


def first_group(pairs: int, group: int, grouping: int) -> int:
    """capi.cu's causal_first_group: the short group's size when it opens the list (grouping 1), else 0."""
    return pairs % group if grouping == 1 else 0


def tile_coord(t: int, mb: int, heads: int, pairs: int, group: int, first: int = 0) -> tuple[int, int, int]:
    """flash_fwd.cuh's tile_coord<true>: list index -> (m_block, head, batch); `first` pairs form the list's opening
    group (causal_first_group), then groups of `group`, the last possibly short."""
    base, hg, r = 0, first, t
    if r >= first * mb:
        r -= first * mb
        g, r = divmod(r, group * mb)
        base = first + g * group
        hg = min(group, pairs - base)
    i, j = divmod(r, hg)
    hb = base + j
    return mb - 1 - i, hb % heads, hb // heads


def grouped_list(b: int, h: int, sq: int, skv: int, d: int, group: int, bottom_right: bool = False,
                 first: int = 0) -> list[int]:
    """Key blocks of every tile in the order tile_coord walks with groups of `group` (batch, head) pairs (after an
    opening group of `first`)."""
    bm, bn = block_sizes(d)
    mb = -(-sq // bm)
    return [tile_blocks(tile_coord(t, mb, h, b * h, group, first)[0], bm, bn, sq, skv, bottom_right)
            for t in range(mb * b * h)]


def sized_list(b: int, h: int, sq: int, skv: int, d: int, sizes: list[int], bottom_right: bool = False) -> list[int]:
    """Key blocks of every tile for groups of the given sizes in list order (each heaviest block first across it):
    the grouping alternatives the kernel does not build, for the survey."""
    bm, bn = block_sizes(d)
    mb = -(-sq // bm)
    out = []
    for size in sizes:
        for i in range(mb):
            out += [tile_blocks(mb - 1 - i, bm, bn, sq, skv, bottom_right)] * size
    return out


def group_sizes(pairs: int, group: int, rule: str) -> list[int]:
    """Group sizes in list order under a rule: `last` (shipped: the budget's groups, the remainder last), `first`
    (the remainder first), `divisor` (the largest divisor of the pairs within the budget), `even` (as many groups as
    the budget needs, sizes within one of each other, larger first), `even_asc` (the same, smaller first)."""
    full, rem = divmod(pairs, group)
    if rule == "last":
        return [group] * full + ([rem] if rem else [])
    if rule == "first":
        return ([rem] if rem else []) + [group] * full
    if rule == "divisor":
        g = max(x for x in range(1, group + 1) if pairs % x == 0)
        return [g] * (pairs // g)
    n = -(-pairs // group)
    q, r = divmod(pairs, n)
    sizes = [q + 1] * r + [q] * (n - r)
    return sizes if rule == "even" else sorted(sizes)


SURVEY_RULES = ("last", "first", "divisor", "even", "even_asc")


def survey(overhead: float = 0.5, g: int = SMS) -> dict:
    """Busiest CTA / mean over the shapes whose budget groups leave a remainder (D=64 and 128, 1K-32K, 7-256 pairs):
    geometric mean and worst per grouping rule and for the static order, and the shapes where `first` is worse than
    `last`."""
    shapes = [(b, h, s, d) for d in (64, 128) for s in (1024, 2048, 3072, 4096, 6144, 8192, 12288, 16384, 32768)
              for b, h in ((1, 12), (1, 13), (1, 16), (1, 24), (1, 32), (2, 16), (2, 24), (4, 16), (2, 32), (1, 40),
                           (3, 7), (2, 20), (1, 30), (8, 16), (8, 32), (4, 32))
              if (b * h) % group_heads(b, h, s, d)]
    ratios = {rule: [] for rule in ("static",) + SURVEY_RULES}
    for b, h, s, d in shapes:
        grid = min(g, -(-s // block_sizes(d)[0]) * b * h)
        ratios["static"].append(static_snake(tile_list(b, h, s, s, d), grid, overhead)["ratio"])
        for rule in SURVEY_RULES:
            work = sized_list(b, h, s, s, d, group_sizes(b * h, group_heads(b, h, s, d), rule))
            ratios[rule].append(dynamic(work, grid, overhead)["ratio"])
    stats = {rule: {"geomean": math.exp(sum(map(math.log, xs)) / len(xs)), "worst": max(xs)}
             for rule, xs in ratios.items()}
    worse = [(shape, a, c) for shape, a, c in zip(shapes, ratios["last"], ratios["first"]) if c > a + 1e-9]
    return {"shapes": len(shapes), "stats": stats, "first_worse_than_last": worse}


def _finish(loads: list[float]) -> dict:
    mean = sum(loads) / len(loads)
    return {"makespan": max(loads), "mean": mean, "ratio": max(loads) / mean if mean else 1.0}


def static_rr(work: list[int], g: int, overhead: float) -> dict:
    loads = [0.0] * g
    for t, n in enumerate(work):
        loads[t % g] += n + overhead
    return _finish(loads)


def static_snake(work: list[int], g: int, overhead: float) -> dict:
    loads = [0.0] * g
    for t, n in enumerate(work):
        r, c = divmod(t, g)
        loads[g - 1 - c if r & 1 else c] += n + overhead
    return _finish(loads)


def dynamic(work: list[int], g: int, overhead: float, cap: int = REDO_CAP, assign: list | None = None) -> dict:
    """List scheduling: CTA c starts on tile c, then each ticket goes to the CTA free first (ties: lower index); a
    CTA holding `cap` tiles takes no more (the kernel's producer stops fetching). `assign`, if given, receives the
    CTA of every tile."""
    g = min(g, len(work))
    if assign is not None:
        assign[:] = list(range(g)) + [None] * (len(work) - g)
    loads = [0.0] * g
    taken = [0] * g
    heap = []
    for c in range(g):
        loads[c] = work[c] + overhead
        taken[c] = 1
        heapq.heappush(heap, (loads[c], c))
    for t in range(g, len(work)):
        while True:
            _, c = heapq.heappop(heap)
            if taken[c] < cap:
                break
        loads[c] += work[t] + overhead
        taken[c] += 1
        if assign is not None:
            assign[t] = c
        heapq.heappush(heap, (loads[c], c))
    return _finish(loads)


def static_pairs(work: list[int], g: int, overhead: float, mb: int) -> dict:
    """Pairs (m, mb - 1 - m) of each head as units, dealt round robin (an odd block count leaves a single)."""
    units = []
    for base in range(0, len(work), mb):
        head = work[base:base + mb]
        for i in range(mb // 2):
            units.append(head[i] + head[mb - 1 - i] + 2 * overhead)
        if mb % 2:
            units.append(head[mb // 2] + overhead)
    loads = [0.0] * g
    for u, w in enumerate(units):
        loads[u % g] += w
    return _finish(loads)


POLICIES = ("static_rr", "static_snake", "dynamic", "dynamic_grouped", "dynamic_short_first", "static_pairs")


def simulate(b: int, h: int, sq: int, d: int, skv: int | None = None, g: int = SMS, overhead: float = 0.5,
             bottom_right: bool = False) -> dict[str, dict]:
    skv = sq if skv is None else skv
    work = tile_list(b, h, sq, skv, d, bottom_right)
    g_launch = min(g, len(work))
    bm, _ = block_sizes(d)
    mb = -(-sq // bm)
    group = group_heads(b, h, skv, d)
    return {
        "static_rr": static_rr(work, g_launch, overhead),
        "static_snake": static_snake(work, g_launch, overhead),
        "dynamic": dynamic(work, g_launch, overhead),
        "dynamic_grouped": dynamic(grouped_list(b, h, sq, skv, d, group, bottom_right), g_launch, overhead),
        "dynamic_short_first": dynamic(grouped_list(b, h, sq, skv, d, group, bottom_right,
                                                    first_group(b * h, group, 1)), g_launch, overhead),
        "static_pairs": static_pairs(work, g_launch, overhead, mb),
    }


# (name, batch, heads, tokens, head dim): scripts/bench_kernel.py --shapes causal, and video-model shapes with a
# causal pathway or the lengths the families run at.
SHAPES = [
    ("causal 8K D128 (2x16)", 2, 16, 8192, 128),
    ("causal 32K D128 (1x16)", 1, 16, 32768, 128),
    ("causal 8K D64 (2x32)", 2, 32, 8192, 64),
    ("causal 32K D64 (1x32)", 1, 32, 32768, 64),
    ("causal 16K D128 (1x16)", 1, 16, 16384, 128),
    ("causal 1K D128 (4x16)", 4, 16, 1024, 128),
    ("Wan 480p 32760 D128 (1x12)", 1, 12, 32760, 128),
    ("Wan 720p 75600 D128 (1x40)", 1, 40, 75600, 128),
    ("Cosmos 32 heads 8K D128 (1x32)", 1, 32, 8192, 128),
    ("LTX 24K D64 (1x32)", 1, 32, 24576, 64),
    # the causal A/B's lengths between the crossover sweep's and the bench's (dev/probes/causal_sched_ab.py)
    ("causal 6K D128 (2x16)", 2, 16, 6144, 128),
    ("causal 6K D64 (2x16)", 2, 16, 6144, 64),
    ("causal 3K D128 (2x16)", 2, 16, 3072, 128),
    ("causal 12K D128 (1x16)", 1, 16, 12288, 128),
    ("causal 4K D128 (1x12)", 1, 12, 4096, 128),
    ("causal 2K D128 (3x7)", 3, 7, 2048, 128),
]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--shape", help="B,H,S,D (default: the bench and video shapes)")
    ap.add_argument("--overhead", type=float, default=0.5, help="per-tile boundary cost, in key-block times")
    ap.add_argument("--sms", type=int, default=SMS)
    ap.add_argument("--survey", action="store_true",
                    help="the grouping rules over shapes whose groups leave a remainder")
    args = ap.parse_args()
    if args.survey:
        r = survey(args.overhead, args.sms)
        print(f"busiest CTA / mean over {r['shapes']} shapes with a remainder: geometric mean, worst")
        for rule, st in r["stats"].items():
            print(f"  {rule:10s} {st['geomean']:.3f} {st['worst']:.3f}")
        print("first worse than last at: " + ", ".join(f"{b}x{h}x{s} D{d} ({c:.3f} vs {a:.3f})"
                                                         for (b, h, s, d), a, c in r["first_worse_than_last"]))
        return
    shapes = SHAPES
    if args.shape:
        b, h, s, d = (int(x) for x in args.shape.split(","))
        shapes = [(f"{b}x{h}x{s} D{d}", b, h, s, d)]
    print(f"makespan / mean per CTA (overhead {args.overhead} block per tile, {args.sms} CTAs)")
    print(f"{'shape':34s}{'group':>6s}" + "".join(f"{p:>20s}" for p in POLICIES))
    for name, b, h, s, d in shapes:
        r = simulate(b, h, s, d, g=args.sms, overhead=args.overhead)
        print(f"{name:34s}{group_heads(b, h, s, d):6d}" + "".join(f"{r[p]['ratio']:20.3f}" for p in POLICIES))


if __name__ == "__main__":
    main()
