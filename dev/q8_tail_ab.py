"""Device A/B of the 8-bit tail launch (dev/NOTES_8bit.md "v18"; csrc/capi_8bit.cuh q8_plan_tail, VIDATTN_Q8_TAIL):
the last, partial round of 192-row tiles run as key ranges and merged (mode 1, the build default) against the plain
launch (mode 0), in paired rounds on the issue's 8-bit shapes and the family shapes whose tile counts leave a partial
round.

    python3 dev/q8_tail_ab.py [--rounds 6] [--reps 12] [--budget 150] [--shapes "Wan 1.3B self" LTX ...]
    python3 dev/q8_tail_ab.py --modes 1 2 --shapes "HunyuanVideo 1.5 padded" "Mochi padded"   # v18b: kv_lens

    python3 dev/q8_tail_ab.py --path exact --modes 0 1 --shapes "HunyuanVideo 1.5 padded" "Mochi padded"

`--path exact` times the exact (bf16) kernel instead, its modes those of vidattn._ext.set_tail_kv_lens (0: kv_lens
calls on the plain schedule, 1: in the tail launch; dev/NOTES.md "The tail launch with kv_lens"); `--path
exact-rounds` the exact kernel's vidattn._ext.set_tail_rounds (1: the one-round plan, 2: ranges in up to two short
rounds, 3: the balanced tail, one equal chunk of the last round's key blocks per SM; dev/NOTES.md "The tail launch in
two rounds", "A balanced tail at D=256": the exact kernel's tiles are 128 rows, so "Mochi" has 84 tiles in its last
round, "D256 32K" 68, "D256 8K" 100 and "D192 32K" 52, the control, split in one round either way); the rest as below.

    python3 dev/q8_tail_ab.py --path exact-rounds --modes 1 2 --shapes "D256 32K" Mochi "D192 32K"
    python3 dev/q8_tail_ab.py --path exact-rounds --modes 1 3 --shapes "D256 8K" "D256 32K" Mochi "D192 32K"
`--modes A B` (default 0 1): the two quant8.set_tail modes compared, A the plain side of the ratio. Mode 2 ("v18b")
also splits calls with kv_lens, which mode 1 runs plain: the "padded" shapes are batch-1 calls with the key padding
HunyuanVideo 1.5's and Mochi's processors pass as kv_lens (the text's padding: the lengths below are assumptions,
a prompt shorter than the padded text), where modes 1 and 2 differ.

Per shape: the plan each mode ran (quant8.last_tail_splits), relative L2 against fp64 on 128 query rows spread over
the sequence (both modes, the same inputs) and the LSE's largest difference between the modes; then `--rounds`
rounds, the two modes' order reversed every other round: ms per call synced (median of `--reps` calls, each timed
alone: what one attention call costs, the pre-pass included), queued (`--reps` calls back to back between two
events) and device ms per call summed over every kernel (torch.profiler: pre-pass, main launch, tail launch, merge).
The table, printed last: medians, the per-round ratios plain / tail of the synced time and the rounds the tail won,
and the rule's verdict (fixed before the run: see the notes). JSON to $OUT/q8_tail_ab.json.
"""
import argparse
import json
import math
import os
import statistics
import sys
import time

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))
sys.path.insert(0, HERE)
import q8_check as qc  # noqa: E402
from q8_selector_ab import queued_ms  # noqa: E402 - calls queued back to back between two events
import vidattn  # noqa: E402
from vidattn import _ext, quant8  # noqa: E402

