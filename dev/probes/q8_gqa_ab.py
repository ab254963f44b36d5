"""Grouped-query attention at 8 bits (the thirty-third sitting): the 8-bit kernel reading grouped K/V in place
("gqa8") against what a grouped call at precision="8bit" ran before, per route:
- "rep8": K/V repeated to the query heads, then the 8-bit path (the diffusers backend's route: one copy of K and V
  per call, and the pre-pass over every repeated head), the copy timed with the call;
- "gqa": the exact kernel on the grouped K/V (vidattn.attention's route: the 8-bit path refused GQA, so it ran exact);
- "mha8": the 8-bit path on equal heads (32 key/value heads: issue 26's per-query-head bar, at 8 bits);
and, where the anchors are installed, FlashAttention-3 FP8 (its kernel on e4m3 inputs cast beforehand, "fa3_fp8")
and SageAttention2 ("sage2") on the grouped inputs. Palindrome rounds of back-to-back spans over rotating input sets
larger than twice the L2 (dev/probes/hd_variants_ab.py's timer, dev/probes/envelope_rules.py's sign test), as
dev/probes/gqa_ab.py. Every side is checked against cuDNN's output (SDPA with enable_gqa) before it is timed.

    python3 dev/probes/q8_gqa_ab.py --out $OUT/q8_gqa [--rounds 8] [--seq 32768] [--d 128]
    python3 dev/probes/q8_gqa_ab.py --dry-run

Rule, fixed before the run: the grouped 8-bit kernel becomes what grouped calls at precision="8bit" run (it already
is in the tree under test; a miss reverts vidattn.quant8 and the backend to their earlier routes) when the sign test
calls gqa8 a win over both rep8 and gqa, and gqa8 is not a loss against mha8 (per query head).
"""
from __future__ import annotations

import datetime
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))
sys.path.insert(0, str(ROOT / "dev" / "probes"))
import envelope_rules as rules  # noqa: E402
import gqa_ab  # noqa: E402 - the shared timing (measure) and argument check

SIDES = ("gqa8", "rep8", "gqa", "mha8", "fa3_fp8", "sage2")
ANCHORS = ("fa3_fp8", "sage2")
DEVICE = "cuda"


def decide(spans: dict[str, list[list[float]]]) -> dict:
    """The rule above from the rounds' spans (ms per call; spans[side][round] = that round's spans)."""
    out = {f"gqa8_vs_{x}": rules.verdict(rules.round_ratios(spans, x, "gqa8")) for x in ("rep8", "gqa", "mha8")}
    for anchor in ANCHORS:
        r = rules.round_ratios(spans, anchor, "gqa8") if anchor in spans else []
        out[f"gqa8_over_{anchor}"] = statistics.median(r) if r else None
    out["met"] = (out["gqa8_vs_rep8"]["verdict"] == "win" and out["gqa8_vs_gqa"]["verdict"] == "win"
                  and out["gqa8_vs_mha8"]["verdict"] in ("win", "tie"))
    out["why"] = "; ".join(f"gqa8 vs {x}: {rules.describe(out[f'gqa8_vs_{x}'])}" for x in ("rep8", "gqa", "mha8"))
    for anchor in ANCHORS:
        v = out[f"gqa8_over_{anchor}"]
        out["why"] += f"; gqa8 / {anchor} " + (f"{v:.3f}" if v is not None else "not measured")
    return out


def plan(args) -> dict:
    b, hq, hkv, s, d = 1, args.hq, args.hkv, args.seq, args.d
    return {"shape": f"{b}x{hq}/{hkv}x{s}x{d}", "b": b, "hq": hq, "hkv": hkv, "s": s, "d": d,
            "flops_per_call": 4.0 * b * hq * s * s * d, "rounds": args.rounds, "sides": list(SIDES),
            "rule": "gqa8 wins the sign test against rep8 and gqa, and is not a loss against mha8"}


