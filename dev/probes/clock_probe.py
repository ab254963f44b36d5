"""SM clock, power and temperature while one attention path runs back to back: is a shape's ratio to cuDNN the
kernel's, or the GPU's power limit? Each (shape, path) runs for --seconds while `nvidia-smi` samples every 50 ms;
the table gives the path's TFLOPS next to the median clock, power and temperature of the samples taken while it
ran. vidattn and cuDNN alternate per shape, cuDNN first, with a pause between them so the GPU cools the same way.

    python3 dev/probes/clock_probe.py wan13b_self hunyuan_720p        # anchor keys (bench/anchor_shapes.py)
    python3 dev/probes/clock_probe.py 16x8x1024x256 1x8x32768x256 --paths cudnn fa3 vidattn --json out/clock.json

A shape is an anchor key or BxHxSxD (self-attention, Sq = Skv = S). --paths picks and orders the paths: cudnn,
vidattn, vidattn_t1 / vidattn_t2 / vidattn_t3 (vidattn under that exact-kernel tail setting, vidattn._ext.
set_tail_rounds; a name may repeat, to see the drift between runs), vidattn_hd6 / vidattn_hd8 (vidattn under that
VIDATTN_HD_NARROW setting, vidattn._ext.hd_narrow: the routed D=256 build, and that build in CTA pairs, whose row
records the clusters it ran in), and fa3 (FlashAttention-3 through scripts/anchor_impls.py, where the anchors are installed; absent, or
failing, its row says why). The host synchronizes every 4 calls: on calls of a fraction of a millisecond a path
whose host side is slow (FA3's Python entry, 0.13-0.27 ms a call) leaves the GPU idle, which its row shows as power
far under the cap (FA3 at 16x8x1024x256: 127 W); such a row measures the host, not the kernel.

Honours VIDATTN_LIBRARY like every other script. Needs `nvidia-smi` on PATH.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import anchor_shapes  # noqa: E402

QUERY = "timestamp,clocks.sm,power.draw,temperature.gpu"


def parse_timed_samples(lines: list[str]) -> list[tuple[float | None, float, float, float]]:
    """(unix time, SM clock MHz, power W, temperature C) from `nvidia-smi --query-gpu=QUERY --format=csv,noheader,
    nounits` lines; the time is None where the timestamp ("YYYY/MM/DD HH:MM:SS.mmm", local time) does not parse,
    and lines whose numbers do not parse (a header, "[N/A]", a cut-off last line) are skipped."""
    out = []
    for line in lines:
        parts = [p.strip() for p in line.split(",")]
        if len(parts) != 4:
            continue
        try:
            values = (float(parts[1]), float(parts[2]), float(parts[3]))
        except ValueError:
            continue
        try:
            t = datetime.datetime.strptime(parts[0], "%Y/%m/%d %H:%M:%S.%f").timestamp()
        except ValueError:
            t = None
        out.append((t, *values))
    return out


def parse_samples(lines: list[str]) -> list[tuple[float, float, float]]:
    """(SM clock MHz, power W, temperature C) of each sample that parse_timed_samples keeps."""
    return [s[1:] for s in parse_timed_samples(lines)]


@contextlib.contextmanager
def sampling(period_ms: int = 50):
    """`nvidia-smi` samples QUERY every period_ms while the block runs; the list it yields is filled with the
    samples (parse_timed_samples) when the block ends. Shared with dev/probes/neighbour_probe.py."""
    samples: list = []
    smi = subprocess.Popen(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits",
                            f"-lms={period_ms}"], stdout=subprocess.PIPE, text=True)
    try:
        yield samples
    finally:
        smi.terminate()
        text, _ = smi.communicate(timeout=10)
        samples.extend(parse_timed_samples(text.splitlines()))


def summarize(samples: list[tuple[float, float, float]]) -> dict:
    """Median clock, power and temperature, and the sample count."""
    if not samples:
        return {"n": 0, "clock_mhz": float("nan"), "power_w": float("nan"), "temp_c": float("nan")}
    return {"n": len(samples), "clock_mhz": statistics.median(s[0] for s in samples),
            "power_w": statistics.median(s[1] for s in samples), "temp_c": statistics.median(s[2] for s in samples)}


def run_sampled(fn, seconds: float, period_ms: int = 50) -> tuple[int, float, list[tuple[float, float, float]]]:
    """Calls fn back to back for about `seconds` while nvidia-smi samples; returns (calls, elapsed s, samples)."""
    import torch
    with sampling(period_ms) as samples:
        fn()
        torch.cuda.synchronize()
        calls, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < seconds:
            for _ in range(4):
                fn()
            calls += 4
            torch.cuda.synchronize()
        elapsed = time.perf_counter() - t0
    return calls, elapsed, [s[1:] for s in samples]


PATHS = ("cudnn", "vidattn", "vidattn_t1", "vidattn_t2", "vidattn_t3", "vidattn_hd6", "vidattn_hd8", "fa3")


def path_setting(name: str) -> tuple[int, int]:
    """(exact-kernel tail setting, VIDATTN_HD_NARROW setting) a path runs under; -1: the library's own."""
    tail = int(name[len("vidattn_t"):]) if name.startswith("vidattn_t") else -1
    narrow = int(name[len("vidattn_hd"):]) if name.startswith("vidattn_hd") else -1
    return tail, narrow


