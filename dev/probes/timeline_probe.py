#!/usr/bin/env python3
"""Where a tile's time goes: per-phase clock64 stamps from a timeline build of the kernel library.

    VARIANTS="tl||-DVIDATTN_DIAG_TIMELINE=1" bash dev/probes/kernel_ab.sh --build-only
    VIDATTN_LIBRARY=.build/ab/lib_tl.so python3 dev/probes/timeline_probe.py seed4k seed16k wan_cross
    timeout 300 bash dev/probes/timeline_d256.sh $OUT/d256b   # D=256 and D=128 at 1K keys, a subset build
    timeout 300 bash dev/probes/timeline_sparse.sh $OUT/tls   # the block-sparse kernels (sparse:64:tile3d, ...)

Shapes: the anchors' keys, EXTRA_SHAPES (d256_1k, d128_1k, d192_1k, d256_8k, d256_32k), and sparse:D:MASK, the
block-sparse op at dev/probes/sparse_bench.py's shape of head dim D with its MASK (tile3d, band, scattered, full),
which needs a library whose block-sparse kernels are the timed ones (dev/probes/timeline_sparse.sh). The last lines
printed are, per shape, the tile's period cut at every stamp (TILE_ROWS) in microseconds per tile and as a share
of the period, per consumer warpgroup, converted at the SM clock the stamps ran at (clock64 against %globaltimer,
read together by the producer per tile).

A timeline build (csrc/sm90/diag_timeline.cuh) stamps each consumer warpgroup's tile at: entry, Q landed, K_0 landed,
S_0 retired, the third and the last key iterations begun, last V landed, last P V retired, epilogue issued; the producer stamps when it starts to wait for Q's
buffer and when Q's loads are issued. After warm launches this runs the shape `--launches` times back to back (the
rows hold the last launch) and prints, per shape, the median cycles of each phase over the tiles of every CTA (a
CTA's first and last tile left out: pipeline fill and drain), the cycles per key block from S_0 to the last V, the
tile boundary's cost (period - blocks x those cycles), and for tiles of 4+ key blocks the key loop split into S_0's
softmax with the first iteration, one steady iteration, and the last; then what the key iterations wait for (cycles per
iteration in the K/V "full" waits, the ping-pong turn, the turn's issue with the wait for S_j, and the P V wait
after the softmax; the rest of an iteration is the softmax and P's packing) and how long the producer
found the ring full (cycles per key block waiting for a K and a V stage to be released). Cycles are SM cycles
(clock64), whatever the clock. Also printed: the share of key iterations whose K_j or V_{j-1} had not landed when
the consumer came to wait for it (level 1, no clock in the key loop). The cycle sums come from a level-2 build
(`-DVIDATTN_DIAG_TIMELINE=2`), whose clock reads change ptxas' schedule of the key loop (csrc/sm90/diag_timeline.cuh);
a level-1 build prints them as 0.
"""
from __future__ import annotations

import argparse
import ctypes
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import sparse_bench  # noqa: E402 - the block-sparse shapes and masks (no torch at import)
sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))  # bench_kernel's inputs

# csrc/sm90/diag_timeline.cuh
MAX_CTAS, MAX_LOCAL, WGS, EVENTS, PEVENTS = 160, 64, 3, 16, 6
(START, QFULL, K0FULL, S0DONE, DRAIN, LASTPV, EPI, BLOCKS, ITER2, LASTITER, KVWAIT, TURNWAIT, PVWAIT,
 SWAIT, KLATE, VLATE) = range(16)
Q_EMPTY_WAIT, Q_ISSUED, K_EMPTY_WAIT, V_EMPTY_WAIT, CLOCK_PAIR, TIMER_NS = range(6)
# A tile's period cut at every consumer stamp, in the order a tile passes them (tiles of 4+ key blocks): what
# us_table prints, per warpgroup; the rows add up to the period (this tile's start to the next's).
TILE_ROWS = (("q wait", START, QFULL), ("K_0 wait", QFULL, K0FULL), ("S_0 (turn + wgmma)", K0FULL, S0DONE),
             ("softmax_0 + iteration 1", S0DONE, ITER2), ("iterations 2..n-2", ITER2, LASTITER),
             ("iteration n-1", LASTITER, DRAIN), ("last P V (turn + wgmma)", DRAIN, LASTPV),
             ("epilogue (O out, Q/V back)", LASTPV, EPI), ("to the next tile", EPI, None))