OUT = os.environ.get("OUT", "/tmp")
DEV = torch.device("cuda")
# (name, batch, heads, queries, keys, head dim[, kv_len]): the 8-bit shapes and three family shapes with a
# partial last round (tiles of 192 rows over 132 SMs: Wan 1.3B 15 rounds + 72 tiles, LTX 31 + 4, HunyuanVideo 1.5
# 15 + 20, Mochi 21 + 12; seed 8K and CogVideoX plan no tail launch: the controls).
# The "padded" shapes carry a kv_len (batch 1): HunyuanVideo 1.5 at 480x848x61 (the family run's 27425 tokens,
# 2288 tiles = 17 rounds + 44) with 500 padded text keys, and the Mochi shape above with 256.
SHAPES = [("Wan 1.3B self", 1, 12, 32760, 32760, 128), ("LTX", 1, 32, 24576, 24576, 64),
          ("HunyuanVideo 1.5", 1, 16, 24000, 24000, 128), ("Mochi", 1, 24, 22230, 22230, 128),
          ("seed 8K", 4, 16, 8192, 8192, 128), ("CogVideoX", 1, 48, 17776, 17776, 64),
          ("HunyuanVideo 1.5 padded", 1, 16, 27425, 27425, 128, 26925),
          ("Mochi padded", 1, 24, 22230, 22230, 128, 21974),
          ("D256 32K", 1, 8, 32768, 32768, 256), ("D192 32K", 1, 10, 32768, 32768, 192),
          ("D256 8K", 2, 8, 8192, 8192, 256)]
MODES = (0, 1)
# Per path: (the mode setter, the plan reader, vidattn.attention's precision, the modes it takes).
PATHS = {"8bit": (quant8.set_tail, quant8.last_tail_splits, "8bit", tuple(m for m in quant8.TAIL_MODES if m >= 0)),
         "exact": (_ext.set_tail_kv_lens, _ext.last_tail_splits, "exact", (0, 1)),
         "exact-rounds": (_ext.set_tail_rounds, _ext.last_tail_splits, "exact", (1, 2, 3))}


def rule(ratios):
    """The verdict on one shape from the per-round ratios plain / tail of the synced ms (> 1: the tail faster)."""
    if not ratios:
        return "no rounds"
    med, won = statistics.median(ratios), sum(r > 1 for r in ratios)
    if med >= 1.005 and won >= len(ratios) - 1:
        return "tail wins"
    if med <= 0.995 and won <= 1:
        return "tail loses"
    return "tie"


def measure(shapes, rounds, reps, deadline, modes=MODES, path="8bit"):
    set_mode, last_splits, precision, _ = PATHS[path]
    quant8.SHORT_KV_EXACT_MAX = 0
    rows = []
    for name, b, h, sq, skv, d, *kv_len in shapes:
        torch.manual_seed(hash(name) % 1000)
        q, k, v = qc.make(b, h, sq, skv, d)
        n = kv_len[0] if kv_len else skv  # (batch 1 where a kv_len is given)
        lens = torch.tensor([n], dtype=torch.int32, device=DEV) if kv_len else None
        sel = torch.linspace(0, sq - 1, 128, device=DEV).long()
        o_ref, lse_ref = qc.ref64(q[:, sel], k[:, :n], v[:, :n], 1.0 / math.sqrt(d))
        row = {"shape": name, "dims": [b, h, sq, skv, d], "kv_len": n, "flops": 4.0 * b * h * sq * n * d,
               "splits": {}, "rel_l2": {}, "lse_max_abs_vs_fp64": {}, "synced_ms": {}, "queued_ms": {},
               "device_ms": {}}
        lses = {}
        for m in modes:
            set_mode(m)
            out, lse = vidattn.attention(q, k, v, kv_lens=lens, precision=precision, return_lse=True)
            row["splits"][m] = last_splits()
            row["rel_l2"][m] = qc.rel_l2(out[:, sel], o_ref)
            row["lse_max_abs_vs_fp64"][m] = float((lse[:, :, sel].double() - lse_ref).abs().max())
            lses[m] = lse
        row["lse_max_abs_between_modes"] = float((lses[modes[0]] - lses[modes[1]]).abs().max())
        del o_ref, lse_ref, lses
        torch.cuda.empty_cache()
        print(f"[{name}] splits {row['splits']}, rel L2 {row['rel_l2']}, LSE vs fp64 {row['lse_max_abs_vs_fp64']}",
              flush=True)
        rows.append((row, (q, k, v, lens)))
    for r in range(rounds):
        if time.time() > deadline:
            print(f"out of time after {r} rounds", flush=True)
            break
        for row, (q, k, v, lens) in rows:
            for m in (modes if r % 2 == 0 else modes[::-1]):
                set_mode(m)
                fn = lambda: vidattn.attention(q, k, v, kv_lens=lens, precision=precision)  # noqa: E731
                row["synced_ms"].setdefault(m, []).append(qc.bench_ms(fn, reps))
                row["queued_ms"].setdefault(m, []).append(queued_ms(fn, reps))
                row["device_ms"].setdefault(m, []).append(sum(qc.kernel_times(fn, 3).values()))
    set_mode(-1)
    return [row for row, _ in rows]


