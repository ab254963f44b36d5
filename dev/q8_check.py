"""Device check of the 8-bit path (precision="8bit"): correctness against fp64, the guard inputs, and timing beside
cuDNN and the exact kernel in one process. Prints a short table last; writes JSON to $OUT/q8_check.json.

    python3 dev/q8_check.py [--quick] [--no-time]
"""
import argparse
import json
import math
import os
import re
import sys
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import vidattn  # noqa: E402
from vidattn import _ext, quant8  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
DEV = torch.device("cuda")


def ref64(q, k, v, scale, kv_lens=None):
    """fp64 attention of (B, S, H, D) tensors; out (B, S, H, D) fp64 and lse (B, H, Sq)."""
    qh, kh, vh = (t.transpose(1, 2).double() for t in (q, k, v))
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if kv_lens is not None:
        mask = torch.arange(k.shape[1], device=q.device)[None, :] < kv_lens[:, None]
        s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    o = torch.matmul(torch.softmax(s, dim=-1), vh)
    return o.transpose(1, 2), lse


def lse_bound(q, k, scale):
    """As tests/test_8bit_gpu.py: 0.02 + 6 sigma of one score's INT8 rounding error."""
    qf, kf = q.float(), k.float()
    kf = kf - kf.mean(1, keepdim=True)
    dq = float(qf.abs().amax(-1).max()) / 127
    dk = float(kf.abs().amax(-1).max()) / 127
    sigma = scale / math.sqrt(12) * (float(qf.norm(dim=-1).max()) * dk + float(kf.norm(dim=-1).max()) * dq)
    return 0.02 + 6 * sigma


def rel_l2(a, b):
    a, b = a.double(), b.double()
    return float((a - b).norm() / b.norm().clamp_min(1e-30))


def run8(q, k, v, layout="bshd", scale=None, kv_lens=None, lse=False):
    return vidattn.attention(q, k, v, layout=layout, scale=scale, kv_lens=kv_lens, return_lse=lse, precision="8bit")


def make(b, h, sq, skv, d, dtype=torch.bfloat16, gen=None):
    q = torch.randn(b, sq, h, d, device=DEV, dtype=dtype, generator=gen)
    k = torch.randn(b, skv, h, d, device=DEV, dtype=dtype, generator=gen)
    v = torch.randn(b, skv, h, d, device=DEV, dtype=dtype, generator=gen)
    return q, k, v


results = {"cases": [], "guards": [], "timing": []}


def case(name, q, k, v, layout="bshd", scale=None, kv_lens=None, want_lse=False, bound=4e-2):
    qv, kv, vv = (t if layout == "bshd" else t.transpose(1, 2) for t in (q, k, v))  # bshd views for the reference
    sc = scale if scale is not None else 1.0 / math.sqrt(q.shape[-1])
    reason = vidattn.explain(q, k, v, layout=layout, scale=scale, kv_lens=kv_lens, precision="8bit")
    torch.cuda.synchronize()
    r = run8(q, k, v, layout, scale, kv_lens, want_lse)
    out, lse = (r if want_lse else (r, None))
    torch.cuda.synchronize()
    o_ref, lse_ref = ref64(qv, kv, vv, sc, kv_lens)
    ob = out if layout == "bshd" else out.transpose(1, 2)
    ex = vidattn.attention(q, k, v, layout=layout, scale=scale, kv_lens=kv_lens, precision="exact")
    exb = ex if layout == "bshd" else ex.transpose(1, 2)
    rec = {"name": name, "reason": reason, "rel_l2": rel_l2(ob, o_ref), "exact_rel_l2": rel_l2(exb, o_ref),
           "max_abs": float((ob.double() - o_ref).abs().max()), "nan": bool(torch.isnan(ob).any()),
           "bound": bound}
    if want_lse:
        fin = torch.isfinite(lse_ref)
        rec["lse_max_abs"] = float((lse.double() - lse_ref)[fin].abs().max())
        rec["lse_bound"] = lse_bound(qv, kv, sc)
    rec["ok"] = (reason is None and not rec["nan"] and rec["rel_l2"] <= bound
                 and (not want_lse or rec["lse_max_abs"] <= rec["lse_bound"]))
    results["cases"].append(rec)
    print(json.dumps(rec), flush=True)
    return rec