# Shapes beyond the anchors (key: name, B, H, Sq, Skv, D): D=256 at 1K keys as issue 26's envelope runs it
# (16 x 8 x 1024: 1024 tiles of 128 rows, 7.76 rounds on 132 SMs), and D=128 at the same batch, heads and tokens.
# D=256 at 8K and 32K as issue 26's envelope runs them, where the kernel runs at 84-88% of the bare wgmma loop at the
# power cap while its K/V traffic (P61) and P V from registers (P66) cost it nothing measurable: what is between the
# wgmmas of a key iteration.
EXTRA_SHAPES = {"d256_1k": ("D256 1K", 16, 8, 1024, 1024, 256), "d128_1k": ("D128 1K (16x8)", 16, 8, 1024, 1024, 128),
                "d192_1k": ("D192 1K", 16, 10, 1024, 1024, 192),
                "d256_8k": ("D256 8K", 2, 8, 8192, 8192, 256), "d256_32k": ("D256 32K", 1, 8, 32768, 32768, 256)}
PHASES = (("q wait", START, QFULL), ("K_0 wait", QFULL, K0FULL), ("S_0 (turn + wgmma)", K0FULL, S0DONE),
          ("blocks 1..n-1", S0DONE, DRAIN), ("last P V", DRAIN, LASTPV), ("epilogue", LASTPV, EPI))


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")


def median_or_none(xs: list[float]) -> float | None:
    return statistics.median(xs) if xs else None


def clock_ghz(prod, grid: int) -> float | None:
    """The SM clock the stamps ran at (GHz): per CTA, its tiles' clock64 span over their %globaltimer span (the
    producer reads both as it takes a tile up), the median over CTAs whose span is at least 20 us (the global timer
    ticks in steps of up to 1 us)."""
    rates = []
    for c in range(min(grid, MAX_CTAS)):
        pairs = [(p[CLOCK_PAIR], p[TIMER_NS]) for p in prod[c] if p[CLOCK_PAIR] and p[TIMER_NS]]
        if len(pairs) >= 2:
            (c0, t0), (c1, t1) = pairs[0], pairs[-1]
            if t1 - t0 >= 20_000 and c1 > c0:
                rates.append((c1 - c0) / (t1 - t0))
    return statistics.median(rates) if rates else None


def tile_rows(cons, grid: int, wgs: int = 2) -> dict:
    """Per warpgroup, the median cycles of each TILE_ROWS row and of the period, over the middle tiles of every CTA
    with 4+ key blocks (the rows need the third and the last iteration's stamps); the median block count."""
    out = {}
    for w in range(wgs):
        rows: dict[str, list[float]] = {name: [] for name, _, _ in TILE_ROWS}
        period, blocks, steady = [], [], []
        for c in range(min(grid, MAX_CTAS)):
            n_local = 0
            while n_local < MAX_LOCAL and cons[c][n_local][0][BLOCKS] > 0:
                n_local += 1
            for l in range(1, n_local - 1):
                r, nxt = cons[c][l][w], cons[c][l + 1][w]
                n = r[BLOCKS]
                if n < 4 or any(r[e] == 0 for e in (START, QFULL, K0FULL, S0DONE, ITER2, LASTITER, DRAIN, LASTPV,
                                                    EPI)) or nxt[START] == 0:
                    continue
                for name, a, b in TILE_ROWS:
                    rows[name].append((nxt[START] if b is None else r[b]) - r[a])
                period.append(nxt[START] - r[START])
                blocks.append(n)
                steady.append((r[LASTITER] - r[ITER2]) / (n - 3))
        if period:
            out[w] = {"tiles": len(period), "period": statistics.median(period), "blocks": statistics.median(blocks),
                      "steady_iteration": statistics.median(steady),
                      "rows": {k: statistics.median(v) for k, v in rows.items()}}
    return out


