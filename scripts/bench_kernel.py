#!/usr/bin/env python3
"""Kernel benchmark: vidattn against SDPA (default, cuDNN, flash) on the anchor kernel table (docs/results.md,
"Kernel").

Every anchor shape is timed in bf16, non-causal, with inputs held the way diffusers' processors hold them:
(B, S, H, D) tensors. vidattn takes them as they are (layout="bshd"); SDPA takes `.transpose(1, 2)` views
of the same tensors (B, H, S, D with non-contiguous strides) and its (B, H, S, D) output is left as it
comes (no copy back to BSHD is timed). FLOPs = 4·B·H·Sq·Skv·D. Each measurement is the median of
`triton.testing.do_bench` (which also clears L2 before every call), or of a CUDA-event loop when triton is
missing; the backends are measured round by round (--rounds, default 4; a multiple of 4 balances the four backends),
each round in the order of a Williams design (bench/round_order.py: over four rounds every backend runs right after
every other one once), and each one's time is the median of its rounds, the ratio's spread over rounds going into the
JSON. On the long shapes the card runs at its power limit, where a kernel's clock depends on what ran just before it.
Until the twelfth session each round rotated one fixed order (`--order rotated` still does), which kept every
backend's neighbour fixed: vidattn always ran right after FlashAttention-2 and cuDNN right after SDPA's default
(cuDNN again). When one input set is smaller than about twice the L2 several sets are rotated so timings are not
cache-hot.

Before timing a shape, vidattn's output is checked against SDPA's (relative L2 < 2e-2) and
`vidattn.explain` records whether the kernel ran or why it fell back. Results go to a markdown table on
stdout and a JSON file (run metadata + per-shape results), rewritten after every shape so a run cut short
still leaves its numbers.

Causal shapes ("causal ..." in EXTRA_SHAPES, timed when --shapes names them: `--shapes causal`) run every backend with
the mask: vidattn with causal=True, SDPA (default, cuDNN, flash) with is_causal=True, all top-left at Sq = Skv. Their
FLOPs count only the query-key pairs the mask keeps, 4·B·H·D·S(S+1)/2 (about half the dense count; FlashAttention's
benchmarks halve it), so their TFLOPS compare with each other and not with the dense shapes'.

    python scripts/bench_kernel.py                       # all shapes, all backends
    python scripts/bench_kernel.py --shapes Wan --quick  # a subset, fewer repetitions
    python scripts/bench_kernel.py --dry-run             # list shapes and FLOPs (no GPU needed)
    ncu --clock-control none -k regex:vidattn python scripts/bench_kernel.py --profile --shapes "Wan2.1-1.3B"
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import math
import statistics
import sys
import time
import traceback
from dataclasses import asdict
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
from bench.anchor_shapes import SHAPES, Shape  # noqa: E402
from bench.envinfo_light import git_commit, short_commit  # noqa: E402
from bench.round_order import ORDERS, round_orders  # noqa: E402
from bench.timing import Timer, l2_bytes  # noqa: E402

BACKENDS = ("vidattn", "sdpa", "cudnn", "flash")  # the default run: the exact comparison
# Timed only when --backends names them: the 8-bit path is not exact.
# vidattn_narrow: D=192/256 (bf16) on the narrow builds with the separate O scratch, the wide builds' A/B partner.
OPTIONAL_BACKENDS = ("8bit", "vidattn_narrow")
ALL_BACKENDS = BACKENDS + OPTIONAL_BACKENDS
BACKEND_NOTES = {
    "vidattn": "vidattn.attention(q, k, v, layout='bshd') on the (B,S,H,D) tensors; output (B,S,H,D)",
    "sdpa": "F.scaled_dot_product_attention on q.transpose(1,2) views (B,H,S,D, non-contiguous), "
            "torch's default backend choice; output (B,H,S,D), not copied back",
    "cudnn": "as sdpa, inside sdpa_kernel(SDPBackend.CUDNN_ATTENTION)",
    "flash": "as sdpa, inside sdpa_kernel(SDPBackend.FLASH_ATTENTION) (FlashAttention-2 in torch)",
    "vidattn_narrow": "as vidattn, with vidattn._ext.set_hd_narrow(1) around each call: head dims 136..256 (bf16) on "
                      "the D=192 N=96 / D=256 N=64 builds with the separate O scratch instead of the wide ones",
    "8bit": "vidattn.attention(q, k, v, layout='bshd', precision='8bit') on the (B,S,H,D) tensors: INT8 QK + e4m3 "
            "PV, its quantization pre-pass (K smoothing, scales, V transposed) inside the timing; output (B,S,H,D). "
            "Up to vidattn.quant8.short_kv_exact_max(D) keys (7680 at D=128, 12288 at D=64) that call runs the "
            "exact kernel (faster there; 8bit_fallback_reason says so): VIDATTN_Q8_SHORT_KV_EXACT_MAX=0 times the 8-bit kernel at every length",
}
CHECK_REL_L2 = 2e-2
CHECK_REL_L2_8BIT = 6e-2
MAX_ROTATING_SETS = 8


# The anchor kernel table (docs/results.md, "Kernel"), in its order (bench/anchor_shapes.py, shared with the A/B
# scripts).


# Shapes outside the anchor table, timed only when --shapes names them: head dims the kernel pads onto a build of its
# own (Allegro's 24 x 96 at 720p) and grouped-query K/V (cuDNN through SDPA's enable_gqa).
class CausalShape(Shape):
    """A shape timed with the causal mask (top-left; Sq = Skv, so every backend's is_causal means the same). Not a
    dataclass of its own: the module is also loaded by path, without a sys.modules entry, which dataclass() needs."""
    causal = "top_left"

    @property
    def flops(self) -> int:
        # only the kept query-key pairs: query i sees keys 0..i
        assert self.sq == self.skv, "causal bench shapes are square"
        return 4 * self.b * self.h * self.d * self.sq * (self.sq + 1) // 2


# FlashAttention's benchmark sizes: 16K tokens per batch at 8K (B=2), heads of 2048 / D, so the GPU is full.
CAUSAL_SHAPES = [
    CausalShape("causal 8K D128", 2, 16, 8192, 8192, 128, key="causal_8k_d128"),
    CausalShape("causal 32K D128", 1, 16, 32768, 32768, 128, key="causal_32k_d128"),
    CausalShape("causal 8K D64", 2, 32, 8192, 8192, 64, key="causal_8k_d64"),
    CausalShape("causal 32K D64", 1, 32, 32768, 32768, 64, key="causal_32k_d64"),
]

# The head-dim builds (docs/guide/head_dims.md; `--shapes headdim`): D=96, 192 and 256 at 1K, 8K and 32K tokens, 16
# heads and as many batches as make 2048-4096 Q tiles of 128 rows (15-31 rounds on 132 SMs), and D=112 (Sana's
# layers) on the D=128 build, padded.
HEAD_DIM_SHAPES = [
    Shape(f"headdim D{d} {n // 1024}K", b, 16, n, n, d, key=f"headdim_d{d}_{n // 1024}k")
    for d in (96, 192, 256) for n, b in ((1024, 16), (8192, 2), (32768, 1))
] + [Shape("headdim D112 8K", 2, 16, 8192, 8192, 112, key="headdim_d112_8k")]

EXTRA_SHAPES = [
    Shape("Allegro D96", 1, 24, 79200, 79200, 96, key="allegro_d96"),
    Shape("GQA 32q/8kv 32K", 1, 32, 32768, 32768, 128, key="gqa_32q8kv_32k", h_kv=8),
] + HEAD_DIM_SHAPES + CAUSAL_SHAPES


def causal_of(s: Shape) -> str | None:
    return getattr(s, "causal", None)


def select_shapes(patterns: list[str] | None) -> list[Shape]:
    if not patterns:
        return list(SHAPES)
    pats = [p.lower() for p in patterns]
    return [s for s in SHAPES + EXTRA_SHAPES if any(p in s.name.lower() for p in pats)]


def gqa_kwargs(q, k, causal: str | None = None) -> dict:
    """SDPA's enable_gqa for (B,H,S,D) views whose K/V have fewer heads, and is_causal for a causal shape (square:
    SDPA's top-left is the mask); nothing otherwise (the anchors' calls)."""
    kw = {"enable_gqa": True} if k.shape[1] != q.shape[1] else {}
    if causal is not None:
        kw["is_causal"] = True
    return kw


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", nargs="*", default=None,
                    help="keep shapes whose name contains any of these substrings (case-insensitive); "
                         "comma-separated lists work too")
    ap.add_argument("--backends", default=",".join(BACKENDS),
                    help=f"comma-separated subset of {','.join(ALL_BACKENDS)}")
    ap.add_argument("--quick", action="store_true", help="fewer repetitions (do_bench warmup 10 ms, rep 40 ms)")
    ap.add_argument("--rounds", type=int, default=4,
                    help="backends timed round by round this many times; each backend's time is its median")
    ap.add_argument("--order", choices=ORDERS, default="williams",
                    help="each round's backend order: a Williams design (every backend after every other one "
                         "equally often) or the earlier rotation of one fixed order (bench/round_order.py)")
    ap.add_argument("--profile", action="store_true",
                    help="run vidattn exactly once on the first selected shape (for ncu) and exit")
    ap.add_argument("--dry-run", action="store_true", help="list shapes and FLOPs, touch no GPU")
    ap.add_argument("--out", default=None,
                    help="JSON path, or a directory (existing, or ending in '/') to put the default name in; "
                         "default bench/results/kernel_<date>_<short-commit>.json")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-progress", action="store_true", help="no tqdm progress bar")
    args = ap.parse_args(argv)
    if args.shapes:
        args.shapes = [p.strip() for s in args.shapes for p in s.split(",") if p.strip()]
    args.backends = [b.strip() for b in args.backends.split(",") if b.strip()]
    bad = [b for b in args.backends if b not in ALL_BACKENDS]
    if bad:
        ap.error(f"unknown backend(s) {bad}; choose from {list(ALL_BACKENDS)}")
    if not args.backends:
        ap.error("--backends names no backend")
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    return args


def fmt_tflops(x) -> str:
    return f"{x:.0f}" if isinstance(x, (int, float)) and x == x else "-"


def dry_run_table(shapes: list[Shape]) -> str:
    lines = ["| shape | B | H | Sq × Skv | D | GFLOP | min bytes (MB) | anchor cuDNN | anchor FA3 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in shapes:
        lines.append(f"| {s.name} | {s.b} | {s.h} | {s.sq} × {s.skv} | {s.d} | {s.flops / 1e9:.1f} | "
                     f"{s.bytes_bf16() / 1e6:.1f} | {fmt_tflops(s.anchor_cudnn)} | {fmt_tflops(s.anchor_fa3)} |")
    return "\n".join(lines)


def default_out_name() -> str:
    return f"kernel_{datetime.date.today().isoformat()}_{short_commit(git_commit(REPO))}.json"


def resolve_out(out: str | None) -> Path:
    if out is None:
        return REPO / "bench" / "results" / default_out_name()
    p = Path(out)
    if out.endswith("/") or p.is_dir():
        return p / default_out_name()
    return p


# ----------------------------------------------------------------------------------------------- GPU side

def _is_oom(exc: BaseException) -> bool:
    import torch
    return isinstance(exc, torch.cuda.OutOfMemoryError) or "out of memory" in str(exc).lower()


def _err(exc: BaseException) -> str:
    msg = f"{type(exc).__name__}: {exc}"
    return msg if len(msg) < 600 else msg[:600] + " ..."


def make_inputs(s: Shape, n_sets: int, gen):
    import torch
    sets = []
    for _ in range(n_sets):
        q = torch.randn(s.b, s.sq, s.h, s.d, dtype=torch.bfloat16, device="cuda", generator=gen)
        k = torch.randn(s.b, s.skv, s.kv_heads, s.d, dtype=torch.bfloat16, device="cuda", generator=gen)
        v = torch.randn(s.b, s.skv, s.kv_heads, s.d, dtype=torch.bfloat16, device="cuda", generator=gen)
        sets.append((q, k, v))
    return sets


def rel_l2_bshd_vs_bhsd(out_bshd, ref_bhsd, chunk: int = 4096) -> float:
    """‖a − b‖ / ‖b‖ in fp32, where a is (B,S,H,D) and b is (B,H,S,D); chunked over S to bound memory."""
    num = 0.0
    den = 0.0
    ref = ref_bhsd.transpose(1, 2)
    for i in range(0, out_bshd.shape[1], chunk):
        a = out_bshd[:, i:i + chunk].float()
        b = ref[:, i:i + chunk].float()
        num += float((a - b).pow(2).sum())
        den += float(b.pow(2).sum())
    return math.sqrt(num) / max(math.sqrt(den), 1e-30)


def sdpa_context(backend: str):
    if backend in ("vidattn", "sdpa", "8bit", "vidattn_narrow"):
        return contextlib.nullcontext()
    from torch.nn.attention import SDPBackend, sdpa_kernel
    return sdpa_kernel({"cudnn": SDPBackend.CUDNN_ATTENTION, "flash": SDPBackend.FLASH_ATTENTION}[backend])


def make_fn(backend: str, sets, vidattn_mod, causal: str | None = None):
    import torch.nn.functional as F
    counter = itertools.count()
    n = len(sets)
    vkw = {"causal": causal} if causal is not None else {}
    if backend == "vidattn":
        def fn():
            q, k, v = sets[next(counter) % n]
            return vidattn_mod.attention(q, k, v, layout="bshd", **vkw)
        return fn
    if backend == "vidattn_narrow":
        from vidattn import _ext

        def fn():
            q, k, v = sets[next(counter) % n]
            _ext.set_hd_narrow(1)
            try:
                return vidattn_mod.attention(q, k, v, layout="bshd", **vkw)
            finally:
                _ext.set_hd_narrow(0)
        return fn
    if backend == "8bit":
        def fn():
            q, k, v = sets[next(counter) % n]
            return vidattn_mod.attention(q, k, v, layout="bshd", precision="8bit", **vkw)
        return fn
    views = [(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)) for q, k, v in sets]

    def fn():
        q, k, v = views[next(counter) % n]
        return F.scaled_dot_product_attention(q, k, v, **gqa_kwargs(q, k, causal))
    return fn


def sdpa_default_choice(q, k, v, causal: str | None = None) -> str | None:
    """Which backend plain SDPA picks for these (B,H,S,D) views (private torch API; None if unavailable)."""
    import torch
    try:
        from torch.nn.attention import SDPBackend
        idx = int(torch._fused_sdp_choice(q, k, v, **gqa_kwargs(q, k, causal)))
        for b in SDPBackend.__members__.values():
            if int(b) == idx:
                return b.name
        return str(idx)
    except Exception:  # noqa: BLE001
        return None


def timed_backends(backends, vidattn_mod) -> list[str]:
    """The backends a run times: the requested ones, less vidattn when `import vidattn` failed (its error is
    recorded per shape instead). The rounds take these in round_orders' order, and the JSON config says so."""
    return [b for b in backends if not (b in ("vidattn", "8bit", "vidattn_narrow") and vidattn_mod is None)]


