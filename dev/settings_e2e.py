"""Device A/B, end to end, of two settings of the run-time selectors: one forward of a family's model (Wan by default)
through vidattn's processors at 8-bit precision (or exact, `--path exact`) under setting A against the same forward
under setting B, in one process on one model, beside SDPA.

    python3 dev/settings_e2e.py --a v12=1 nr=1 --b v12=2 nr=3 [--family wan14b] [--rounds 4] [--sdpa 2]
    python3 dev/settings_e2e.py --a tail=1 --b tail=2 --family hunyuan_video15 --height 480 --width 848 --frames 61
    python3 dev/settings_e2e.py --path exact --a tkv=0 --b tkv=1 --family hunyuan_video15 --height 480 ...

Selectors (KEY=VALUE; a key left out keeps the library's default, -1 / 0):
  v12   vidattn.quant8.set_v12 (0 v10 mode 1, 1 v12; with dev/experiments/q8_v15_pass_point.patch applied, 2-5:
        v12 with the exponential turn passed after 8, 10, 14 or 16 of P's 16 packed registers; v14, the alphas behind
        a warp vote, is dev/experiments/q8_v14_alpha_vote.patch; both measured in the ninth sitting, neither won)
  nr    vidattn.rotary.set_norm_rope_schedule (the fused norm + RoPE kernel's schedule: 1 one row per CTA, 3 lean)
  kv    vidattn.quant8.set_kv_pass (the pre-pass's K/V pass: 0 a thread per key, 1 whole rows)
  tail  vidattn.quant8.set_tail (the tail launch: 0 never, 1 calls without kv_lens, 2 every call)
  tkv   vidattn._ext.set_tail_kv_lens (the exact kernel's tail launch for kv_lens calls: 0 off, 1 on; with
        --path exact, whose forwards then run the exact kernel and skip the v12 check)
The settings alternate on one model (A B B A ...) after one untimed forward each, so their difference is the
settings' and not the run-to-run spread of two processes or machines. SDPA's forwards (`--sdpa`, after one untimed)
give each setting's speedup in the same run. Checks first: each setting's forward ran the v12 mode it asked for (the
last 8-bit launch's report), and the outputs' relative L2 difference is printed beside the 8-bit path's own
run-to-run difference (its K sums' atomics order varies). JSON to $OUT/settings_e2e.json; a table last.
"""
import argparse
import json
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.join(ROOT, "scripts"))

OUT = os.environ.get("OUT", "/tmp")
KEYS = ("v12", "nr", "kv", "tail", "tkv")


def parse_setting(items):
    """['v12=2', 'nr=3'] -> {'v12': 2, 'nr': 3}; unknown keys, repeated keys and non-integers are errors."""
    out = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or key not in KEYS:
            raise ValueError(f"setting {item!r}: expected KEY=VALUE with KEY one of {', '.join(KEYS)}")
        if key in out:
            raise ValueError(f"setting {item!r}: {key} given twice")
        try:
            out[key] = int(value)
        except ValueError:
            raise ValueError(f"setting {item!r}: the value must be an integer") from None
    return out


def describe(setting):
    return " ".join(f"{k}={v}" for k, v in sorted(setting.items())) or "defaults"


