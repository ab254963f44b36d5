"""Kernel developer's quick check: a handful of shapes against an fp32 reference, then one timing against cuDNN.

Calls the kernel seam (`vidattn._ext.forward`) directly, so it works before/without the op layer. For the full
suite use `pytest -m gpu tests/test_kernel_gpu.py`; for the benchmark table `scripts/bench_kernel.py`.

    python dev/probes/kernel_smoke.py [--time]
"""
from __future__ import annotations

import argparse
import contextlib
import math
import sys
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench import anchor_shapes  # noqa: E402
from bench.accuracy import shape_scores  # noqa: E402,F401  (the GPU suite's score ramps and spikes)
from vidattn import _ext  # noqa: E402

CASES = [  # (B, Sq, Skv, H, D, dtype, layout, kv_lens[, D=64 warpgroups forced: 2 or 3; default: by shape])
    (1, 128, 128, 1, 128, torch.bfloat16, "bshd", None),
    (2, 256, 384, 3, 128, torch.bfloat16, "bshd", None),
    (1, 1, 7, 2, 128, torch.bfloat16, "bshd", None),
    (2, 129, 777, 2, 64, torch.float16, "bhsd", None),
    (3, 333, 513, 2, 128, torch.float16, "bhsd", [513, 1, 200]),
    (1, 4224, 4224, 2, 64, torch.bfloat16, "bshd", None),
    (1, 1000, 512, 4, 128, torch.bfloat16, "bshd", [300]),
    (2, 129, 777, 2, 64, torch.float16, "bhsd", None, 3),
    (3, 333, 513, 2, 64, torch.bfloat16, "bshd", [513, 1, 200], 3),
    (1, 4224, 4224, 2, 64, torch.bfloat16, "bshd", None, 3),
    # One 128-row tile per head and 133 / 136 heads: on 132 SMs a last round of 1 / 4 tiles, which the tail launch
    # runs as key ranges and merges (csrc/capi.cu, plan_tail) when the keys are long enough: 2000 keys at D=128 make 4
    # ranges, 4224 at D=64 make 11, 777 at D=128 too few (the plain schedule).
    (1, 100, 777, 133, 128, torch.bfloat16, "bshd", None),
    (1, 100, 2000, 133, 128, torch.bfloat16, "bshd", None),
    (1, 100, 4224, 136, 64, torch.float16, "bhsd", None),
]
# Score ranges the fixed-reference softmax (csrc/sm90/flash_fwd.cuh, softmax_fixed_ref) must survive: a ramp (later
# key blocks' maxima ~40 log2 units above the first block's on average: p up to 2^40 and beyond) and a spike (one key
# far above everything, p overflows: the tile is run again with the exact softmax). (case, pattern)
RANGE_CASES = [
    ((1, 700, 3000, 2, 128, torch.bfloat16, "bshd", None), "ramp"),
    ((1, 700, 3000, 2, 128, torch.bfloat16, "bshd", None), "spike"),
    ((2, 300, 2000, 3, 64, torch.float16, "bhsd", None, 3), "ramp"),
    ((2, 300, 2000, 3, 64, torch.bfloat16, "bshd", [2000, 1500], 2), "spike"),
    # 1320 tiles, ten per CTA: heads 0 and 4 spiked, so some CTAs run two tiles again and most none
    ((1, 4224, 1000, 40, 128, torch.bfloat16, "bshd", None), "spike"),
]
SPIKED_HEADS = [0, 4]  # the heads RANGE_CASES' spikes go to (those that exist)


def reference(q, k, v, scale, kv_lens):
    """fp32 attention on (B, S, H, D) inputs, returns (out, lse)."""
    qf, kf, vf = (t.float().transpose(1, 2) for t in (q, k, v))
    s = torch.einsum("bhqd,bhkd->bhqk", qf, kf) * scale
    if kv_lens is not None:
        mask = torch.arange(k.shape[1], device=q.device)[None, :] >= kv_lens[:, None]
        s = s.masked_fill(mask[:, None, None, :], float("-inf"))
    lse = torch.logsumexp(s, dim=-1)
    return torch.einsum("bhqk,bhkd->bhqd", torch.softmax(s, -1), vf).transpose(1, 2), lse


