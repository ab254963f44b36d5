"""Device A/B driver of the 8-bit path (csrc/capi_8bit.cuh, csrc/sm90/q8_fwd.cuh, csrc/sm90/q8_quant.cuh): one plan
a run, each a list of variants (head dim and the four selectors: schedule, row-sum mode, score conversion, pre-pass),
the first of each head dim the shipped default (every selector -1), the reference of the ratios.

    python3 dev/q8_selector_ab.py PLAN [--passes N] [--reps 20] [--budget S]

Plans (dev/NOTES_8bit.md has the experiments they served; the defaults of --passes and --budget are the plan's):
- prep (--passes 2, --budget 40): the defaults of call Z (D=128: sequential, score conversion 2; D=64: sequential,
  mode 1, conversion 1; both with the statistics and Q's quantization in one launch), the same kernel with the
  three-launch pre-pass, and the old default (D=128: sequential, I2F; D=64: three-warpgroup ping-pong, I2F; three
  launches). Checks per variant: odd lengths, kv_lens tails with LSE, fp16, a shared key offset, V = ones against
  fp64, and that the launch ran the schedule, conversion and pre-pass it names.
- prep2 (--passes 3, --budget 35): the pre-pass's mode 2 (Q quantized inside the attention kernel,
  q8_quantize_q_tile; quant8.set_prep(2)) against the default fused pre-pass, on the default kernel of each head dim.
  Checks per head dim and mode: odd lengths, kv_lens tails with LSE, fp16, strided (packed QKV) views, the bhsd
  layout, a shared key offset, V = ones, against fp64; mode 2 also against mode 1 on the same inputs (the same Q
  codes by construction: relative L2 between them <= 2e-3, LSE within 1e-3), and that the launch ran the pre-pass it
  names (mode 2 with LSE too; the fused one falls back to three launches there). The table adds the device total
  (kernel + pre-pass; in mode 2 the kernel's time includes Q's quantization).
- sched (--passes 6, --budget 60): the schedules (dev/NOTES_8bit.md v8). D=128: the default (schedule 3, conversion
  2) against the earlier default, schedule 1 with conversion 2, forced; D=64: the default (schedule 1) against itself
  forced: the same kernel twice, the passes' noise floor. prep's checks. The table gives, per pass, the ratio to the
  default's figure of the same pass (synced with quantization, and kernel-only), with the count of passes a variant
  won: the paired comparison the v7 decision used.

Then per shape (Wan 1.3B self, seed 8K, CogVideoX, LTX) `--passes` alternating passes (the order reversed every other
pass) of: TFLOPS with the quantization, each call synchronized (CUDA events around one call, median of `--reps`: the
figure the guide has quoted, host time before the first launch included); TFLOPS of `--reps` calls queued back to
back between two events (a model's forward: the host runs ahead, so only the device's time counts); and from
torch.profiler the device time of q8_fwd_kernel and of the pre-pass kernels (memset included). The relative L2
against fp64 on 128 query rows spread over the sequence. JSON to $OUT/q8_<PLAN>_ab.json; the table last.
dev/q8_selector_ab.sh runs a plan as a device stage with its GPU tests.
"""
import argparse
import importlib.util
import json
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass
from typing import Callable

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location("q8_check", os.path.join(HERE, "q8_check.py"))
qc = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(qc)
import vidattn  # noqa: E402
from vidattn import quant8  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
DEV = torch.device("cuda")
DEFAULT = (-1, -1, -1, -1)  # every selector left to the build's default

# The conversion each head dim's default must report (the pre-pass without LSE: 1), and its schedule (D=128: 3, the
# exponentials in turns, since call Q; D=64: 1, sequential).
EXPECT = {128: {-1: 2, 0: 0}, 64: {-1: 1, 0: 0}}
EXPECT_SEQ = {128: 3, 64: 1}
SHAPES = [("Wan 1.3B self", 1, 12, 32760, 128), ("seed 8K", 4, 16, 8192, 128), ("CogVideoX", 1, 48, 17776, 64),
          ("LTX", 1, 32, 24576, 64)]


def select(seq, mode, cvt, prep):
    quant8.set_sequential(seq)
    quant8.set_sum_mma(mode)
    quant8.set_cvt(cvt)
    quant8.set_prep(prep)


def run(q, k, v):
    return vidattn.attention(q, k, v, precision="8bit")