def correctness(quick):
    g = torch.Generator(device=DEV)
    g.manual_seed(1234)
    for d in (128, 64):
        for (b, h, sq, skv) in [(1, 2, 113, 113), (1, 2, 1, 77), (2, 3, 1023, 517), (1, 4, 4224, 4224)]:
            q, k, v = make(b, h, sq, skv, d, gen=g)
            case(f"d{d} bshd {b}x{h}x{sq}x{skv}", q, k, v)
        # bhsd layout, strided views (every other head of a bigger tensor), fp16, kv_lens + LSE
        q, k, v = make(2, 6, 700, 1500, d, gen=g)
        case(f"d{d} bhsd strided", q[:, :, ::2].transpose(1, 2), k[:, :, ::2].transpose(1, 2),
             v[:, :, ::2].transpose(1, 2), layout="bhsd")
        q, k, v = make(2, 2, 300, 1000, d, dtype=torch.float16, gen=g)
        case(f"d{d} fp16 kv_lens lse", q, k, v, kv_lens=torch.tensor([1000, 37], device=DEV, dtype=torch.int32),
             want_lse=True)
        q, k, v = make(1, 2, 256, 32760 if not quick else 8192, d, gen=g)
        case(f"d{d} long rows", q, k, v, want_lse=True)


def guards():
    g = torch.Generator(device=DEV)
    g.manual_seed(99)
    for d in (128, 64):
        q, k, v = make(1, 8, 4096, 4096, d, gen=g)
        case(f"guard d{d} plain", q, k, v)
        off = 8.0 * torch.randn(d, device=DEV, generator=g)
        case(f"guard d{d} key offset", q, (k.float() + off).to(k.dtype), v, want_lse=True)
        case(f"guard d{d} sharpened", q, k, v, scale=4.0 / math.sqrt(d))
        ones = torch.ones_like(v)
        out = run8(q, k, ones)
        dev1 = float((out.double() - 1).abs().max())
        results["guards"].append({"name": f"d{d} V=ones", "max_abs_dev": dev1})
        print(json.dumps(results["guards"][-1]), flush=True)
        e = torch.randn(d, device=DEV, generator=g)
        e = e / e.norm()
        qs = (q.float() + 4.0 * e).to(q.dtype)
        ks = k.clone()
        ks[:, -1] = (30.0 * e).to(k.dtype)
        case(f"guard d{d} late sink", qs, ks, v, want_lse=True)
        out = run8(qs, ks, ones)
        dev1 = float((out.double() - 1).abs().max())
        results["guards"].append({"name": f"d{d} V=ones late sink", "max_abs_dev": dev1})
        print(json.dumps(results["guards"][-1]), flush=True)


def bench_ms(fn, reps=20):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(reps):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def kernel_name(raw):
    """A profiler event's kernel name without its argument list, "void" and namespaces, but with every template
    argument (a tail of fixed length cut "q8_fwd" off once the kernel had nine of them)."""
    return re.sub(r"^void |\b\w+::", "", raw.split("(")[0]).strip()