def run_case(b, sq, skv, h, d, dtype, layout, lens, wgs=0, lib=None, pattern=None):
    dev = "cuda"
    def make(s):
        if layout == "bshd":
            return torch.randn(b, s, h, d, device=dev, dtype=dtype) + 0.5
        return (torch.randn(b, h, s, d, device=dev, dtype=dtype) + 0.5).transpose(1, 2)
    q, k, v = make(sq), make(skv), make(skv)
    if pattern:
        shape_scores(q, k, pattern, heads=[x for x in SPIKED_HEADS if x < h])
    kv_lens = torch.tensor(lens, device=dev, dtype=torch.int32) if lens else None
    scale = 1.0 / math.sqrt(d)
    out = torch.full((b, sq, h, d), float("nan"), device=dev, dtype=dtype)
    if layout == "bhsd":
        out = torch.full((b, h, sq, d), float("nan"), device=dev, dtype=dtype).transpose(1, 2)
    lse = torch.full((b, h, sq), float("nan"), device=dev, dtype=torch.float32)
    reason = _ext.kernel_reason(q, k, v, kv_lens, scale) if lib is None else None
    if reason:
        return f"FALLBACK? {reason}"
    if wgs:
        if not hasattr(lib or _ext.load(), "vidattn_sm90_set_d64_warpgroups"):
            return "ok   (skipped: this build has no D=64 warpgroup switch)"
    with _ext.d64_warpgroups(wgs, lib) if wgs else contextlib.nullcontext():
        _ext.forward(q, k, v, out, lse, kv_lens, scale, lib=lib)
    torch.cuda.synchronize()
    ref, ref_lse = reference(q, k, v, scale, kv_lens)
    rel = ((out.float() - ref).norm() / ref.norm()).item()
    lse_err = (lse - ref_lse).abs().max().item()
    nan = torch.isnan(out).any().item()
    ok = rel < 1e-2 and lse_err < 1e-2 and not nan
    return f"{'ok  ' if ok else 'FAIL'} rel_l2={rel:.2e} lse_err={lse_err:.2e} nan={nan}"


TIMED = anchor_shapes.by_key(["wan13b_self", "wan_cross", "wan14b_self", "seed4k", "fa1k_d128", "cogvideox_d64",
                              "fa1k_d64"])


def bshd_inputs(b, h, sq, skv, d):
    """Fresh randn q (B, Sq, H, D), k and v (B, Skv, H, D), bf16 on the GPU: an anchor shape's inputs as the timing
    scripts (time_shapes, kernel_ab_time.py, clock_probe.py) give them to vidattn and, transposed, to cuDNN."""
    q = torch.randn(b, sq, h, d, device="cuda", dtype=torch.bfloat16)
    k, v = (torch.randn(b, skv, h, d, device="cuda", dtype=torch.bfloat16) for _ in range(2))
    return q, k, v


def time_shapes():
    """vidattn vs cuDNN on a few anchor shapes, one line each (ratio = cuDNN time / vidattn time)."""
    from triton.testing import do_bench
    from torch.nn.attention import SDPBackend, sdpa_kernel
    for name, b, h, sq, skv, d in TIMED:
        q, k, v = bshd_inputs(b, h, sq, skv, d)
        out = torch.empty_like(q)
        flops = 4 * b * h * sq * skv * d
        scale = d ** -0.5
        t_vid = do_bench(lambda: _ext.forward(q, k, v, out, None, None, scale), warmup=50, rep=300,
                         return_mode="median")
        qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            t_cudnn = do_bench(lambda: F.scaled_dot_product_attention(qt, kt, vt), warmup=50, rep=300,
                               return_mode="median")
        print(f"{name:14s} vidattn {flops / t_vid / 1e9:5.0f} TFLOPS  cuDNN {flops / t_cudnn / 1e9:5.0f} TFLOPS  "
              f"ratio {t_cudnn / t_vid:.3f}", flush=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time", action="store_true", help="also time a few anchor shapes against cuDNN")
    args = ap.parse_args()
    torch.manual_seed(0)
    failed = 0
    for case, pattern in [(c, None) for c in CASES] + RANGE_CASES:
        msg = run_case(*case, pattern=pattern)
        failed += not msg.startswith("ok")
        wgs = f" d64 warpgroups={case[8]}" if len(case) > 8 else ""
        label = f" {pattern}" if pattern else ""
        print(f"{str(case[:5]):28s} {str(case[5])[6:]:9s} {case[6]} lens={case[7]}{wgs}{label}: {msg}", flush=True)
    if args.time:
        time_shapes()
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