def checks_fp64(variants, results):
    """Each variant on a few cases against fp64, and the schedule, conversion and pre-pass its launch ran; returns
    {name: ok}."""
    g = torch.Generator(device=DEV)
    g.manual_seed(1357)
    ok = {}
    for name, d, seq, mode, cvt, prep in variants:
        try:
            select(seq, mode, cvt, prep)
            recs = []
            for (b, h, sq, skv) in [(1, 2, 1, 77), (1, 2, 113, 113), (2, 3, 1023, 517), (1, 2, 300, 4097)]:
                q, k, v = qc.make(b, h, sq, skv, d, gen=g)
                recs.append(qc.case(f"{name} {b}x{h}x{sq}x{skv}", q, k, v, bound=5e-2))
                ran = (quant8.last_sequential(), quant8.last_cvt(), quant8.last_prep())
                recs.append(qc.case(f"{name} {b}x{h}x{sq}x{skv} lse", q, k, v, want_lse=True, bound=5e-2))
                ran_lse_prep = quant8.last_prep()
            q, k, v = qc.make(3, 2, 777, 1000, d, gen=g)
            lens = torch.tensor([1000, 37, 129], device=DEV, dtype=torch.int32)
            recs.append(qc.case(f"{name} kv_lens", q, k, v, kv_lens=lens))
            recs.append(qc.case(f"{name} fp16 kv_lens lse", q.half(), k.half(), v.half(), kv_lens=lens, want_lse=True))
            mass = float((run(q, k, torch.ones_like(v)).double() - 1).abs().max())
            q, k, v = qc.make(1, 4, 2048, 2048, d, gen=g)
            off = 8.0 * torch.randn(d, device=DEV, generator=g)
            recs.append(qc.case(f"{name} key offset", q, (k.float() + off).to(k.dtype), v))
            want = (EXPECT_SEQ[d] if seq < 0 else seq, EXPECT[d][cvt] if cvt < 0 else cvt, 1 if prep < 0 else prep)
            ok[name] = all(r["ok"] for r in recs) and mass <= 2e-2 and ran == want and ran_lse_prep == 0
            results["checks"].append({"variant": name, "ok": ok[name], "V=ones": mass, "ran": ran,
                                      "lse_prep": ran_lse_prep, "rel_l2": [round(r["rel_l2"], 5) for r in recs]})
            print(f"[{name}] checks {'ok' if ok[name] else 'FAIL'} (ran schedule, cvt, prep {ran}, with LSE prep "
                  f"{ran_lse_prep}, V=ones {mass:.1e})", flush=True)
        except Exception as exc:  # noqa: BLE001 - one variant's error must not end the A/B
            import traceback
            traceback.print_exc()
            ok[name] = False
            print(f"[{name}] ERROR {exc!r}", flush=True)
    select(*DEFAULT)
    return ok


def _bshd(t, layout):
    return t if layout == "bshd" else t.transpose(1, 2)


def _call(q, k, v, layout="bshd", kv_lens=None, lse=False):
    r = vidattn.attention(q, k, v, layout=layout, kv_lens=kv_lens, return_lse=lse, precision="8bit")
    torch.cuda.synchronize()
    out, l = r if lse else (r, None)
    return _bshd(out, layout), l, quant8.last_prep()


