"""Device A/B of the causal tile schedule in one process: the dynamic schedule (the default, with the workspace)
against the static order (the same library called without a workspace: capi.cu then keeps every CTA's tiles fixed
by its index), interleaved round by round on the same inputs. Prints TFLOPS of the kept pairs (4 B H D S(S+1)/2) per
policy, the ratio, and the simulated makespan / mean of each (dev/probes/causal_schedule_sim.py), and checks the
outputs are equal bit for bit (a tile's arithmetic does not depend on the CTA that runs it). Writes a JSON with --out
(and the table printed last beside it, FILE_table.txt).

Timing (dev/probes/hd_variants_ab.py's timer): back-to-back calls between one CUDA event pair, rotating over input
sets that together exceed twice the L2, the GPU kept busy before the first event so that the host's dispatch stays
off the timed span. (One call per event pair after an L2 flush, as this probe timed until then, put the dispatch
inside the span: ~30% low at 1K in the head-dim A/B, and a cost both policies pay, so the ratios were pulled toward
1.) Each round times every policy once, in an order rotated from round to round; a policy's switches (workspace,
thresholds, grouping) hold for its whole span.

    python3 dev/probes/causal_sched_ab.py --rounds 7 --out $OUT/causal_sched_ab.json

--sweep crossover times the short problems where the two meet (1K, 2K, 4K tokens at batch x heads that fill the
card, D=64 and D=128, and D=128 at 6K between the two lengths where it crossed): "dynamic" is then forced at every
length (vidattn_sm90_set_causal_dynamic_min_sq(0)), and a third policy, "auto", is the library's default routing
(static below VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64 / _D128 query rows, one threshold per causal build). The last lines
give, per head dim, the shortest length from which dynamic is at least as fast as static at every longer length
measured (`crossover`, on the median of the per-round ratios): the threshold capi.cu should ship for that build.

--sweep wide is the crossover sweep for the D=192 and D=256 causal builds (1K-8K), whose thresholds were D=128's
2048 until measured (VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D192 / _D256), with short_first beside dynamic: D=192's head groups
leave remainders at these shapes, where the short group last loses to static and first does not (call P18).
Every sweep but confirm also tables auto / static, the library's defaults as they ship.

--sweep grouping adds a fourth policy, "short_first": forced dynamic with the short head group (where the groups of
the L2 budget do not divide batch x heads) opening the list instead of closing it (vidattn_sm90_set_causal_grouping
(1)); "dynamic" keeps the short group last. D=64 and D=128 from 1K to 8K and at 32K, plus shapes whose groups leave
a remainder (the only ones where the two orders differ; the others are the control). The verdict then names the
crossover of each grouping.

--sweep confirm times only the library's defaults ("auto") against static, at the lengths the grouping sweep moved
the defaults over (D=128 at 4K, 6K, 8K, D=64 at 2K and 6K), and checks that auto ran what the defaults say.

    python3 dev/probes/causal_sched_ab.py --sweep crossover --rounds 5 --out $OUT/causal/crossover.json
    python3 dev/probes/causal_sched_ab.py --sweep wide --rounds 7 --out $OUT/causal/wide.json
    python3 dev/probes/causal_sched_ab.py --sweep grouping --rounds 5 --out $OUT/causal/grouping.json
    python3 dev/probes/causal_sched_ab.py --sweep confirm --rounds 7 --out $OUT/causal/confirm.json
    python3 dev/probes/causal_sched_ab.py --replay bench/results/h200_2026-12-02_pm/call_g/causal/crossover.json
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import statistics
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402



def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"dev/probes/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


sim = _load("causal_schedule_sim")
timer = _load("hd_variants_ab")  # the back-to-back timer: CudaSpan, time_back_to_back, n_sets, calls_for

SHAPES = [(2, 16, 8192, 128), (1, 16, 32768, 128), (2, 32, 8192, 64), (1, 32, 32768, 64), (1, 16, 16384, 128),
          (4, 16, 1024, 128), (1, 12, 32760, 128)]
# Short problems, batch x heads chosen so that each length has several tiles per CTA (132 SMs; D=128 tiles are 128
# rows, D=64 192): 1K D=128 4x16 is the shape that measured 0.85-0.98x.
# D=128 has a second 4K shape and a 6K one: its 4K point read 0.83-1.05 from round to round, and its threshold sits
# between 4K and 8K.
CROSSOVER = [(4, 16, 1024, 128), (8, 16, 1024, 128), (8, 32, 1024, 64), (4, 16, 2048, 128), (4, 32, 2048, 64),
             (2, 16, 4096, 128), (4, 16, 4096, 128), (2, 32, 4096, 64), (2, 16, 6144, 128), (1, 16, 8192, 128),
             (1, 32, 8192, 64)]
# Shapes whose head groups leave a remainder first (group sizes from capi.cu's 16 MB budget; the only shapes where
# short_first and dynamic differ): 2x16x6K D=128 in groups of 5 (the measured 0.931), D=64 in groups of 10, 1x12x4K
# D=128 in groups of 8, 3x7x2K D=128 in groups of 16; then short problems whose pair count is not a multiple of 32,
# where the static order leaves 1.3-1.5 of the mean below the length thresholds (capi.cu, the static-imbalance rule);
# then D=64 and D=128 at 1K-8K and 32K at the crossover sweep's batch x heads (their groups divide the pairs: the
# control, where short_first is the same order as dynamic). A sweep cut short by its timeout keeps the rows done.
GROUPING = [(2, 16, 6144, 128), (2, 16, 6144, 64), (1, 12, 4096, 128), (3, 7, 2048, 128), (1, 16, 4096, 128),
            (1, 24, 2048, 128), (2, 16, 1024, 64), (4, 16, 1024, 128), (8, 16, 1024, 128), (8, 32, 1024, 64),
            (4, 16, 2048, 128), (4, 32, 2048, 64), (2, 16, 4096, 128), (2, 32, 4096, 64), (1, 16, 8192, 128),
            (1, 32, 8192, 64), (1, 16, 32768, 128), (1, 32, 32768, 64)]
# The defaults' confirmation (grouping 1, D=128 dynamic from 4096 rows): the 4K, 6K and 8K D=128 shapes that the
# grouping sweep found ahead with the short group first (1x12x4K the one with a remainder at 4K), and D=64 at 2K and
# at 6K, where the short group last lost to static (0.884).
CONFIRM = [(2, 16, 4096, 128), (1, 12, 4096, 128), (2, 16, 6144, 128), (2, 16, 8192, 128), (4, 32, 2048, 64),
           (2, 16, 6144, 64)]
# D=192 and D=256 (issue 26's causal builds: D=192 N=96; D=256 N=64 when first swept in call P18, bf16 N=80 since):
# they took D=128's threshold (2048 rows) unmeasured.
# 1K-8K at batch x heads that give every length at least ~8 tiles per CTA (tiles of 128 rows), 3K between the two
# lengths where D=128 crossed.
WIDE = [(8, 16, 1024, 192), (8, 16, 1024, 256), (4, 16, 2048, 192), (4, 16, 2048, 256), (3, 16, 3072, 192),
        (3, 16, 3072, 256), (2, 16, 4096, 192), (2, 16, 4096, 256), (1, 16, 8192, 192), (1, 16, 8192, 256)]
# The causal builds a head dim runs on (capi.cu, causal_build_slot): one threshold each.
BUILD_HEAD_DIMS = (64, 128, 192, 256)


def crossover(points: list[tuple[int, float]], tol: float = 0.0) -> int | None:
    """The shortest length S such that dynamic / static >= 1 - tol at S and at every longer length measured
    (points: (seqlen, speedup) of one head dim); None if dynamic loses at the longest length."""
    best = None
    for s, x in sorted(points, reverse=True):
        if x < 1.0 - tol:
            break
        best = s
    return best


def paired_speedup(row: dict, policy: str = "dynamic") -> float:
    """The median of the per-round static / `policy` ratios. The clocks drift between rounds (2x16x4K D=128: both
    policies 203 -> 282 us and back within one sweep) and each round times the policies back to back, so the ratio
    within a round cancels the drift that the ratio of the two medians keeps. Rows of older sweeps have only the
    ratio of medians (and only "dynamic")."""
    key = "speedup_rounds" if policy == "dynamic" else f"speedup_rounds_{policy}"
    xs = row.get(key)
    if xs:
        return statistics.median(xs)
    if policy == "dynamic":
        return row["speedup"]
    raise KeyError(f"row {row.get('shape')} has no {key}")


def per_round_ratios(ms: dict[str, list[float]], num: str, den: str) -> list[float]:
    """ms[num][r] / ms[den][r] for each round r (times: a ratio above 1 means `den` is faster)."""
    return [a / b for a, b in zip(ms[num], ms[den])]


def recommended_min_sq(rows: list[dict], tol: float = 0.0, policy: str = "dynamic") -> dict[int, int | None]:
    """The threshold per head dim (capi.cu has one per causal build): the crossover of that head dim's median
    paired speedup of `policy` over static, over the batch x heads measured at each length; None where it loses at
    the longest."""
    by_d: dict[int, dict[int, list[float]]] = {}
    for r in rows:
        if policy != "dynamic" and f"speedup_rounds_{policy}" not in r:
            continue
        by_d.setdefault(r["d"], {}).setdefault(r["s"], []).append(paired_speedup(r, policy))
    return {d: crossover([(s, statistics.median(xs)) for s, xs in per.items()], tol)
            for d, per in sorted(by_d.items())}


def library_min_sq(lib) -> dict[int, int]:
    """The library's default threshold per causal build (libraries with one threshold give it for all)."""
    if hasattr(lib, "vidattn_sm90_causal_dynamic_min_sq_for"):
        return {d: lib.vidattn_sm90_causal_dynamic_min_sq_for(d) for d in BUILD_HEAD_DIMS}
    return {d: lib.vidattn_sm90_causal_dynamic_min_sq() for d in BUILD_HEAD_DIMS}


