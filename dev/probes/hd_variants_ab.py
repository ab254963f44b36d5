"""Device A/B of the head-dim builds in one process, at the shapes where the default builds miss their bars (1.00x
FlashAttention-3, 1.15x cuDNN): head dims 72..96 on two consumer warpgroups ("d96_2wg", N=176) against three
("d96_3wg", N=96) and padded onto the D=128 build ("pad128"); bf16 D=192/256 on the wide builds ("wide", N=112 / 80,
O through Q's buffer) against the narrow ones ("narrow", N=96 / 64) and the O-in-V ones ("ov": the wide widths, O
through the V stages, Q released after the last S); cuDNN through SDPA and FlashAttention-3 (scripts/anchor_impls.py,
when installed). The library's default routing is not a side of its own: its pick ("default") is read from the
key-block width and O path of a plain call, and its rate is that side's.

Timing: back-to-back calls between one CUDA event pair, rotating over input sets that together exceed twice the L2
(so no call finds its inputs cached), the GPU kept busy before the first event so that the host enqueues ahead and
its dispatch (vidattn.attention's Python, FA3's wrapper) stays off the timed span, as in scripts/bench_anchors.py.
(Timing one call per event pair after an L2 flush put the host's dispatch inside the span: at 1K, ~0.25 ms calls,
vidattn read 406 TFLOPS against 604 back to back.) Rounds interleaved, the side order rotated each round, the median
span of all rounds; every side checked against cuDNN (relative L2) and its key-block width recorded, so a variant
that did not run cannot pass as one. TFLOPS at the shape's own D (4 B H S^2 D). Per round, each vidattn side's
span median over the wide side's of the same round ("paired"): the spread of those ratios across rounds is what a
routing decision between two builds is read against. --matmul SECONDS also times a large bf16 torch.matmul back to
back for that long (the card at its power limit, as in the long attention calls) and reports its sustained TFLOPS
beside the table: the ceiling an attention kernel's rate can be read against. Writes ab.json and ab_table.txt and
prints the table last.

    python3 dev/probes/hd_variants_ab.py --rounds 3 --out $OUT/hd
"""
from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

# (name, batch, heads, seqlen, head dim): the head-dim rows of scripts/bench_anchors.py (B = 16384 // S, H = 2048 // D
# so that the GPU is full), the misses first
SHAPES = [("D192 1K", 16, 10, 1024, 192), ("D192 8K", 2, 10, 8192, 192), ("D256 1K", 16, 8, 1024, 256),
          ("D256 32K", 1, 8, 32768, 256), ("Allegro D96", 1, 24, 79200, 96), ("D72 8K", 2, 28, 8192, 72),
          ("D192 32K", 1, 10, 32768, 192), ("D96 8K", 2, 21, 8192, 96), ("D80 8K", 2, 25, 8192, 80),
          ("D96 1K", 16, 21, 1024, 96)]
VIDATTN_SIDES = ("d96_2wg", "d96_3wg", "pad128", "wide", "narrow", "ov")
# key-block width of each side's kernel, (bf16) head dim 72..96 / 136..192 / 200..256: how "default" is recognised
SIDE_BLOCK_N = {"d96_2wg": {96: 176}, "d96_3wg": {96: 96}, "pad128": {96: (128, 176)},
                "wide": {192: 112, 256: 80}, "narrow": {192: 96, 256: 64}, "ov": {192: 112, 256: 80}}
# where each D=192/256 side's epilogue stages O (_ext.last_o_path): wide and ov share their widths
SIDE_O_PATH = {"wide": 1, "narrow": 0, "ov": 2}
CHECK_REL_L2 = 2e-2
MAX_SETS = 8


def build_of(d: int) -> int:
    return 96 if d <= 96 else 192 if d <= 192 else 256


def applies(backend: str, d: int) -> bool:
    return {"d96_2wg": 64 < d <= 96, "d96_3wg": 64 < d <= 96, "pad128": 64 < d <= 96, "wide": d > 128,
            "narrow": d > 128, "ov": d > 128}.get(backend, True)


def default_side(d: int, block_n: int, o_path: int | None = None) -> str | None:
    """The side whose kernel a plain call of head dim d ran, from its key-block width and, past D=128, where its
    epilogue staged O (None: none of them). O path 4 (the read-late build a routed D=256 O-in-V call runs) is the ov
    side's."""
    if o_path == 4:
        o_path = SIDE_O_PATH["ov"]
    for side, widths in SIDE_BLOCK_N.items():
        w = widths.get(build_of(d))
        if not (applies(side, d) and side != "pad128" and w is not None and block_n == w):
            continue
        if side in SIDE_O_PATH and o_path is not None and SIDE_O_PATH[side] != o_path:
            continue
        return side
    return None


