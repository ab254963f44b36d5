"""Issue 26's open questions in one device stage, each with its decision rule fixed before the run
(dev/probes/envelope_rules.py; predictions in dev/NOTES.md, "The envelope stage"):

  --part ov      O-in-V at D=192/256 (1K, 8K, 32K keys, batch x heads filling the GPU as scripts/bench_anchors.py):
                 the routed build (what a plain call runs: narrow at D=192 up to 2048 keys, wide elsewhere) against
                 O-in-V, the wide build beside them, cuDNN and FlashAttention-3 in the same rounds when installed.
                 Rule: O-in-V takes a length if it wins the sign test against the routed side (envelope_rules.verdict);
                 the KV_MAX constants follow by envelope_rules.ov_routing, printed as one-line edits of csrc/capi.cu.
  --part causal  the causal schedule at 1K-4K, host-free: N back-to-back calls captured in one CUDA graph per policy
                 (static, and the dynamic schedule with the short group first forced at every length), replayed and
                 timed per call; the eager back-to-back span beside it shows what the host did to the earlier reads.
                 Rule: envelope_rules.causal_threshold per causal build, envelope_rules.imbalance_rule for the
                 static-imbalance routing.
  --part d256    where D=256 at 1K keys loses: 1024 query rows (16 x 8 heads: 1024 tiles, 7.76 rounds on 132 SMs) at
                 1K, 2K, 4K and 8K keys, per-round time fitted as a + b x key blocks (a: the tile boundary, b: a
                 block), and 12 x 11 heads at 1K (1056 tiles: 8 whole rounds) against 16 x 8 (the tail wave). Wide,
                 O-in-V and FA3 when installed.
  --summary DIR  (no GPU) the table of every part's outcome by its rule, from DIR/{ov,causal,d256}.json.
  --dry-run      (no GPU) the plan: shapes, sides, rounds and an estimate of the device seconds.

Every round runs the sides in a palindrome (A B B A, the rotation alternating), each span one CUDA event pair around
back-to-back calls (or one graph replay) over rotating input sets larger than twice the L2 (dev/probes/
hd_variants_ab.py's timer); each part first runs the routed side back to back for --preheat-ms so the clocks settle
at the power limit before the first round. Every vidattn side is checked against cuDNN (relative L2) and for the
build it ran (key-block width, O path, causal schedule), and causal outputs are compared bit for bit.

    python3 dev/probes/envelope_ab.py --part ov --out $OUT/envelope
    python3 dev/probes/envelope_ab.py --summary $OUT/envelope
"""
from __future__ import annotations

import argparse
import importlib.util
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, ROOT / f"dev/probes/{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


rules = _load("envelope_rules")

# (name, batch, heads, keys = queries, head dim): scripts/bench_anchors.py's head-dim rows (B = 16384 // S,
# H = 2048 // D)
OV_SHAPES = [("D192 1K", 16, 10, 1024, 192), ("D192 8K", 2, 10, 8192, 192), ("D192 32K", 1, 10, 32768, 192),
             ("D256 1K", 16, 8, 1024, 256), ("D256 8K", 2, 8, 8192, 256), ("D256 32K", 1, 8, 32768, 256)]
# (batch, heads, seqlen, head dim): the length sweep at causal_sched_ab.py's CROSSOVER batch x heads (1.5K and 3K
# added at the neighbours' batch x heads; 4K, where both builds run dynamic now, is the landing point of a raise)
CAUSAL_SHAPES = [(4, 16, 1024, 128), (8, 16, 1024, 128), (4, 16, 1536, 128), (4, 16, 2048, 128),
                 (2, 16, 3072, 128), (2, 16, 4096, 128),
                 (8, 32, 1024, 64), (4, 32, 1536, 64), (4, 32, 2048, 64), (2, 32, 3072, 64), (2, 32, 4096, 64)]
# the static-imbalance rule's shapes that lost 0.877-0.882 in host-bound spans (call Q's grouping sweep)
IMBALANCE_SHAPES = [(3, 7, 2048, 128), (1, 24, 2048, 128), (2, 16, 1024, 64)]
# (name, batch, heads, queries, keys): D=256, 1024 tiles at 1K-8K keys, and 1056 (8 whole rounds) at 1K
D256_POINTS = [("16x8 1K", 16, 8, 1024, 1024), ("16x8 2K", 16, 8, 1024, 2048), ("16x8 4K", 16, 8, 1024, 4096),
               ("16x8 8K", 16, 8, 1024, 8192), ("12x11 1K", 12, 11, 1024, 1024)]
CAUSAL_POLICIES = ("static", "dynamic")
DEVICE = "cuda"  # the CPU smoke test (tests/test_envelope_ab.py) runs the parts' code on "cpu" with fakes
PARTS = ("ov", "causal", "d256")


def shape_name(b: int, h: int, s: int, d: int) -> str:
    return f"{b}x{h}x{s} D{d}"


# ---------------------------------------------------------------------------------------------------------------
# the plan (no GPU)