def kernel_times(fn, reps=5):
    """Median device time per kernel name over `reps` calls (torch.profiler), in ms: the pre-pass apart."""
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    per = {}
    for e in prof.events():
        t = getattr(e, "device_time", None) or getattr(e, "cuda_time", 0)
        if t and e.device_type is not None and "cuda" in str(e.device_type).lower():
            per.setdefault(kernel_name(e.name), []).append(t / 1e3)
    return {n: sorted(v)[len(v) // 2] for n, v in per.items()}


SHAPES = [("seed 8K", 4, 16, 8192, 8192, 128), ("Wan 1.3B self", 1, 12, 32760, 32760, 128),
          ("Wan cross", 1, 12, 32760, 512, 128), ("CogVideoX", 1, 48, 17776, 17776, 64),
          ("LTX", 1, 32, 24576, 24576, 64)]


# Kernel variants (capi_8bit.cuh): (mode, consumer warpgroups, schedule); mode 0: row sums in the softmax (v1), 1: row
# sums by the tensor cores; schedule 0: ping-pong (D=64 only), 1: sequential with three warpgroups (q8_consumer_seq),
# 3: that with the exponentials in round-robin turns (D=128 only). The shipped default of each head dim runs first.
# Modes 2-5, the D=128 ping-pong schedule, schedule 2 and schedule 3 at D=64 lost in device runs 2-5 and call Q and
# are no longer built.
VARIANTS = {128: [(0, 3, 3), (0, 3, 1)],
            64: [(1, 3, 1), (1, 3, 0)]}


def vkey(sm, wgs, seq):
    return f"mode={sm} wgs={wgs} seq={seq}"


# Variants a smoke run saw fail or crash (dev/q8_ab_device.sh): comma-separated pieces of vkey, left out of the A/B.
_EXCLUDE = [x for x in os.environ.get("Q8_EXCLUDE", "").split(",") if x]
VARIANTS = {d: [vt for i, vt in enumerate(vs) if i == 0 or not any(x in vkey(*vt) for x in _EXCLUDE)]
            for d, vs in VARIANTS.items()}


def set_variant(sum_mma, wgs, seq=-1):
    quant8.set_sum_mma(sum_mma)
    quant8.set_d64_warpgroups(wgs)
    quant8.set_sequential(seq)


def variant_checks():
    """The variants' correctness on a few cases each (the default's full set runs in correctness/guards)."""
    g = torch.Generator(device=DEV)
    g.manual_seed(4321)
    ok = {}
    for d, variants in VARIANTS.items():
        for sm, wgs, seq in variants:
            try:
                set_variant(sm, wgs if d == 64 else 0, seq)
                tag = f"[{vkey(sm, wgs, seq)}]"
                recs = []
                q, k, v = make(1, 8, 4096, 4096, d, gen=g)
                recs.append(case(f"var d{d} plain {tag}", q, k, v, want_lse=True))
                ran = (quant8.last_variant()[0], quant8.last_variant()[1], quant8.last_sequential())
                q, k, v = make(3, 2, 777, 1000, d, gen=g)
                recs.append(case(f"var d{d} kv_lens {tag}", q, k, v, want_lse=True,
                                 kv_lens=torch.tensor([1000, 37, 129], device=DEV, dtype=torch.int32)))
                out = run8(q, k, torch.ones_like(v))
                mass = float((out.double() - 1).abs().max())
                results["guards"].append({"name": f"d{d} V=ones {tag}", "max_abs_dev": mass})
                # Odd lengths (one query; a tile mostly past Sq), fp16, strided BHSD views, long rows, a shared key
                # offset and a late sink: the schedules differ in every loop edge these reach.
                for (b, h, sq, skv) in [(1, 2, 1, 77), (1, 2, 113, 113), (2, 3, 1023, 517)]:
                    q, k, v = make(b, h, sq, skv, d, gen=g)
                    recs.append(case(f"var d{d} {b}x{h}x{sq}x{skv} {tag}", q, k, v, bound=5e-2))
                q, k, v = make(2, 2, 300, 1000, d, dtype=torch.float16, gen=g)
                recs.append(case(f"var d{d} fp16 {tag}", q, k, v, want_lse=True))
                q, k, v = make(2, 6, 700, 1500, d, gen=g)
                recs.append(case(f"var d{d} bhsd strided {tag}", q[:, :, ::2].transpose(1, 2),
                                 k[:, :, ::2].transpose(1, 2), v[:, :, ::2].transpose(1, 2), layout="bhsd"))
                q, k, v = make(1, 2, 256, 32760, d, gen=g)
                recs.append(case(f"var d{d} long rows {tag}", q, k, v, want_lse=True, bound=5e-2))
                q, k, v = make(1, 4, 2048, 2048, d, gen=g)
                off = 8.0 * torch.randn(d, device=DEV, generator=g)
                recs.append(case(f"var d{d} key offset {tag}", q, (k.float() + off).to(k.dtype), v, want_lse=True))
                e = torch.randn(d, device=DEV, generator=g)
                e = e / e.norm()
                ks = k.clone()
                ks[:, -1] = (30.0 * e).to(k.dtype)
                recs.append(case(f"var d{d} late sink {tag}", (q.float() + 4.0 * e).to(q.dtype), ks, v, want_lse=True))
                want = (3 if d == 128 and seq >= 1 else (wgs if d == 64 else 2), sm, seq)
                ok[(d, sm, wgs, seq)] = all(r["ok"] for r in recs) and mass <= 2e-2 and ran == want
                print(tag, "variant", d, "ran", ran, "ok" if ok[(d, sm, wgs, seq)] else "FAIL", flush=True)
            except Exception as exc:  # noqa: BLE001 - one variant's error must not end the A/B
                import traceback
                traceback.print_exc()
                ok[(d, sm, wgs, seq)] = False
                print(f"[{vkey(sm, wgs, seq)}] variant {d} ERROR {exc!r}", flush=True)
    set_variant(-1, 0, -1)
    return ok


def timing(ok):
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, b, h, sq, skv, d in SHAPES:
        q, k, v = make(b, h, sq, skv, d)
        flops = 4.0 * b * h * sq * skv * d
        qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
        row = {"shape": name}
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                row["cudnn"] = flops / bench_ms(lambda: F.scaled_dot_product_attention(qh, kh, vh)) / 1e9
        except Exception as exc:  # noqa: BLE001
            row["cudnn"] = None
            print("cudnn failed", exc)
        row["exact"] = flops / bench_ms(lambda: vidattn.attention(q, k, v, precision="exact")) / 1e9
        row["8bit"] = flops / bench_ms(lambda: vidattn.attention(q, k, v, precision="8bit")) / 1e9
        row["kernels_ms"] = kernel_times(lambda: vidattn.attention(q, k, v, precision="8bit"))
        main_ms = sum(t for n, t in row["kernels_ms"].items() if "q8_fwd" in n)
        row["8bit_kernel_only"] = flops / main_ms / 1e9 if main_ms else None
        row["variants"] = {}
        row["variants_kernel_only"] = {}
        # Two passes over the variants, in alternating order: the spread between a variant's two timings is the
        # noise a difference between variants must beat (dev/NOTES_8bit.md).
        live = [vt for vt in VARIANTS[d] if ok is None or ok.get((d,) + vt)]
        for rnd, order in enumerate((live, live[::-1])):
            for sm, wgs, seq in order:
                set_variant(sm, wgs if d == 64 else 0, seq)
                t = flops / bench_ms(lambda: vidattn.attention(q, k, v, precision="8bit")) / 1e9
                row["variants"].setdefault(vkey(sm, wgs, seq), []).append(t)
                if rnd == 0:
                    km = kernel_times(lambda: vidattn.attention(q, k, v, precision="8bit"))
                    ms = sum(x for n, x in km.items() if "q8_fwd" in n)
                    row["variants_kernel_only"][vkey(sm, wgs, seq)] = flops / ms / 1e9 if ms else None
        set_variant(-1, 0, -1)
        results["timing"].append(row)
        print(json.dumps(row), flush=True)


def kv_sweep():
    """8-bit against the exact kernel as the key count grows (Wan's 32760 queries, 12 heads, D=128): where the 8-bit
    path's pre-pass and per-tile cost stop outweighing its faster key blocks (vidattn/quant8.py, SHORT_KV_EXACT_MAX)."""
    quant8.SHORT_KV_EXACT_MAX = 0  # the 8-bit kernel itself at every length
    for skv in (256, 512, 1024, 2048, 4096, 8192):
        for d in (128, 64):
            q, k, v = make(1, 12, 32760, skv, d)
            flops = 4.0 * 12 * 32760 * skv * d
            row = {"shape": f"sweep 1x12x32760x{skv} D{d}",
                   "exact": flops / bench_ms(lambda: vidattn.attention(q, k, v, precision="exact")) / 1e9,
                   "8bit": flops / bench_ms(lambda: quant8._attention_8bit_impl(q, k, v, "bshd", None, None, False)[0])
                   / 1e9}
            results.setdefault("kv_sweep", []).append(row)
            print(json.dumps(row), flush=True)


def pick_best():
    """Per head dim, the variant with the best geometric mean over that head dim's shapes (each shape's timing the
    mean of its two passes). Written to Q8_BEST_ENV as the environment variables that force it (for both head dims:
    a run under it is for looking, the shipped defaults are per head dim in capi_8bit.cuh)."""
    def gmean(xs):
        return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else 0.0
    results["best"] = {}
    for d in (128, 64):
        rows = [r for r, sh in zip(results["timing"], SHAPES) if sh[5] == d]
        scores = {key: gmean([sum(r["variants"][key]) / len(r["variants"][key]) if key in r["variants"] else 1e-9
                              for r in rows]) for key in (vkey(*vt) for vt in VARIANTS[d])}
        best = max(scores, key=scores.get)
        results["best"][d] = {"variant": best, "gmean": scores[best], "default": vkey(*VARIANTS[d][0]),
                              "default_gmean": scores[vkey(*VARIANTS[d][0])]}
    b = dict(kv.split("=") for kv in results["best"][128]["variant"].split())
    with open(os.environ.get("Q8_BEST_ENV", os.path.join(OUT, "q8_best.env")), "w") as f:
        f.write(f"export VIDATTN_Q8_SUM_MMA={b['mode']} VIDATTN_Q8_SEQ={b['seq']}\n")
    print("best variants:", results["best"], flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--no-time", action="store_true")
    ap.add_argument("--ab", action="store_true", help="also check and time the kernel variants, write q8_best.env")
    ap.add_argument("--skip-default", action="store_true", help="with --ab: skip the default's full case set")
    ap.add_argument("--smoke", action="store_true", help="one small case per head dim, no timing (a hang shows early)")
    ap.add_argument("--sweep", action="store_true", help="with --ab: the key-count sweep too")
    a = ap.parse_args()
    if a.smoke:
        # The 8-bit kernel itself: 333 keys would otherwise be routed to the exact kernel (SHORT_KV_EXACT_MAX), and the
        # smoke would test nothing of the 8-bit path. Exit status 1 when a case is off.
        quant8.SHORT_KV_EXACT_MAX = 0
        recs = []
        for d in (128, 64):
            q, k, v = make(1, 2, 300, 333, d)
            recs.append(case(f"smoke d{d}", q, k, v, want_lse=True))
            # Localising a failure: LSE checks S = Q K^T alone; V = ones checks P and the row sums whatever V's key
            # order; then D=64 and D=128 separate the 64B / 128B swizzle paths.
            out = run8(q, k, torch.ones_like(v))
            dev1 = float((out.double() - 1).abs().max())
            print(f"smoke d{d} V=ones max|o-1| {dev1:.3e} variant {quant8.last_variant()} "
                  f"seq {quant8.last_sequential()}", flush=True)
            recs[-1]["ok"] = recs[-1]["ok"] and dev1 <= 2e-2
        sys.exit(0 if all(r["ok"] for r in recs) else 1)
    quant8.SHORT_KV_EXACT_MAX = 0  # the 8-bit kernel itself at every length (precision="8bit" routes short keys)
    t0 = time.time()
    lib = _ext.load()
    print("library", lib, _ext.build_error(), f"{time.time() - t0:.0f} s", flush=True)
    try:
        if not (a.ab and a.skip_default):
            correctness(a.quick)
            guards()
    except Exception as exc:  # noqa: BLE001
        import traceback
        traceback.print_exc()
        results["error"] = repr(exc)
    ok = None
    if a.ab:
        try:
            ok = variant_checks()
        except Exception as exc:  # noqa: BLE001
            import traceback
            traceback.print_exc()
            results["error_variants"] = repr(exc)
    if not a.no_time:
        timing(ok)
        if a.ab:
            pick_best()
            if a.sweep:
                kv_sweep()
    with open(os.path.join(OUT, "q8_check.json"), "w") as f:
        json.dump(results, f, indent=1)
    print("\n== cases ==")
    for c in results["cases"]:
        print(f"{c['name']:34s} rel_l2 {c['rel_l2']:.2e} (exact {c['exact_rel_l2']:.1e}) max {c['max_abs']:.2e} "
              f"lse {c.get('lse_max_abs', float('nan')):.1e} {'ok' if c['ok'] else 'FAIL'}")
    for gd in results["guards"]:
        print(f"{gd['name']:34s} max |out - 1| {gd['max_abs_dev']:.2e}")
    for r in results.get("kv_sweep", []):
        print(f"{r['shape']:34s} exact {r['exact']:6.0f} 8bit {r['8bit']:6.0f} ratio {r['8bit'] / r['exact']:.2f}")
    print("== TFLOPS (8bit includes quantization) ==")
    for r in results["timing"]:
        cu = r.get("cudnn") or float("nan")
        ko = r.get("8bit_kernel_only") or float("nan")
        print(f"{r['shape']:16s} cudnn {cu:6.0f} exact {r['exact']:6.0f} 8bit {r['8bit']:6.0f} "
              f"(kernel only {ko:6.0f}) 8bit/exact {r['8bit'] / r['exact']:.2f}")
        print("   ", {n: round(t, 3) for n, t in r["kernels_ms"].items()})
    if any(r.get("variants") for r in results["timing"]):
        print("== variants: TFLOPS with quantization (pass 1 / pass 2), kernel only ==")
        for r in results["timing"]:
            for key, ts in r["variants"].items():
                ko = r["variants_kernel_only"].get(key) or float("nan")
                print(f"{r['shape']:16s} {key:22s} " + " / ".join(f"{t:6.0f}" for t in ts) + f"   kernel {ko:6.0f}")
    if "best" in results:
        for d, bb in results["best"].items():
            print(f"D={d}: best {bb['variant']} gmean {bb['gmean']:.0f}; default {bb['default']} "
                  f"{bb['default_gmean']:.0f}")

if __name__ == "__main__":
    main()
