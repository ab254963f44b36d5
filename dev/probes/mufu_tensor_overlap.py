"""Runs dev/probes/mufu_tensor_overlap.cu (built here with nvcc unless --bin names a built one) with `nvidia-smi`
sampling the SM clock and power in the background (clock_probe.sampling), and tabulates per variant: the tensor work
as TFLOPS and as a share of the 8-bit dense peak at the clock the SM itself counted (4096 MACs per clock per SM), the
ex2 rate against MUFU's 16 per clock per SM, and "both": tensor share / its alone-baseline + MUFU share / its
alone-baseline, 2.0 where the two pipes ran at once at full rate, 1.0 where they took turns. Writes overlap.json,
overlap.txt and the program's raw lines (overlap_raw.jsonl) under --out; prints the table last.

    python3 dev/probes/mufu_tensor_overlap.py --out $OUT/ceiling --seconds 1.5
"""
from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(Path(__file__).resolve().parent))
import clock_probe  # noqa: E402

SRC = ROOT / "dev" / "probes" / "mufu_tensor_overlap.cu"
NVCC_FLAGS = ["-std=c++17", "-O3", "-gencode", "arch=compute_90a,code=sm_90a", "-I", str(ROOT / "csrc")]
TENSOR_PEAK = 4096.0  # 8-bit dense MACs per clock per SM (H100/H200 SXM: 8192 flop/clk/SM)
MUFU_PEAK = 16.0      # MUFU.EX2 per clock per SM (4 per SMSP); b_ex2_4m measures it
# variant -> (its tensor-alone baseline, its MUFU-alone baseline) for the "both" column
BASELINES = {"e_same_mix": ("a_attn_3t", "e_ex2mix_3m"), "d_attn2_1m": ("a_attn_3t", "b_ex2_4m"),
             **{v: ("a_fp8ss_2t", "b_ex2_2m") for v in ("d_2t2m_free", "d_2t2m_sync", "d_2t2m_sync_05x",
                                                         "d_2t2m_sync_2x")}}
DEFAULT_BASELINE = ("a_fp8ss_4t", "b_ex2_4m")


def nvcc_command(nvcc: str, out_bin: Path) -> list[str]:
    return [nvcc, *NVCC_FLAGS, "-o", str(out_bin), str(SRC)]


def find_nvcc() -> str | None:
    found = shutil.which("nvcc")
    if found:
        return found
    for cand in sorted(Path("/usr/local").glob("cuda*/bin/nvcc")):
        return str(cand)
    return None


def parse_lines(text: str) -> list[dict]:
    """The program's JSON lines (one per variant); anything else on stdout is skipped."""
    rows = []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return rows


def attach_samples(rows: list[dict], samples: list) -> None:
    """Each row's mean nvidia-smi clock and power over the samples taken inside its [t_start, t_end] window."""
    for r in rows:
        inside = [s for s in samples if s[0] is not None and r["t_start"] <= s[0] <= r["t_end"]]
        r["smi_samples"] = len(inside)
        r["smi_clock_mhz"] = statistics.fmean(s[1] for s in inside) if inside else float("nan")
        r["smi_power_w"] = statistics.fmean(s[2] for s in inside) if inside else float("nan")


def add_overlap(rows: list[dict]) -> None:
    """The "both" column: the sum of each pipe's share relative to what it reached alone (None where a baseline is
    missing or the variant does only one kind of work)."""
    by = {r["variant"]: r for r in rows}
    for r in rows:
        t_base, m_base = BASELINES.get(r["variant"], DEFAULT_BASELINE)
        r["both"] = None
        if r["tensor_frac"] > 0 and r["mufu_frac"] > 0 and t_base in by and m_base in by:
            t0, m0 = by[t_base]["tensor_frac"], by[m_base]["mufu_frac"]
            if t0 > 0 and m0 > 0:
                r["both"] = r["tensor_frac"] / t0 + r["mufu_frac"] / m0
                r["both_baselines"] = [t_base, m_base]