def verdict(picks: dict[int, int | None], library: dict[int, int]) -> list[str]:
    """One line per head dim: the measured crossover against the library's default."""
    lines = []
    for d, pick in picks.items():
        lib_d = library.get(d)
        note = "" if lib_d is None or pick == lib_d else "  <- differs: ship the measured value"
        where = f"min_sq = {pick}" if pick is not None else "none (dynamic loses at the longest length)"
        lines.append(f"crossover D={d} (dynamic >= static from here on): {where}; library {lib_d}{note}")
    return lines


def summary(rows: list[dict], library: dict[int, int], rounds: int) -> list[str]:
    """The table of paired speedups by head dim and length, then the verdict per head dim (and, where the sweep
    timed the short-first grouping, the same for it)."""
    lengths = sorted({r["s"] for r in rows})
    policies = ["dynamic"] + (["short_first"] if any("speedup_rounds_short_first" in r for r in rows) else [])
    # auto (the library's defaults: static below the thresholds, else dynamic in the library's grouping) has a table
    # but no verdict: it is what ships, not a candidate
    shown = policies + (["auto"] if any("speedup_rounds_auto" in r for r in rows) else [])
    lines = []
    for policy in shown:
        lines += [f"{policy} / static by length (median of the per-round ratios; median over the batch x heads "
                  f"measured), {rounds} rounds:", "  D   " + "".join(f"{s:>9d}" for s in lengths)]
        for d in sorted({r["d"] for r in rows}):
            cells = []
            for s in lengths:
                xs = [paired_speedup(r, policy) for r in rows if r["d"] == d and r["s"] == s
                      and (policy == "dynamic" or f"speedup_rounds_{policy}" in r)]
                cells.append(f"{statistics.median(xs):9.3f}" if xs else f"{'-':>9s}")
            lines.append(f"  {d:<4d}" + "".join(cells))
    lines += verdict(recommended_min_sq(rows), library)
    if "short_first" in policies:
        lines += [x.replace("crossover", "crossover short_first", 1)
                  for x in verdict(recommended_min_sq(rows, policy="short_first"), library)]
        lines += imbalance_rule_lines(rows, library)
    return lines