def checks_vs_default(variants, results):
    """Per head dim (two variants: the default, then another pre-pass on the same kernel): both against fp64, the
    second against the first; returns {variant name: ok}."""
    g = torch.Generator(device=DEV)
    g.manual_seed(2468)
    ok = {}
    for d in (128, 64):
        base, mine = [vt for vt in variants if vt[1] == d]
        good = {base[0]: True, mine[0]: True}
        try:
            # (b, h, sq, skv, dtype, layout, kv_lens, lse, strided)
            cases = [(1, 2, 1, 77, torch.bfloat16, "bshd", None, False, False),
                     (1, 2, 113, 113, torch.bfloat16, "bshd", None, True, False),
                     (3, 2, 777, 1000, torch.bfloat16, "bshd", [1000, 37, 129], True, False),
                     (3, 2, 777, 1000, torch.float16, "bhsd", [1000, 37, 129], True, False),
                     (1, 3, 2049, 4097, torch.bfloat16, "bshd", None, False, True),
                     (2, 2, 1500, 1100, torch.float16, "bhsd", None, True, True)]
            for (b, h, sq, skv, dtype, layout, lens, lse, strided) in cases:
                if strided:
                    qp = torch.randn(b, sq, 3, h, d, device=DEV, generator=g).to(dtype)
                    kvp = torch.randn(b, skv, 3, h, d, device=DEV, generator=g).to(dtype)
                    q, k, v = qp[:, :, 0], kvp[:, :, 1], kvp[:, :, 2]
                else:
                    q, k, v = (torch.randn(b, n, h, d, device=DEV, generator=g).to(dtype) for n in (sq, skv, skv))
                k.add_((4.0 * torch.randn(d, device=DEV, generator=g)).to(dtype))  # a shared key offset, in place
                if layout == "bhsd":
                    q, k, v = (t.transpose(1, 2) for t in (q, k, v))
                kv_lens = torch.tensor(lens, device=DEV, dtype=torch.int32) if lens else None
                qb, kb, vb = (_bshd(t, layout) for t in (q, k, v))
                o_ref, lse_ref = qc.ref64(qb, kb, vb, 1.0 / math.sqrt(d), kv_lens)
                outs = {}
                for name, _, seq, mode, cvt, prep in (base, mine):
                    select(seq, mode, cvt, prep)
                    o, l, ran = _call(q, k, v, layout, kv_lens, lse)
                    outs[name] = (o, l)
                    want_ran = 2 if prep == 2 else (0 if lse else 1)
                    rel = qc.rel_l2(o, o_ref)
                    rec = {"variant": name, "case": f"{b}x{h}x{sq}x{skv} {str(dtype)[6:]} {layout} "
                           f"kv_lens={lens} lse={lse} strided={strided}", "rel_l2": rel, "ran": ran,
                           "nan": bool(torch.isnan(o).any())}
                    good_case = ran == want_ran and not rec["nan"] and rel <= 5e-2
                    if lse:
                        fin = torch.isfinite(lse_ref)
                        rec["lse_max_abs"] = float((l.double() - lse_ref)[fin].abs().max())
                        good_case = good_case and rec["lse_max_abs"] <= qc.lse_bound(qb, kb, 1.0 / math.sqrt(d))
                    if name == mine[0]:
                        ob, lb = outs[base[0]]
                        rec["vs_default_rel_l2"] = qc.rel_l2(o, ob)
                        good_case = good_case and rec["vs_default_rel_l2"] <= 2e-3
                        if lse:
                            rec["vs_default_lse"] = float((l.double() - lb.double())[fin].abs().max())
                            good_case = good_case and rec["vs_default_lse"] <= 1e-3
                    rec["ok"] = good_case
                    good[name] = good[name] and good_case
                    results["checks"].append(rec)
                    if not good_case:
                        print("FAIL", json.dumps(rec), flush=True)
            for name, _, seq, mode, cvt, prep in (base, mine):  # V = ones: every output 1 (row mass)
                select(seq, mode, cvt, prep)
                q, k, v = (torch.randn(1, 2048, 4, d, device=DEV, generator=g).to(torch.bfloat16) for _ in range(3))
                mass = float((_call(q, k, torch.ones_like(v))[0].double() - 1).abs().max())
                good[name] = good[name] and mass <= 2e-2
                results["checks"].append({"variant": name, "case": "V=ones", "max_dev": mass, "ok": mass <= 2e-2})
        except Exception as exc:  # noqa: BLE001 - one head dim's error must not end the A/B
            import traceback
            traceback.print_exc()
            good = {base[0]: False, mine[0]: False}
            print(f"[d{d}] ERROR {exc!r}", flush=True)
        ok.update(good)
        for name in (base[0], mine[0]):
            print(f"[{name}] checks {'ok' if good[name] else 'FAIL'}", flush=True)
    select(*DEFAULT)
    return ok


def queued_ms(fn, reps):
    """Mean ms per call of `reps` calls queued back to back between two events (the host runs ahead)."""
    for _ in range(2):
        fn()
    torch.cuda.synchronize()
    a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    a.record()
    for _ in range(reps):
        fn()
    b.record()
    b.synchronize()
    return a.elapsed_time(b) / reps


def device_ms(fn, reps=3):
    """(q8_fwd_kernel, pre-pass kernels incl. the memset) median device ms per call (torch.profiler)."""
    kt = qc.kernel_times(fn, reps)
    fwd = sum(t for n, t in kt.items() if "q8_fwd" in n)
    prep = sum(t for n, t in kt.items() if "q8_fwd" not in n)
    return fwd, prep