def plan(args) -> dict:
    """Shapes and sides per part, and the device seconds they should take (spans, leads, set-up; not the import)."""
    lead_ms = 1.0
    out = {}
    if "ov" in args.parts:
        shapes = [x for x in OV_SHAPES if not getattr(args, "shapes", None) or x[0] in args.shapes]
        # routed, ov, wide (or narrow), cudnn, fa3; and the variant at D=256 (--with-variant), with its reference
        # side where that is a variant too (setting 7 against 6)
        extra = 0
        if getattr(args, "with_variant", False):
            vs = getattr(args, "variant_setting", VARIANT_SETTING)
            extra = 1 + (reference_side(vs) != "ov")
        per = [1.5 + args.preheat_ms / 1e3 + args.rounds * (5 + (extra if x[4] == 256 else 0))
               * 2 * (max(args.target_ms, 24.0) + lead_ms) / 1e3 for x in shapes]
        out["ov"] = {"shapes": [x[0] for x in shapes], "rounds": args.rounds, "est_s": sum(per)}
    if "causal" in args.parts:
        shapes = CAUSAL_SHAPES + IMBALANCE_SHAPES
        per = [1.0 + args.causal_rounds * 2 * 2 * (args.causal_target_ms + lead_ms) / 1e3 for _ in shapes]
        out["causal"] = {"shapes": [shape_name(*x) for x in shapes], "rounds": args.causal_rounds,
                         "est_s": sum(per)}
    if "d256" in args.parts:
        per = [1.5 + args.d256_rounds * 3 * 2 * (args.target_ms + lead_ms) / 1e3 for _ in D256_POINTS]
        out["d256"] = {"shapes": [x[0] for x in D256_POINTS], "rounds": args.d256_rounds, "est_s": sum(per)}
    return out


# ---------------------------------------------------------------------------------------------------------------
# device helpers


def preheat(call, ms: float, one_ms: float, span, timer) -> None:
    """The card at its power limit before the first round: `ms` of back-to-back calls."""
    if ms > 0:
        timer.time_back_to_back(call, max(1, math.ceil(ms / max(one_ms, 1e-3))), span)


def host_us(call, n: int) -> float:
    """Microseconds the host takes to issue one call with the GPU held busy (the eager span is host-bound when this
    reaches the GPU's time per call)."""
    import torch
    torch.cuda._sleep(50_000_000)
    t0 = time.perf_counter()
    for i in range(n):
        call(i)
    t = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return t


def write_json(out: Path | None, name: str, data: dict) -> None:
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        (out / f"{name}.json").write_text(json.dumps(data, indent=1))


# ---------------------------------------------------------------------------------------------------------------
# part ov


# --with-variant: a variant of the D=256 O-in-V build as one more side, judged against "ov" by the same sign test;
# --variant-setting picks which (VIDATTN_HD_NARROW): 4, "ovr", O stored from registers (csrc/sm90/flash_fwd.cuh,
# store_o_regs; last_o_path 3; dev/NOTES.md, "The D=256 boundary: O from registers"), or 5, "ovq", Q released and
# loaded per warpgroup (tile_config.cuh kQHalves; last_o_path 2 with a 64-row Q box; dev/NOTES.md, "The D=256
# boundary: a timeline, and Q released per warpgroup"), or 6, "ovl", the wait for O's stores' reads (and o_done)
# under the next tile's S_0 (tile_config.cuh kOReadLate; last_o_path 4; dev/NOTES.md, "The D=256 epilogue deferred"),
# or 7, "ovn", that build (the routed one) with every partial key block narrowed, by as little as one step
# (tile_config.cuh kNarrowAll; last_o_path 4 as 6's; dev/NOTES.md, "The D=256 partial block narrowed by one step"),
# or 8, "ovp", the routed build run by CTA pairs that share each K/V block (tile_config.cuh kPairs; last_o_path 4 as
# 6's, and last_cluster_ctas 2, which tells it from the routed build it falls back to; dev/NOTES.md, "A multicast
# D=256 kernel").
VARIANT_SIDE, VARIANT_SETTING, VARIANT_O_PATH = "ovr", 4, 3
# setting: (side, what it is, O path it runs with, Q box rows it runs with or None for any)
VARIANTS = {4: (VARIANT_SIDE, "O from registers", VARIANT_O_PATH, None), 5: ("ovq", "Q per warpgroup", 2, 64),
            6: ("ovl", "O read wait late", 4, 128), 7: ("ovn", "every partial block narrowed", 4, 128),
            8: ("ovp", "CTA pairs sharing K/V", 4, 128)}
# CTAs per cluster a variant's main launch must report (last_cluster_ctas), where it matters: the pair build falls back
# to the routed build on a call whose Q tiles do not pair up.
VARIANT_CLUSTER = {8: 2}
SETTING_OF_SIDE = {v[0]: k for k, v in VARIANTS.items()}
# What last_o_path() reads after a plain D=256 call since the read-late build became the routed O-in-V one (capi.cu
# VIDATTN_D256_O_READ_LATE): the rounds then time the routed side under setting 6, the same kernel.
ROUTED_READ_LATE_O_PATH = 4
# The side a variant is judged against: "ov" (the plain O-in-V build, setting 3), or, for a variant of the routed
# build, that build under its own setting (7 against 6's "ovl", timed in the same rounds).
VARIANT_REFERENCE = {7: "ovl", 8: "ovl"}


