"""Device A/B of v12 (dev/NOTES_8bit.md "v12"; csrc/sm90/q8_fwd.cuh kV12, csrc/capi_8bit.cuh VIDATTN_Q8_V12): at D=128
on schedule 3 with v10 mode 1 (the default) mode 0 (the default as it stands: 546 SASS instructions per warp and
key block) against mode 1 (the same arithmetic in 515: the warpgroup index uniform to ptxas, the row max in
three-input chains and by one FADD on steady blocks, the row sums from their first groups, K's scale pointer carried).

    python3 dev/q8_v12_ab.py [--passes 6] [--reps 16] [--budget 100] [--sharp] [--modes 1 2]

--modes REF VARIANT... picks the v12 modes (default 0 1; `1 2 3 4 5` timed v15's pass points against the default, with
dev/experiments/q8_v15_pass_point.patch applied; v14, the alphas' exponentials behind a warp vote, was mode 2 in
dev/experiments/q8_v14_alpha_vote.patch). JSON name:
q8_v12_ab_<modes>.json for other --modes. `--selector kv_pass --modes 0 1` runs the same A/B and rule on the pre-pass's
K/V pass instead (quant8.set_kv_pass; JSON q8_kv_pass_ab_0_1.json); the table's prep column is where it shows.

dev/q8_selector_ab.py's functions, as dev/q8_v10_ab.py uses them: per variant its checks_fp64 (odd lengths, kv_lens
tails with LSE, fp16, a shared key offset, V = ones against fp64; the launch ran schedule 3, conversion 2), that the
launch reports the v12 mode it asked for, and that mode 1's output and LSE equal mode 0's bit for bit on a case with
a tail block (or within mode 0's own run-to-run difference); then `--passes` alternating passes (the order reversed
every other pass) on the D=128 shapes (Wan 1.3B self, seed 8K): TFLOPS synced per call with the quantization,
queued, and kernel-only from torch.profiler. --sharp adds the same shapes with the scores sharpened x4 (reported,
not part of the rule). The table, printed last, gives medians, per-pass ratios to the default and the rule's
verdict. JSON to $OUT/q8_v12_ab.json ($OUT/q8_v12_ab_<modes>.json for other --modes).
"""
import argparse
import importlib.util
import json
import math
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
_spec = importlib.util.spec_from_file_location("q8_v10_ab", os.path.join(HERE, "q8_v10_ab.py"))
v10ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(v10ab)
ab = v10ab.ab

OUT = os.environ.get("OUT", "/tmp")


class Prep(int):
    """q8_selector_ab's pre-pass selector (an int, -1: the default) carrying the variant's mode of --selector."""

    def __new__(cls, value, mode):
        obj = super().__new__(cls, value)
        obj.mode = mode
        return obj


# (name, head dim, schedule, row-sum mode, conversion, pre-pass + mode) as q8_selector_ab.py's; the first is the default.
MODE_NAMES = {0: "v10 mode 1", 1: "fewer instr."}
# What --modes are modes of (--selector): quant8's setter and reader, the modes' names and the build default. kv_pass:
# the pre-pass's K/V pass, the same A/B and rule on the same shapes.
SELECTORS = {"v12": ("set_v12", "last_v12", MODE_NAMES, 1),
             "kv_pass": ("set_kv_pass", "last_kv_pass", {0: "K/V a thread per key", 1: "K/V whole rows"}, 1)}
SELECTOR = "v12"


def _set(mode):
    getattr(ab.quant8, SELECTORS[SELECTOR][0])(mode)


def _last():
    return getattr(ab.quant8, SELECTORS[SELECTOR][1])()


def variants(ref, *modes):
    """The reference first (the rule's baseline), then the variants: the selector's modes (`--modes`)."""
    _, _, names, default = SELECTORS[SELECTOR]
    return [(f"d128 {SELECTOR} {m} ({names[m]}{', default' if m == default else ''})", 128, -1, -1, -1, Prep(-1, m))
            for m in (ref,) + modes]


VARIANTS = variants(0, 1)
_select = ab.select


def select(seq, mode, cvt, prep):
    _select(seq, mode, cvt, int(prep))
    _set(getattr(prep, "mode", -1))


