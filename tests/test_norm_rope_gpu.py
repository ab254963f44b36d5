"""The fused RMSNorm + Wan RoPE kernel (csrc/common/norm_rope.cuh) on the GPU against diffusers' two steps run on the
same GPU (`torch.nn.RMSNorm`, then the Wan RoPE: vidattn.rope, bit for bit diffusers' ops, test_rope_gpu.py):

- every element within one unit in the last place of the normalized values, carried through the rotation (the sum of
  squares runs in another order than torch's, which may move the last bit of 1/rms);
- nearly every element bit for bit (>= 99.9%; the fraction is printed: the first device run measured 100% on most
  shapes and 99.9995% on Wan 14B's rows, and 0.5% where eps=None was read as bf16's eps instead of fp32's);
- Wan's widths (1.3B: 12 x 128, 14B: 40 x 128), odd lengths, batch 2, fp16, bf16 tables, a fused-qkv chunk's strides,
  eps None, and every output element written (the output buffer poisoned first);
- the A/B's schedules: 2, 3 and 4 give schedule 1's bits; the default runs 4 on Wan 14B's rows and 3 elsewhere.
Every case asserts that the kernel ran (norm_rope_reason None), so a silent fallback cannot pass."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")

from vidattn import _ext  # noqa: E402
from vidattn import rotary as R  # noqa: E402
from conftest import is_hopper  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not is_hopper(), reason="the fused norm + RoPE runs on Hopper (sm_90a library)")]
DEV = "cuda"


@pytest.fixture(autouse=True)
def on(monkeypatch):
    monkeypatch.setattr(R, "norm_rope_enabled", True)


def wan_tables(s, d, dtype=torch.float32):
    pos = torch.randperm(4 * s)[:s].double()[:, None]
    freqs = pos / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))[None, :]
    return tuple(f.repeat_interleave(2, dim=-1).to(dtype).to(DEV)[None, :, None, :] for f in (freqs.cos(), freqs.sin()))


def rms_norm(width, dtype, eps=1e-6):
    norm = torch.nn.RMSNorm(width, eps=eps, elementwise_affine=True, device=DEV)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.2 * torch.randn(width, device=DEV))
    return norm.to(dtype).requires_grad_(False)


def check(norm, x, heads, cos, sin, min_exact=0.999):
    with torch.no_grad():
        assert R.norm_rope_reason(norm, x, heads, cos, sin) is None
        xv = x.unflatten(-1, (heads, -1))
        out = torch.full(xv.shape, float("nan"), dtype=x.dtype, device=DEV)  # poisoned: every element must be written
        R._norm_launch(norm, xv, R._table_view(cos, xv.shape), R._table_view(sin, xv.shape), out)
        torch.cuda.synchronize()
        y = norm(x).unflatten(-1, (heads, -1))  # torch's normalized values
        ref = R.rope(y, cos, sin, mode="wan")
        assert torch.equal(R.norm_rope(norm, x, heads, cos, sin), out)  # the public call launches the same
    assert torch.isfinite(out).all()
    # One unit in the last place of a normalized value (its dtype's eps relative to it) through the rotation:
    # |d out| <= eps * (|y_even| + |y_odd|) per pair, twice where the products are rounded to x's dtype too (tables
    # of x's dtype), plus the output's own rounding.
    eps = torch.finfo(x.dtype).eps
    ya = y.float().abs().unflatten(-1, (-1, 2)).sum(-1, keepdim=True).expand(*y.shape[:-1], -1, 2).flatten(-2)
    err = (out.float() - ref.float()).abs()
    bound = eps * ((2 if cos.dtype == x.dtype else 1) * ya + ref.float().abs()) + 1e-6
    worst = (err / bound).max().item()
    exact = (out == ref).float().mean().item()
    print(f"norm_rope {tuple(x.shape)} {x.dtype} tables {cos.dtype}: bit for bit {exact:.4%}, "
          f"worst error / bound {worst:.3f}")
    assert worst <= 1.0
    assert exact >= min_exact
    return out


@pytest.mark.parametrize("heads", [12, 40])
@pytest.mark.parametrize("s", [1, 77, 1000])
def test_wan_widths_bf16(heads, s):
    d = 128
    x = (torch.randn(1, s, heads * d, device=DEV) * 3).bfloat16()
    check(rms_norm(heads * d, torch.bfloat16), x, heads, *wan_tables(s, d))


@pytest.mark.parametrize("dtype,table_dtype", [(torch.float16, torch.float32), (torch.bfloat16, torch.bfloat16),
                                               (torch.float16, torch.float16)])
def test_dtypes_and_table_dtypes(dtype, table_dtype):
    b, s, h, d = 2, 333, 24, 64
    x = torch.randn(b, s, h * d, device=DEV).to(dtype)
    check(rms_norm(h * d, dtype), x, h, *wan_tables(s, d, table_dtype))


def test_fused_qkv_chunk_and_eps_none():
    b, s, h, d = 2, 129, 40, 128
    qkv = (torch.randn(b, s, 3 * h * d, device=DEV) * 0.5).bfloat16()
    for i, chunk in enumerate(qkv.chunk(3, dim=-1)[:2]):
        assert not chunk.is_contiguous()
        check(rms_norm(h * d, torch.bfloat16, eps=None if i else 1e-6), chunk, h, *wan_tables(s, d))


def test_widest_row_and_odd_vector_counts():
    # 16384 channels (4 vectors per thread on 512 threads), a head of 512 and 8 x 40 = 320 channels (40 vectors: one
    # partial warp)
    for h, d in ((128, 128), (32, 512), (8, 40)):
        x = torch.randn(1, 65, h * d, device=DEV).bfloat16()
        check(rms_norm(h * d, torch.bfloat16), x, h, *wan_tables(65, d))


def test_large_rows_keep_their_scale():
    """Rows of large and tiny magnitudes (RMSNorm's point): the output does not depend on the row's scale."""
    s, h, d = 64, 12, 128
    base = torch.randn(1, s, h * d, device=DEV)
    scales = torch.logspace(-3, 3, s, device=DEV)[None, :, None]
    x = (base * scales).bfloat16()
    check(rms_norm(h * d, torch.bfloat16), x, h, *wan_tables(s, d))


def test_refusals_reach_no_kernel():
    lib = _ext._library(None)
    assert R._norm_entry(lib) is not None
    x = torch.randn(1, 9, 3 * 20, device=DEV).bfloat16()  # head dim 20: not a multiple of 8
    reason = R.norm_rope_reason(rms_norm(60, torch.bfloat16), x, 3, *wan_tables(9, 20))
    assert reason is not None and "multiple of 8" in reason


@pytest.mark.parametrize("s", [1, 333, 4099])
def test_schedules_agree_bit_for_bit(s):
    """The A/B's two schedules (one row per CTA; CTAs looping over rows with the next row's loads in flight) compute
    the same arithmetic: equal outputs, each within the bound (odd row counts: the loop's last, partial round)."""
    h, d = 40, 128
    x = torch.randn(1, s, h * d, device=DEV).bfloat16()
    norm, tables = rms_norm(h * d, torch.bfloat16), wan_tables(s, d)
    outs = []
    try:
        for schedule in (1, 2):
            R.set_norm_rope_schedule(schedule)
            outs.append(check(norm, x, h, *tables))
    finally:
        R.set_norm_rope_schedule(0)
    assert torch.equal(outs[0], outs[1])


@pytest.mark.parametrize("b,s,h,d,chunk", [
    (1, 333, 40, 128, False),  # Wan 14B's rows: 2 vectors per thread
    (1, 1001, 12, 128, False),  # 1.3B's: one per thread
    (2, 129, 40, 128, True),  # batch 2, a fused-qkv chunk's strides
    (2, 77, 24, 72, False),  # head dim 72: not a power of two; 216 vectors, a partial warp
    (1, 65, 32, 384, True),  # 4 vectors per thread, head dim 384
])
def test_lean_schedule_is_the_one_row_schedule_bit_for_bit(b, s, h, d, chunk):
    """Schedule 3 (one row per CTA with lean index math) runs schedule 1's arithmetic and accesses: the same bits on
    every element, each within the bound (odd lengths, 1, 2 and 4 vectors per thread, head dims that are not powers of
    two, a chunk's strides), and the setting goes back to the library's afterwards."""
    n = h * d
    if chunk:
        x = torch.randn(b, s, 3 * n, device=DEV).bfloat16().chunk(3, dim=-1)[1]
        assert not x.is_contiguous()
    else:
        x = (torch.randn(b, s, n, device=DEV) * 3).bfloat16()
    norm, tables = rms_norm(n, torch.bfloat16), wan_tables(s, d)
    outs = {}
    try:
        for schedule in (1, 3, 4):
            R.set_norm_rope_schedule(schedule)
            outs[schedule] = check(norm, x, h, *tables)
    finally:
        R.set_norm_rope_schedule(0)
    assert torch.equal(outs[1].view(torch.int16), outs[3].view(torch.int16))
    assert torch.equal(outs[1].view(torch.int16), outs[4].view(torch.int16))


@pytest.mark.parametrize("s,h,d,x_dtype,table_dtype,want", [
    (333, 40, 128, torch.bfloat16, torch.float32, 4),  # Wan 14B's rows: 2 vectors a thread -> schedule 4
    (1001, 12, 128, torch.bfloat16, torch.float32, 3),  # 1.3B's: one vector a thread -> schedule 3
    (129, 40, 128, torch.bfloat16, torch.bfloat16, 3),  # tables of x's dtype: schedule 4 is not built there
    (129, 40, 128, torch.float16, torch.float32, 3),  # fp16 x: likewise
    (65, 32, 384, torch.bfloat16, torch.float32, 3),  # 4 vectors a thread: wider than schedule 4 holds
])
def test_default_schedule_per_row(s, h, d, x_dtype, table_dtype, want):
    """The library's default runs schedule 4 on Wan 14B's rows (its A/B's win) and schedule 3 elsewhere; the reader
    reports what each launch ran, and a forced schedule 1 is reported as such. The bits are schedule 1's either way."""
    x = (torch.randn(1, s, h * d, device=DEV) * 3).to(x_dtype)
    norm, tables = rms_norm(h * d, x_dtype), wan_tables(s, d, table_dtype)
    got = check(norm, x, h, *tables)
    assert R.last_norm_rope_schedule() == want
    try:
        R.set_norm_rope_schedule(1)
        forced = check(norm, x, h, *tables)
        ran_forced = R.last_norm_rope_schedule()
    finally:
        R.set_norm_rope_schedule(0)
    # a forced schedule is built for bf16 x with fp32 tables only; other calls keep the default
    assert ran_forced == (1 if (x_dtype, table_dtype) == (torch.bfloat16, torch.float32) else want)
    assert torch.equal(got.view(torch.int16), forced.view(torch.int16))


@pytest.mark.parametrize("text", ["fast", "9"])
def test_malformed_schedule_setting_is_named_and_ignored(monkeypatch, text):
    """VIDATTN_NORM_ROPE_SCHEDULE that is not a schedule: the first launch warns with its name and runs the library's
    schedule (a setting never makes a call raise: docs/install.md)."""
    monkeypatch.setenv(R.NORM_ROPE_SCHEDULE_ENV, text)
    monkeypatch.setattr(R, "_schedule_from_env_applied", False)
    h, d, s = 12, 128, 77
    x = torch.randn(1, s, h * d, device=DEV).bfloat16()
    norm, tables = rms_norm(h * d, torch.bfloat16), wan_tables(s, d)
    with pytest.warns(RuntimeWarning, match=R.NORM_ROPE_SCHEDULE_ENV):
        check(norm, x, h, *tables)
    assert R.last_norm_rope_schedule() == 3  # the library's on 1.3B's rows (test_default_schedule_per_row)