def reference_side(setting: int) -> str:
    return VARIANT_REFERENCE.get(setting, "ov")


def _last_launch(reading: str) -> int | None:
    """vidattn._ext's `reading` of the last launch, or None from a library that predates it."""
    from vidattn import _ext
    try:
        return getattr(_ext, reading)()
    except RuntimeError:
        return None


def last_q_box_rows() -> int | None:
    """Rows of the last launch's Q box, or None from a library that predates the Q-halves variant."""
    return _last_launch("last_q_box_rows")


def last_cluster_ctas() -> int | None:
    """CTAs per cluster of the last main launch, or None from a library that predates the CTA-pair variant."""
    return _last_launch("last_cluster_ctas")


def variant_ran(setting: int, o_path: int | None, q_box_rows: int | None,
                cluster_ctas: int | None = None) -> str | None:
    """Why the last launch under `setting` was not that variant (a library without it runs something else, the pair
    build falls back on an unpaired call), or None."""
    _, _, want_o, want_rows = VARIANTS[setting]
    if o_path != want_o:
        return f"ran with O path {o_path}, not {want_o}"
    if want_rows is not None and q_box_rows != want_rows:
        return f"ran with a Q box of {q_box_rows} rows, not {want_rows}"
    if setting in VARIANT_CLUSTER and cluster_ctas != VARIANT_CLUSTER[setting]:
        return f"ran in clusters of {cluster_ctas} CTAs, not {VARIANT_CLUSTER[setting]}"
    return None


def side_context(x: str, timer):
    if x in SETTING_OF_SIDE:
        from vidattn import _ext
        return _ext.hd_narrow(SETTING_OF_SIDE[x])
    return timer.backend_context(x)


def run_ov(args) -> dict:
    import torch
    timer = _load("hd_variants_ab")
    import anchor_impls
    from vidattn import _ext
    fa3_reason = anchor_impls.available().get("fa3")
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)
    span = timer.CudaSpan()
    result = {"part": "ov", "rounds": args.rounds, "fa3": fa3_reason or "available", "rows": [],
              "timing": "back-to-back spans, palindrome rounds, preheated"}
    print(f"ov: FA3 {'in the rounds' if fa3_reason is None else 'absent: ' + str(fa3_reason)}", flush=True)
    vsetting = getattr(args, "variant_setting", VARIANT_SETTING)
    vside, vref = VARIANTS[vsetting][0], reference_side(vsetting)
    for name, b, h, s, d in OV_SHAPES:
        if args.shapes and name not in args.shapes:
            continue
        g = torch.Generator(device=DEVICE).manual_seed(s + d)
        sets = [tuple(torch.randn(b, s, h, d, device=DEVICE, generator=g, dtype=torch.bfloat16) for _ in range(3))
                for _ in range(timer.n_sets(4 * b * s * h * d * 2, l2))]
        calls = {x: timer.make_call(x, sets) for x in ("wide", "narrow", "ov", "cudnn", "fa3", "default")}
        calls[vside] = calls[vref] = calls[VARIANTS[6][0]] = calls["ov"]  # the same plain call; the setting picks the build
        with timer.backend_context("cudnn"):
            ref = calls["cudnn"](0).transpose(1, 2)
        calls["default"](0)
        torch.cuda.synchronize()
        routed = timer.default_side(d, _ext.last_block_n(), timer.last_o_path()) or "wide"
        if routed == "ov" and timer.last_o_path() == ROUTED_READ_LATE_O_PATH:
            # a routed D=256 O-in-V call runs the read-late build (setting 6's kernel): time that, not setting 3's
            routed = VARIANTS[6][0]
        base = routed if routed not in ("ov", VARIANTS[6][0]) else "wide"  # the side O-in-V is judged against
        sides = list(dict.fromkeys([base, "ov", "wide", routed])) + ["cudnn"]
        if getattr(args, "with_variant", False) and d == 256:
            for x in dict.fromkeys([vref, vside]):
                if x not in sides:
                    sides.insert(sides.index("cudnn"), x)
        if fa3_reason is None and anchor_impls.supports("fa3", d, h, h) is None:
            sides.append("fa3")
        row = {"shape": name, "b": b, "h": h, "s": s, "d": d, "flops": timer.flops(b, h, s, d), "routed": routed,
               "base": base, "sides": sides, "errors": {}, "block_n": {}, "rel_l2": {}, "calls": {}, "host_us": {},
               "spans": {}, "tflops": {}}
        one = {}
        for x in sides:
            try:
                with side_context(x, timer):
                    out = calls[x](0)
                    torch.cuda.synchronize()
                    refused = timer.take_launch_error()
                    if refused is not None:
                        raise RuntimeError(refused)
                    if x in timer.VIDATTN_SIDES:
                        row["block_n"][x] = _ext.last_block_n()
                        want = timer.SIDE_O_PATH.get(x)
                        if want is not None and timer.last_o_path() not in (None, want):
                            raise RuntimeError(f"ran with O path {timer.last_o_path()}, not {want}")
                    if x in SETTING_OF_SIDE:  # the variant, or the variant it is judged against
                        row["block_n"][x] = _ext.last_block_n()
                        why = variant_ran(SETTING_OF_SIDE[x], timer.last_o_path(), last_q_box_rows(),
                                          last_cluster_ctas())
                        if why is not None:  # a library without the variant ran something else
                            raise RuntimeError(why)
                    one[x] = timer.time_back_to_back(calls[x], len(sets), span)
                    row["host_us"][x] = host_us(calls[x], len(sets))
                if x != "cudnn":
                    row["rel_l2"][x] = timer.rel_l2(out, ref)
                    if not row["rel_l2"][x] < timer.CHECK_REL_L2:
                        raise RuntimeError(f"relative L2 {row['rel_l2'][x]:.2e} against cuDNN")
                row["calls"][x] = timer.calls_for(one[x], args.target_ms, len(sets))
            except Exception as exc:  # noqa: BLE001 - a failing side is reported; the others still time
                row["errors"][x] = f"{type(exc).__name__}: {exc}"
        live = [x for x in sides if x not in row["errors"]]
        if base in live:
            with timer.backend_context(base):
                preheat(calls[base], args.preheat_ms, one[base], span, timer)
        spans = {x: [[] for _ in range(args.rounds)] for x in live}
        for r in range(args.rounds):
            for x in rules.palindrome(live, r):
                with side_context(x, timer):
                    spans[x][r].append(timer.time_back_to_back(calls[x], row["calls"][x], span, first=r))
        refused = timer.take_launch_error()
        if refused is not None:
            row["errors"]["rounds"] = refused
        row["spans"] = spans
        for x in live:
            row["tflops"][x] = row["flops"] / (statistics.median(t for rr in spans[x] for t in rr) * 1e-3) / 1e12
        row["host_bound"] = {x: row["host_us"][x] > 0.8 * one[x] * 1e3 for x in live if x in row["host_us"]}
        if "ov" in live and base in live:
            row["ov_vs_base"] = rules.verdict(rules.round_ratios(spans, base, "ov"))
        if "ov" in live and "wide" in live and base != "wide":
            row["ov_vs_wide"] = rules.verdict(rules.round_ratios(spans, "wide", "ov"))
        for x in (x for x in live if x in SETTING_OF_SIDE):  # each variant against its reference (ovl also vs ov)
            ref_side = reference_side(SETTING_OF_SIDE[x])
            if ref_side in live:
                row[f"{x}_vs_{ref_side}"] = rules.verdict(rules.round_ratios(spans, ref_side, x))
        for anchor in ("fa3", "cudnn"):
            for x in dict.fromkeys((base, "ov", routed, vref, vside)):
                if anchor in live and x in live:
                    row[f"{x}_over_{anchor}"] = statistics.median(rules.round_ratios(spans, anchor, x))
        result["rows"].append(row)
        v = row.get("ov_vs_base")
        print(f"{name}: " + ", ".join(f"{x} {row['tflops'][x]:.0f}" for x in live) + f"; routed {routed}; "
              + (f"ov vs {base}: {rules.describe(v)}" if v else "no verdict")
              + (f"; {vside} vs {vref}: {rules.describe(row[f'{vside}_vs_{vref}'])}"
                 if row.get(f"{vside}_vs_{vref}") else "")
              + (f"; errors {row['errors']}" if row["errors"] else ""), flush=True)
        del sets, ref, calls
        torch.cuda.empty_cache()
        write_json(args.out, "ov", result)
    return result


