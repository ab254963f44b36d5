"""Device A/B of v10 (dev/NOTES_8bit.md "v10"; csrc/sm90/q8_fwd.cuh kDescInc, csrc/capi_8bit.cuh VIDATTN_Q8_V10): at
D=128 on schedule 3 (three consumer warpgroups) mode 0 (the wgmma descriptors rebuilt per wgmma, the default before
v10) against mode 1 (the descriptors by increments: the same arithmetic, 546 SASS instructions per warp and key block
instead of 573; the default since it won this A/B). Mode 2 (the lazy reference max: 532 per block, 980 on a redone
block) lost it and is no longer built.

    python3 dev/q8_v10_ab.py [--passes 6] [--reps 16] [--budget 60] [--sharp]

dev/q8_selector_ab.py's functions, as dev/experiments/promote_every_k_two_wg.patch's q8_promote_ab.py used them: per
variant its checks_fp64 (odd lengths, kv_lens tails with LSE, fp16, a shared key offset, V = ones against fp64; the
launch ran schedule 3, conversion 2), plus that the launch reports the v10 mode it asked for, and for mode 2 a
climbing case (rows whose max rises through the keys: redone blocks) against fp64; then `--passes` alternating passes
(the order reversed every other pass) on the D=128 shapes (Wan 1.3B self, seed 8K): TFLOPS synced per call with the
quantization, queued, and kernel-only from torch.profiler. --sharp adds the same shapes with the scores sharpened x4
(the lazy reference's worst case: most blocks redone). The table, printed last, gives medians and per-pass ratios to
the default, and the rule's verdict per variant. JSON to $OUT/q8_v10_ab.json.
"""
import argparse
import importlib.util
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location("q8_selector_ab", os.path.join(HERE, "q8_selector_ab.py"))
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)

OUT = os.environ.get("OUT", "/tmp")


class Prep(int):
    """q8_selector_ab's pre-pass selector (an int, -1: the default) carrying the variant's v10 mode, so its checks and
    pass loop, which call select(seq, mode, cvt, prep), select v10 too."""

    def __new__(cls, value, v10):
        obj = super().__new__(cls, value)
        obj.v10 = v10
        return obj


# (name, head dim, schedule, row-sum mode, conversion, pre-pass + v10) as q8_selector_ab.py's; the first is the default.
# Mode 2 (the lazy max) ran in call U (bench/results/h200_2026-12-02_sixth/call_u/, commit b85ba43, when mode 0 was
# the default) and is no longer built; mode 1 is now the default, so the reference names mode 0 explicitly.
VARIANTS = [("d128 v10 0 (before v10)", 128, -1, -1, -1, Prep(-1, 0)),
            ("d128 v10 1 (descriptors)", 128, -1, -1, -1, Prep(-1, 1))]
_select = ab.select


def select(seq, mode, cvt, prep):
    _select(seq, mode, cvt, int(prep))
    ab.quant8.set_v10(getattr(prep, "v10", -1))


def v10_checks(results, ok):
    """The launch ran the mode it names (0 for the default); mode 2 on climbing rows (blocks redone) against fp64."""
    import torch

    g = torch.Generator(device=ab.DEV)
    g.manual_seed(2468)
    for name, d, seq, mode, cvt, prep in VARIANTS:
        try:
            select(seq, mode, cvt, prep)
            q, k, v = ab.qc.make(1, 2, 517, 1031, d, gen=g)
            ab.run(q, k, v)
            torch.cuda.synchronize()
            want = prep.v10
            got = ab.quant8.last_v10()
            good = got == want
            # Climbing rows: a direction e shared by the queries and added to the keys with a ramp, so the row max
            # rises block after block (the lazy reference is passed and blocks are redone).
            q, k, v = ab.qc.make(1, 2, 300, 4096, d, gen=g)
            e = torch.randn(d, device=ab.DEV, generator=g)
            e = e / e.norm()
            ramp = torch.linspace(0, 1, k.shape[1], device=ab.DEV)[None, :, None, None]
            qq = (q.float() + 4 * e).to(q.dtype)
            kk = (k.float() + 24 * ramp * e).to(k.dtype)
            rec = ab.qc.case(f"{name} climbing", qq, kk, v, bound=5e-2)
            good = good and rec["ok"]
        except Exception as exc:  # noqa: BLE001 - one variant's error must not end the A/B
            got, good, rec = repr(exc), False, {"rel_l2": float("nan")}
        ok[name] = ok.get(name, False) and good
        results["checks"].append({"variant": name + " (v10 mode, climbing)", "ok": good, "ran": got,
                                  "climbing_rel_l2": rec["rel_l2"]})
        print(f"[{name}] ran v10 {got}, climbing rel L2 {rec['rel_l2']:.3e}: {'ok' if good else 'FAIL'}", flush=True)
    select(-1, -1, -1, Prep(-1, -1))