def run(args) -> dict:
    import torch
    import torch.nn.functional as F

    import anchor_impls
    import vidattn
    from vidattn import quant8

    import hd_variants_ab as timer
    quant8.GROUPED_EXACT_HEAD_DIMS = ()  # the 8-bit kernel on grouped K/V at D=64 too: the route is what is measured
    p = plan(args)
    b, hq, hkv, s, d = p["b"], p["hq"], p["hkv"], p["s"], p["d"]
    grp = hq // hkv
    l2 = int(getattr(torch.cuda.get_device_properties(0), "L2_cache_size", 0) or 50 * 2**20)
    n = timer.n_sets(2 * b * s * hq * d * 2 * 2, l2)
    g = torch.Generator(device=DEVICE).manual_seed(s + d)

    def rnd(h):
        return torch.randn(b, s, h, d, device=DEVICE, generator=g, dtype=torch.bfloat16)

    grouped = [(rnd(hq), rnd(hkv), rnd(hkv)) for _ in range(n)]
    equal = [(q, rnd(hq), rnd(hq)) for q, _, _ in grouped]
    tgrouped = [tuple(t.transpose(1, 2) for t in x) for x in grouped]
    prequant = {}

    def fa3_fp8(i):
        x = grouped[i % n]
        if i % n not in prequant:
            prequant[i % n] = anchor_impls.prequantize(*x)
        return anchor_impls.fa3_fp8(*x, prequantized=prequant[i % n])

    calls = {"gqa8": lambda i: vidattn.attention(*grouped[i % n], precision="8bit"),
             "rep8": lambda i: vidattn.attention(grouped[i % n][0], grouped[i % n][1].repeat_interleave(grp, 2),
                                                 grouped[i % n][2].repeat_interleave(grp, 2), precision="8bit"),
             "gqa": lambda i: vidattn.attention(*grouped[i % n]),
             "mha8": lambda i: vidattn.attention(*equal[i % n], precision="8bit"),
             "fa3_fp8": fa3_fp8,
             "sage2": lambda i: anchor_impls.sage2(*grouped[i % n])}
    with timer.backend_context("cudnn"):
        ref = F.scaled_dot_product_attention(*tgrouped[0], enable_gqa=True).transpose(1, 2)
        ref_mha = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in equal[0])).transpose(1, 2)
    span = timer.CudaSpan()
    meta = {"gpu": torch.cuda.get_device_name(0), "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version(), "commit": os.environ.get("VIDATTN_GIT_COMMIT", "unknown"),
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "command": "python3 dev/probes/q8_gqa_ab.py " + " ".join(sys.argv[1:]), "anchors": anchor_impls.versions()}
    result = dict(p, meta=meta, sets=n, errors={}, rel_l2={}, calls={}, tflops={}, spans={}, ran={})
    avail = anchor_impls.available()
    sides = []
    for x in SIDES:
        why = (avail.get(x) or anchor_impls.supports(x, d, hq, hkv)) if x in ANCHORS else None
        if why is not None:
            result["errors"][x] = str(why)
        else:
            sides.append(x)

    def check(x, out):
        if x in ("gqa8", "mha8", "gqa"):
            args_x = (grouped if x != "mha8" else equal)[0]
            why = vidattn.explain(*args_x, precision="exact" if x == "gqa" else "8bit")
            result["ran"][x] = why or "the kernel"
            if why is not None:
                raise RuntimeError(f"vidattn would not run its {'8-bit' if x != 'gqa' else 'exact'} kernel: {why}")
        result["rel_l2"][x] = timer.rel_l2(out, ref_mha if x == "mha8" else ref)
        if not result["rel_l2"][x] < args.check_rel_l2:
            raise RuntimeError(f"relative L2 {result['rel_l2'][x]:.2e} against cuDNN")

    gqa_ab.measure(calls, sides, result, args, n, span, check)
    spans = result["spans"]
    result["decision"] = decide(spans) if all(x in spans for x in ("gqa8", "rep8", "gqa", "mha8")) else None
    return result


def parse_args(argv=None):
    ap = gqa_ab.base_parser(__doc__, 8)
    ap.add_argument("--d", type=int, default=128, choices=(64, 128))
    ap.add_argument("--hq", type=int, default=32)
    ap.add_argument("--hkv", type=int, default=8)
    ap.add_argument("--check-rel-l2", type=float, default=0.12, help="each side against cuDNN (8-bit: ~4e-2)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    if not gqa_ab.rounds_ok(args, "q8_gqa_ab"):
        return 2
    if args.hkv < 1 or args.hq % args.hkv:
        print(f"q8_gqa_ab: --hkv must divide --hq ({args.hq} on {args.hkv})", file=sys.stderr)
        return 2
    if args.dry_run:
        print(json.dumps(plan(args), indent=1))
        return 0
    result = run(args)
    gqa_ab.finish(args, result, f"q8_gqa_{result['shape'].replace('/', 'kv')}.json", head=f"{result['shape']}: ")
    return 0


if __name__ == "__main__":
    sys.exit(main())
