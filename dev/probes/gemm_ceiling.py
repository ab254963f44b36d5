"""What the card's tensor cores sustain under the 700 W cap on plain GEMMs: bf16 torch.matmul, FP8 e4m3
torch._scaled_mm (tensor-wise scales with and without fast accumulation, row-wise scales) and INT8 torch._int_mm, each
run back to back for --seconds after --warmup (so the power limiter has engaged), with the SM clock and power sampled
by `nvidia-smi` (clock_probe.sampling) over the measured window. The ceiling an 8-bit attention kernel's rate is read
against: TFLOPS, mean clock and power, TFLOPS per GHz and the fraction of the dense peak at the measured clock
(bf16 4096, FP8/INT8 8192 flop per clock per SM on H100/H200 SXM). Writes gemm_ceiling.json and gemm_ceiling.txt under
--out and prints the table last.

    python3 dev/probes/gemm_ceiling.py --out $OUT/ceiling            # four (not fp8_tensor), 1 + 5 s each
    python3 dev/probes/gemm_ceiling.py --cases fp8_tensor_fast int8   # a subset

NVML is not used: pynvml may be absent on the device; `nvidia-smi -lms` (the project's clock_probe.py) is there.
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import clock_probe  # noqa: E402

# name -> (dense flop per clock per SM, what it runs)
CASES = {
    "bf16": (4096, "torch.matmul bf16 (row-major A, B)"),
    "fp8_tensor": (8192, "torch._scaled_mm e4m3, tensor-wise scales, out bf16, use_fast_accum=False"),
    "fp8_tensor_fast": (8192, "torch._scaled_mm e4m3, tensor-wise scales, out bf16, use_fast_accum=True"),
    "fp8_row_fast": (8192, "torch._scaled_mm e4m3, row-wise scales (M,1)/(1,N), out bf16, use_fast_accum=True"),
    "int8": (8192, "torch._int_mm s8 x s8 -> s32 (B column-major)"),
}

# cuBLAS's FP8 without fast accumulation adds partial sums on the CUDA cores (not what the kernel's wgmma does):
# selectable, not run by default, to keep the call short.
DEFAULT_CASES = ["bf16", "fp8_tensor_fast", "fp8_row_fast", "int8"]


def build(case: str, n: int):
    """A no-argument callable running one n x n x n GEMM of `case` on the GPU, with its operands made once."""
    import torch
    dev = "cuda"
    if case == "bf16":
        a, b = (torch.randn(n, n, device=dev, dtype=torch.bfloat16) for _ in range(2))
        c = torch.empty(n, n, device=dev, dtype=torch.bfloat16)
        return lambda: torch.matmul(a, b, out=c)
    if case.startswith("fp8"):
        a = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn)
        b = torch.randn(n, n, device=dev).to(torch.float8_e4m3fn).t()  # column-major, as cuBLASLt wants it
        fast = case.endswith("_fast")
        if case.startswith("fp8_row"):
            sa = torch.rand(n, 1, device=dev, dtype=torch.float32) + 0.5
            sb = torch.rand(1, n, device=dev, dtype=torch.float32) + 0.5
        else:
            sa, sb = (torch.tensor(1.0, device=dev, dtype=torch.float32) for _ in range(2))
        return lambda: torch._scaled_mm(a, b, scale_a=sa, scale_b=sb, out_dtype=torch.bfloat16, use_fast_accum=fast)
    if case == "int8":
        a = torch.randint(-128, 128, (n, n), device=dev, dtype=torch.int8)
        b = torch.randint(-128, 128, (n, n), device=dev, dtype=torch.int8).t()
        try:  # column-major B is cuBLASLt's int8 layout; a torch that refuses it gets the row-major one
            torch._int_mm(a, b)
        except RuntimeError:
            b = b.contiguous()
        return lambda: torch._int_mm(a, b)
    raise ValueError(case)


def window(samples: list, t0: float, t1: float) -> list[tuple[float, float, float]]:
    """(clock, power, temp) of the timed samples taken in [t0, t1]; all of them where none carries a time."""
    timed = [s for s in samples if s[0] is not None]
    if not timed:
        return [s[1:] for s in samples]
    return [s[1:] for s in timed if t0 <= s[0] <= t1]


def summarize(name: str, flop_per_clk_sm: int, n: int, spans: list[tuple[int, float]], samples, sms: int) -> dict:
    """One row: TFLOPS over the whole window and per span, the mean clock and power of the samples, TFLOPS per GHz
    and the fraction of the dense peak at that clock."""
    flops = 2.0 * n ** 3
    calls = sum(c for c, _ in spans)
    secs = sum(s for _, s in spans)
    rates = [flops * c / s / 1e12 for c, s in spans if s > 0]
    tflops = flops * calls / secs / 1e12 if secs > 0 else float("nan")
    clock = statistics.fmean(s[0] for s in samples) if samples else float("nan")
    power = statistics.fmean(s[1] for s in samples) if samples else float("nan")
    per_ghz = tflops / (clock / 1000.0) if clock == clock and clock > 0 else float("nan")
    peak_per_ghz = sms * flop_per_clk_sm / 1000.0  # TFLOPS per GHz at 100% of the dense rate
    return {"case": name, "what": CASES[name][1], "n": n, "calls": calls, "seconds": secs, "tflops": tflops,
            "tflops_spans": rates, "tflops_first_span": rates[0] if rates else float("nan"),
            "tflops_last_span": rates[-1] if rates else float("nan"), "clock_mhz": clock, "power_w": power,
            "samples": len(samples), "tflops_per_ghz": per_ghz, "peak_tflops_per_ghz": peak_per_ghz,
            "frac_of_peak_at_clock": per_ghz / peak_per_ghz}


def table(rows: list[dict]) -> str:
    out = ["| case | TFLOPS | first / last 1 s span | SM clock (MHz, mean) | power (W, mean) | TFLOPS/GHz | "
           "of dense peak at clock | samples |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            out.append(f"| {r['case']} | failed: {r['error'][:80]} | | | | | | |")
            continue
        out.append(f"| {r['case']} | {r['tflops']:.0f} | {r['tflops_first_span']:.0f} / {r['tflops_last_span']:.0f} | "
                   f"{r['clock_mhz']:.0f} | {r['power_w']:.0f} | {r['tflops_per_ghz']:.0f} | "
                   f"{100 * r['frac_of_peak_at_clock']:.0f}% | {r['samples']} |")
    return "\n".join(out)


def run_case(fn, seconds: float, warmup: float, span_s: float = 1.0) -> tuple[list[tuple[int, float]], float, float]:
    """fn back to back: `warmup` seconds unmeasured, then spans of about span_s until `seconds` have passed.
    Returns the (calls, seconds) of each span and the unix times the measured window began and ended."""
    import torch
    fn()
    torch.cuda.synchronize()
    t = time.perf_counter()
    while time.perf_counter() - t < warmup:
        for _ in range(4):
            fn()
        torch.cuda.synchronize()
    spans, w0 = [], time.time()
    t_start = time.perf_counter()
    while time.perf_counter() - t_start < seconds:
        calls, s0 = 0, time.perf_counter()
        while time.perf_counter() - s0 < span_s:
            for _ in range(4):
                fn()
            calls += 4
            torch.cuda.synchronize()
        spans.append((calls, time.perf_counter() - s0))
    return spans, w0, time.time()


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", nargs="+", default=DEFAULT_CASES, choices=list(CASES))
    ap.add_argument("--n", type=int, default=8192)
    ap.add_argument("--seconds", type=float, default=5.0, help="measured seconds per case (>= 5: the limiter engages)")
    ap.add_argument("--warmup", type=float, default=1.0, help="unmeasured seconds before each")
    ap.add_argument("--pause", type=float, default=1.0, help="idle seconds before each case")
    ap.add_argument("--out", type=Path)
    return ap.parse_args(argv)


def main(argv=None) -> int:
    args = parse_args(argv)
    import torch
    if not torch.cuda.is_available():
        raise SystemExit("gemm_ceiling.py needs a CUDA GPU")
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    rows = []
    for case in args.cases:
        time.sleep(args.pause)
        try:
            fn = build(case, args.n)
            with clock_probe.sampling(100) as samples:
                spans, w0, w1 = run_case(fn, args.seconds, args.warmup)
        except Exception as e:  # a signature or layout torch refuses: the others still run
            rows.append({"case": case, "what": CASES[case][1], "error": f"{type(e).__name__}: {e}"})
            print(f"{case}: failed: {rows[-1]['error']}", flush=True)
            continue
        finally:
            torch.cuda.empty_cache()
        rows.append(summarize(case, CASES[case][0], args.n, spans, window(samples, w0, w1), sms))
        r = rows[-1]
        print(f"{case:16s} {r['tflops']:6.0f} TFLOPS  {r['clock_mhz']:5.0f} MHz  {r['power_w']:4.0f} W", flush=True)
    text = table(rows)
    result = {"device": torch.cuda.get_device_name(), "sms": sms, "torch": torch.__version__, "rows": rows}
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "gemm_ceiling.json").write_text(json.dumps(result, indent=1))
        (args.out / "gemm_ceiling.txt").write_text(text + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