def switch(backend: str):
    """The library setting a vidattn side runs under."""
    from vidattn import _ext
    if backend == "d96_2wg":
        return _ext.d96_warpgroups(2)
    if backend == "d96_3wg":
        return _ext.d96_warpgroups(3)
    if backend == "wide":
        return _ext.hd_narrow(2)
    if backend == "narrow":
        return _ext.hd_narrow(1)
    if backend == "ov":
        return _ext.hd_narrow(3)
    if backend == "pad128":
        return _ext.d96_build(128)
    return contextlib.nullcontext()


def last_o_path() -> int | None:
    """_ext.last_o_path(), or None from a library that predates it."""
    from vidattn import _ext
    try:
        return _ext.last_o_path()
    except RuntimeError:
        return None


def take_launch_error() -> str | None:
    """The refusal of a launch the library turned down, taken back: a refused launch turns the kernel off for the
    process (vidattn/_ext.py, forward), so every vidattn side after it would time SDPA under its own name. Taken
    back, it fails only the side that caused it."""
    from vidattn import _ext
    err, _ext._launch_error = _ext._launch_error, None
    return err


def flops(b: int, h: int, s: int, d: int) -> float:
    return 4.0 * b * h * s * s * d


def n_sets(set_bytes: int, l2_bytes: int) -> int:
    """Input sets to rotate so that the sets between two uses of one exceed twice the L2 (at least 2, at most
    MAX_SETS: a set larger than the L2 alone cannot be cache-hot on its next use)."""
    return max(2, min(MAX_SETS, math.ceil(2 * l2_bytes / max(set_bytes, 1)) + 1))


def make_call(backend: str, sets):
    """A function of the call index running `backend` on input set index % len(sets)."""
    import torch.nn.functional as F
    if backend in VIDATTN_SIDES or backend == "default":
        import vidattn
        return lambda i: vidattn.attention(*sets[i % len(sets)], layout="bshd")
    if backend == "cudnn":
        tsets = [tuple(t.transpose(1, 2) for t in qkv) for qkv in sets]
        return lambda i: F.scaled_dot_product_attention(*tsets[i % len(tsets)])
    if backend == "fa3":
        import anchor_impls
        return lambda i: anchor_impls.fa3(*sets[i % len(sets)])
    raise KeyError(backend)


def backend_context(backend: str):
    if backend == "cudnn":
        from torch.nn.attention import SDPBackend, sdpa_kernel
        return sdpa_kernel(SDPBackend.CUDNN_ATTENTION)
    return switch(backend) if backend in VIDATTN_SIDES else contextlib.nullcontext()


class CudaSpan:
    """One CUDA event pair around a run of calls; `lead()` first queues a short busy kernel so that the host is
    ahead of the GPU when the first event records (the first call's dispatch is then not in the span)."""

    def __init__(self, lead_cycles: int = 2_000_000):
        import torch
        self.torch, self.lead_cycles = torch, lead_cycles

    def lead(self):
        self.torch.cuda._sleep(self.lead_cycles)

    def start(self):
        self.a = self.torch.cuda.Event(enable_timing=True)
        self.b = self.torch.cuda.Event(enable_timing=True)
        self.a.record()

    def stop(self) -> float:
        self.b.record()
        self.b.synchronize()
        return self.a.elapsed_time(self.b)


def time_back_to_back(call, calls: int, span, first: int = 0) -> float:
    """Milliseconds per call of `calls` back-to-back calls call(first), call(first + 1), ... in one span (the call
    index picks the rotating input set)."""
    span.lead()
    span.start()
    for i in range(first, first + calls):
        call(i)
    return span.stop() / calls


def calls_for(one_ms: float, target_ms: float, n_sets_: int) -> int:
    """Calls per span: about target_ms of work, at least one pass over the sets, at most 200."""
    return max(n_sets_, min(200, math.ceil(target_ms / max(one_ms, 1e-3))))


def rounds_order(sides: list[str], r: int) -> list[str]:
    """Round r's order: the sides rotated by r, so no side always runs first or after the same one."""
    if not sides:
        return []
    k = r % len(sides)
    return sides[k:] + sides[:k]


def rel_l2(a, b) -> float:
    a, b = a.float(), b.float()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


HEAD = ["shape", "d96_2wg", "d96_3wg", "pad128", "wide", "narrow", "ov", "fa3", "cudnn", "default", "def/fa3",
        "def/cudnn", "best", "best/def", "narrow/wide rounds", "ov/wide rounds"]
# the per-round ratios the table's last columns give: side / wide, min..max over rounds
PAIRED = ("narrow", "ov")