def us_table(rows: dict, ghz: float | None) -> list[str]:
    """tile_rows' medians as a table: microseconds per tile (at `ghz`; cycles when unknown) and the share of the
    period, per warpgroup; then the boundary, the period less the tile's blocks at the steady iteration's time."""
    if not rows:
        return ["   (no tile of 4+ key blocks in the middle of a CTA's list)"]
    unit, f = ("us", 1e-3 / ghz) if ghz else ("cyc", 1.0)
    ws = sorted(rows)
    out = [f"   {'phase (' + unit + ' per tile, share of the period)':44s}"
           + "".join(f"{'warpgroup ' + str(w):>22s}" for w in ws)]
    for name, _, _ in TILE_ROWS:
        out.append(f"   {name:44s}" + "".join(f"{rows[w]['rows'][name] * f:12.3f} {100 * rows[w]['rows'][name] / rows[w]['period']:7.1f}%  "
                                               for w in ws))
    out.append(f"   {'period':44s}" + "".join(f"{rows[w]['period'] * f:12.3f} {100.0:7.1f}%  " for w in ws))
    out.append(f"   {'one steady iteration (a key block)':44s}"
               + "".join(f"{rows[w]['steady_iteration'] * f:12.3f} {100 * rows[w]['steady_iteration'] / rows[w]['period']:7.1f}%  "
                         for w in ws))
    for w in ws:
        r = rows[w]
        bnd = r["period"] - r["blocks"] * r["steady_iteration"]
        out.append(f"   warpgroup {w}: {r['tiles']} tiles, {r['blocks']:.0f} blocks; boundary (period - blocks x steady "
                   f"iteration) {bnd * f:.3f} {unit} = {100 * bnd / r['period']:.1f}% of the period")
    return out


def fmt_us(cycles: float | None, ghz: float | None) -> str:
    """Cycles as microseconds at `ghz` ("-" for none; cycles when the clock is unknown)."""
    if cycles is None:
        return "-"
    return f"{cycles * 1e-3 / ghz:.3f} us" if ghz else f"{cycles:.0f} cyc"


def analyse(cons, prod, grid: int, wgs: int = 2) -> dict:
    """Per-phase medians (cycles) from the consumer rows cons[cta][local][wg][event] and producer rows."""
    phases: dict[str, list[float]] = {name: [] for name, _, _ in PHASES}
    per_block, period, boundary, blocks_seen = [], [], [], []
    first_iter, steady_iter, last_iter = [], [], []  # tiles of 4+ key blocks: the key loop split by iteration
    # per key iteration 1..n-1: cycles waited for the ring (K/V full), the turn, the turn's issue with S_j's wait,
    # and the P V after the softmax (level-2 builds)
    waits = {"kv_full_wait": [], "turn_wait": [], "pv_wait": [], "s_issue_wait": []}
    prod_waits = {"k_empty_wait": [], "v_empty_wait": []}  # the producer, per key block: the ring full
    late_iters = {"k": 0, "v": 0}  # key iterations whose K_j / V_{j-1} had not landed when waited for
    late_first = {"k": 0, "v": 0}  # the same, of the first iteration (j = 1) alone: the counts' high words
    iters = 0
    q_issue_before_start, q_latency_seen, wg_skew, gap_next = [], [], [], []
    tiles = 0
    for c in range(min(grid, MAX_CTAS)):
        n_local = 0
        while n_local < MAX_LOCAL and cons[c][n_local][0][BLOCKS] > 0:
            n_local += 1
        for l in range(1, n_local - 1):  # not the CTA's first (fill) or last (drain) tile
            for w in range(wgs):
                r, nxt = cons[c][l][w], cons[c][l + 1][w]
                n = r[BLOCKS]
                if any(r[e] == 0 for e in range(7)) or n < 2:
                    continue
                for name, a, b in PHASES:
                    phases[name].append(r[b] - r[a])
                per_block.append((r[DRAIN] - r[S0DONE]) / (n - 1))
                for name, e in (("kv_full_wait", KVWAIT), ("turn_wait", TURNWAIT), ("pv_wait", PVWAIT),
                                ("s_issue_wait", SWAIT)):
                    waits[name].append(r[e] / (n - 1))
                for k2, e in (("k", KLATE), ("v", VLATE)):
                    late_iters[k2] += r[e] & 0xFFFFFFFF
                    late_first[k2] += r[e] >> 32
                iters += n - 1
                if n >= 4 and r[ITER2] and r[LASTITER]:
                    first_iter.append(r[ITER2] - r[S0DONE])
                    steady_iter.append((r[LASTITER] - r[ITER2]) / (n - 3))
                    last_iter.append(r[DRAIN] - r[LASTITER])
                period.append(nxt[START] - r[START])
                gap_next.append(nxt[START] - r[EPI])
                blocks_seen.append(n)
                tiles += 1
            r0, r1 = cons[c][l][0], cons[c][l][1]
            wg_skew.append(r1[START] - r0[START])
            p = prod[c][l]
            if r0[BLOCKS] > 0:
                prod_waits["k_empty_wait"].append(p[K_EMPTY_WAIT] / r0[BLOCKS])
                prod_waits["v_empty_wait"].append(p[V_EMPTY_WAIT] / r0[BLOCKS])
            if p[Q_ISSUED]:
                q_issue_before_start.append(r0[START] - p[Q_ISSUED])
                q_latency_seen.append(r0[QFULL] - p[Q_ISSUED])
    if not tiles:
        return {"tiles": 0}
    ghz = clock_ghz(prod, grid)
    steady = statistics.median(per_block)
    n_med = statistics.median(blocks_seen)
    for pr in period:
        boundary.append(pr - n_med * steady)
    out = {
        "tiles": tiles,
        "blocks_per_tile": n_med,
        "period_cycles": statistics.median(period),
        "steady_cycles_per_block": steady,
        "boundary_cycles": statistics.median(boundary),
        "boundary_share": statistics.median(boundary) / statistics.median(period),
        "phases_median_cycles": {k: statistics.median(v) for k, v in phases.items()},
        "phases_p90_cycles": {k: pct(v, 0.9) for k, v in phases.items()},
        "gap_to_next_tile_cycles": statistics.median(gap_next),
        # S_0's softmax plus the first key iteration; one steady iteration; the last iteration (4+ key blocks).
        "first_iteration_cycles": median_or_none(first_iter),
        "steady_iteration_cycles": median_or_none(steady_iter),
        "last_iteration_cycles": median_or_none(last_iter),
        "wg1_start_minus_wg0_start_cycles": median_or_none(wg_skew),
        "q_issued_before_tile_start_cycles": median_or_none(q_issue_before_start),
        "q_issue_to_q_full_cycles": median_or_none(q_latency_seen),
        # medians, cycles per key iteration (consumers) / per key block (producer)
        "waits_per_iteration_cycles": {k: statistics.median(v) for k, v in waits.items() if v},
        "waits_per_iteration_p90_cycles": {k: pct(v, 0.9) for k, v in waits.items() if v},
        "producer_waits_per_block_cycles": {k: statistics.median(v) for k, v in prod_waits.items() if v},
        # share of key iterations 1..n-1 (all middle tiles) that found K_j / V_{j-1} not yet landed
        "late_share": {k: v / iters for k, v in late_iters.items()},  # iters >= tiles > 0
        # share of the first key iterations (j = 1, one per tile row) that found K_1 / V_0 not yet landed
        "late_share_first_iteration": {k: v / tiles for k, v in late_first.items()},
        "clock_ghz": ghz,  # from the producer's clock64 / %globaltimer pairs; None from a build without them
        "tile_rows": tile_rows(cons, grid, wgs),  # per warpgroup (us_table)
    }
    return out