def ov_decision(result: dict, capi_text: str) -> dict:
    verdicts = {(r["d"], r["s"]): r["ov_vs_base"]["verdict"] for r in result["rows"] if r.get("ov_vs_base")}
    current = rules.current_constants(capi_text)
    dec = rules.ov_routing(verdicts, current)
    dec["edits"] = rules.edit_lines(capi_text, dec["changed"])
    return dec


# ---------------------------------------------------------------------------------------------------------------
# part causal


def capture_graph(call, n: int, policy):
    """A CUDA graph of n back-to-back calls captured under `policy` (the schedule a call takes is decided on the host
    at capture, so a replay runs it); the first call's output kept for the bitwise comparison."""
    import torch
    with policy:
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):
            for i in range(2):
                call(i)
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            first = call(0)
            for i in range(1, n):
                call(i)
    return graph, first


def time_graph(graph, n: int, span) -> float:
    span.lead()
    span.start()
    graph.replay()
    return span.stop() / n


def run_causal(args) -> dict:
    import torch
    import vidattn
    from vidattn import _ext
    timer = _load("hd_variants_ab")
    csab = _load("causal_sched_ab")
    sim = csab.sim
    lib = _ext.load()
    if lib is None or not hasattr(lib, "vidattn_sm90_set_causal_grouping"):
        raise SystemExit("envelope_ab --part causal: needs the library with the per-build thresholds and grouping")
    library = csab.library_min_sq(lib)
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)
    span = timer.CudaSpan()
    result = {"part": "causal", "rounds": args.causal_rounds, "library_min_sq": {str(k): v for k, v in library.items()},
              "timing": "one CUDA graph of n calls per policy, replayed; eager spans beside", "rows": []}
    print("causal: library dynamic from " + ", ".join(f"{n} rows at D={d}" for d, n in library.items()), flush=True)
    for kind, shapes in (("threshold", CAUSAL_SHAPES), ("imbalance", IMBALANCE_SHAPES)):
        for b, h, s, d in shapes:
            name = shape_name(b, h, s, d)
            if args.shapes and name not in args.shapes:
                continue
            g = torch.Generator(device=DEVICE).manual_seed(s + d)
            sets = [tuple(torch.randn(b, s, h, d, device=DEVICE, generator=g, dtype=torch.bfloat16)
                          for _ in range(3)) for _ in range(timer.n_sets(4 * b * s * h * d * 2, l2))]

            def call(i, sets=sets):
                return vidattn.attention(*sets[i % len(sets)], causal=True)

            def policy(p):
                return csab.Policy(lib, "short_first" if p == "dynamic" else p, True)

            row = {"shape": name, "kind": kind, "b": b, "h": h, "s": s, "d": d,
                   "flops": 4 * b * h * d * s * (s + 1) / 2, "ran": {}, "n": {}, "host_us": {}, "one_ms": {},
                   "graph_ms": {p: [[] for _ in range(args.causal_rounds)] for p in CAUSAL_POLICIES},
                   "eager_ms": {p: [[] for _ in range(args.causal_rounds)] for p in CAUSAL_POLICIES},
                   "sim_static": sim.simulate(b, h, s, d)["static_snake"]["ratio"]}
            graphs, firsts = {}, {}
            try:
                for p in CAUSAL_POLICIES:
                    with policy(p):
                        call(0)
                        torch.cuda.synchronize()
                        one = timer.time_back_to_back(call, len(sets), span)
                        row["host_us"][p] = host_us(call, len(sets))
                    row["one_ms"][p] = one
                    row["n"][p] = max(len(sets), min(64, math.ceil(args.causal_target_ms / max(one, 1e-3))))
                    graphs[p], firsts[p] = capture_graph(call, row["n"][p], policy(p))
                    row["ran"][p] = csab.ran_as(lib)  # what the last captured call chose
                row["ran_ok"] = row["ran"]["static"]["dynamic"] == 0 and row["ran"]["dynamic"]["dynamic"] == 1
                for p in CAUSAL_POLICIES:  # settle the clocks on the longer side
                    for _ in range(max(1, math.ceil(args.preheat_ms / 4 / max(row["n"][p] * row["one_ms"][p], 1e-3)))):
                        graphs[p].replay()
                torch.cuda.synchronize()
                for r in range(args.causal_rounds):
                    for p in rules.palindrome(list(CAUSAL_POLICIES), r):
                        row["graph_ms"][p][r].append(time_graph(graphs[p], row["n"][p], span))
                    for p in rules.palindrome(list(CAUSAL_POLICIES), r + 1):
                        with policy(p):
                            row["eager_ms"][p][r].append(timer.time_back_to_back(call, row["n"][p], span))
                torch.cuda.synchronize()
                row["equal"] = bool(torch.equal(firsts["static"], firsts["dynamic"]))
            except Exception as exc:  # noqa: BLE001 - the shape is reported, the sweep goes on
                row["error"] = f"{type(exc).__name__}: {exc}"
            if "error" not in row:
                row["graph_ratios"] = rules.round_ratios(row["graph_ms"], "static", "dynamic")
                row["eager_ratios"] = rules.round_ratios(row["eager_ms"], "static", "dynamic")
                row["verdict"] = rules.verdict(row["graph_ratios"])
                row["tflops"] = {p: row["flops"] / (statistics.median(t for rr in row["graph_ms"][p] for t in rr)
                                                   * 1e-3) / 1e12 for p in CAUSAL_POLICIES}
                row["host_bound_eager"] = any(row["host_us"][p] > 0.8 * row["one_ms"][p] * 1e3
                                              for p in CAUSAL_POLICIES)
                print(f"{name:18s} graph: static {row['tflops']['static']:6.1f} dynamic {row['tflops']['dynamic']:6.1f}"
                      f" TFLOPS, {rules.describe(row['verdict'])}; eager x{statistics.median(row['eager_ratios']):.3f}"
                      f"{' (host-bound)' if row['host_bound_eager'] else ''}; sim static {row['sim_static']:.3f}; "
                      f"equal={row['equal']} ran_ok={row['ran_ok']}", flush=True)
            else:
                print(f"{name}: {row['error']}", flush=True)
            result["rows"].append(row)
            del graphs, firsts, sets
            torch.cuda.empty_cache()
            write_json(args.out, "causal", result)
    return result


