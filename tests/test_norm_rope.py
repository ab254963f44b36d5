"""The fused RMSNorm + Wan RoPE (vidattn.rotary.norm_rope, csrc/common/norm_rope.cuh) without a GPU: the switch, the
reasons it gives, the two-step fallback (bit for bit the stock code), what the C ABI receives, the Wan processor's
use of it. The kernel's own output is tests/test_norm_rope_gpu.py's."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

from vidattn import _ext
from vidattn import rotary as R
from _support import args_recorder, install_fake_library
from test_capi_abi import header_fields, mirror_fields

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")


def wan_tables(s, d, dtype=torch.float32):
    pos = torch.arange(s, dtype=torch.float64)[:, None]
    freqs = pos / (10000.0 ** (torch.arange(0, d, 2, dtype=torch.float64) / d))[None, :]
    return tuple(f.repeat_interleave(2, dim=-1).to(dtype)[None, :, None, :] for f in (freqs.cos(), freqs.sin()))


def rms_norm(width, dtype=torch.bfloat16, eps=1e-6, seed=0):
    norm = torch.nn.RMSNorm(width, eps=eps, elementwise_affine=True)
    with torch.no_grad():
        norm.weight.copy_(1 + 0.1 * torch.randn(width, generator=torch.Generator().manual_seed(seed)))
    return norm.to(dtype).requires_grad_(False)


def stock(norm, x, heads, cos, sin):
    """diffusers' Wan steps with diffusers' own RoPE ops (rope_reference is checked against them in test_rope.py)."""
    return R.rope_reference(norm(x).unflatten(-1, (heads, -1)), cos, sin, mode="wan")


@pytest.fixture
def on(monkeypatch):
    monkeypatch.setattr(R, "norm_rope_enabled", True)


def test_switch_is_on_by_default():
    assert R.norm_rope_from_env({}) is True
    assert R.norm_rope_from_env({"VIDATTN_NORM_ROPE": "1"}) is True
    assert R.norm_rope_from_env({"VIDATTN_NORM_ROPE": "0"}) is False


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("switch", [False, True])
def test_fallback_is_the_stock_steps_bit_for_bit(dtype, switch, monkeypatch):
    monkeypatch.setattr(R, "norm_rope_enabled", switch)
    b, s, h, d = 2, 7, 3, 16
    x = torch.randn(b, s, h * d, generator=torch.Generator().manual_seed(3)).to(dtype)
    norm = rms_norm(h * d, dtype)
    cos, sin = wan_tables(s, d)
    with torch.no_grad():
        out = R.norm_rope(norm, x, h, cos, sin)
        assert out.shape == (b, s, h, d) and out.dtype == dtype
        assert torch.equal(out, stock(norm, x, h, cos, sin))


def test_reasons(on):
    h, d, s = 2, 16, 5
    x = torch.randn(1, s, h * d).bfloat16()
    cos, sin = wan_tables(s, d)
    norm = rms_norm(h * d)
    with torch.no_grad():
        assert "not torch.nn.RMSNorm" in R.norm_rope_reason(torch.nn.LayerNorm(h * d).bfloat16(), x, h, cos, sin)
        assert "no weight" in R.norm_rope_reason(torch.nn.RMSNorm(h * d, elementwise_affine=False), x, h, cos, sin)
        assert "do not split" in R.norm_rope_reason(norm, x, 3, cos, sin)
        assert "takes x's dtype" in R.norm_rope_reason(rms_norm(h * d, torch.float32), x, h, cos, sin)
        assert "fp32 tables or tables of x's dtype" in R.norm_rope_reason(
            norm, x, h, *wan_tables(s, d, torch.float16))
        assert "last dim" in R.norm_rope_reason(norm, x.unflatten(-1, (h, d)), h, cos, sin)
        wide = torch.randn(1, 2, R.MAX_NORM_WIDTH + 8).bfloat16()
        assert "at most" in R.norm_rope_reason(rms_norm(wide.shape[-1]), wide, 1, cos, sin)
        # on this machine the next reason is the device
        assert R.norm_rope_reason(norm, x, h, cos, sin) == _ext.device_reason(x.device)
    assert "require grad" in R.norm_rope_reason(norm, x.requires_grad_(), h, cos, sin)


def test_reason_names_the_switch(monkeypatch):
    monkeypatch.setattr(R, "norm_rope_enabled", False)
    x = torch.randn(1, 3, 32).bfloat16()
    assert "VIDATTN_NORM_ROPE=0" in R.norm_rope_reason(rms_norm(32), x, 2, *wan_tables(3, 16))


def test_abi_mirror():
    assert mirror_fields(R._NormRopeArgs) == header_fields("VidattnNormRopeArgs")


class _FakeLib:
    """Stands in for the kernel library: records each vidattn_norm_rope call and each schedule set (it computes
    nothing)."""

    def __init__(self):
        self.calls = []
        self.schedules = []
        self.rc = 0
        self.vidattn_norm_rope = args_recorder(R._NormRopeArgs, self.calls, lambda: self.rc)
        self.vidattn_rope = lambda ref, stream: 0
        self.vidattn_norm_rope_set_schedule = lambda v: self.schedules.append(v) or 0
        self.vidattn_norm_rope_last_schedule = lambda: 4
        self.vidattn_sm90_last_error = lambda: b"fake"


@pytest.fixture
def fake_kernel(monkeypatch, on):
    monkeypatch.setattr(R, "_norm_declared", set())
    monkeypatch.setattr(R, "_declared", set())
    monkeypatch.setattr(R, "kernel_enabled", True)
    monkeypatch.setattr(R, "_norm_launch_error", None)
    return install_fake_library(monkeypatch, _FakeLib())


def test_kernel_arguments_for_a_fused_qkv_chunk(fake_kernel):
    """A fused-qkv projection's q chunk (row stride 3C), Wan's broadcast fp32 tables, eps None -> finfo eps."""
    b, s, h, d = 2, 9, 4, 16
    qkv = torch.randn(b, s, 3 * h * d).bfloat16()
    q = qkv.chunk(3, dim=-1)[0]
    cos, sin = wan_tables(s, d)
    norm = rms_norm(h * d, eps=None)
    with torch.no_grad():
        assert R.norm_rope_reason(norm, q, h, cos, sin) is None
        out = R.norm_rope(norm, q, h, cos, sin)
    (a,) = fake_kernel.calls
    assert (a["batch"], a["seqlen"], a["heads"], a["head_dim"]) == (b, s, h, d)
    assert a["x"] == q.data_ptr() and a["x_stride"] == [s * 3 * h * d, 3 * h * d, d]
    assert a["out"] == out.data_ptr() and a["out_stride"] == [s * h * d, h * d, d] and out.is_contiguous()
    assert a["weight"] == norm.weight.data_ptr()
    assert a["cos"] == cos.data_ptr() and a["cos_stride"] == [0, d] and a["sin_stride"] == [0, d]
    assert a["eps"] == pytest.approx(torch.finfo(torch.float32).eps)  # torch's opmath type's, not bf16's
    assert (a["dtype"], a["table_dtype"]) == (0, 2)


def test_a_failed_launch_turns_the_fusion_off_and_falls_back(fake_kernel):
    fake_kernel.rc = 1
    h, d, s = 2, 16, 5
    x = torch.randn(1, s, h * d).bfloat16()
    cos, sin = wan_tables(s, d)
    norm = rms_norm(h * d)
    with torch.no_grad():
        out = R.norm_rope(norm, x, h, cos, sin)
        assert "launch failed (fake)" in R.norm_rope_reason(norm, x, h, cos, sin)
    assert len(fake_kernel.calls) == 1
    # the two steps ran: the norm by torch, the RoPE by the (fake) rope kernel, which wrote nothing into its output;
    # what matters here is that the fused entry is not called again
    assert out.shape == (1, s, h, d)
    with torch.no_grad():
        R.norm_rope(norm, x, h, cos, sin)
    assert len(fake_kernel.calls) == 1


def test_schedules_reach_the_library_and_out_of_range_ones_do_not(fake_kernel):
    """0-4 (3: one row per CTA with lean index math; 4: that held to 32 registers) pass through to the C entry;
    anything else is refused in Python, before the library is called."""
    for v in (1, 3, 2, 4, 0):
        R.set_norm_rope_schedule(v)
    assert fake_kernel.schedules == [1, 3, 2, 4, 0]
    for bad in (5, -1, "3", None):
        with pytest.raises(ValueError, match="schedule must be one of"):
            R.set_norm_rope_schedule(bad)
    assert fake_kernel.schedules == [1, 3, 2, 4, 0]


def test_schedule_from_the_environment(fake_kernel, monkeypatch):
    """VIDATTN_NORM_ROPE_SCHEDULE=3 is set once, at the first fused launch."""
    monkeypatch.setenv(R.NORM_ROPE_SCHEDULE_ENV, "3")
    monkeypatch.setattr(R, "_schedule_from_env_applied", False)
    h, d, s = 2, 16, 5
    x = torch.randn(1, s, h * d).bfloat16()
    cos, sin = wan_tables(s, d)
    with torch.no_grad():
        R.norm_rope(rms_norm(h * d), x, h, cos, sin)
        R.norm_rope(rms_norm(h * d), x, h, cos, sin)
    assert fake_kernel.schedules == [3] and len(fake_kernel.calls) == 2


def test_capi_schedule_3_dispatch():
    """The C side of schedule 3: accepted by the setter, run only where the row's offsets fit 32 bits (else the
    default), its head divisor set for every call."""
    src = (Path(__file__).resolve().parents[1] / "csrc/capi_rope.cuh").read_text()
    assert "if (schedule < 0 || schedule > 4)" in src
    assert "if (g_norm_rope_schedule == kLean32 && lean_offsets_fit(p))" in src
    assert "if (g_norm_rope_schedule == kLean && lean_offsets_fit(p))" in src
    # the default too falls back to one row per CTA where the lean offsets do not fit
    assert ("  if (!lean_offsets_fit(p)) return norm_rope_run<T, C, kVecs, kOneRow>(p, grid, block, stream);\n"
            "  return norm_rope_run<T, C, kVecs, kDefault>(p, grid, block, stream);") in src
    assert "p.head_magic = static_cast<uint32_t>(((int64_t(1) << 32) + a->head_dim - 1) / a->head_dim);" in src
    assert 'if (rows > (1ll << 31) - 1) return fail("norm_rope: batch * seqlen over 2^31 - 1 (grid.x)");' in src


def test_head_magic_divides_exactly():
    """lean_row's head of channel c, umulhi(c, ceil(2^32 / D)), is c // D for every channel offset of a row the C
    entry takes (multiples of 8 below MAX_NORM_WIDTH) and every head dim (multiples of 8 up to MAX_HEAD_DIM)."""
    c = torch.arange(0, R.MAX_NORM_WIDTH, 8, dtype=torch.int64)
    for d in range(8, R.MAX_HEAD_DIM + 1, 8):
        magic = ((1 << 32) + d - 1) // d
        assert magic < 1 << 32
        assert torch.equal((c * magic) >> 32, c // d), d


@pytest.mark.dev
def test_ab_script_takes_schedule_3(monkeypatch):
    import importlib.util

    spec = importlib.util.spec_from_file_location(
        "norm_rope_ab", Path(__file__).resolve().parents[1] / "dev/norm_rope_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)  # parse the arguments, time nothing
    assert ab.main(["--schedules", "1", "3", "4"]) == 2
    with pytest.raises(SystemExit):
        ab.main(["--schedules", "5"])


@pytest.mark.parametrize("precision,fused", [("8bit", True), ("exact", False)])
def test_wan_processor_uses_it_for_8bit_self_attention_only(monkeypatch, on, precision, fused):
    """With the switch on, the Wan processor sends q and k of each self-attention through norm_rope at 8-bit precision
    (cross-attention, which has no RoPE, keeps the norms; the exact precision keeps diffusers' two steps bit for bit),
    and the model's output is the stock processor's (here the fallback runs)."""
    import vidattn
    from conftest import tiny_wan, tiny_wan_inputs

    model = tiny_wan()
    inputs = tiny_wan_inputs()
    with torch.no_grad():
        expected = model(*inputs).sample
    seen = []
    real = R.norm_rope

    def spy(norm, x, heads, cos, sin):
        seen.append(x.shape)
        return real(norm, x, heads, cos, sin)

    monkeypatch.setattr(R, "norm_rope", spy)
    vidattn.apply(model)
    try:
        with torch.no_grad(), vidattn.use_precision(precision):
            got = model(*inputs).sample
    finally:
        vidattn.restore(model)
    blocks = len(model.blocks)
    assert len(seen) == (2 * blocks if fused else 0)  # q and k of each block's attn1
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_schedule_4_holds_two_vectors_at_most():
    """Schedule 4 (kLean32, 32 registers) is instantiated for 1 and 2 vectors a thread only (4 cannot fit: wider rows
    run the default), and its row code is kLean's with the bases and indices computed again after the block sum."""
    capi = (Path(__file__).resolve().parents[1] / "csrc/capi_rope.cuh").read_text()
    i = capi.index("if constexpr (kVecs <= 2) {")
    assert "g_norm_rope_schedule == kLean32" in capi[i:i + 200]
    src = (Path(__file__).resolve().parents[1] / "csrc/common/norm_rope.cuh").read_text()
    assert "lean_row<T, C, kRoundMid, kVecs, true>(p, scratch);" in src
    assert "template <typename T, typename C, bool kRoundMid, int kVecs, bool kRemat = false>" in src


def test_last_schedule_reads_the_library_and_an_older_library_is_an_error(fake_kernel):
    """last_norm_rope_schedule returns the C reader's value; a library without the reader raises RuntimeError naming
    it (not a made-up schedule)."""
    assert R.last_norm_rope_schedule() == 4
    del fake_kernel.vidattn_norm_rope_last_schedule
    with pytest.raises(RuntimeError, match="vidattn_norm_rope_last_schedule"):
        R.last_norm_rope_schedule()


def test_default_schedule_per_row_width_in_the_source():
    """The library's default (csrc/capi_rope.cuh): schedule 4 (kLean32) at two vectors a thread with bf16 x and fp32
    tables, where its A/B won (Wan 14B's rows); schedule 3 (kLean) elsewhere, and schedule 1 where the 32-bit offsets
    do not fit; each launch records what it ran for the reader."""
    src = (Path(__file__).resolve().parents[1] / "csrc/capi_rope.cuh").read_text()
    assert ("  return std::is_same<T, __nv_bfloat16>::value && std::is_same<C, float>::value && kVecs == 2 ? kLean32 "
            ": kLean;") in src
    launch = src[src.index("int norm_rope_launch("):src.index("int norm_rope_vecs(")]
    assert "constexpr int kDefault = norm_rope_default<T, C, kVecs>();" in launch
    assert launch.index("if (!lean_offsets_fit(p)) return norm_rope_run<T, C, kVecs, kOneRow>") < launch.index(
        "return norm_rope_run<T, C, kVecs, kDefault>")
    assert "g_norm_rope_last = kSchedule;" in src
    assert 'extern "C" int vidattn_norm_rope_last_schedule(void)' in src
