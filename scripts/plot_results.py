"""The README's results figure, drawn from committed result files only (bench/results/INDEX.md lists them).

    python3 scripts/plot_results.py                      # -> docs/img/results.png
    python3 scripts/plot_results.py --kernel bench/results/kernel_2026-12-01_*.json --out /tmp/results.png

Left: the kernel against cuDNN SDPA on the five anchor shapes of the README's kernel bullet (bf16, non-causal), from
one `scripts/bench_anchors.py` run (default: the envelope run the bullet quotes): vidattn, FlashAttention-3 and
SageAttention2 (8-bit: INT8 QK, FP8 PV, quantization included; not exact), each TFLOPS over cuDNN's of the same run.
`--kernel` draws the older form instead: the median over `scripts/bench_kernel.py` runs of vidattn over cuDNN, beside
the reference kernels' ratios taken within their own runs (bench/results/anchors_fa3_sageattention_h200.json).
Right: one transformer forward per model family, vidattn over SDPA (`scripts/e2e_report.py`, the cross-model table),
with the FlashAttention-3 and SageAttention2 forwards of Wan 1.3B from the same anchors file.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
RESULTS = REPO / "bench" / "results"
DEFAULT_KERNEL = [RESULTS / f"kernel_2026-12-01_{name}.json" for name in
                  ("74bf459_williams", "74bf459_williams_run2", "5a9dc28_unr_williams", "5a9dc28_unr_williams_run2")]
DEFAULT_RUN = RESULTS / "h200_2026-12-02_envelope" / "kernel" / "anchors.json"
RUN_GROUP = "fp8"  # bench_anchors.py's group of the five anchor shapes (seed 8K, Wan self and cross, CogVideoX, LTX)
DEFAULT_CROSS = RESULTS / "h200_2026-12-02_families" / "family_table" / "table.json"
DEFAULT_E2E = RESULTS / "h200_2026-12-02_late" / "call_e13" / "e2e13" / "report.json"
DEFAULT_ANCHORS = RESULTS / "anchors_fa3_sageattention_h200.json"
DEFAULT_OUT = REPO / "docs" / "img" / "results.png"


def kernel_ratios(paths: list[Path]) -> list[tuple[str, str, float]]:
    """(key, name, median vidattn/cuDNN) per shape, in the order of the first file; a shape must be in every file."""
    runs = [{r["key"]: r for r in json.loads(p.read_text())["results"]} for p in paths]
    out = []
    for key, row in runs[0].items():
        ratios = [run[key]["vidattn_over_cudnn"] for run in runs if key in run and run[key].get("vidattn_over_cudnn")]
        if len(ratios) != len(runs):
            raise SystemExit(f"shape {key!r} is missing or has no vidattn/cuDNN ratio in some of {[str(p) for p in paths]}")
        out.append((key, row["name"], statistics.median(ratios)))
    return out


def run_ratios(run: dict, group: str = RUN_GROUP) -> tuple[list[tuple[str, str, float]], dict, dict]:
    """The kernel panel from one bench_anchors.py run: ([(key, name, vidattn/cuDNN)], FA3/cuDNN, SageAttention2/cuDNN),
    every ratio within the run; a shape without a cuDNN or vidattn time stops the plot."""
    kernel, fa3, sage = [], {}, {}
    for r in run["results"]:
        if r.get("group") != group:
            continue
        t = {k: v.get("tflops") for k, v in r["impls"].items() if isinstance(v, dict)}
        if not t.get("cudnn") or not t.get("vidattn"):
            raise SystemExit(f"{r['name']}: no cuDNN or vidattn time in the run")
        kernel.append((r["name"], r["name"], t["vidattn"] / t["cudnn"]))
        for name, table in (("fa3", fa3), ("sage2", sage)):
            if t.get(name):
                table[r["name"]] = t[name] / t["cudnn"]
    if not kernel:
        raise SystemExit(f"no shape of group {group!r} in the run")
    return kernel, fa3, sage


def anchor_ratios(anchors: dict) -> tuple[dict[str, float], dict[str, float]]:
    """FA3/cuDNN (every anchor shape) and SageAttention2/cuDNN (where measured), each within its own run."""
    fa3_table = anchors["kernel_2026-11-30"]
    cols = fa3_table["columns"]
    fa3 = {k: v[cols.index("fa3")] / v[cols.index("cudnn")] for k, v in fa3_table["rows"].items()}
    sage_table = anchors["kernel_2026-12-01"]
    cols = sage_table["columns"]
    sage = {k: v[cols.index("sageattention2")] / v[cols.index("cudnn")] for k, v in sage_table["rows"].items()}
    return fa3, sage


def forward_rows(cross: dict, e2e: dict | None) -> list[tuple[str, float]]:
    """(label, vidattn speedup over SDPA per transformer forward) per measured family, the shipped-kernel Wan report
    first when given."""
    rows = []
    if e2e is not None:
        measured = (e2e.get("speedup") or {}).get("per_forward_median")
        if (e2e.get("fallback") or {}).get("all_fallback") or not measured \
                or not str(e2e.get("device", "cuda")).startswith("cuda"):
            raise SystemExit("the --e2e report has no speedup to plot: every vidattn call fell back to SDPA there "
                             "(or it ran off the GPU)")
        commit = e2e["metadata"]["git_commit"][:7]
        rows.append((f"Wan2.1-T2V-1.3B (e2e report, {commit})", e2e["speedup"]["per_forward_median"]))
    for r in cross["rows"]:
        # A family none of whose calls ran the kernel (Allegro, head dim 96) timed SDPA twice: no speedup to plot.
        # Rows of scripts/family_table.py keep the commit in their metadata and say all_fallback instead.
        ran = r.get("kernel_calls", 1) > 0 and not r.get("all_fallback", False)
        if "flex backend" in r.get("inputs_note", ""):  # AnyFlow-FAR: stock runs eager flex, not a ratio over SDPA
            continue
        if r.get("status") == "ok" and r.get("speedup") and ran:
            commit = r.get("git_commit") or r.get("metadata", {}).get("git_commit", "")
            rows.append((f"{r['model']} ({commit[:7]})", r["speedup"]))
    return rows


def wan_forward_anchors(anchors: dict) -> dict[str, float]:
    row = anchors["wan_forward_2026-12-01"]["rows"]["wan13b_480p"]
    sdpa = statistics.mean(row["sdpa"])
    return {name: sdpa / row[name] for name in ("fa3", "sageattention2") if row.get(name)}


def plot(kernel, fa3, sage, fwd, fwd_anchor, out: Path, kernel_title: str = "Attention kernel, H200, bf16 inputs",
         kernel_xlabel: str = "kernel TFLOPS over cuDNN SDPA, same run (higher is faster)") -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_k, ax_f) = plt.subplots(1, 2, figsize=(13.5, 6.2), gridspec_kw={"width_ratios": [1.1, 1]})
    names = [name for _, name, _ in kernel][::-1]
    keys = [key for key, _, _ in kernel][::-1]
    y = range(len(names))
    h = 0.27
    ax_k.barh([i + h for i in y], [r for _, _, r in kernel][::-1], h, label="vidattn (exact, bf16)", color="#2a6fdb")
    ax_k.barh(list(y), [fa3.get(k, 0) for k in keys], h, label="FlashAttention-3 (exact, bf16)", color="#9aa5b1")
    ax_k.barh([i - h for i in y], [sage.get(k, 0) for k in keys], h, label="SageAttention2 (8-bit, approximate)",
              color="#f0a541")
    ax_k.axvline(1.0, color="black", lw=0.8)
    ax_k.set_yticks(list(y), names)
    ax_k.set_xlim(0.5, 1.9)
    ax_k.set_ylim(-2.4, len(names) - 0.4)  # room for the legend below the last shape
    ax_k.set_xlabel(kernel_xlabel)
    ax_k.set_title(kernel_title)
    ax_k.legend(loc="lower center", fontsize=8, ncol=2)

    labels = [label for label, _ in fwd][::-1]
    vals = [v for _, v in fwd][::-1]
    ax_f.barh(range(len(vals)), vals, 0.6, color="#2a6fdb", label="vidattn")
    top = len(vals) - 1  # the shipped-kernel Wan row, drawn first in `fwd`
    for i, v in enumerate(vals):
        right = max([v, *fwd_anchor.values()]) if i == top else v
        ax_f.text(right + 0.05, i, f"{v:.2f}x", va="center", fontsize=8)
    for (name, v), color in zip(sorted(fwd_anchor.items()), ("#9aa5b1", "#f0a541")):
        label = {"fa3": "FlashAttention-3", "sageattention2": "SageAttention2 (8-bit)"}[name]
        ax_f.plot([v], [top], marker="D", color=color, ls="none", label=f"{label}, Wan 1.3B forward")
    ax_f.axvline(1.0, color="black", lw=0.8)
    ax_f.set_yticks(range(len(labels)), labels, fontsize=8)
    ax_f.set_xlim(0.8, max(vals) + 0.4)
    ax_f.set_xlabel("forward speedup over SDPA (random weights)")
    ax_f.set_title("One transformer forward per family (commit in brackets)")
    ax_f.legend(loc="upper right", fontsize=8)  # over the short bars at the top, clear of every label
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110, bbox_inches="tight")
    plt.close(fig)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--run", type=Path, default=DEFAULT_RUN,
                    help="the kernel panel: one scripts/bench_anchors.py JSON, its five anchor shapes (default: the "
                         "envelope run the README's kernel bullet quotes)")
    ap.add_argument("--kernel", type=Path, nargs="+", default=None,
                    help="the older kernel panel instead: scripts/bench_kernel.py JSONs of one build (e.g. the "
                         "2026-12-01 build's four runs), the reference kernels from --anchors' own runs")
    ap.add_argument("--cross-model", type=Path, default=DEFAULT_CROSS, help="scripts/cross_model_table.py or scripts/family_table.py JSON")
    ap.add_argument("--e2e", type=Path, default=DEFAULT_E2E,
                    help="an e2e_report.py report.json whose forward speedup heads the right panel ('' to leave out)")
    ap.add_argument("--anchors", type=Path, default=DEFAULT_ANCHORS, help="reference kernels' measurements")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help="PNG to write (default docs/img/results.png)")
    args = ap.parse_args(argv)
    kernel_files = args.kernel if args.kernel else [args.run]
    for p in [*kernel_files, args.cross_model, args.anchors] + ([args.e2e] if str(args.e2e) not in ("", ".") else []):
        if not p.is_file():
            ap.error(f"{p}: no such file")
    anchors = json.loads(args.anchors.read_text())
    if args.kernel:
        kernel = kernel_ratios(args.kernel)
        fa3, sage = anchor_ratios(anchors)
        titles = {}
    else:
        run = json.loads(args.run.read_text())
        kernel, fa3, sage = run_ratios(run)
        meta = run.get("meta", {})
        titles = {"kernel_title": f"Attention kernel, H200, bf16 inputs ({meta.get('date_utc', '')[:10]}, "
                                  f"{meta.get('commit', '')[:7]})",
                  "kernel_xlabel": "kernel TFLOPS over cuDNN SDPA, all in one run (higher is faster)"}
    e2e = json.loads(args.e2e.read_text()) if str(args.e2e) not in ("", ".") else None
    try:
        fwd = forward_rows(json.loads(args.cross_model.read_text()), e2e)
    except (KeyError, TypeError, AttributeError) as exc:
        raise SystemExit(f"{args.cross_model} (or --e2e) is not the JSON this panel reads (missing {exc}): "
                         f"--cross-model takes a scripts/cross_model_table.py or family_table.py JSON") from None
    plot(kernel, fa3, sage, fwd, wan_forward_anchors(anchors), args.out, **titles)
    print(f"wrote {args.out}")
    for _, name, r in kernel:
        print(f"  {name:24s} vidattn/cuDNN {r:.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