def table(rows: list[dict]) -> str:
    out = ["| variant | TFLOPS (tensor) | tensor % of peak (4096 8-bit, 2048 bf16 MAC/clk/SM) | ex2/clk/SM | "
           "MUFU % of 16 | both | SM GHz (clock64/ns) | smi MHz | smi W |", "|---|---|---|---|---|---|---|---|---|"]
    pairs = []
    for r in rows:
        both = f"{r['both']:.2f}" if r.get("both") is not None else "-"
        smi_mhz, smi_w = r.get("smi_clock_mhz", float("nan")), r.get("smi_power_w", float("nan"))
        tflops = r["tflops"]
        if r.get("tflops_all_sms") is not None and r["tflops_all_sms"] != r["tflops"]:
            tflops = r["tflops_all_sms"]  # a pair launch on fewer SMs than the card has: scaled to all of them
            pairs.append(f"{r['variant']} ({r['sms']} SMs)")
        out.append(f"| {r['variant']} | {tflops:.0f} | {100 * r['tensor_frac']:.1f} | {r['ex2_per_clk_sm']:.2f} | "
                   f"{100 * r['mufu_frac']:.1f} | {both} | {r['sm_ghz']:.3f} | {smi_mhz:.0f} | {smi_w:.0f} |")
    out.append("both: tensor share / its alone baseline + MUFU share / its alone baseline (2.0 = full rate at once, "
               "1.0 = taking turns); baselines a_fp8ss_4t and b_ex2_4m, d_2t2m*: a_fp8ss_2t and b_ex2_2m, "
               "d_attn2_1m: a_attn_3t and b_ex2_4m, e_same_mix: a_attn_3t and e_ex2mix_3m.")
    if pairs:
        out.append(f"TFLOPS scaled to every SM from the SMs a pair launch ran on: {', '.join(pairs)}.")
    short = [r["variant"] for r in rows if r.get("distinct_sms", r["sms"]) != r["sms"]]
    if short:
        out.append(f"WARNING: not one CTA per SM in {', '.join(short)} (distinct_sms != sms): rates per SM are off.")
    return "\n".join(out)


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--seconds", type=float, default=1.5, help="per variant (the program's deadline)")
    ap.add_argument("--pause", type=float, default=0.5, help="idle seconds after each variant")
    ap.add_argument("--bin", type=Path, help="a built mufu_tensor_overlap (default: build it in a temporary folder)")
    ap.add_argument("--timeout", type=float, default=120.0, help="for the whole program run")
    ap.add_argument("variants", nargs="*", help="names from `--list` of the program (default: all)")
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    binary = args.bin
    if binary is None:
        nvcc = find_nvcc()
        if nvcc is None:
            raise SystemExit("mufu_tensor_overlap.py: no nvcc and no --bin")
        binary = Path(tempfile.mkdtemp(prefix="mto-")) / "mufu_tensor_overlap"  # not under --out: not copied back
        subprocess.run(nvcc_command(nvcc, binary), check=True)
    cmd = [str(binary), "--seconds", str(args.seconds), "--pause", str(args.pause), *args.variants]
    lines = []
    with clock_probe.sampling(100) as samples, open(args.out / "overlap_raw.jsonl", "w") as raw:
        # streamed line by line (and echoed), so that a run cut short keeps the variants it finished
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, text=True)
        killer = threading.Timer(args.timeout, proc.kill)
        killer.start()
        try:
            for line in proc.stdout:
                raw.write(line)
                raw.flush()
                print(line.rstrip(), flush=True)
                lines.append(line)
            rc = proc.wait()
        finally:
            killer.cancel()
    if rc != 0:
        raise SystemExit(f"mufu_tensor_overlap exited {rc}")
    rows = parse_lines("".join(lines))
    attach_samples(rows, samples)
    add_overlap(rows)
    text = table(rows)
    (args.out / "overlap.json").write_text(json.dumps({"command": cmd, "rows": rows}, indent=1))
    (args.out / "overlap.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
