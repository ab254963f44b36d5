"""Issue 26's grouped-query bar as one sign test (prepared in the tenth sitting; not run yet): 32 query heads over 8
key/value heads at D=128 and 32K tokens ("gqa") against the equal-head call of the same queries ("mha", 32 key/value
heads), per query head (the same FLOPs: 4 * B * Hq * S^2 * D), in palindrome rounds of back-to-back spans over
rotating input sets larger than twice the L2 (dev/probes/hd_variants_ab.py's timer, dev/probes/envelope_rules.py's
sign test), with FlashAttention-3 on the grouped inputs ("fa3") and cuDNN (SDPA with enable_gqa, "cudnn") in the
same rounds where available. Each side's output is checked against cuDNN's before it is timed.

    python3 dev/probes/gqa_ab.py --out $OUT/gqa [--rounds 16] [--seq 32768] [--target-ms 20]
    python3 dev/probes/gqa_ab.py --dry-run

Rule, fixed before the run (issue 26: "at least the speed of the equal-head kernel per query head, and at least FA3
with GQA"): met when the sign test does not call gqa a loss against mha (envelope_rules.verdict: "win" or "tie") and
the median per-round ratio gqa / fa3 is >= 1.00. The two-round anchors tables read gqa 0.99x and 1.00x mha per query
head (docs/results.md, the seventh and tenth sittings), inside their spread: this decides it.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "dev" / "probes"))  # the other probes, imported as modules (clock_probe.py's way)
import envelope_rules as rules  # noqa: E402

SIDES = ("gqa", "mha", "fa3", "cudnn")
DEVICE = "cuda"


def decide(spans: dict[str, list[list[float]]]) -> dict:
    """The rule above from the rounds' spans (ms per call; spans[side][round] = that round's spans)."""
    out = {"gqa_vs_mha": rules.verdict(rules.round_ratios(spans, "mha", "gqa"))}
    for anchor in ("fa3", "cudnn"):
        r = rules.round_ratios(spans, anchor, "gqa")
        out[f"gqa_over_{anchor}"] = statistics.median(r) if r else None
    fa3 = out["gqa_over_fa3"]
    out["met"] = out["gqa_vs_mha"]["verdict"] in ("win", "tie") and fa3 is not None and fa3 >= 1.0
    out["why"] = (f"gqa vs mha: {rules.describe(out['gqa_vs_mha'])}; gqa / FA3 "
                  + (f"{fa3:.3f}" if fa3 is not None else "not measured (no FA3)"))
    return out


def plan(args) -> dict:
    b, hq, hkv, s, d = 1, 32, 8, args.seq, 128
    return {"shape": f"{b}x{hq}/{hkv}x{s}x{d}", "b": b, "hq": hq, "hkv": hkv, "s": s, "d": d,
            "flops_per_call": 4.0 * b * hq * s * s * d, "rounds": args.rounds, "sides": list(SIDES),
            "rule": "gqa not a loss against mha (sign test) and gqa / fa3 >= 1.00 (median of per-round ratios)"}


def run(args) -> dict:
    import torch
    import torch.nn.functional as F

    import anchor_impls
    import vidattn

    import hd_variants_ab as timer
    p = plan(args)
    b, hq, hkv, s, d = p["b"], p["hq"], p["hkv"], p["s"], p["d"]
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)
    n = timer.n_sets(2 * b * s * hq * d * 2 * 2, l2)
    g = torch.Generator(device=DEVICE).manual_seed(s)

    def rnd(h):
        return torch.randn(b, s, h, d, device=DEVICE, generator=g, dtype=torch.bfloat16)

    grouped = [(rnd(hq), rnd(hkv), rnd(hkv)) for _ in range(n)]
    equal = [(q, rnd(hq), rnd(hq)) for q, _, _ in grouped]
    tgrouped = [tuple(t.transpose(1, 2) for t in x) for x in grouped]
    calls = {"gqa": lambda i: vidattn.attention(*grouped[i % n], layout="bshd"),
             "mha": lambda i: vidattn.attention(*equal[i % n], layout="bshd"),
             "fa3": lambda i: anchor_impls.fa3(*grouped[i % n]),
             "cudnn": lambda i: F.scaled_dot_product_attention(*tgrouped[i % n], enable_gqa=True)}
    with timer.backend_context("cudnn"):
        ref = calls["cudnn"](0).transpose(1, 2)
        ref_mha = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in equal[0])).transpose(1, 2)
    span = timer.CudaSpan()
    result = dict(p, sets=n, errors={}, rel_l2={}, calls={}, tflops={}, spans={})
    fa3_reason = anchor_impls.available().get("fa3") or anchor_impls.supports("fa3", d, hq, hkv)
    sides = [x for x in SIDES if not (x == "fa3" and fa3_reason is not None)]
    if fa3_reason is not None:
        result["errors"]["fa3"] = str(fa3_reason)
    def check(x, out):
        if x in ("gqa", "mha"):
            why = vidattn.explain(*(grouped if x == "gqa" else equal)[0], layout="bshd")
            if why is not None:
                raise RuntimeError(f"vidattn would not run its kernel: {why}")
        if x != "cudnn":
            result["rel_l2"][x] = timer.rel_l2(out, ref_mha if x == "mha" else ref)
            if not result["rel_l2"][x] < timer.CHECK_REL_L2:
                raise RuntimeError(f"relative L2 {result['rel_l2'][x]:.2e} against cuDNN")

    measure(calls, sides, result, args, n, span, check, context=lambda x: timer.backend_context(
        "cudnn" if x == "cudnn" else "default"))
    result["decision"] = decide(result["spans"])
    return result


def measure(calls: dict, sides: list, result: dict, args, n: int, span, check, context=None) -> None:
    """The probes' shared timing (this one's and q8_gqa_ab.py's): each side's first call checked (`check(side, out)`
    raises on a wrong or misrouted one, which is then reported in result["errors"] and left out), its span sized to
    args.target_ms, then args.rounds palindrome rounds of back-to-back spans over the `n` rotating input sets; fills
    result's "calls", "spans" and "tflops" (per result["flops_per_call"]). `context(side)`: a context manager each
    call of that side runs in (an SDPA backend choice), or None."""
    import contextlib

    import torch

    import hd_variants_ab as timer
    ctx = context or (lambda x: contextlib.nullcontext())
    for x in sides:
        try:
            with ctx(x):
                out = calls[x](0)
                torch.cuda.synchronize()
                check(x, out)
                one = timer.time_back_to_back(calls[x], n, span)
                result["calls"][x] = timer.calls_for(one, args.target_ms, n)
        except Exception as exc:  # noqa: BLE001 - a failing side is reported; the others still time
            result["errors"][x] = f"{type(exc).__name__}: {exc}"
    live = [x for x in sides if x not in result["errors"]]
    spans = {x: [[] for _ in range(args.rounds)] for x in live}
    for r in range(args.rounds):
        for x in rules.palindrome(live, r):
            with ctx(x):
                spans[x][r].append(timer.time_back_to_back(calls[x], result["calls"][x], span, first=r))
    result["spans"] = spans
    for x in live:
        ms = statistics.median(t for rr in spans[x] for t in rr)
        result["tflops"][x] = result["flops_per_call"] / (ms * 1e-3) / 1e12


def rounds_ok(args, tool: str) -> bool:
    """Whether --rounds allows a sign test (the probes' shared check; says why not on stderr)."""
    if args.rounds < rules.MIN_ROUNDS:
        print(f"{tool}: --rounds must be >= {rules.MIN_ROUNDS}", file=sys.stderr)
        return False
    return True


def base_parser(doc: str, rounds: int) -> argparse.ArgumentParser:
    """The arguments this probe and q8_gqa_ab.py share: --out, --rounds, --seq, --target-ms, --dry-run."""
    ap = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--rounds", type=int, default=rounds)
    ap.add_argument("--seq", type=int, default=32768)
    ap.add_argument("--target-ms", type=float, default=20.0, help="GPU time per span")
    ap.add_argument("--dry-run", action="store_true", help="print the plan and the rule, no GPU")
    return ap


def parse_args(argv=None):
    return base_parser(__doc__, 16).parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not rounds_ok(args, "gqa_ab"):
        return 2
    if args.dry_run:
        print(json.dumps(plan(args), indent=1))
        return 0
    finish(args, run(args), "gqa.json")
    return 0


def finish(args, result: dict, name: str, head: str = "") -> None:
    """Write the result to args.out/name (when --out is given), then print the TFLOPS line and the verdict (the
    probes' shared ending)."""
    if args.out is not None:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / name).write_text(json.dumps(result, indent=1))
    print(head + ", ".join(f"{x} {t:.0f}" for x, t in result["tflops"].items()) + " TFLOPS per query head"
          + (f"; errors {result['errors']}" if result["errors"] else ""))
    if result.get("decision") is not None:
        print(f"{result['decision']['why']} -> {'met' if result['decision']['met'] else 'not met'}")


if __name__ == "__main__":
    sys.exit(main())