def paired_ratios(samples: dict[str, list[float]], spans: int, side: str, base: str = "wide") -> list[float]:
    """Per round, base's median span over side's (a rate ratio: > 1 means side is faster), from the samples of
    both taken in that round (`spans` consecutive samples per round)."""
    a, b = samples.get(side), samples.get(base)
    if not a or not b:
        return []
    rounds = min(len(a), len(b)) // spans
    return [statistics.median(b[r * spans:(r + 1) * spans]) / statistics.median(a[r * spans:(r + 1) * spans])
            for r in range(rounds)]


def table(rows: list[dict]) -> str:
    """Median TFLOPS per side; the default routing's pick, its ratios to FA3 and cuDNN; the best vidattn side and
    its gain over the default."""
    lines = [" | ".join(HEAD)]
    for r in rows:
        t = r["tflops"]
        sides = {b: t[b] for b in VIDATTN_SIDES if t.get(b)}
        best = max(sides, key=sides.get) if sides else None
        dflt = r.get("default")

        def ratio(x, y):
            return f"{t[x] / t[y]:.3f}" if x and y and t.get(x) and t.get(y) else "-"
        cells = [r["shape"]] + [f"{t[b]:.0f}" if t.get(b) else "-" for b in HEAD[1:9]]
        cells += [dflt or "-", ratio(dflt, "fa3"), ratio(dflt, "cudnn"), best or "-", ratio(best, dflt)]
        for side in PAIRED:
            pr = r.get("paired", {}).get(side) or []
            cells.append(f"{min(pr):.3f}..{max(pr):.3f}" if pr else "-")
        lines.append(" | ".join(cells))
    return "\n".join(lines)