def sparse_case(key: str):
    """sparse:D:MASK -> (a Shape-like record, the kept fraction, the block-sparse call, its tile's warpgroups): the
    block-sparse op at sparse_bench.py's shape of head dim D with its MASK, the tables built as the package builds
    them for that head dim; MASK "dense": the dense kernel at that shape (warpgroups None: the build's, read after)."""
    import torch
    from types import SimpleNamespace

    import vidattn
    from vidattn import sparse

    _, d, kind = key.split(":")
    name, b, h, s, d = next(sh for sh in sparse_bench.SHAPES if sh[4] == int(d))
    torch.manual_seed(0)
    qs, ks, vs = (torch.randn(b, s, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    if kind == "dense":  # the dense kernel on the whole problem (capi.cu's rows)
        rec = SimpleNamespace(name=f"{name} dense", b=b, h=h, sq=s, skv=s, d=d)
        return rec, 1.0, lambda: vidattn.attention(qs, ks, vs), None
    blocks = sparse_bench.nabla_like(b, h, s, dict(sparse_bench.ALL_MASKS)[kind], "cuda", kind=kind)
    _, call = sparse_bench.sparse_call(sparse, qs, ks, vs, blocks)
    wgs = sparse_bench.tile_warpgroups(sparse, d)
    rec = SimpleNamespace(name=f"{name} block-sparse {kind}", b=b, h=h, sq=s, skv=s, d=d)
    return rec, sparse.density(blocks, s, s), call, wgs


def copy_error(lib, fn) -> str:
    """Why a timeline entry refused: capi.cu's says it (vidattn_sm90_last_error); the block-sparse unit's entry
    returns 1 without a message (its buffers' sizes, or a CUDA error in the copy)."""
    if fn is getattr(lib, "vidattn_sm90_diag_timeline_sparse", None):
        return "the block-sparse timeline copy failed (buffer sizes other than diag_timeline.cuh's, or a CUDA error)"
    return lib.vidattn_sm90_last_error().decode()


def is_sparse_key(key: str) -> bool:
    parts = key.split(":")
    return len(parts) == 3 and parts[0] == "sparse" and parts[1] in ("64", "128") and \
        parts[2] in sparse_bench.MASK_KINDS + ("dense",)


def main(argv: list[str] | None = None):
    import torch

    from bench.anchor_shapes import SHAPES as ANCHORS
    from bench_kernel import make_inputs
    from vidattn import _ext

    from bench.anchor_shapes import Shape

    shapes = {s.key: s for s in ANCHORS}
    shapes.update({k: Shape(*v, key=k) for k, v in EXTRA_SHAPES.items()})
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+",
                    help=f"{', '.join(sorted(shapes))}, or sparse:64|128:tile3d|band|scattered|full|dense")
    ap.add_argument("--launches", type=int, default=8, help="back-to-back launches after the reset (rows: the last)")
    ap.add_argument("--warm-ms", type=float, default=300, help="warm-up time per shape before the reset")
    ap.add_argument("--json", help="write the analysis here")
    args = ap.parse_args(argv)
    unknown = [k for k in args.shapes if k not in shapes and not is_sparse_key(k)]
    if unknown:
        ap.error(f"unknown shapes {unknown}")
    if not torch.cuda.is_available():
        sys.exit("timeline_probe: needs a CUDA GPU (and a timeline build of the kernel library)")
    lib = _ext.load()
    if lib is None or not hasattr(lib, "vidattn_sm90_diag_timeline"):
        sys.exit("timeline_probe: not a timeline build (build csrc/ with -DVIDATTN_DIAG_TIMELINE=1, set VIDATTN_LIBRARY)")
    entries = {}  # the dense kernels' rows (capi.cu) and the block-sparse ones' (capi_sparse.cu): diag_timeline.cuh
    for name in ("vidattn_sm90_diag_timeline", "vidattn_sm90_diag_timeline_sparse"):
        if hasattr(lib, name):
            entries[name] = getattr(lib, name)
            entries[name].argtypes = [ctypes.c_void_p, ctypes.c_uint64, ctypes.c_void_p, ctypes.c_uint64, ctypes.c_int]
            entries[name].restype = ctypes.c_int
    cons_t = ctypes.c_uint64 * (MAX_CTAS * MAX_LOCAL * WGS * EVENTS)
    prod_t = ctypes.c_uint64 * (MAX_CTAS * MAX_LOCAL * PEVENTS)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    results, tables, heads = {}, {}, {}
    for key in args.shapes:
        kept, wgs, fn = 1.0, 2, entries["vidattn_sm90_diag_timeline"]
        if is_sparse_key(key):
            s, kept, run, wgs = sparse_case(key)
            if wgs is not None:
                if "vidattn_sm90_diag_timeline_sparse" not in entries:
                    sys.exit("timeline_probe: the block-sparse kernels carry no stamps in this library "
                             "(dev/probes/timeline_sparse.sh builds one that does)")
                fn = entries["vidattn_sm90_diag_timeline_sparse"]
        else:
            s = shapes[key]
            (q, k, v), = make_inputs(s, 1, torch.Generator(device="cuda").manual_seed(0))
            out = torch.empty_like(q)
            run = lambda: _ext.forward(q, k, v, out, None, None, s.d ** -0.5)  # noqa: E731
        run()
        torch.cuda.synchronize()
        if wgs is None:  # the dense D=64 build this shape ran (64-row warpgroups)
            wgs = max(2, _ext.last_q_box_rows() // 64) if hasattr(_ext, "last_q_box_rows") else 2
        t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        t[0].record(); run(); t[1].record(); torch.cuda.synchronize()
        one_ms = max(t[0].elapsed_time(t[1]), 1e-3)
        for _ in range(int(args.warm_ms / one_ms) + 1):
            run()
        cons, prod = cons_t(), prod_t()
        if fn(None, ctypes.sizeof(cons), None, ctypes.sizeof(prod), 1) != 0:
            sys.exit(f"timeline_probe: {copy_error(lib, fn)}")
        for _ in range(int(args.warm_ms / one_ms) + 1):
            run()  # back to the power state of a busy GPU before the recorded launches
        t[0].record()
        for _ in range(args.launches):
            run()
        t[1].record()
        if fn(cons, ctypes.sizeof(cons), prod, ctypes.sizeof(prod), 1) != 0:
            sys.exit(f"timeline_probe: {copy_error(lib, fn)}")
        ms = t[0].elapsed_time(t[1]) / args.launches
        flat_c = list(cons)
        cons4 = [[[flat_c[((c * MAX_LOCAL + l) * WGS + w) * EVENTS:((c * MAX_LOCAL + l) * WGS + w + 1) * EVENTS]
                   for w in range(WGS)] for l in range(MAX_LOCAL)] for c in range(MAX_CTAS)]
        flat_p = list(prod)
        prod3 = [[flat_p[(c * MAX_LOCAL + l) * PEVENTS:(c * MAX_LOCAL + l + 1) * PEVENTS] for l in range(MAX_LOCAL)]
                 for c in range(MAX_CTAS)]
        r = analyse(cons4, prod3, sms, wgs)
        r["ms_per_launch"] = ms
        r["tflops"] = 4 * s.b * s.h * s.sq * s.skv * s.d * kept / ms / 1e9  # (block-sparse: of the kept pairs)
        r["kept"], r["consumer_warpgroups"] = kept, wgs
        results[key] = r
        built = (_ext.last_block_n(), lib.vidattn_sm90_last_o_path() if hasattr(lib, "vidattn_sm90_last_o_path")
                 else None)
        r["build"] = {"block_n": built[0], "o_path": built[1]}
        print(f"\n== {key} (B{s.b} H{s.h} {s.sq}x{s.skv} D{s.d}): {ms:.3f} ms, {r['tflops']:.0f} TFLOPS, "
              f"{r['tiles']} tile rows; build N={built[0]}, O path {built[1]}; clock "
              + (f"{r['clock_ghz']:.3f} GHz" if r.get("clock_ghz") else "unknown"), flush=True)
        if r["tiles"]:
            print(f"   blocks/tile {r['blocks_per_tile']:.0f}, period {r['period_cycles']:.0f} cyc, steady "
                  f"{r['steady_cycles_per_block']:.0f} cyc/block, boundary {r['boundary_cycles']:.0f} cyc "
                  f"({100 * r['boundary_share']:.1f}% of the period)")
            for name, _, _ in PHASES:
                print(f"   {name:22s} median {r['phases_median_cycles'][name]:8.0f}   p90 "
                      f"{r['phases_p90_cycles'][name]:8.0f}")
            for k2 in ("gap_to_next_tile_cycles", "first_iteration_cycles", "steady_iteration_cycles",
                       "last_iteration_cycles", "wg1_start_minus_wg0_start_cycles",
                       "q_issued_before_tile_start_cycles", "q_issue_to_q_full_cycles"):
                print(f"   {k2:38s} {r[k2]}")
            for k2 in ("waits_per_iteration_cycles", "waits_per_iteration_p90_cycles",
                       "producer_waits_per_block_cycles"):
                print(f"   {k2:38s} " + ", ".join(f"{a} {b:.0f}" for a, b in r[k2].items()))
            print(f"   {'late_share (K_j, V_(j-1) not landed)':38s} "
                  + ", ".join(f"{a} {100 * b:.1f}%" for a, b in r["late_share"].items()))
            print(f"   {'  of the first iteration (K_1, V_0)':38s} "
                  + ", ".join(f"{a} {100 * b:.1f}%" for a, b in r["late_share_first_iteration"].items()))
            ghz = r.get("clock_ghz")
            tables[key] = us_table(r["tile_rows"], ghz) + [
                f"   Q issued (producer, all of it) {fmt_us(r['q_issued_before_tile_start_cycles'], ghz)} before "
                f"warpgroup 0's tile start, landed {fmt_us(r['q_issue_to_q_full_cycles'], ghz)} after its issue"]
            heads[key] = (f"{s.name}, B{s.b} H{s.h} {s.sq}x{s.skv} D{s.d}, N={built[0]} O path {built[1]}: "
                          f"{ms * 1e3:.1f} us a launch, {r['tflops']:.0f} TFLOPS, clock "
                          + (f"{ghz:.3f} GHz" if ghz else "unknown"))
    for key, lines in tables.items():  # last, so that the tables are what a log's tail shows
        print(f"\n== {key}: where a tile's time goes (medians over the middle tiles of every CTA)\n   {heads[key]}")
        print("\n".join(lines))
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))


if __name__ == "__main__":
    main()