IMBALANCE_RULE = 1.10  # the permille rule's value the NOTES predict for (vidattn_sm90_set_causal_static_imbalance_max)


def confirm_lines(rows: list[dict], library: dict[int, int], grouping: int) -> list[str]:
    """auto (the library's defaults) / static per shape, what auto ran, and one verdict line."""
    lines = [f"auto / static (defaults: grouping {grouping}, dynamic from "
             + ", ".join(f"{n} rows at D={d}" for d, n in library.items()) + "), median of the per-round ratios:"]
    for r in rows:
        xs = r["speedup_rounds_auto"]
        ran = r["ran"]["auto"]
        lines.append(f"  {r['shape']:16s} static {r['tflops']['static']:6.1f}  auto {r['tflops']['auto']:6.1f} TFLOPS  "
                     f"x{paired_speedup(r, 'auto'):.3f} [{min(xs):.3f}-{max(xs):.3f}]  auto ran dynamic "
                     f"{ran.get('dynamic')} first group {ran.get('first_group')}"
                     f"{'' if r.get('ran_ok', True) else ' NOT-RUN-AS-NAMED'}{' HOST-BOUND' if r['host_bound'] else ''}"
                     f"{'' if r['equal'] else ' NOT-EQUAL'}")
    losing = [r["shape"] for r in rows if r["ran"]["auto"].get("dynamic") and paired_speedup(r, "auto") < 1.0]
    bad = [r["shape"] for r in rows if not (r.get("ran_ok", True) and r["equal"])]

    def yes_no(names):
        return "no (" + ", ".join(names) + ")" if names else "yes"
    lines.append(f"confirm: auto at or above static wherever it runs dynamic: {yes_no(losing)}; ran as the defaults "
                 f"say and the same bits: {yes_no(bad)}")
    return lines