def parse_shapes(items: list[str]) -> list[tuple[str, int, int, int, int, int]]:
    """(key, B, H, Sq, Skv, D) per item: BxHxSxD (all positive) as itself, anything else an anchor key."""
    out = []
    for item in items:
        parts = item.lower().split("x")
        if len(parts) == 4 and all(p.isdigit() and int(p) > 0 for p in parts):
            b, h, s, d = map(int, parts)
            out.append((item, b, h, s, s, d))
        else:
            out.extend(anchor_shapes.by_key([item]))
    return out


def parse_args(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("shapes", nargs="+", help="anchor shape keys or BxHxSxD")
    ap.add_argument("--paths", nargs="+", choices=PATHS, default=["cudnn", "vidattn"], help="paths, in run order")
    ap.add_argument("--seconds", type=float, default=4.0, help="per shape and path")
    ap.add_argument("--pause", type=float, default=3.0, help="idle seconds before each run")
    ap.add_argument("--json", default=None, help="write the rows here")
    args = ap.parse_args(argv)
    try:
        args.shape_rows = parse_shapes(args.shapes)
    except KeyError as exc:
        ap.error(str(exc))
    return args


def main(argv=None):
    args = parse_args(argv)
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    import kernel_smoke  # torch and the kernel library: imported here so the sample parsing stays light
    from vidattn import _ext
    fa3_why = None
    if "fa3" in args.paths:
        sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "scripts"))
        import anchor_impls
        fa3_why = anchor_impls.available().get("fa3")
    rows = []
    for key, b, h, sq, skv, d in args.shape_rows:
        q, k, v = kernel_smoke.bshd_inputs(b, h, sq, skv, d)
        out = torch.empty_like(q)
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))

        def cudnn():
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                F.scaled_dot_product_attention(qt, kt, vt)

        fns = {"cudnn": cudnn, "vidattn": lambda: _ext.forward(q, k, v, out, None, None, d ** -0.5)}
        for t in (1, 2, 3):
            fns[f"vidattn_t{t}"] = fns["vidattn"]
        for n in (6, 8):
            fns[f"vidattn_hd{n}"] = fns["vidattn"]
        if fa3_why is None and "fa3" in args.paths:
            fns["fa3"] = lambda: anchor_impls.fa3(q, k, v)
        flops = 4 * b * h * sq * skv * d
        for name in args.paths:
            if name not in fns:
                rows.append({"shape": key, "path": name, "skipped": str(fa3_why)})
                print(f"{key:14s} {name:8s} skipped: {fa3_why}", flush=True)
                continue
            fn = fns[name]
            time.sleep(args.pause)
            tail, narrow = path_setting(name)
            extra = {}
            try:
                with contextlib.ExitStack() as forced:
                    if tail > 0:
                        _ext.set_tail_rounds(tail)
                        fn()
                        extra = {"tail_splits": _ext.last_tail_splits()}
                    if narrow >= 0:
                        forced.enter_context(_ext.hd_narrow(narrow))
                        fn()
                        extra = {"hd_narrow": narrow, "block_n": _ext.last_block_n(), "o_path": _ext.last_o_path(),
                                 "cluster_ctas": _ext.last_cluster_ctas()}
                    calls, elapsed, samples = run_sampled(fn, args.seconds)
            except Exception as exc:  # noqa: BLE001 - a failing path is its row; the others still run
                rows.append({"shape": key, "path": name, "error": f"{type(exc).__name__}: {exc}"})
                print(f"{key:14s} {name:8s} error: {rows[-1]['error']}", flush=True)
                continue
            finally:
                if tail > 0:
                    _ext.set_tail_rounds(-1)
            rows.append({"shape": key, "path": name, "tflops": flops * calls / elapsed / 1e12, **summarize(samples),
                         **extra})
            r = rows[-1]
            # energy per call at the median power: where the cap holds the power, the calls' energy sets their rate
            r["j_per_call"] = r["power_w"] * elapsed / calls
            print(f"{key:14s} {name:8s} {r['tflops']:6.0f} TFLOPS  SM {r['clock_mhz']:6.0f} MHz  "
                  f"{r['power_w']:5.0f} W  {r['temp_c']:3.0f} C  {r['j_per_call']:.3f} J/call  ({r['n']} samples)",
                  flush=True)
        del q, k, v, out, qt, kt, vt
        torch.cuda.empty_cache()
    print("\n| shape | path | TFLOPS | SM clock (MHz) | power (W) | temp (C) | J a call | samples |")
    print("|---|---|---|---|---|---|---|---|")
    for r in rows:
        if "skipped" in r or "error" in r:
            print(f"| {r['shape']} | {r['path']} | {'skipped: ' + r['skipped'] if 'skipped' in r else r['error']} "
                  "| | | | | |")
            continue
        print(f"| {r['shape']} | {r['path']} | {r['tflops']:.0f} | {r['clock_mhz']:.0f} | {r['power_w']:.0f} | "
              f"{r['temp_c']:.0f} | {r['j_per_call']:.3f} | {r['n']} |")
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps({"seconds": args.seconds, "pause": args.pause, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