def bench_shape(s: Shape, args, timer: Timer, vidattn_mod, vidattn_err: str | None, gen) -> dict:
    import torch
    import torch.nn.functional as F

    res = {**asdict(s), "flops": s.flops, "tflops": {}, "ms": {}, "errors": {}, "n_input_sets": None,
           "vidattn_kernel": None, "vidattn_fallback_reason": None, "check_rel_l2_vs_sdpa": None,
           "check_passed": None, "sdpa_default_backend": None}
    working_set = s.bytes_bf16()
    n_sets = min(MAX_ROTATING_SETS, max(1, math.ceil(2 * l2_bytes() / working_set)))
    res["n_input_sets"] = n_sets
    try:
        sets = make_inputs(s, n_sets, gen)
    except Exception as exc:  # noqa: BLE001
        res["errors"]["inputs"] = _err(exc)
        torch.cuda.empty_cache()
        return res
    q, k, v = sets[0]
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    causal = causal_of(s)
    res["causal"] = causal or False
    vkw = {"causal": causal} if causal is not None else {}
    res["sdpa_default_backend"] = sdpa_default_choice(qt, kt, vt, causal)

    # Correctness before speed: vidattn against default SDPA on the same inputs.
    if "vidattn" in args.backends:
        if vidattn_mod is None:
            res["errors"]["vidattn"] = vidattn_err
        else:
            try:
                reason = vidattn_mod.explain(q, k, v, layout="bshd", **vkw)
                res["vidattn_kernel"] = reason is None
                res["vidattn_fallback_reason"] = reason
                out_v = vidattn_mod.attention(q, k, v, layout="bshd", **vkw)
                out_s = F.scaled_dot_product_attention(qt, kt, vt, **gqa_kwargs(qt, kt, causal))
                torch.cuda.synchronize()
                finite = bool(torch.isfinite(out_v).all())
                rel = rel_l2_bshd_vs_bhsd(out_v, out_s)
                res["check_rel_l2_vs_sdpa"] = rel
                res["check_passed"] = finite and rel < CHECK_REL_L2
                del out_v, out_s
            except Exception as exc:  # noqa: BLE001
                res["errors"]["vidattn_check"] = _err(exc)
                res["check_passed"] = False
                if _is_oom(exc):
                    torch.cuda.empty_cache()

    # The 8-bit path's own check: whether it ran (explain) and its distance from SDPA, against a looser bound (it is not
    # exact: about 4e-2 relative L2 on random inputs, tests/test_8bit_gpu.py).
    if "8bit" in args.backends and vidattn_mod is not None:
        try:
            res["8bit_fallback_reason"] = vidattn_mod.explain(q, k, v, layout="bshd", precision="8bit", **vkw)
            out_8 = vidattn_mod.attention(q, k, v, layout="bshd", precision="8bit", **vkw)
            out_s = F.scaled_dot_product_attention(qt, kt, vt, **gqa_kwargs(qt, kt, causal))
            torch.cuda.synchronize()
            rel = rel_l2_bshd_vs_bhsd(out_8, out_s)
            res["8bit_check_rel_l2_vs_sdpa"] = rel
            res["8bit_check_passed"] = bool(torch.isfinite(out_8).all()) and rel < CHECK_REL_L2_8BIT
            del out_8, out_s
        except Exception as exc:  # noqa: BLE001
            res["errors"]["8bit_check"] = _err(exc)
            res["8bit_check_passed"] = False

    # Backends interleaved round by round, each backend's time the median of its rounds: on the long shapes the GPU
    # runs at its power limit and one measurement of the same kernel moved by up to 8% between calls (dev/NOTES.md,
    # fifth session), so a lone timing per backend made the ratio a draw.
    fns = {b: make_fn(b, sets, vidattn_mod, causal) for b in timed_backends(args.backends, vidattn_mod)}
    rounds: dict[str, list[float]] = {b: [] for b in fns}
    for backend_order in round_orders(fns, args.rounds, args.order):
        for backend in backend_order:
            fn = fns[backend]
            if backend in res["errors"]:
                continue
            try:
                with sdpa_context(backend):
                    if not rounds[backend]:
                        fn()  # surfaces "no available kernel" before timing
                        torch.cuda.synchronize()
                    rounds[backend].append(timer(fn))
            except Exception as exc:  # noqa: BLE001 - record, continue with the next backend
                res["errors"][backend] = _err(exc)
                if _is_oom(exc):
                    torch.cuda.empty_cache()
    for backend, times in rounds.items():
        if times and backend not in res["errors"]:
            ms = statistics.median(times)
            res["ms"][backend] = ms
            res["tflops"][backend] = s.flops / (ms * 1e-3) / 1e12
    res["ms_rounds"] = {b: t for b, t in rounds.items() if t}
    t = res["tflops"]
    res["vidattn_over_cudnn"] = t["vidattn"] / t["cudnn"] if "vidattn" in t and "cudnn" in t else None
    res["vidattn_over_sdpa"] = t["vidattn"] / t["sdpa"] if "vidattn" in t and "sdpa" in t else None
    res["8bit_over_vidattn"] = t["8bit"] / t["vidattn"] if "8bit" in t and "vidattn" in t else None
    # > 1: the wide D=192/256 builds (the default) are faster than the narrow ones
    res["narrow_over_vidattn"] = (t["vidattn_narrow"] / t["vidattn"]
                                  if "vidattn_narrow" in t and "vidattn" in t else None)
    res["8bit_over_cudnn"] = t["8bit"] / t["cudnn"] if "8bit" in t and "cudnn" in t else None
    if res["vidattn_over_cudnn"] is not None:  # the spread: the ratio of each round's two times
        per_round = [c / v for v, c in zip(rounds["vidattn"], rounds["cudnn"])]
        res["vidattn_over_cudnn_rounds"] = [min(per_round), max(per_round)]
    del sets, q, k, v, qt, kt, vt
    torch.cuda.empty_cache()
    return res