def timing(live, passes, reps, results, deadline):
    rows_out, data = [], []
    for shape, b, h, s, d in SHAPES:
        vs = [vt for vt in live if vt[1] == d]
        if not vs:
            continue
        q, k, v = qc.make(b, h, s, s, d)
        rows = torch.linspace(0, s - 1, 128, device=DEV).long()
        o_ref, _ = qc.ref64(q[:, rows], k, v, 1.0 / math.sqrt(d))
        row = {"shape": shape, "flops": 4.0 * b * h * s * s * d, "synced": {}, "queued": {}, "kernel_ms": {},
               "prep_ms": {}, "rel_l2": {}}
        for name, _, seq, mode, cvt, prep in vs:
            select(seq, mode, cvt, prep)
            row["rel_l2"][name] = qc.rel_l2(run(q, k, v)[:, rows], o_ref)
        del o_ref
        torch.cuda.empty_cache()
        rows_out.append(row)
        data.append((row, vs, (q, k, v), row["flops"]))
    for p in range(passes):
        if time.time() > deadline:
            print(f"out of time after {p} passes", flush=True)
            break
        for row, vs, (q, k, v), flops in data:
            for name, _, seq, mode, cvt, prep in (vs if p % 2 == 0 else vs[::-1]):
                select(seq, mode, cvt, prep)
                fn = lambda: run(q, k, v)  # noqa: E731
                row["synced"].setdefault(name, []).append(flops / qc.bench_ms(fn, reps) / 1e9)
                row["queued"].setdefault(name, []).append(flops / queued_ms(fn, reps) / 1e9)
                fwd, pre = device_ms(fn)
                row["kernel_ms"].setdefault(name, []).append(fwd)
                row["prep_ms"].setdefault(name, []).append(pre)
    select(*DEFAULT)
    for row in rows_out:
        results["timing"].append(row)
        print(json.dumps(row), flush=True)


def _checks_line(results):
    bad = list(dict.fromkeys(c["variant"] for c in results["checks"] if not c["ok"]))  # once each, in run order
    print("checks:", "all ok" if not bad else f"FAILED: {bad}")


def ratio_table(results, header, width, device_total):
    """Medians; each variant's ratios to its head dim's default (the first of the row). device_total: the kernel's
    and the pre-pass's device ms and their sum, and the sum's ratio; otherwise the pre-pass's ms alone."""
    print(header)
    for r in results["timing"]:
        base = None
        for name, ts in r["synced"].items():
            syn, que = statistics.median(ts), statistics.median(r["queued"][name])
            kms, pms = statistics.median(r["kernel_ms"][name]), statistics.median(r["prep_ms"][name])
            kern = r["flops"] / kms / 1e9 if kms else float("nan")
            if base is None:
                base = (syn, que, kms + pms)
            ms = f"ms {kms:.3f} + {pms:.3f} = {kms + pms:.3f}" if device_total else f"prep {pms:.3f} ms"
            dev = f", device {(kms + pms) / base[2]:.3f}x" if device_total else ""
            print(f"{r['shape']:14s} {name:{width}s} {syn:5.0f} | {que:5.0f} | {kern:5.0f} | {ms} | "
                  f"{r['rel_l2'][name]:.2e}  (synced {syn / base[0]:.3f}x, queued {que / base[1]:.3f}x{dev})")
    _checks_line(results)


def paired_table(results, header, width):
    """Medians, and per pass each variant's ratio to the default's figure of the same pass (synced with
    quantization; kernel only) with the count of passes it won."""
    print(header)
    for r in results["timing"]:
        names = list(r["synced"])
        base = names[0]
        kern = {n: [r["flops"] / ms / 1e9 if ms else float("nan") for ms in r["kernel_ms"][n]] for n in names}
        for n in names:
            syn, que = statistics.median(r["synced"][n]), statistics.median(r["queued"][n])
            line = (f"{r['shape']:14s} {n:{width}s} {syn:5.0f} | {que:5.0f} | {statistics.median(kern[n]):5.0f} | "
                    f"{r['rel_l2'][n]:.2e}")
            if n != base:
                rs = [a / b for a, b in zip(r["synced"][n], r["synced"][base])]
                rk = [a / b for a, b in zip(kern[n], kern[base])]
                line += (f"  synced x {' '.join(f'{x:.3f}' for x in rs)} (won {sum(x > 1 for x in rs)}/{len(rs)})"
                         f"  kernel x {' '.join(f'{x:.3f}' for x in rk)} (won {sum(x > 1 for x in rk)}/{len(rk)})")
            print(line)
    _checks_line(results)