def imbalance_rule_lines(rows: list[dict], library: dict[int, int]) -> list[str]:
    """What the static-imbalance rule would do below the length thresholds: the shapes whose simulated static order
    exceeds IMBALANCE_RULE go dynamic (short group first); their measured short_first / static, and the rest's
    dynamic / static that the rule leaves alone."""
    below = [r for r in rows if r["s"] < library.get(r["d"], 0) and "speedup_rounds_short_first" in r]
    routed = [r for r in below if r["sim_ratio"]["static"] > IMBALANCE_RULE]
    if not below:
        return []
    cells = ", ".join(f"{r['shape']} {paired_speedup(r, 'short_first'):.3f}" for r in routed) or "none"
    return [f"static-imbalance rule at {IMBALANCE_RULE:.2f} routes {len(routed)} of {len(below)} shapes below the "
            f"thresholds; short_first / static there: {cells}"]


SHAPE_HEAD = ["shape", "group", "first", "static", "dynamic", "short_first", "auto", "dyn/st", "sf/st", "sf/dyn",
              "sim st", "sim dyn", "sim sf", "equal"]


def shape_table(rows: list[dict]) -> str:
    """One line per shape: median TFLOPS per policy, the per-round-median ratios, the simulator's makespan / mean of
    each order, and whether every policy's output was the same bits."""
    lines = [" | ".join(SHAPE_HEAD)]
    for r in rows:
        t = r.get("tflops", {})
        sr = r["sim_ratio"]

        def cell(x):
            return f"{x:.0f}" if x else "-"
        ratios = [f"{paired_speedup(r):.3f}"]
        ratios.append(f"{paired_speedup(r, 'short_first'):.3f}" if "speedup_rounds_short_first" in r else "-")
        sf_dyn = r.get("short_first_over_dynamic_rounds")
        ratios.append(f"{statistics.median(sf_dyn):.3f}" if sf_dyn else "-")
        lines.append(" | ".join([r["shape"], str(r["group"]), str(r.get("first_group", 0))]
                                + [cell(t.get(p)) for p in ("static", "dynamic", "short_first", "auto")] + ratios
                                + [f"{sr.get(p, 0):.3f}" for p in ("static", "dynamic", "short_first")]
                                + [str(r["equal"]) + ("" if r.get("ran_ok", True) else " NOT-RUN-AS-NAMED")
                                   + (" HOST-BOUND" if r.get("host_bound") else "")]))
    return "\n".join(lines)