def table(rows, modes=MODES, path="8bit"):
    what = {"8bit": "8-bit tail launch", "exact": "exact tail launch with kv_lens",
            "exact-rounds": "exact tail launch in two rounds"}[path]
    print(f"== {what} A/B, modes {modes[0]} against {modes[1]}: TFLOPS synced per call | queued | from "
          f"the device time (pre-pass and every launch); rel L2 vs fp64; per-round synced ratios "
          f"{modes[0]} / {modes[1]} ==")
    a_m, b_m = modes
    for row in rows:
        f = row["flops"]
        line = f"{row['shape']:17s}"
        for m in modes:
            if not row["synced_ms"].get(m):
                continue
            syn, que, dev = (statistics.median(row[k][m]) for k in ("synced_ms", "queued_ms", "device_ms"))
            line += (f" | mode {m} (splits {row['splits'][m]}): {f / syn / 1e9:5.0f} {f / que / 1e9:5.0f} "
                     f"{f / dev / 1e9:5.0f} {row['rel_l2'][m]:.2e}")
        ratios = [a / b for a, b in zip(row["synced_ms"].get(a_m, []), row["synced_ms"].get(b_m, []))]
        dev_r = [a / b for a, b in zip(row["device_ms"].get(a_m, []), row["device_ms"].get(b_m, []))]
        row["ratios_synced"], row["ratios_device"], row["verdict"] = ratios, dev_r, rule(ratios)
        print(line)
        print(f"{'':17s}   synced x {' '.join(f'{x:.3f}' for x in ratios)} (median "
              f"{statistics.median(ratios) if ratios else float('nan'):.3f}, won {sum(x > 1 for x in ratios)}/"
              f"{len(ratios)}); device x {statistics.median(dev_r) if dev_r else float('nan'):.3f}; "
              f"LSE between modes {row['lse_max_abs_between_modes']:.2e}: {row['verdict']}")


def main(argv=None):
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=6)
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--budget", type=float, default=150.0, help="seconds from the start; no round starts after it")
    ap.add_argument("--shapes", nargs="+", default=None, help="names from SHAPES (default: all)")
    ap.add_argument("--path", choices=sorted(PATHS), default="8bit",
                    help="the 8-bit path's tail modes (quant8.set_tail) or the exact kernel's kv_lens switch "
                         "(_ext.set_tail_kv_lens); default 8bit")
    ap.add_argument("--modes", nargs=2, type=int, default=list(MODES), metavar=("A", "B"),
                    help="the modes compared, A / B in the ratios (default 0 1)")
    a = ap.parse_args(argv)
    if any(m not in PATHS[a.path][3] for m in a.modes):
        ap.error(f"--modes: the {a.path} path's modes are {PATHS[a.path][3]}, got {a.modes}")
    names = [s[0] for s in SHAPES]
    if a.shapes and any(s not in names for s in a.shapes):
        ap.error(f"--shapes: names from {names}")
    modes = tuple(a.modes)
    if modes[0] == modes[1]:
        ap.error(f"--modes: two different modes, got {a.modes}")
    shapes = [s for s in SHAPES if not a.shapes or s[0] in a.shapes]
    t0 = time.time()
    rows = measure(shapes, a.rounds, a.reps, t0 + a.budget, modes, a.path)
    table(rows, modes, a.path)
    res = {"rows": rows, "path": a.path, "modes": list(modes), "rounds": a.rounds, "reps": a.reps,
           "gpu": torch.cuda.get_device_name(), "torch": torch.__version__,
           "commit": os.environ.get("VIDATTN_GIT_COMMIT", "unknown")}
    name = {"8bit": "q8_tail_ab.json", "exact": "tail_kv_lens_ab.json", "exact-rounds": "tail_rounds_ab.json"}[a.path]
    with open(os.path.join(OUT, name), "w") as fh:
        json.dump(res, fh, indent=1, default=str)
    print(f"q8_tail_ab done in {time.time() - t0:.0f} s", flush=True)


if __name__ == "__main__":
    main()
