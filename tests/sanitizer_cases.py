"""Small kernel calls for compute-sanitizer (memcheck, racecheck): no pytest, exit 0 only if all are right.

    compute-sanitizer --tool memcheck  --error-exitcode 1 python3 tests/sanitizer_cases.py
    compute-sanitizer --tool racecheck --error-exitcode 1 python3 tests/sanitizer_cases.py

Inputs are made and the reference computed on the CPU, so under the sanitizer the GPU runs little besides
copies and the vidattn kernel itself. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so every tensor is its own
allocation and memcheck sees reads or writes past its end (the caching allocator would hide them).
Build the kernel library first (`python -c "import vidattn; vidattn.build()"`), or nvcc runs under the tool.
Exit codes: 0 all right, 1 wrong result, 2 the kernel did not run (fallback) or no usable GPU.
"""
from __future__ import annotations

import math
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# (name, B, H, Sq, Skv, D, dtype, layout, kv_lens, D=64 warpgroups (0: the launcher's pick, 3: forced)[, spiked
# heads]): a tail-heavy case (no tile is full), a degenerate one, a tail-heavy one on the three-warpgroup D=64
# build, and one whose spiked heads overflow the fixed-reference softmax, so their tiles are marked and run again
# (the marks in shared memory, the producer told through an mbarrier: csrc/sm90/flash_fwd.cuh, redo_tiles), and one
# with a last round of one tile ("sms+1" heads of one tile each), which runs as four key ranges merged by
# combine_kernel (csrc/capi.cu, plan_tail).
CASES = [
    ("tails+ragged", 2, 3, 129, 777, 128, torch.bfloat16, "bshd", [777, 259], 0),
    ("skv=1", 1, 2, 65, 1, 64, torch.float16, "bhsd", None, 0),
    ("d64-3wg tails+ragged", 2, 2, 257, 333, 64, torch.bfloat16, "bshd", [333, 100], 3),
    ("redo", 1, 4, 300, 500, 128, torch.bfloat16, "bshd", None, 0, [1, 2]),
    ("tail launch", 1, "sms+1", 100, 2200, 128, torch.bfloat16, "bshd", None, 0),
    # Several tiles per CTA with two Q buffers: O stored behind the next tile's S_0, which rides in the last P V's
    # turn (flash_fwd.cuh, S0Link); batch 1's single key block is a next tile whose S_0 releases its Q.
    ("merged turns", 2, 140, 200, 300, 128, torch.bfloat16, "bshd", [300, 100], 0),
    ("d64-3wg merged turns", 1, 140, 400, 300, 64, torch.float16, "bhsd", None, 3),
    # Head dims padded onto a wider build (TMA's zero fill past D, the O store clipped at D; at D=96 the tail
    # launch's merge stops at D too), and grouped-/multi-query K/V, H given as (query heads, K/V heads).
    ("d72 tails+ragged", 2, 3, 129, 777, 72, torch.bfloat16, "bshd", [777, 259], 0),
    ("d40 3wg tails+ragged", 2, 2, 257, 333, 40, torch.float16, "bhsd", [333, 100], 3),
    ("d96 tail launch", 1, "sms+1", 100, 2200, 96, torch.bfloat16, "bshd", None, 0),
    ("gqa 8q/2kv tails+ragged", 2, (8, 2), 129, 777, 128, torch.bfloat16, "bhsd", [777, 300], 0),
    ("mqa 6q/1kv d64-3wg", 1, (6, 1), 257, 333, 64, torch.float16, "bshd", None, 3),
]
REL_L2_MAX = 1e-2
LSE_ATOL = 1e-2


def reference(q, k, v, layout, kv_lens):
    """fp64 attention on the CPU: (out in `layout`, lse (B, H, Sq))."""
    qb, kb, vb = (t.double() if layout == "bhsd" else t.double().transpose(1, 2) for t in (q, k, v))
    group = qb.shape[1] // kb.shape[1]
    kb, vb = kb.repeat_interleave(group, dim=1), vb.repeat_interleave(group, dim=1)
    s = qb @ kb.transpose(-1, -2) / math.sqrt(q.shape[-1])
    if kv_lens is not None:
        keep = torch.arange(kb.shape[2])[None, :] < torch.tensor(kv_lens)[:, None]
        s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
    out = torch.softmax(s, -1) @ vb
    return (out if layout == "bhsd" else out.transpose(1, 2)), torch.logsumexp(s, -1)


def run_case(vidattn, name, b, h, sq, skv, d, dtype, layout, kv_lens, d64_wgs, spiked=()) -> int:
    g = torch.Generator().manual_seed(1234)
    hq, hkv = h if isinstance(h, tuple) else (h, h)
    shape = (lambda s, n: (b, s, n, d)) if layout == "bshd" else (lambda s, n: (b, n, s, d))
    q, k, v = ((torch.randn(shape(s, n), generator=g) + 0.5).to(dtype) for s, n in ((sq, hq), (skv, hkv), (skv, hkv)))
    if spiked:  # one key past the first key block far above the rest in these heads (bench.accuracy.shape_scores)
        from bench.accuracy import shape_scores
        shape_scores(q, k if layout == "bshd" else k.transpose(1, 2), "spike", heads=list(spiked))
    qd, kd, vd = (t.cuda() for t in (q, k, v))
    lens = torch.tensor(kv_lens, dtype=torch.int32).cuda() if kv_lens is not None else None
    reason = vidattn.explain(qd, kd, vd, layout=layout, kv_lens=lens)
    if reason is not None:
        print(f"[sanitizer_cases] {name}: the kernel would not run ({reason}); nothing to sanitize")
        return 2
    from vidattn import _ext
    with _ext.d64_warpgroups(d64_wgs):
        out, lse = vidattn.attention(qd, kd, vd, layout=layout, kv_lens=lens, return_lse=True)
        torch.cuda.synchronize()
    out, lse = out.cpu(), lse.cpu()
    ref, ref_lse = reference(q, k, v, layout, kv_lens)
    finite = bool(torch.isfinite(out).all()) and bool(torch.isfinite(lse).all())
    rel = ((out.double() - ref).norm() / ref.norm()).item() if finite else float("nan")
    lse_err = (lse.double() - ref_lse).abs().max().item() if finite else float("nan")
    ok = finite and rel < REL_L2_MAX and lse_err < LSE_ATOL and out.shape == ref.shape
    print(f"[sanitizer_cases] {name}: B{b} H{h} {sq}x{skv} D{d} {dtype} {layout} kv_lens={kv_lens}: "
          f"rel-L2 {rel:.2e}, max|lse err| {lse_err:.2e} -> {'ok' if ok else 'WRONG'}", flush=True)
    return 0 if ok else 1


def main() -> int:
    if not torch.cuda.is_available():
        print("[sanitizer_cases] CUDA is not available")
        return 2
    import vidattn
    rc = 0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for name, b, h, *rest in CASES:
        rc = max(rc, run_case(vidattn, name, b, sms + 1 if h == "sms+1" else h, *rest))
    torch.cuda.synchronize()
    return rc


if __name__ == "__main__":
    sys.exit(main())