def causal_decision(result: dict) -> dict:
    library = {int(k): v for k, v in result["library_min_sq"].items()}
    out = {"thresholds": {}, "per_length": {}}
    ok = [r for r in result["rows"] if "verdict" in r and r.get("ran_ok") and r.get("equal")]
    for d in sorted(library):
        by_len: dict[int, list[list[float]]] = {}
        for r in ok:
            if r["kind"] == "threshold" and r["d"] == d:
                by_len.setdefault(r["s"], []).append(r["graph_ratios"])
        vs = {s: rules.pooled_verdict(xs) for s, xs in sorted(by_len.items())}
        out["per_length"][d] = vs
        out["thresholds"][d] = {"current": library[d],
                                **rules.causal_threshold(library[d], {s: v["verdict"] for s, v in vs.items()})}
    imb = [(r["shape"], r["sim_static"], r["verdict"]["verdict"]) for r in ok if r["kind"] == "imbalance"]
    out["imbalance"] = rules.imbalance_rule(imb)
    out["bad_rows"] = [r["shape"] for r in result["rows"] if r not in ok]
    return out


# ---------------------------------------------------------------------------------------------------------------
# part d256


def run_d256(args) -> dict:
    import torch
    import vidattn
    timer = _load("hd_variants_ab")
    import anchor_impls
    from vidattn import _ext
    fa3_reason = anchor_impls.available().get("fa3")
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)
    span = timer.CudaSpan()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    result = {"part": "d256", "rounds": args.d256_rounds, "sms": sms, "fa3": fa3_reason or "available", "rows": []}
    for name, b, h, sq, skv in D256_POINTS:
        d = 256
        g = torch.Generator(device=DEVICE).manual_seed(sq + skv)
        set_bytes = 2 * (b * sq * h * d + 2 * b * skv * h * d)
        sets = [(torch.randn(b, sq, h, d, device=DEVICE, generator=g, dtype=torch.bfloat16),
                 torch.randn(b, skv, h, d, device=DEVICE, generator=g, dtype=torch.bfloat16),
                 torch.randn(b, skv, h, d, device=DEVICE, generator=g, dtype=torch.bfloat16))
                for _ in range(timer.n_sets(set_bytes, l2))]
        sides = ["wide", "ov"] + (["fa3"] if fa3_reason is None else [])
        calls = {"wide": lambda i, sets=sets: vidattn.attention(*sets[i % len(sets)], layout="bshd"),
                 "fa3": lambda i, sets=sets: anchor_impls.fa3(*sets[i % len(sets)])}
        calls["ov"] = calls["wide"]
        tiles = b * h * (-(-sq // 128))
        row = {"shape": name, "b": b, "h": h, "sq": sq, "skv": skv, "tiles": tiles,
               "rounds_of_tiles": rules.tile_rounds(tiles, sms), "blocks": rules.d256_blocks(skv),
               "flops": 4.0 * b * h * sq * skv * d, "ms": {x: [[] for _ in range(args.d256_rounds)] for x in sides},
               "calls": {}, "errors": {}, "block_n": {}}
        one = {}
        for x in sides:
            try:
                with timer.backend_context(x):
                    calls[x](0)
                    torch.cuda.synchronize()
                    refused = timer.take_launch_error()
                    if refused is not None:
                        raise RuntimeError(refused)
                    if x != "fa3":
                        row["block_n"][x] = ran = (_ext.last_block_n(), timer.last_o_path())
                        want = (timer.SIDE_BLOCK_N[x][256], timer.SIDE_O_PATH[x])
                        if ran[0] != want[0] or ran[1] not in (None, want[1]):
                            raise RuntimeError(f"ran N={ran[0]}, O path {ran[1]}: not the {x} build {want}")
                    one[x] = timer.time_back_to_back(calls[x], len(sets), span)
                row["calls"][x] = timer.calls_for(one[x], args.target_ms, len(sets))
            except Exception as exc:  # noqa: BLE001
                row["errors"][x] = f"{type(exc).__name__}: {exc}"
        live = [x for x in sides if x not in row["errors"]]
        if live:
            with timer.backend_context(live[0]):
                preheat(calls[live[0]], args.preheat_ms / 2, one[live[0]], span, timer)
        for r in range(args.d256_rounds):
            for x in rules.palindrome(live, r):
                with timer.backend_context(x):
                    row["ms"][x][r].append(timer.time_back_to_back(calls[x], row["calls"][x], span, first=r))
        row["ms"] = {x: row["ms"][x] for x in live}
        row["tflops"] = {x: row["flops"] / (statistics.median(t for rr in row["ms"][x] for t in rr) * 1e-3) / 1e12
                         for x in live}
        # per round of tiles, microseconds: the launch's time over its rounds (every point here has 8)
        row["round_us"] = {x: statistics.median(t for rr in row["ms"][x] for t in rr) * 1e3 / row["rounds_of_tiles"]
                           for x in live}
        result["rows"].append(row)
        print(f"d256 {name}: " + ", ".join(f"{x} {row['tflops'][x]:.0f} TFLOPS ({row['round_us'][x]:.1f} us/round)"
                                           for x in live) + (f"; errors {row['errors']}" if row["errors"] else ""),
              flush=True)
        del sets, calls
        torch.cuda.empty_cache()
        write_json(args.out, "d256", result)
    return result


def block_us_32k(ov_result: dict | None, side: str, sms: int = rules.SMS) -> float | None:
    """One key block's time at D=256 32K (part ov): the launch over its rounds of tiles and blocks per tile, where
    a tile's boundary is 1 of 410 blocks: the per-block cost the 1K fit's b is read against."""
    for r in (ov_result or {}).get("rows", []):
        if r["shape"] == "D256 32K" and side in r.get("spans", {}):
            ms = statistics.median(t for rr in r["spans"][side] for t in rr)
            tiles = r["b"] * r["h"] * (-(-r["s"] // 128))
            return ms * 1e3 / rules.tile_rounds(tiles, sms) / rules.d256_blocks(r["s"])
    return None


def d256_decision(result: dict, ov_result: dict | None = None) -> dict:
    rows = {r["shape"]: r for r in result["rows"]}
    out = {}
    for x in ("wide", "ov", "fa3"):
        pts = [(r["blocks"], r["round_us"][x]) for r in result["rows"]
               if r["shape"].startswith("16x8") and x in r.get("round_us", {})]
        if len(pts) < 2:
            continue
        fit = rules.fit_boundary(pts)
        one_k = rows.get("16x8 1K", {}).get("round_us", {}).get(x)
        entry = {"fit": fit}
        if one_k:
            entry["decomposition"] = rules.d256_decomposition(one_k, fit, tiles=rows["16x8 1K"]["tiles"],
                                                              sms=result.get("sms", rules.SMS))
        ctrl, base = rows.get("12x11 1K", {}).get("tflops", {}).get(x), rows.get("16x8 1K", {}).get("tflops", {}).get(x)
        if ctrl and base:
            entry["whole_rounds_gain"] = ctrl / base  # predicted 1056 / 1024 = 1.031 if the tail wave is real
        b32 = block_us_32k(ov_result, x, result.get("sms", rules.SMS))
        if b32:
            entry["block_us_32k"] = b32  # per-block excess at short keys: fit b over this
        out[x] = entry
    return out


# ---------------------------------------------------------------------------------------------------------------
# the summary


def summary(folder: Path, capi_text: str) -> str:
    lines = []
    p = folder / "ov.json"
    if p.exists():
        res = json.loads(p.read_text())
        lines.append(f"O-in-V (sign test, >= 8 palindrome rounds; FA3 {res.get('fa3')}):")
        # routed: what a plain call ran; O-in-V's verdict is against the base (the routed side, or wide where the
        # plain call already runs O-in-V)
        lines.append("  shape     | routed | routed TF | ov TF | wide TF | FA3 | cuDNN | routed/FA3 | ov/FA3 | "
                     "routed/cuDNN | ov/cuDNN | ov vs base")
        for r in res["rows"]:
            t = r["tflops"]

            def c(x):
                return f"{t[x]:.0f}" if x in t else "-"

            def q(key):  # median of the per-round ratios (bars: 1.00x FA3, 1.15x cuDNN)
                return f"{r[key]:.3f}" if key in r else "-"
            v = r.get("ov_vs_base")
            b = r["base"]
            rt = r.get("routed") or b
            lines.append(f"  {r['shape']:9s} | {rt:6s} | {c(rt):>9s} | {c('ov'):>5s} | {c('wide'):>7s} | "
                         f"{c('fa3'):>3s} | {c('cudnn'):>5s} | {q(rt + '_over_fa3'):>10s} | {q('ov_over_fa3'):>6s} | "
                         f"{q(rt + '_over_cudnn'):>12s} | {q('ov_over_cudnn'):>8s} | "
                         f"{(b + ': ' + rules.describe(v)) if v else 'no verdict'}"
                         + (f" | errors {r['errors']}" if r.get("errors") else ""))
        for r in res["rows"]:
            for setting, (side, what, _, _) in VARIANTS.items():
                ref_side = reference_side(setting)
                if r.get(f"{side}_vs_{ref_side}"):  # --with-variant
                    t = r["tflops"]
                    lines.append(f"  {r['shape']:9s} {side} ({what}) {t.get(side, 0):.0f} TF, "
                                 f"/FA3 {r.get(side + '_over_fa3', float('nan')):.3f}, "
                                 f"/cuDNN {r.get(side + '_over_cudnn', float('nan')):.3f}, "
                                 f"{side} vs {ref_side}: {rules.describe(r[f'{side}_vs_{ref_side}'])}")
        dec = ov_decision(res, capi_text)
        lines += ["  decision: " + ("; ".join(dec["edits"]) if dec["edits"] else "no change (no constant moves)")]
        lines += [f"  note: {n}" for n in dec["notes"] + dec["unroutable"]]
    else:
        lines.append("O-in-V: no ov.json (part did not run)")
    p = folder / "causal.json"
    if p.exists():
        res = json.loads(p.read_text())
        dec = causal_decision(res)
        lines.append("causal, graph-timed, dynamic (short group first) / static per length (pooled rounds):")
        for d, vs in dec["per_length"].items():
            cells = ", ".join(f"{s}: x{v['median']:.3f} {v['verdict']} ({v['wins']}/{v['n']}, p={v['p_win']:.3g})"
                              for s, v in vs.items())
            th = dec["thresholds"][d]
            lines.append(f"  D={d}: {cells}")
            lines.append(f"  D={d} threshold {th['current']} -> {th['min_sq']} ({th['moved']}: {th['why']})")
        eager = [(r["shape"], statistics.median(r["eager_ratios"]), statistics.median(r["graph_ratios"]))
                 for r in res["rows"] if r.get("graph_ratios")]
        lines.append("  eager vs graph ratio: " + ", ".join(f"{n} {e:.3f}/{g:.3f}" for n, e, g in eager))
        lines.append(f"  static-imbalance rule: {dec['imbalance']['permille']} ({dec['imbalance']['why']})")
        changed = {f"VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D{d}": (th["current"], th["min_sq"])
                   for d, th in dec["thresholds"].items() if th["min_sq"] != th["current"]}
        imb_now = rules.current_constants(capi_text, rules.CAUSAL_CONSTANTS).get("VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX")
        if imb_now is not None and imb_now != dec["imbalance"]["permille"]:
            changed["VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX"] = (imb_now, dec["imbalance"]["permille"])
        edits = rules.edit_lines(capi_text, changed)
        lines.append("  decision: " + ("; ".join(edits) if edits else "no change (no constant moves)"))
        if dec["bad_rows"]:
            lines.append(f"  left out (error, not as named, or bits differ): {dec['bad_rows']}")
    else:
        lines.append("causal: no causal.json (part did not run)")
    p = folder / "d256.json"
    if p.exists():
        res = json.loads(p.read_text())
        ovp = folder / "ov.json"
        dec = d256_decision(res, json.loads(ovp.read_text()) if ovp.exists() else None)
        lines.append("D=256 at 1K keys: per-round time = a + b x blocks (16x8 heads, 1K-8K keys); "
                     "12x11 = 8 whole rounds:")
        for x, e in dec.items():
            f = e["fit"]
            dd = e.get("decomposition", {})
            lines.append(f"  {x:4s}: a {f['a_us']:.2f} us, b {f['b_us']:.3f} us/block (resid {f['max_resid_us']:.2f}); "
                         + (f"at 1K boundary {dd['boundary_share']:.1%}, tail {dd['tail_share']:.1%}, largest: "
                            f"{dd['largest']}; " if dd else "")
                         + (f"12x11/16x8 x{e['whole_rounds_gain']:.3f} (tail wave predicts 1.031)"
                            if "whole_rounds_gain" in e else "")
                         + (f"; b at 32K {e['block_us_32k']:.3f} us" if "block_us_32k" in e else ""))
    else:
        lines.append("D=256 decomposition: no d256.json (part did not run)")
    return "\n".join(lines)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--part", choices=PARTS + ("all",), default="all")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--summary", type=Path, metavar="DIR", help="print the outcome table from DIR's JSONs, no GPU")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and its device-time estimate, no GPU")
    ap.add_argument("--rounds", type=int, default=16, help="ov part: palindrome rounds (>= 8)")
    ap.add_argument("--causal-rounds", type=int, default=12)
    ap.add_argument("--d256-rounds", type=int, default=6)
    ap.add_argument("--target-ms", type=float, default=20.0, help="GPU time per span (ov, d256)")
    ap.add_argument("--causal-target-ms", type=float, default=6.0, help="GPU time per graph replay (causal)")
    ap.add_argument("--preheat-ms", type=float, default=500.0)
    ap.add_argument("--shapes", nargs="*", help="names to keep (ov: 'D256 1K'; causal: '4x16x1024 D128')")
    ap.add_argument("--with-variant", action="store_true",
                    help="ov part: a D=256 O-in-V variant (--variant-setting) as one more side, against 'ov' "
                         "(setting 7: against 'ovl', a side too)")
    ap.add_argument("--variant-setting", type=int, choices=sorted(VARIANTS), default=VARIANT_SETTING,
                    help="VIDATTN_HD_NARROW of the variant: 4 O from registers (side 'ovr'), 5 Q per warpgroup "
                         "('ovq'), 6 O read wait late ('ovl'), 7 that with every partial block narrowed ('ovn', "
                         "judged against 'ovl', both timed)")
    args = ap.parse_args(argv)
    args.parts = PARTS if args.part == "all" else (args.part,)
    if args.rounds < rules.MIN_ROUNDS or args.causal_rounds < rules.MIN_ROUNDS:
        ap.error(f"the sign test needs at least {rules.MIN_ROUNDS} rounds")
    return args


def main(argv=None) -> int:
    args = parse_args(argv)
    capi_text = (ROOT / "csrc/capi.cu").read_text()
    if args.summary is not None:
        print(summary(args.summary, capi_text))
        return 0
    if args.dry_run:
        pl = plan(args)
        for part, p in pl.items():
            print(f"{part}: {len(p['shapes'])} shapes x {p['rounds']} rounds, ~{p['est_s']:.0f} s of device time: "
                  + ", ".join(p["shapes"]))
        print(f"total ~{sum(p['est_s'] for p in pl.values()):.0f} s (plus ~10-15 s of imports per part)")
        print("constants now: " + ", ".join(f"{k} {v}" for k, v in rules.current_constants(capi_text).items()))
        return 0
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("envelope_ab: needs a CUDA GPU (--dry-run and --summary do not)")
    t0 = time.time()
    for part in args.parts:
        {"ov": run_ov, "causal": run_causal, "d256": run_d256}[part](args)
    print(f"\nenvelope_ab: {', '.join(args.parts)} in {time.time() - t0:.0f} s")
    if args.out:
        print(summary(args.out, capi_text))
    return 0


if __name__ == "__main__":
    sys.exit(main())