def replay(path: str) -> None:
    """The summary of a saved sweep (--out), without a GPU: the verdict of older sweeps by today's rule."""
    data = json.loads(Path(path).read_text())
    lib = data.get("library_min_sq", {})
    library = {int(d): n for d, n in lib.items()} if isinstance(lib, dict) else {d: lib for d in BUILD_HEAD_DIMS}
    if data["rows"] and "speedup_rounds_auto" in data["rows"][0] and "speedup_rounds" not in data["rows"][0]:
        # a --sweep confirm (the other sweeps' rows carry auto's ratios beside dynamic's)
        print("\n".join(confirm_lines(data["rows"], library, data.get("library_grouping", 0))))
        return
    rounds = len(data["rows"][0].get("speedup_rounds", [])) if data["rows"] else 0
    print("\n".join(summary(data["rows"], library, rounds)))


POLICY_NAMES = ("static", "dynamic", "short_first", "auto")


class Policy:
    """The library settings one policy runs under, held for a whole span: static, no workspace (capi.cu keeps the
    static order); dynamic, the workspace and the dynamic schedule at every length with the short group last;
    short_first, the same with the short group first; auto, the library's defaults."""

    def __init__(self, lib, name: str, grouping: bool):
        self.lib, self.name, self.grouping = lib, name, grouping

    def __enter__(self):
        self.real_ws = _ext.workspace
        if self.name == "static":
            _ext.workspace = lambda lib, dev: None
        if hasattr(self.lib, "vidattn_sm90_set_causal_dynamic_min_sq"):
            assert self.lib.vidattn_sm90_set_causal_dynamic_min_sq(-1 if self.name in ("auto", "static") else 0) == 0
        if self.grouping:
            assert self.lib.vidattn_sm90_set_causal_grouping(1 if self.name == "short_first" else
                                                             -1 if self.name == "auto" else 0) == 0
        return self

    def __exit__(self, *exc):
        _ext.workspace = self.real_ws
        if hasattr(self.lib, "vidattn_sm90_set_causal_dynamic_min_sq"):
            self.lib.vidattn_sm90_set_causal_dynamic_min_sq(-1)
        if self.grouping:
            self.lib.vidattn_sm90_set_causal_grouping(-1)
        return False


def ran_as(lib) -> dict:
    """What the last call ran: the dynamic schedule or not, and the opening group's size."""
    out = {"dynamic": int(lib.vidattn_sm90_last_causal_dynamic())
           if hasattr(lib, "vidattn_sm90_last_causal_dynamic") else None}
    if hasattr(lib, "vidattn_sm90_last_causal_first_group"):
        out["first_group"] = int(lib.vidattn_sm90_last_causal_first_group())
    return out


def expected_first_group(b: int, h: int, s: int, d: int, policy: str, default_grouping: int) -> int:
    """capi.cu's causal_first_group for this shape under `policy` (dynamic policies only)."""
    grouping = {"short_first": 1, "dynamic": 0}.get(policy, default_grouping)
    return sim.first_group(b * h, sim.group_heads(b, h, s, d), grouping)