def matmul_tflops(seconds: float, n: int = 8192) -> dict:
    """Sustained rate of an n x n x n bf16 torch.matmul run back to back for about `seconds` (after a second of
    warm-up at the same load, so the clock has settled at the power limit): the median of 1-second spans."""
    import torch
    a, b = (torch.randn(n, n, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    c = torch.empty(n, n, device="cuda", dtype=torch.bfloat16)
    span = CudaSpan()
    one = time_back_to_back(lambda i: torch.matmul(a, b, out=c), 3, span)
    per_span = max(3, math.ceil(1000.0 / max(one, 1e-3)))
    spans = [time_back_to_back(lambda i: torch.matmul(a, b, out=c), per_span, span)
             for _ in range(1 + max(1, math.ceil(seconds)))][1:]
    rates = [2.0 * n ** 3 / (ms * 1e-3) / 1e12 for ms in spans]
    # spans as short as the attention sides' (about 25 ms after an idle gap), for a like-for-like reading
    short = [time_back_to_back(lambda i: torch.matmul(a, b, out=c), calls_for(one, 25.0, 3), span) for _ in range(3)]
    return {"n": n, "seconds": seconds, "tflops_median": statistics.median(rates), "tflops_spans": rates,
            "tflops_25ms": statistics.median([2.0 * n ** 3 / (ms * 1e-3) / 1e12 for ms in short])}


def write(args, rows: list[dict], fa3_reason, t_start: float) -> tuple[dict, str]:
    """ab.json and ab_table.txt under --out (if given) for the rows so far; the result and the table."""
    import torch
    result = {"rounds": args.rounds, "spans": args.spans, "timing": "back-to-back, rotating input sets",
              "fa3": fa3_reason or "available", "seconds": time.time() - t_start,
              "device": torch.cuda.get_device_name(), "rows": rows}
    text = table(rows)
    if getattr(args, "matmul_result", None):
        result["matmul"] = args.matmul_result
        text += (f"\nbf16 matmul {args.matmul_result['n']}^3 sustained over {args.matmul_result['seconds']:.0f} s: "
                 f"{args.matmul_result['tflops_median']:.0f} TFLOPS (median of 1 s spans), "
                 f"{args.matmul_result['tflops_25ms']:.0f} in 25 ms spans as the attention sides")
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "ab.json").write_text(json.dumps(result, indent=1))
        (args.out / "ab_table.txt").write_text(text + "\n")
    return result, text


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--spans", type=int, default=2, help="spans per side per round")
    ap.add_argument("--target-ms", type=float, default=25.0, help="GPU time per span (sets its call count)")
    ap.add_argument("--shapes", nargs="*", help="names from SHAPES (default: all)")
    ap.add_argument("--out", type=Path)
    ap.add_argument("--skip", nargs="*", default=[], choices=VIDATTN_SIDES,
                    help="vidattn sides to leave out (a variant whose GPU tests failed)")
    ap.add_argument("--matmul", type=float, default=0.0, metavar="SECONDS",
                    help="also time a bf16 8192^3 matmul back to back for this long (0: not)")
    args = ap.parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("hd_variants_ab: needs a CUDA GPU")
    import anchor_impls
    from vidattn import _ext
    fa3_reason = anchor_impls.available().get("fa3")
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)
    t_start = time.time()
    span = CudaSpan()
    rows = []
    for name, b, h, s, d in SHAPES:
        if args.shapes and name not in args.shapes:
            continue
        g = torch.Generator(device="cuda").manual_seed(s + d)
        set_bytes = 4 * b * s * h * d * 2  # q, k, v and the output
        sets = [tuple(torch.randn(b, s, h, d, device="cuda", generator=g, dtype=torch.bfloat16) for _ in range(3))
                for _ in range(n_sets(set_bytes, l2))]
        backends = [x for x in VIDATTN_SIDES if applies(x, d) and x not in args.skip] + ["cudnn"]
        if fa3_reason is None and anchor_impls.supports("fa3", d, h, h) is None:
            backends.append("fa3")
        calls = {x: make_call(x, sets) for x in backends + ["default"]}
        row = {"shape": name, "b": b, "h": h, "s": s, "d": d, "flops": flops(b, h, s, d), "sets": len(sets),
               "ms": {}, "tflops": {}, "block_n": {}, "rel_l2_vs_cudnn": {}, "errors": {}, "backends": backends,
               "calls": {}}
        with backend_context("cudnn"):
            ref = calls["cudnn"](0).transpose(1, 2)
        calls["default"](0)
        torch.cuda.synchronize()
        row["default_block_n"] = _ext.last_block_n()
        row["default_o_path"] = last_o_path()
        row["default"] = default_side(d, row["default_block_n"], row["default_o_path"])
        n_calls = {}
        for x in backends:  # warm-up, the correctness gate, the call count for the target time
            try:
                with backend_context(x):
                    out = calls[x](0)
                    torch.cuda.synchronize()
                    refused = take_launch_error()
                    if refused is not None:
                        raise RuntimeError(refused)
                    if x in VIDATTN_SIDES:
                        row["block_n"][x] = _ext.last_block_n()
                        want = SIDE_O_PATH.get(x)
                        if want is not None and last_o_path() not in (None, want):
                            raise RuntimeError(f"ran with O path {last_o_path()}, not the side's {want}")
                    one = time_back_to_back(calls[x], len(sets), span)
                if x != "cudnn":
                    row["rel_l2_vs_cudnn"][x] = rel_l2(out, ref)
                    if not row["rel_l2_vs_cudnn"][x] < CHECK_REL_L2:
                        raise RuntimeError(f"relative L2 {row['rel_l2_vs_cudnn'][x]:.2e} against cuDNN")
                n_calls[x] = row["calls"][x] = calls_for(one, args.target_ms, len(sets))
            except Exception as exc:  # noqa: BLE001 - a side that fails is reported, the others still time
                row["errors"][x] = f"{type(exc).__name__}: {exc}"
        live = [x for x in backends if x not in row["errors"]]
        samples = {x: [] for x in live}
        for r in range(args.rounds):
            for x in rounds_order(live, r):
                with backend_context(x):
                    for _ in range(args.spans):
                        samples[x].append(time_back_to_back(calls[x], n_calls[x], span))
        refused = take_launch_error()
        if refused is not None:  # a side refused between its warm-up and now: the sides after it timed SDPA
            row["errors"]["rounds"] = refused
        for x in live:
            row["ms"][x] = samples[x]
            row["tflops"][x] = row["flops"] / (statistics.median(samples[x]) * 1e-3) / 1e12
        row["paired"] = {x: paired_ratios(samples, args.spans, x) for x in PAIRED if x in live and "wide" in live}
        rows.append(row)
        print(f"{name}: " + ", ".join(f"{x} {row['tflops'][x]:.0f}" for x in live) +
              (f"; errors {row['errors']}" if row["errors"] else "") +
              f"; default {row['default']} (N={row['default_block_n']}); block_n {row['block_n']}", flush=True)
        del sets, ref, calls
        torch.cuda.empty_cache()
        write(args, rows, fa3_reason, t_start)  # each row as it lands: a timeout keeps what was measured
    if args.matmul > 0:
        args.matmul_result = matmul_tflops(args.matmul)
        print(f"matmul: {args.matmul_result['tflops_median']:.0f} TFLOPS sustained", flush=True)
    result, text = write(args, rows, fa3_reason, t_start)
    print(f"\nhd_variants_ab: {args.rounds} rounds x {args.spans} spans, back to back, {time.time() - t_start:.0f} s, "
          f"FA3 {result['fa3']}")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
