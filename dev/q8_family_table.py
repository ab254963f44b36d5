#!/usr/bin/env python3
"""The 8-bit path per family, one table from device stage P21's folders (dev/device_session.sh P21): for each family
the forward times (scripts/e2e_report.py --precision both: SDPA, exact, 8-bit) and the fidelity report
(scripts/fidelity_8bit.py: per-layer error against fp64 beside SageAttention2's, one-step output, video, the policy
the sweep suggests).

    python3 dev/q8_family_table.py bench/results/h200_2026-12-04_sixteenth/call_p21*/p21

Each folder holds e2e_<family>/report.json and fid_<family>/fidelity.json; a family with only one of the two gets
"n/a" in the other's columns. Markdown on stdout.
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "scripts"))

import fidelity_8bit  # noqa: E402 - its table formatter and attention_blind rule


def _load(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def _median_ms(report: dict, path: str) -> float | None:
    r = (report.get("results") or {}).get(path) or {}
    return (r.get("forward_stats_ms") or {}).get("median")


def _e(x, nd=2):
    return fidelity_8bit._f(x, nd, True)


def _f(x, nd=2):  # fidelity_8bit's: None "n/a", strings as written (the reports write inf as "inf"), inf "inf"
    return fidelity_8bit._f(x, nd)


def family_row(e2e: dict | None, fid: dict | None) -> dict:
    row = {}
    if e2e:
        row["size"] = f"{e2e.get('height')}x{e2e.get('width')}x{e2e.get('frames')}"
        row["tokens"], row["heads"], row["head_dim"] = e2e.get("tokens"), e2e.get("heads"), e2e.get("head_dim")
        for p in ("sdpa", "vidattn", "vidattn_8bit"):
            row[p] = _median_ms(e2e, p)
    if fid:
        row.setdefault("size", f"{fid.get('height')}x{fid.get('width')}x{fid.get('frames')}")
        summ = (fid.get("per_layer") or {}).get("summary") or {}
        for p in ("exact", "8bit", "sage2"):
            se = (summ.get(p) or {}).get("self") or {}
            row[f"{p}_self"] = (se.get("rel_l2_median"), se.get("rel_l2_max"))
            steps = [r[p]["rel_l2"] for r in fid.get("one_step") or [] if isinstance(r.get(p), dict)]
            row[f"{p}_step"] = max(steps) if steps else None
            row[f"{p}_psnr"] = ((fid.get("video") or {}).get(p) or {}).get("psnr_db")
        q8 = (summ.get("8bit") or {}).get("self") or {}
        row["q8_calls"] = (q8.get("kernel_8bit_calls"), q8.get("calls"), q8.get("key_padded_calls"))
        row["policy"] = (fid.get("suggested_policy") or {}).get("policy")
        # the report's note, or fidelity_8bit's rule applied here for reports written before it had one
        row["blind"] = bool(fid.get("attention_blind") or fidelity_8bit.attention_blind(
            fid.get("one_step") or [], fidelity_8bit.torch.device(fid.get("device", "cpu"))))
        row["swept"] = [s["policy"] for s in fid.get("sweep") or [] if "error" not in s]
    return row


def table(dirs: list[Path]) -> str:
    fams: dict[str, dict] = {}
    for d in dirs:
        for sub in sorted(d.iterdir()) if d.is_dir() else []:
            if not sub.is_dir() or "_" not in sub.name:
                continue
            kind, fam = sub.name.split("_", 1)
            if kind == "e2e":
                fams.setdefault(fam, {})["e2e"] = _load(sub / "report.json")
            elif kind == "fid":
                fams.setdefault(fam, {})["fid"] = _load(sub / "fidelity.json")
    lines = ["| family | size | heads x D | forward SDPA / exact / 8-bit (ms) | 8-bit / exact | 8-bit calls "
             "(captured self) | per-layer rel L2, 8-bit / Sage2 / exact (median, max) | one-step rel L2, 8-bit / "
             "Sage2 (worst) | video PSNR dB, 8-bit / Sage2 / exact | suggested policy |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    for fam, parts in fams.items():
        r = family_row(parts.get("e2e"), parts.get("fid"))
        speed = (r["vidattn"] / r["vidattn_8bit"]) if r.get("vidattn") and r.get("vidattn_8bit") else None
        ms = " / ".join(_f(r.get(p), 0) for p in ("sdpa", "vidattn", "vidattn_8bit"))
        calls = r.get("q8_calls") or (None, None, None)
        calls_s = "n/a" if calls[1] is None else f"{calls[0]} of {calls[1]}" + (f" ({calls[2]} key-padded)"
                                                                               if calls[2] else "")
        err = ", ".join(f"{_e((r.get(f'{p}_self') or (None,))[0])} / {_e((r.get(f'{p}_self') or (None, None))[1])}"
                        for p in ("8bit", "sage2", "exact"))
        blind = r.get("blind")
        step = "not measurable" if blind else f"{_e(r.get('8bit_step'))} / {_e(r.get('sage2_step'))}"
        video = "not measurable" if blind else " / ".join(_f(r.get(f"{p}_psnr")) for p in ("8bit", "sage2", "exact"))
        pol = r.get("policy")
        pol_s = "n/a" if blind else ({None: "none reached Sage2", "none": "none (all 8-bit)"}.get(pol, pol)
                                     if "policy" in r else "n/a")
        if "swept" in r and not r["swept"] and not blind:
            pol_s += " (sweep not run)"
        hd = f"{r.get('heads')} x {r.get('head_dim')}" if r.get("heads") else "n/a"
        lines.append(f"| {fam} | {r.get('size', 'n/a')} | {hd} | {ms} | {_f(speed, 3)}x | {calls_s} | {err} | "
                     f"{step} | {video} | {pol_s} |")
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("dirs", nargs="+", type=Path, help="P21 output folders (holding e2e_* and fid_* folders)")
    args = ap.parse_args(argv)
    missing = [str(d) for d in args.dirs if not d.is_dir()]
    if missing:
        print(f"error: not a folder: {', '.join(missing)}", file=sys.stderr)
        return 2
    sys.stdout.write(table(args.dirs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