@dataclass(frozen=True)
class Plan:
    # (name, head dim, schedule, row-sum mode, conversion, pre-pass); the first of each head dim is the default.
    variants: list
    checks: Callable  # (variants, results) -> {name: ok}
    table: Callable  # (results) -> None; its first line is the header dev/q8_selector_ab.sh finds the table by
    passes: int
    budget: float


PLANS = {
    "prep": Plan([("d128 new default (seq cvt2, fused prep)", 128, -1, -1, -1, -1),
                  ("d128 seq cvt2, 3-launch prep", 128, -1, -1, -1, 0),
                  ("d128 old default (seq I2F, 3-launch)", 128, 1, 0, 0, 0),
                  ("d64 new default (seq cvt1, fused prep)", 64, -1, -1, -1, -1),
                  ("d64 seq cvt1, 3-launch prep", 64, -1, -1, -1, 0),
                  ("d64 old default (pp I2F, 3-launch)", 64, 0, 1, 0, 0)],
                 checks_fp64,
                 lambda res: ratio_table(res, "== 8-bit defaults and pre-pass A/B: TFLOPS synced per call | queued | "
                                         "kernel only; pre-pass ms; rel L2 vs fp64; ratios (medians) to the new "
                                         "default ==", 40, device_total=False),
                 passes=2, budget=40.0),
    "prep2": Plan([("d128 default (fused prep)", 128, -1, -1, -1, -1),
                   ("d128 Q in kernel (prep 2)", 128, -1, -1, -1, 2),
                   ("d64 default (fused prep)", 64, -1, -1, -1, -1),
                   ("d64 Q in kernel (prep 2)", 64, -1, -1, -1, 2)],
                  checks_vs_default,
                  lambda res: ratio_table(res, "== 8-bit pre-pass mode 2 (Q in the kernel) A/B: TFLOPS synced per "
                                          "call | queued | kernel only; device ms kernel + pre-pass = total; rel L2 "
                                          "vs fp64; ratios (medians) to the default ==", 27, device_total=True),
                  passes=3, budget=35.0),
    "sched": Plan([("d128 default (seq 3, cvt 2)", 128, -1, -1, -1, -1),
                   ("d128 old default (seq 1, cvt 2)", 128, 1, -1, -1, -1),
                   ("d64 default (seq 1, cvt 1)", 64, -1, -1, -1, -1),
                   ("d64 seq 1 forced (same kernel)", 64, 1, -1, -1, -1)],
                  checks_fp64,
                  lambda res: paired_table(res, "== 8-bit schedules A/B: medians of TFLOPS synced per call | queued | "
                                           "kernel only; per-pass ratios to the default (synced with quantization; "
                                           "kernel only); rel L2 vs fp64 ==", 31),
                  passes=6, budget=60.0),
}


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("plan", choices=sorted(PLANS))
    ap.add_argument("--passes", type=int, help="alternating passes (default: the plan's)")
    ap.add_argument("--reps", type=int, default=20)
    ap.add_argument("--budget", type=float, help="seconds from the start; no pass starts after it (default: the "
                    "plan's)")
    a = ap.parse_args(argv)
    plan = PLANS[a.plan]
    passes = plan.passes if a.passes is None else a.passes
    budget = plan.budget if a.budget is None else a.budget
    t0 = time.time()
    quant8.SHORT_KV_EXACT_MAX = 0  # the 8-bit kernel at every length (seed 8K is routed to exact otherwise)
    results = {"checks": [], "timing": [], "passes": passes, "variants": plan.variants}
    ok = plan.checks(plan.variants, results)
    live = [vt for vt in plan.variants if ok.get(vt[0]) or tuple(vt[2:]) == DEFAULT]  # a default always runs
    timing(live, passes, a.reps, results, t0 + budget)
    with open(os.path.join(OUT, f"q8_{a.plan}_ab.json"), "w") as f:
        json.dump(results, f, indent=1)
    plan.table(results)
    print(f"q8_{a.plan}_ab done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