def host_us_per_call(call, n: int) -> float:
    """Microseconds the host takes to issue one call, the GPU held busy meanwhile (so no call waits for it): a span
    measures the GPU only while this stays below the GPU's time per call."""
    torch.cuda._sleep(50_000_000)  # ~25 ms, more than n calls take to issue
    t0 = time.perf_counter()
    for i in range(n):
        call(i)
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return host


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--reps", type=int, default=None, help="(ignored: the span's call count follows --target-ms)")
    ap.add_argument("--target-ms", type=float, default=8.0, help="GPU time per span (sets its call count)")
    ap.add_argument("--out")
    ap.add_argument("--sweep", choices=("bench", "crossover", "wide", "grouping", "confirm", "all"), default="bench")
    ap.add_argument("--replay", metavar="JSON", help="print the table and verdict of a saved sweep, then exit")
    args = ap.parse_args()
    if args.replay:
        replay(args.replay)
        return
    shapes = {"bench": SHAPES, "crossover": CROSSOVER, "wide": WIDE, "grouping": GROUPING, "confirm": CONFIRM,
              "all": CROSSOVER + SHAPES}[args.sweep]
    lib = _ext.load()
    routed = lib is not None and hasattr(lib, "vidattn_sm90_set_causal_dynamic_min_sq")
    grouping = lib is not None and hasattr(lib, "vidattn_sm90_set_causal_grouping")
    default_min_sq = library_min_sq(lib) if routed else {d: 0 for d in BUILD_HEAD_DIMS}
    default_grouping = int(lib.vidattn_sm90_causal_grouping()) if grouping else 0
    confirm = args.sweep == "confirm"
    if confirm and not (routed and grouping):
        raise SystemExit("--sweep confirm needs a library with the per-build thresholds and the grouping switch")
    policies = ["static", "auto"] if confirm else ["static", "dynamic"] + \
        (["short_first"] if grouping and args.sweep in ("grouping", "wide") else []) + (["auto"] if routed else [])
    print("library default: dynamic from " + ", ".join(f"{n} query rows at D={d}" for d, n in default_min_sq.items())
          + f"; grouping {default_grouping} (1: the short group first)"
          if routed else "library without the short-problem routing: dynamic at every length", flush=True)
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)
    span = timer.CudaSpan()
    rows = []
    table_path = Path(args.out).with_name(Path(args.out).stem + "_table.txt") if args.out else None
    for b, h, s, d in shapes:
        g = torch.Generator(device="cuda").manual_seed(s + d)
        set_bytes = 4 * b * s * h * d * 2  # q, k, v and the output, bf16
        sets = [tuple(torch.randn(b, s, h, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
                for _ in range(timer.n_sets(set_bytes, l2))]
        flops = 4 * b * h * d * s * (s + 1) / 2

        def call(i):
            return vidattn.attention(*sets[i % len(sets)], causal=True)

        outs, ran, n_calls, host_us = {}, {}, {}, {}
        for policy in policies:  # warm-up, what ran, the output, the call count for the target time
            with Policy(lib, policy, grouping):
                outs[policy] = call(0)
                torch.cuda.synchronize()
                ran[policy] = ran_as(lib)
                one = timer.time_back_to_back(call, len(sets), span)
                host_us[policy] = host_us_per_call(call, len(sets))
            n_calls[policy] = timer.calls_for(one, args.target_ms, len(sets))
        ms = {policy: [] for policy in policies}
        for r in range(args.rounds):  # interleaved, the order rotating from round to round
            for policy in timer.rounds_order(policies, r):
                with Policy(lib, policy, grouping):
                    ms[policy].append(timer.time_back_to_back(call, n_calls[policy], span))
        simr = sim.simulate(b, h, s, d)
        group = sim.group_heads(b, h, s, d)
        row = {"shape": f"{b}x{h}x{s} D{d}", "b": b, "h": h, "s": s, "d": d, "sets": len(sets),
               "calls": n_calls, "host_us_per_call": host_us, "ran": ran,
               "equal": all(torch.equal(outs["static"], outs[p]) for p in policies),
               "ms": ms, "group": group, "first_group": sim.first_group(b * h, group, 1),
               "sim_ratio": {"dynamic": simr["dynamic_grouped"]["ratio"], "static": simr["static_snake"]["ratio"],
                             "short_first": simr["dynamic_short_first"]["ratio"]},
               "tflops": {}}
        # a policy that did not run its schedule cannot pass as one
        if confirm:
            want = int(s >= default_min_sq[sim.build_head_dim(d)])  # capi.cu, causal_build_slot
            row["ran_ok"] = ran["static"]["dynamic"] == 0 and ran["auto"] == {
                "dynamic": want, "first_group": expected_first_group(b, h, s, d, "auto", default_grouping) * want}
        elif routed:
            row["ran_ok"] = ran["static"]["dynamic"] == 0 and ran["dynamic"]["dynamic"] == 1
            if "short_first" in policies:
                row["ran_ok"] &= ran["short_first"] == {"dynamic": 1, "first_group": row["first_group"]}
                row["ran_ok"] &= ran["dynamic"].get("first_group") == 0
        for policy in ms:
            row[f"tflops_{policy}"] = row["tflops"][policy] = flops / (statistics.median(ms[policy]) * 1e-3) / 1e12
        # a span whose calls the host issues slower than the GPU runs them times the host, not the schedule
        row["host_bound"] = any(host_us[p] > 0.8 * statistics.median(ms[p]) * 1e3 for p in policies)
        if confirm:
            row["speedup_rounds_auto"] = per_round_ratios(ms, "static", "auto")
            rows.append(row)
            print(confirm_lines([row], default_min_sq, default_grouping)[1].strip(), flush=True)
            del sets, outs
            torch.cuda.empty_cache()
            if args.out:
                write(args.out, rows, default_min_sq, default_grouping, table_path,
                      "\n".join(confirm_lines(rows, default_min_sq, default_grouping)))
            continue
        row["speedup"] = statistics.median(ms["static"]) / statistics.median(ms["dynamic"])
        # per round, so that the spread between rounds shows next to the median
        row["speedup_rounds"] = per_round_ratios(ms, "static", "dynamic")
        row["speedup_paired"] = paired_speedup(row)
        if "auto" in ms:
            row["speedup_rounds_auto"] = per_round_ratios(ms, "static", "auto")
        if "short_first" in ms:
            row["speedup_rounds_short_first"] = per_round_ratios(ms, "static", "short_first")
            row["short_first_over_dynamic_rounds"] = per_round_ratios(ms, "dynamic", "short_first")
        rows.append(row)
        auto = f"  auto {row['tflops_auto']:6.1f}" if routed else ""
        sf = (f"  short_first {row['tflops_short_first']:6.1f} x{paired_speedup(row, 'short_first'):.3f}"
              if "short_first" in ms else "")
        print(f"{row['shape']:22s} group {row['group']:3d}  dynamic {row['tflops_dynamic']:6.1f}  static "
              f"{row['tflops_static']:6.1f}{auto} TFLOPS  x{row['speedup_paired']:.3f} "
              f"[{min(row['speedup_rounds']):.3f}-{max(row['speedup_rounds']):.3f}]{sf}  (sim "
              f"{row['sim_ratio']['static']:.3f} -> {row['sim_ratio']['dynamic']:.3f}"
              f"{' / ' + format(row['sim_ratio']['short_first'], '.3f') if 'short_first' in ms else ''})  "
              f"equal={row['equal']} ran_ok={row.get('ran_ok')} host {max(host_us.values()):.0f} us/call"
              f"{' HOST-BOUND' if row['host_bound'] else ''}", flush=True)
        del sets, outs
        torch.cuda.empty_cache()
        if args.out:  # each row as it lands: a timeout keeps what was measured
            write(args.out, rows, default_min_sq, default_grouping, table_path)
    text = ("\n".join(confirm_lines(rows, default_min_sq, default_grouping)) if confirm else
            "\n".join(summary(rows, default_min_sq, args.rounds)) + "\n\n" + shape_table(rows))
    if args.out:
        write(args.out, rows, default_min_sq, default_grouping, table_path, text)
    print("\n" + text)


def write(out: str, rows: list[dict], default_min_sq: dict, default_grouping: int, table_path: Path | None,
          text: str | None = None) -> None:
    data = {"gpu": torch.cuda.get_device_name(), "timing": "back-to-back, rotating input sets", "rows": rows,
            "library_min_sq": {str(d): n for d, n in default_min_sq.items()}, "library_grouping": default_grouping}
    if any("speedup_rounds" in r or "speedup" in r for r in rows):
        data["crossover_min_sq"] = {str(d): n for d, n in recommended_min_sq(rows).items()}
    if any("speedup_rounds_short_first" in r for r in rows):
        data["crossover_min_sq_short_first"] = {str(d): n for d, n in
                                                recommended_min_sq(rows, policy="short_first").items()}
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps(data, indent=1))
    if table_path is not None:
        table_path.write_text((text if text is not None else shape_table(rows)) + "\n")


if __name__ == "__main__":
    main()