def apply_setting(setting):
    from vidattn import _ext, quant8, rotary

    quant8.set_v12(setting.get("v12", -1))
    rotary.set_norm_rope_schedule(setting.get("nr", 0))
    quant8.set_kv_pass(setting.get("kv", -1))
    quant8.set_tail(setting.get("tail", -1))
    _ext.set_tail_kv_lens(setting.get("tkv", -1))


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--a", nargs="*", default=[], help="setting A (KEY=VALUE ...; none: the defaults)")
    p.add_argument("--b", nargs="*", default=[], help="setting B")
    p.add_argument("--family", default="wan14b", help="a pipelines.registry family (default wan14b)")
    p.add_argument("--path", default="8bit", choices=["8bit", "exact"], help="the attention path timed (default 8bit)")
    p.add_argument("--height", type=int, default=720)
    p.add_argument("--width", type=int, default=1280)
    p.add_argument("--frames", type=int, default=81)
    p.add_argument("--rounds", type=int, default=4, help="timed forwards per setting (default 4)")
    p.add_argument("--sdpa", type=int, default=2, help="timed SDPA forwards (default 2; 0: none)")
    args = p.parse_args(argv)
    try:
        settings = {"A": parse_setting(args.a), "B": parse_setting(args.b)}
    except ValueError as exc:
        p.error(str(exc))
    if settings["A"] == settings["B"]:
        p.error("settings A and B are the same")
    from pipelines import registry

    if args.family not in registry.names():
        p.error(f"--family {args.family!r}: not a registry family ({', '.join(registry.names())})")

    import torch

    if not torch.cuda.is_available():
        print("error: needs a CUDA GPU", file=sys.stderr)
        return 2

    from fidelity_8bit import attention_path
    from e2e_common import build_model, sdpa_forwards
    from pipelines.measure import timed_call
    from vidattn import _ext, quant8
    from vidattn.envinfo import run_metadata

    built, info, dev = build_model(args.family, args.height, args.width, args.frames)

    tails = {}  # key ranges a tile of each setting's last launch in its first forward (0: no tail launch)

    def forward(name):
        apply_setting(settings[name])
        with attention_path(args.path, built.model):
            ms, out = timed_call(built.forward, dev)
        if args.path == "8bit":
            tails.setdefault(name, quant8.last_tail_splits())
            return ms, out, quant8.last_v12()
        tails.setdefault(name, _ext.last_tail_splits())
        return ms, out, None

    report = {"metadata": run_metadata(), "command": "python3 dev/settings_e2e.py " + " ".join(sys.argv[1:]),
              "family": args.family, "path": args.path, "size": [args.height, args.width, args.frames], **info,
              "settings": {k: describe(v) for k, v in settings.items()}}
    try:
        _, out_a, ran_a = forward("A")
        _, out_a2, _ = forward("A")
        _, out_b, ran_b = forward("B")

        def rel(x, y):
            return ((x.float() - y.float()).norm() / y.float().norm()).item()

        # (1: the build's default v12 mode; the exact path has none to check)
        want = {k: (v.get("v12", 1) if args.path == "8bit" else None) for k, v in settings.items()}
        checks = {"ran_v12": {"A": ran_a, "B": ran_b}, "asked_v12": want, "rel_l2_b_vs_a": rel(out_b, out_a),
                  "rel_l2_a_vs_a": rel(out_a2, out_a), "last_tail_splits": dict(tails)}
        del out_a, out_a2, out_b
        ok = ran_a == want["A"] and ran_b == want["B"]
        print(f"checks: v12 ran A {ran_a} / B {ran_b} (asked {want['A']} / {want['B']}); output rel L2 B vs A "
              f"{checks['rel_l2_b_vs_a']:.2e}, A vs itself {checks['rel_l2_a_vs_a']:.2e}; tail ranges of the last "
              f"launch A {tails.get('A')} / B {tails.get('B')} -> "
              f"{'ok' if ok else 'FAILED'}", flush=True)
        times = {"A": [], "B": []}
        for r in range(args.rounds):
            for name in (("A", "B") if r % 2 == 0 else ("B", "A")):
                ms, out, _ = forward(name)
                del out
                times[name].append(ms)
            print(f"round {r + 1}: A {times['A'][-1]:.1f} ms, B {times['B'][-1]:.1f} ms", flush=True)
    finally:
        apply_setting({})
    med = {k: statistics.median(v) for k, v in times.items()}
    wins = sum(b < a for a, b in zip(times["A"], times["B"]))
    sdpa = sdpa_forwards(built, dev, args.sdpa)
    sdpa_med = statistics.median(sdpa) if sdpa else None
    report.update(checks=checks, checks_ok=ok, forward_ms=times, median_ms=med, b_wins=wins,
                  saving_ms=med["A"] - med["B"], sdpa_ms=sdpa,
                  speedup_vs_sdpa={k: sdpa_med / v for k, v in med.items()} if sdpa_med else None)
    os.makedirs(OUT, exist_ok=True)
    with open(os.path.join(OUT, "settings_e2e.json"), "w") as f:
        json.dump(report, f, indent=2, default=str)
    print(f"\n| {args.family} {args.height}x{args.width}x{args.frames}, {args.path} | ms/forward (median) | x SDPA | "
          f"B won |")
    print("|---|---|---|---|")
    if sdpa_med:
        print(f"| SDPA | {sdpa_med:.1f} | 1.000 | |")
    for k in ("A", "B"):
        sp = f"{sdpa_med / med[k]:.3f}" if sdpa_med else "-"
        print(f"| {k}: {describe(settings[k])} | {med[k]:.1f} | {sp} | {f'{wins}/{args.rounds}' if k == 'B' else ''} |")
    print(f"B saves {med['A'] - med['B']:.1f} ms per forward; checks {'OK' if ok else 'FAILED'}")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