def table(results):
    print("== 8-bit v10 A/B: medians of TFLOPS synced per call | queued | kernel only; per-pass ratios to the default "
          "(synced with quantization; kernel only); rel L2 vs fp64 ==")
    wins, sharp = {}, {}
    for r in results["timing"]:
        names = list(r["synced"])
        base = names[0]
        kern = {n: [r["flops"] / ms / 1e9 if ms else float("nan") for ms in r["kernel_ms"][n]] for n in names}
        for n in names:
            syn, que = ab.statistics.median(r["synced"][n]), ab.statistics.median(r["queued"][n])
            line = (f"{r['shape']:20s} {n:26s} {syn:5.0f} | {que:5.0f} | {ab.statistics.median(kern[n]):5.0f} | "
                    f"{r['rel_l2'][n]:.2e}")
            if n != base:
                rs = [a / b for a, b in zip(r["synced"][n], r["synced"][base])]
                rk = [a / b for a, b in zip(kern[n], kern[base])]
                if r["shape"].endswith("sharp x4"):  # the rule's extra condition for the lazy max (mode 2)
                    sharp.setdefault(n, []).append(ab.statistics.median(rs))
                else:
                    w = wins.setdefault(n, {"won": 0, "passes": 0, "median_ahead": True, "kernel_sign": True})
                    w["won"] += sum(x > 1 for x in rs)
                    w["passes"] += len(rs)
                    w["median_ahead"] &= ab.statistics.median(r["synced"][n]) > ab.statistics.median(r["synced"][base])
                    w["kernel_sign"] &= ab.statistics.median(kern[n]) > ab.statistics.median(kern[base])
                line += (f"  synced x {' '.join(f'{x:.3f}' for x in rs)} (won {sum(x > 1 for x in rs)}/{len(rs)})"
                         f"  kernel x {' '.join(f'{x:.3f}' for x in rk)} (won {sum(x > 1 for x in rk)}/{len(rk)})")
            print(line)
    bad = [c["variant"] for c in results["checks"] if not c["ok"]]
    print("checks:", "all ok" if not bad else f"FAILED: {bad}")
    # dev/NOTES_8bit.md v10's rule (v8's): every check passes, the median with quantization ahead on both plain
    # shapes, >= 10 of the 12 paired passes won, kernel-only agreeing in sign.
    for n, w in wins.items():
        adopt = (not bad and w["median_ahead"] and w["kernel_sign"] and w["passes"] >= 12
                 and w["won"] >= w["passes"] * 10 / 12)
        extra = ""
        if "lazy" in n:  # mode 2 must also not lose more than 3% on the sharpened rows (most blocks redone)
            sh = sharp.get(n)
            adopt = adopt and bool(sh) and min(sh) >= 0.97
            extra = (f", sharp x4 median ratio {' '.join(f'{x:.3f}' for x in sh)} (>= 0.970 needed)" if sh
                     else ", sharp x4 not run (needed)")
        print(f"rule: {n}: median ahead on both shapes {w['median_ahead']}, paired passes won {w['won']}/"
              f"{w['passes']}, kernel-only same sign {w['kernel_sign']}{extra} -> "
              f"{'ADOPT' if adopt else 'keep v10 off'}")


def add_sharp_passes():
    """ab.timing then also runs the same shapes with q x 4 (the scores sharpened x4: the lazy reference's worst case,
    most blocks redone), after the plain passes and with a third of their passes; reported, not part of the rule.
    dev/q8_v12_ab.py's --sharp uses it too."""
    make, timing_plain, plain = ab.qc.make, ab.timing, list(ab.SHAPES)

    def make_sharp(*args, **kw):
        q, k, v = make(*args, **kw)
        return (q.float() * 4).to(q.dtype), k, v

    def timing(live, passes, reps, results, deadline):
        timing_plain(live, passes, reps, results, deadline)
        ab.SHAPES, ab.qc.make = [(s[0] + " sharp x4",) + tuple(s[1:]) for s in plain], make_sharp
        try:
            timing_plain(live, max(2, passes // 3), reps, results, deadline + 30)
        finally:
            ab.SHAPES, ab.qc.make = plain, make
    ab.timing = timing


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--reps", type=int, default=16)
    ap.add_argument("--budget", type=float, default=60.0, help="seconds from the start; no pass starts after it")
    ap.add_argument("--sharp", action="store_true", help="also the shapes with scores x4 (softmax scale x4)")
    a = ap.parse_args()
    t0 = time.time()
    ab.select = select  # q8_selector_ab's checks and pass loop select v10 too
    ab.quant8.SHORT_KV_EXACT_MAX = 0  # the 8-bit kernel at every length (seed 8K is routed to exact otherwise)
    ab.SHAPES = [s for s in ab.SHAPES if s[4] == 128]
    if a.sharp:
        add_sharp_passes()
    results = {"checks": [], "timing": [], "passes": a.passes,
               "variants": [v[:5] + (int(v[5]), v[5].v10) for v in VARIANTS]}
    ok = ab.checks_fp64(VARIANTS, results)
    v10_checks(results, ok)
    live = [vt for vt in VARIANTS if ok.get(vt[0]) or vt is VARIANTS[0]]  # the default always runs
    ab.timing(live, a.passes, a.reps, results, t0 + a.budget)
    with open(os.path.join(OUT, "q8_v10_ab.json"), "w") as f:
        json.dump(results, f, indent=1)
    table(results)
    print(f"q8_v10_ab done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