def v12_checks(results, ok):
    """The launch ran the mode it names; the variant's output and LSE are the reference's bit for bit."""
    import torch

    g = torch.Generator(device=ab.DEV)
    g.manual_seed(97531)
    q, k, v = ab.qc.make(2, 3, 517, 2049, 128, gen=g)
    # K on a grid of quarters (|k| <= 31): the pre-pass's K sums (fp32 atomics) are then exact in any order, so any
    # difference is the variant's (with plain normal K, call N3 of the ninth sitting flagged a variant whose GPU test,
    # on this grid, passed bit for bit: the sums' order had changed between the runs).
    k = ((k.float() * 4).round() / 4).clamp(-31, 31).to(k.dtype)

    def call(prep):
        select(-1, -1, -1, prep)
        out = torch.full_like(q, float("nan"))
        lse = torch.full((q.shape[0], q.shape[2], q.shape[1]), float("nan"), device=ab.DEV)
        ab.quant8.forward_8bit(q, k, v, out, lse, None, 1 / math.sqrt(128))
        torch.cuda.synchronize()
        return out, lse, _last()

    try:  # the reference twice, once for all variants (its own run-to-run difference)
        a0, l0, r0 = call(VARIANTS[0][5])
        a1, l1, r1 = call(VARIANTS[0][5])
        ref_error = None
    except Exception as exc:  # noqa: BLE001 - the error must not end the A/B
        ref_error = repr(exc)
    for variant in VARIANTS[1:]:
        try:
            if ref_error is not None:
                raise RuntimeError(f"the reference failed: {ref_error}")
            b, lb, r2 = call(variant[5])
            if torch.equal(a0, a1) and torch.equal(l0, l1):
                same = torch.equal(a0, b) and torch.equal(l0, lb)
            else:  # (the pre-pass's statistics by atomics: the reference itself differs run to run in the last bits)
                noise = float((a1.float() - a0.float()).abs().max())
                same = float((b.float() - a0.float()).abs().max()) <= 2 * noise
            want = (VARIANTS[0][5].mode, VARIANTS[0][5].mode, variant[5].mode)
            good = same and (r0, r1, r2) == want
            got = f"ran {r0}/{r1}/{r2}, identical to mode {want[0]}: {same}"
        except Exception as exc:  # noqa: BLE001 - the error must not end the A/B
            good, got = False, repr(exc)
        name = variant[0]
        ok[name] = ok.get(name, False) and good
        results["checks"].append({"variant": name + f" ({SELECTOR} mode, bit for bit)", "ok": good, "ran": got})
        print(f"[{name}] {got}: {'ok' if good else 'FAIL'}", flush=True)
    select(-1, -1, -1, Prep(-1, -1))


def table(results):
    """v10's table and rule (v8's), named for v12: every check passes, the median with quantization ahead on both plain
    shapes, >= 10 of the 12 paired passes won, kernel-only agreeing in sign."""
    out = []
    v10ab.print = lambda *args, **kw: out.append(" ".join(str(x) for x in args))
    try:
        v10ab.table(results)
    finally:
        del v10ab.print
    for line in out:
        print(line.replace("== 8-bit v10 A/B", f"== 8-bit {SELECTOR} A/B").replace("keep v10 off", f"keep {SELECTOR} off"))
    for r in results["timing"]:  # the pre-pass's device ms (what the K/V pass changes), medians over the passes
        prep = {n: ab.statistics.median(v) for n, v in r.get("prep_ms", {}).items() if v}
        if prep:
            print(f"pre-pass ms, {r['shape']}: " + ", ".join(f"{n} {ms:.3f}" for n, ms in prep.items()))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--passes", type=int, default=6)
    ap.add_argument("--reps", type=int, default=16)
    ap.add_argument("--budget", type=float, default=100.0, help="seconds from the start; no pass starts after it")
    ap.add_argument("--sharp", action="store_true", help="also the shapes with scores x4 (softmax scale x4)")
    ap.add_argument("--modes", type=int, nargs="+", default=[0, 1], metavar="MODE",
                    help="v12 modes compared: the reference, then the variants (0 1: v12; 1 2 3 4 5: v15's pass "
                         "points against the default, with dev/experiments/q8_v15_pass_point.patch applied)")
    ap.add_argument("--selector", choices=sorted(SELECTORS), default="v12",
                    help="what --modes are modes of: v12 (quant8.set_v12) or the pre-pass's K/V pass (set_kv_pass)")
    a = ap.parse_args()
    global VARIANTS, SELECTOR
    SELECTOR = a.selector
    names = SELECTORS[SELECTOR][2]
    if len(a.modes) < 2 or len(set(a.modes)) != len(a.modes) or any(m not in names for m in a.modes):
        ap.error(f"--modes: two or more different modes of {sorted(names)}")
    VARIANTS = variants(*a.modes)
    t0 = time.time()
    ab.select = select
    ab.quant8.SHORT_KV_EXACT_MAX = 0
    ab.SHAPES = [s for s in ab.SHAPES if s[4] == 128]
    if a.sharp:
        v10ab.add_sharp_passes()
    results = {"checks": [], "timing": [], "passes": a.passes,
               "variants": [v[:5] + (int(v[5]), v[5].mode) for v in VARIANTS]}
    ok = ab.checks_fp64(VARIANTS, results)
    v12_checks(results, ok)
    live = [vt for vt in VARIANTS if ok.get(vt[0]) or vt is VARIANTS[0]]  # the default always runs
    ab.timing(live, a.passes, a.reps, results, t0 + a.budget)
    name = "q8_v12_ab.json" if a.modes == [0, 1] else f"q8_v12_ab_{'_'.join(map(str, a.modes))}.json"
    if SELECTOR == "kv_pass":
        name = f"q8_kv_pass_ab_{'_'.join(map(str, a.modes))}.json"
    with open(os.path.join(OUT, name), "w") as f:
        json.dump(results, f, indent=1)
    table(results)
    print(f"q8_v12_ab done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