def results_table(results: list[dict], backends: list[str]) -> str:
    head = ["shape", "B", "H", "Sq × Skv", "D"] + [f"{b} TFLOPS" for b in backends] + \
        ["vidattn/cuDNN", "vidattn/SDPA", "kernel ran", "rel-L2 vs SDPA"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        ratio = lambda x: f"{x:.3f}" if isinstance(x, float) else "-"  # noqa: E731
        kern = {True: "yes", False: "NO", None: "-"}[r.get("vidattn_kernel")]
        rel = r.get("check_rel_l2_vs_sdpa")
        rel_s = "-" if rel is None else f"{rel:.1e}" + ("" if r.get("check_passed") else " FAIL")
        row = [r["name"], str(r["b"]), str(r["h"]), f"{r['sq']} × {r['skv']}", str(r["d"])] + \
            [fmt_tflops(r["tflops"].get(b)) if b in r["tflops"] else ("err" if b in r["errors"] else "-")
             for b in backends] + \
            [ratio(r.get("vidattn_over_cudnn")), ratio(r.get("vidattn_over_sdpa")), kern, rel_s]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def write_json(path: Path, meta: dict, config: dict, results: list[dict]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps({"metadata": meta, "config": config, "results": results}, indent=1))
    tmp.replace(path)


def profile_once(s: Shape, seed: int) -> int:
    import torch
    import vidattn
    gen = torch.Generator(device="cuda").manual_seed(seed)
    q, k, v = make_inputs(s, 1, gen)[0]
    reason = vidattn.explain(q, k, v, layout="bshd")
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = vidattn.attention(q, k, v, layout="bshd")
    torch.cuda.synchronize()
    dt = time.perf_counter() - t0
    print(f"[profile] {s.name}: one vidattn call, {dt * 1e3:.1f} ms wall (includes any first-call load); "
          f"kernel ran: {reason is None}{'' if reason is None else ' (' + reason + ')'}; "
          f"finite: {bool(torch.isfinite(out).all())}")
    return 0


def main(argv=None) -> int:
    args = parse_args(argv)
    shapes = select_shapes(args.shapes)
    if not shapes:
        print(f"no shape matches {args.shapes}; shapes are: {[s.name for s in SHAPES + EXTRA_SHAPES]}", file=sys.stderr)
        return 2
    if args.dry_run:
        print(dry_run_table(shapes))
        print(f"\n{len(shapes)} shapes; backends: {', '.join(args.backends)}; "
              f"json -> {resolve_out(args.out)}")
        return 0

    import torch
    if not torch.cuda.is_available():
        print("CUDA is not available: nothing to benchmark (use --dry-run to list shapes)", file=sys.stderr)
        return 2
    if args.profile:
        return profile_once(shapes[0], args.seed)

    from vidattn.envinfo import run_metadata
    vidattn_mod, vidattn_err = None, None
    try:
        import vidattn as vidattn_mod
    except Exception as exc:  # noqa: BLE001 - still time the SDPA backends
        vidattn_err = "import vidattn failed: " + _err(exc)
        traceback.print_exc()

    out_path = resolve_out(args.out)
    timer = Timer(args.quick)
    meta = run_metadata()
    if meta.get("git_commit") in (None, "unknown"):
        meta["git_commit"] = git_commit(REPO)
    any_causal = any(causal_of(s) is not None for s in shapes)
    config = {"dtype": "bfloat16", "causal": "per shape (results[].causal)" if any_causal else False,
              "input_layout": "BSHD (diffusers)",
              "backends": args.backends, "backend_notes": {b: BACKEND_NOTES[b] for b in args.backends},
              "timing": timer.method, "warmup_ms": timer.warmup_ms, "rep_ms": timer.rep_ms,
              "rounds": args.rounds, "per_backend_time": "median of the rounds (backends interleaved per round)",
              "round_order": args.order,
              "round_orders": round_orders(timed_backends(args.backends, vidattn_mod), args.rounds, args.order),
              "flops": "4*B*H*Sq*Skv*D" + ("; causal shapes 4*B*H*D*S*(S+1)/2 (the kept pairs)" if any_causal else ""),
              "l2_bytes": l2_bytes(), "check_rel_l2_threshold": CHECK_REL_L2,
              "seed": args.seed}
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    results: list[dict] = []
    try:
        from tqdm import tqdm
        it = tqdm(shapes, desc="shapes", unit="shape", file=sys.stderr, disable=args.no_progress,
                  mininterval=1.0, ascii=True)
    except ImportError:
        it = shapes
    for s in it:
        if hasattr(it, "set_postfix_str"):
            it.set_postfix_str(s.name)
        t0 = time.perf_counter()
        try:
            r = bench_shape(s, args, timer, vidattn_mod, vidattn_err, gen)
        except Exception as exc:  # noqa: BLE001 - never lose the other shapes
            r = {**asdict(s), "flops": s.flops, "tflops": {}, "ms": {}, "errors": {"shape": _err(exc)}}
            torch.cuda.empty_cache()
        r["wall_s"] = time.perf_counter() - t0
        results.append(r)
        write_json(out_path, meta, config, results)
        msg = ", ".join(f"{b} {v:.0f}" for b, v in r["tflops"].items())
        print(f"[bench] {s.name}: {msg or 'no timings'} TFLOPS"
              + (f"; errors: {r['errors']}" if r["errors"] else ""), file=sys.stderr, flush=True)

    print()
    print(f"GPU: {meta.get('gpu')}, torch {meta.get('torch')}, CUDA {meta.get('cuda')}, cuDNN {meta.get('cudnn')}, "
          f"commit {meta.get('git_commit')}; {timer.method}; bf16, BSHD inputs, "
          + ("causal shapes top-left, FLOPs of the kept pairs" if any_causal else "non-causal"))
    print(results_table(results, args.backends))
    print(f"\nJSON: {out_path}")
    bad = [r["name"] for r in results if r.get("check_passed") is False]
    fell_back = [r["name"] for r in results if r.get("vidattn_kernel") is False]
    if fell_back:
        print(f"WARNING: vidattn fell back to SDPA on: {fell_back}")
    if bad:
        print(f"FAILED correctness check (rel-L2 vs SDPA >= {CHECK_REL_L2} or non-finite): {bad}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
