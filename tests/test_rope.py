"""vidattn.rope on the CPU: the dispatch decision and its reasons, the fake's shapes and strides, the torch path
equal to diffusers' own functions bit for bit (fresh random inputs), the kernel's mode codes, and its arithmetic
emulated in torch (fp32 products and sums rounded one op at a time, RNE to x's dtype): the order the CUDA code
(csrc/common/rope.cuh) implements, checked against diffusers here, without a GPU."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

pytest.importorskip("diffusers")
from diffusers.models.embeddings import apply_rotary_emb as diffusers_apply_rotary_emb  # noqa: E402
from diffusers.models.embeddings import get_1d_rotary_pos_embed  # noqa: E402

import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402
from vidattn import rotary as R  # noqa: E402
from _support import args_recorder, install_fake_library  # noqa: E402

CAPI_H = Path(__file__).resolve().parent.parent / "csrc" / "capi.h"


def diffusers_wan_rope(hidden_states, freqs_cos, freqs_sin):
    """diffusers 0.42.1 WanAttnProcessor's nested apply_rotary_emb, as written there."""
    x1, x2 = hidden_states.unflatten(-1, (-1, 2)).unbind(-1)
    cos = freqs_cos[..., 0::2]
    sin = freqs_sin[..., 1::2]
    out = torch.empty_like(hidden_states)
    out[..., 0::2] = x1 * cos - x2 * sin
    out[..., 1::2] = x1 * sin + x2 * cos
    return out.type_as(hidden_states)


def test_reference_is_diffusers_wan_code():
    """diffusers_wan_rope above (the GPU tests' reference) is the stock WanAttnProcessor's RoPE, line for line: a
    diffusers release that changed it would fail here rather than leave the GPU tests checking an old formula."""
    import inspect
    from diffusers.models.transformers.transformer_wan import WanAttnProcessor
    stock = [line.strip() for line in inspect.getsource(WanAttnProcessor.__call__).splitlines()]
    ours = [line.strip() for line in inspect.getsource(diffusers_wan_rope).splitlines()[2:]]
    start = stock.index(ours[0])
    assert stock[start:start + len(ours)] == ours


def wan_tables(s, d, gen):
    """Wan's tables, (1, S, 1, D) fp32 (WanRotaryPosEmbed: repeat-interleaved), from random positions."""
    pos = torch.randint(0, 1000, (s,), generator=gen).double()
    cos, sin = get_1d_rotary_pos_embed(d, pos, 10000.0, use_real=True, repeat_interleave_real=True,
                                       freqs_dtype=torch.float64)
    return cos.float()[None, :, None, :], sin.float()[None, :, None, :]


def random_tables(shape, gen, dtype=torch.float32):
    """Independent random cos and sin (not a rotation): every table entry the formula reads must be the right one."""
    return (torch.randn(shape, generator=gen).to(dtype), torch.randn(shape, generator=gen).to(dtype))


@pytest.fixture
def gen():
    return torch.Generator().manual_seed(torch.seed() % (1 << 31))  # fresh per run; the seed is in the generator


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
@pytest.mark.parametrize("tables", ["wan", "random", "same_dtype"])
def test_wan_mode_equals_diffusers(dtype, tables, gen):
    x = torch.randn(2, 13, 3, 16, generator=gen).to(dtype)
    if tables == "wan":
        cos, sin = wan_tables(13, 16, gen)
    else:
        cos, sin = random_tables((1, 13, 1, 16), gen, dtype if tables == "same_dtype" else torch.float32)
    out = vidattn.rope(x, cos, sin, mode="wan")
    ref = diffusers_wan_rope(x, cos, sin)
    assert out.dtype == x.dtype and out.shape == x.shape
    assert torch.equal(out, ref)


@pytest.mark.parametrize("unbind", [-1, -2])
@pytest.mark.parametrize("sequence_dim", [1, 2])
@pytest.mark.parametrize("table_dtype", [torch.float32, torch.bfloat16])
def test_apply_rotary_emb_equals_diffusers(unbind, sequence_dim, table_dtype, gen):
    x = torch.randn(2, 5, 11, 32, generator=gen).bfloat16()  # (B, H, S, D) or (B, S, H, D)
    s = x.shape[sequence_dim]
    freqs = random_tables((s, 32), gen, table_dtype)
    out = R.apply_rotary_emb(x, freqs, use_real=True, use_real_unbind_dim=unbind, sequence_dim=sequence_dim)
    ref = diffusers_apply_rotary_emb(x, freqs, use_real=True, use_real_unbind_dim=unbind, sequence_dim=sequence_dim)
    assert torch.equal(out, ref)


def test_apply_rotary_emb_passes_other_calls_to_diffusers(gen):
    """Complex tables (use_real=False) are diffusers' business: the same function runs."""
    x = torch.randn(1, 6, 2, 8, generator=gen)
    freqs = torch.polar(torch.ones(1, 6, 4), torch.randn(1, 6, 4, generator=gen))  # Lumina's (B, S, D/2)
    out = R.apply_rotary_emb(x, freqs, use_real=False)
    assert torch.equal(out, diffusers_apply_rotary_emb(x, freqs, use_real=False))


def test_strided_chunk_views_and_layouts(gen):
    """q/k as the chunks of a fused qkv projection (non-dense views), and the bhsd layout of the same data."""
    b, s, h, d = 2, 9, 4, 16
    qkv = torch.randn(b, s, 3 * h * d, generator=gen).bfloat16()
    q, k, _ = (t.unflatten(2, (h, d)) for t in qkv.chunk(3, dim=-1))
    cos, sin = random_tables((1, s, 1, d), gen)
    for t in (q, k):
        out = vidattn.rope(t, cos, sin)
        assert torch.equal(out, diffusers_wan_rope(t, cos, sin))
        assert out.stride() == torch.empty_like(t).stride()
        out_h = vidattn.rope(t.transpose(1, 2), cos.transpose(1, 2), sin.transpose(1, 2), layout="bhsd")
        assert torch.equal(out_h.transpose(1, 2), out)


def test_autograd_runs_the_torch_ops(gen):
    x = torch.randn(1, 5, 2, 8, generator=gen, requires_grad=True)
    cos, sin = random_tables((1, 5, 1, 8), gen)
    out = vidattn.rope(x, cos, sin)
    out.sum().backward()
    assert x.grad is not None and torch.equal(out.detach(), diffusers_wan_rope(x.detach(), cos, sin))


def test_tables_that_broadcast_x_larger_are_refused(gen):
    x = torch.randn(1, 5, 2, 8, generator=gen)
    cos, sin = random_tables((3, 5, 1, 8), gen)
    with pytest.raises(ValueError, match="broadcast"):
        vidattn.rope(x, cos, sin)


@pytest.mark.parametrize("bad, match", [
    (dict(mode="interleaved"), "mode"), (dict(layout="sbhd"), "layout"),
])
def test_argument_errors(bad, match, gen):
    x = torch.randn(1, 5, 2, 8, generator=gen)
    cos, sin = random_tables((1, 5, 1, 8), gen)
    with pytest.raises(ValueError, match=match):
        vidattn.rope(x, cos, sin, **bad)
    with pytest.raises(ValueError, match="even"):
        vidattn.rope(torch.randn(1, 5, 2, 7), cos[..., :7], sin[..., :7])
    with pytest.raises(ValueError, match="4-D"):
        vidattn.rope(x[0], cos, sin)


def test_reason_on_cpu_is_the_device(gen):
    x = torch.randn(1, 5, 2, 8, generator=gen).bfloat16()
    cos, sin = random_tables((1, 5, 1, 8), gen)
    reason = vidattn.rope_explain(x, cos, sin)
    assert reason == _ext.device_reason(x.device) and reason is not None


def test_env_switch_and_grad_reasons(monkeypatch, gen):
    x = torch.randn(1, 5, 2, 8, generator=gen)
    cos, sin = random_tables((1, 5, 1, 8), gen)
    monkeypatch.setattr(R, "kernel_enabled", False)
    assert "VIDATTN_ROPE_KERNEL=0" in vidattn.rope_explain(x, cos, sin)
    monkeypatch.setattr(R, "kernel_enabled", True)
    assert "grad" in vidattn.rope_explain(x.requires_grad_(), cos, sin)
    assert R.kernel_from_env({"VIDATTN_ROPE_KERNEL": "0"}) is False and R.kernel_from_env({}) is True


def _shape_reason(x, cos, sin, mode="wan", layout="bshd"):
    return R._shape_reason(*R._prepare(x, cos, sin, layout), mode)


def test_shape_reasons(gen):
    """What the kernel refuses, decided on the tensors alone (no GPU needed): each case names its cause."""
    x = torch.randn(2, 6, 3, 32).bfloat16()
    cos, sin = random_tables((1, 6, 1, 32), gen)
    assert _shape_reason(x, cos, sin) is None
    assert _shape_reason(x, *random_tables((6, 32), gen)) is None  # (S, D) tables
    assert _shape_reason(x, *random_tables((2, 6, 1, 32), gen)) is None  # per-batch tables
    assert "bf16 or fp16" in _shape_reason(x.float(), cos, sin)
    assert "tables" in _shape_reason(x, cos.double(), sin.double())
    assert "varies over heads" in _shape_reason(x, *random_tables((1, 6, 3, 32), gen))
    assert "multiple of 16" in _shape_reason(x[..., :24], cos[..., :24], sin[..., :24], mode="halves")
    assert "multiple of 8" in _shape_reason(x[..., :12], cos[..., :12], sin[..., :12])
    assert "last dim" in _shape_reason(x.transpose(2, 3).contiguous().transpose(2, 3), cos, sin)
    xs = torch.randn(2, 6, 3, 36).bfloat16()[..., 2:34]  # an unaligned base (4 bytes in)
    assert "16-byte" in _shape_reason(xs, cos, sin)
    odd_s = torch.randn(2, 6, 3 * 32 + 4).bfloat16()[..., :96].unflatten(2, (3, 32))  # seq stride 100 elements
    assert "strides multiples of 8" in _shape_reason(odd_s, cos, sin)
    c_odd = torch.randn(1, 6, 1, 34)[..., :32]  # table seq stride 34 floats: not 16 bytes
    assert "cos is not 16-byte" in _shape_reason(x, c_odd, sin)
    assert "last dim" in _shape_reason(x, cos.transpose(1, 3).contiguous().transpose(1, 3), sin)


def test_fake_gives_empty_like_layout():
    from torch._subclasses.fake_tensor import FakeTensorMode
    with FakeTensorMode():
        qkv = torch.empty(2, 7, 3 * 4 * 16, dtype=torch.bfloat16)
        q = qkv.chunk(3, dim=-1)[0].unflatten(2, (4, 16))
        cos = torch.empty(1, 7, 1, 16)
        out = torch.ops.vidattn.rope(q, cos, cos, "wan", "bshd")
        assert out.shape == q.shape and out.dtype == q.dtype
        assert out.stride() == (7 * 4 * 16, 4 * 16, 16, 1)  # empty_like of a non-dense view: contiguous
        xt = torch.empty(2, 4, 7, 16, dtype=torch.bfloat16).transpose(1, 2)  # dense, permuted: kept
        assert torch.ops.vidattn.rope(xt, cos, cos, "wan", "bshd").stride() == xt.stride()


def test_op_output_layout_matches_fake_on_fallback(gen):
    """The op's body returns empty_like(x)'s strides on the torch path too (inductor asserts the fake's strides)."""
    x = torch.randn(2, 4, 7, 16, generator=gen).bfloat16().transpose(1, 2)
    cos, sin = random_tables((7, 16), gen)
    out = torch.ops.vidattn.rope(x, cos, sin, "pairs", "bshd")
    assert out.stride() == torch.empty_like(x).stride()
    ref = diffusers_apply_rotary_emb(x, (cos, sin), use_real=True, use_real_unbind_dim=-1, sequence_dim=1)
    assert torch.equal(out, ref)


def test_compiles_fullgraph(gen):
    torch._dynamo.reset()

    def fn(x, cos, sin):
        return vidattn.rope(x, cos, sin) * 2

    x = torch.randn(2, 9, 3, 16, generator=gen).bfloat16()
    cos, sin = wan_tables(9, 16, gen)
    out = torch.compile(fn, fullgraph=True, backend="aot_eager")(x, cos, sin)
    assert torch.equal(out, diffusers_wan_rope(x, cos, sin) * 2)


# ----------------------------------------------------------------------------------------------------------
# the kernel's arithmetic, emulated: one fp32 op at a time, then RNE to x's dtype
# ----------------------------------------------------------------------------------------------------------

def kernel_emulation(x, cos, sin, mode):
    """What rope.cuh computes, per output pair, in its order (fp32 __fmul_rn/__fsub_rn/__fadd_rn, then RNE)."""
    xf, c, s = x.float(), cos.float().expand(x.shape), sin.float().expand(x.shape)
    out = torch.empty_like(xf)
    if mode == "halves":
        h = x.shape[-1] // 2
        a, b = xf[..., :h], xf[..., h:]
        out[..., :h] = a * c[..., :h] - b * s[..., :h]  # eager CPU ops: each one IEEE-rounded fp32 op
        out[..., h:] = a * s[..., h:] + b * c[..., h:]
        return out.to(x.dtype)
    a, b = xf[..., 0::2], xf[..., 1::2]
    if mode == "wan":
        ce = co = c[..., 0::2]
        se = so = s[..., 1::2]
    else:
        ce, co, se, so = c[..., 0::2], c[..., 1::2], s[..., 0::2], s[..., 1::2]
    if mode == "wan" and cos.dtype == x.dtype:  # kRoundMid: each op rounded to x's dtype
        rd = lambda t: t.to(x.dtype).float()  # noqa: E731
        out[..., 0::2] = rd(rd(a * ce) - rd(b * se))
        out[..., 1::2] = rd(rd(a * so) + rd(b * co))
    else:
        out[..., 0::2] = (a * ce) - (b * se)
        out[..., 1::2] = (a * so) + (b * co)
    return out.to(x.dtype)


@pytest.mark.parametrize("mode", ["wan", "pairs", "halves"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("table_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_kernel_order_equals_diffusers(mode, dtype, table_dtype, gen):
    x = (torch.randn(2, 17, 3, 32, generator=gen) * 4).to(dtype)
    cos, sin = random_tables((1, 17, 1, 32), gen, table_dtype)
    assert torch.equal(kernel_emulation(x, cos, sin, mode), R.rope_reference(x, cos, sin, mode))


# ----------------------------------------------------------------------------------------------------------
# the C ABI (the struct mirror: tests/test_capi_abi.py)
# ----------------------------------------------------------------------------------------------------------

def test_mode_codes_match_the_kernel():
    src = (CAPI_H.parent / "common" / "rope.cuh").read_text()
    enum = re.search(r"enum RopeMode : int \{([^}]*)\}", src).group(1)
    codes = dict((k.strip(), int(v)) for k, v in (e.split("=") for e in enum.split(",")))
    assert codes == {"kRopeWan": R.MODES["wan"], "kRopePairs": R.MODES["pairs"], "kRopeHalves": R.MODES["halves"]}


def test_ltx_apply_rotary_emb_equals_diffusers(gen):
    """LTX-Video's RoPE (and LTX-2's interleaved one, the same code) on (B, S, C) before the head split, per-batch
    (B, S, C) tables: one C-channel "head"."""
    from diffusers.models.transformers.transformer_ltx import apply_rotary_emb as ltx_stock
    from diffusers.models.transformers.transformer_ltx2 import apply_interleaved_rotary_emb as ltx2_stock
    x = torch.randn(2, 37, 96, generator=gen).bfloat16()
    freqs = random_tables((2, 37, 96), gen)
    out = R.ltx_apply_rotary_emb(x, freqs)
    assert out.shape == x.shape and out.is_contiguous()
    assert torch.equal(out, ltx_stock(x, freqs)) and torch.equal(out, ltx2_stock(x, freqs))
    assert "head dim 8192" in _shape_reason(torch.randn(1, 2, 1, 8192).bfloat16(), *random_tables((1, 2, 1, 8192), gen))


def test_allegro_apply_rotary_emb_equals_diffusers(gen):
    from diffusers.models.embeddings import apply_rotary_emb_allegro as allegro_stock
    x = torch.randn(2, 3, 40, 96, generator=gen).bfloat16()
    freqs = tuple(random_tables((50, 32), gen) for _ in range(3))
    pos = tuple(torch.randint(0, 50, (1, 40), generator=gen) for _ in range(3))
    assert torch.equal(R.allegro_apply_rotary_emb(x, freqs, pos), allegro_stock(x, freqs, pos))


class _FakeRopeLib:
    """Stands in for the kernel library: records each vidattn_rope call's arguments (it computes nothing)."""

    def __init__(self):
        self.calls = []
        self.vidattn_rope = args_recorder(R._RopeArgs, self.calls)
        self.vidattn_sm90_last_error = lambda: b"fake"


@pytest.fixture
def fake_kernel(monkeypatch):
    monkeypatch.setattr(R, "_declared", set())
    monkeypatch.setattr(R, "kernel_enabled", True)
    monkeypatch.setattr(R, "_launch_error", None)
    return install_fake_library(monkeypatch, _FakeRopeLib())


def test_kernel_arguments_for_qkv_chunks_and_layouts(fake_kernel, gen):
    """What the C ABI receives (the kernel's own view of the call): a fused-qkv chunk's strides, Wan's broadcast
    tables (batch stride 0), a bhsd call turned into bshd strides, per-layout (S, D) tables, dtype and mode codes."""
    b, s, h, d = 2, 9, 4, 16
    qkv = torch.randn(b, s, 3 * h * d, generator=gen).bfloat16()
    k = qkv.chunk(3, dim=-1)[1].unflatten(2, (h, d))
    cos, sin = random_tables((1, s, 1, d), gen)
    assert vidattn.rope_explain(k, cos, sin) is None
    out = vidattn.rope(k, cos, sin)
    (a,) = fake_kernel.calls
    assert (a["batch"], a["seqlen"], a["heads"], a["head_dim"]) == (b, s, h, d)
    assert a["x"] == k.data_ptr() and a["x_stride"] == [s * 3 * h * d, 3 * h * d, d]
    assert a["out"] == out.data_ptr() and a["out_stride"] == [s * h * d, h * d, d]
    assert a["cos"] == cos.data_ptr() and a["cos_stride"] == [0, d] and a["sin_stride"] == [0, d]
    assert (a["dtype"], a["table_dtype"], a["mode"]) == (0, 2, 0)

    xh = torch.randn(b, h, s, d, generator=gen).half()  # bhsd, (S, D) tables of the apply_rotary_emb kind
    c2, s2 = random_tables((s, d), gen, torch.bfloat16)
    vidattn.rope(xh, c2, s2, mode="halves", layout="bhsd")
    a = fake_kernel.calls[-1]
    assert (a["batch"], a["seqlen"], a["heads"], a["head_dim"]) == (b, s, h, d)
    assert a["x_stride"] == [h * s * d, d, s * d] and a["out_stride"] == [h * s * d, d, s * d]
    assert a["cos_stride"] == [0, d] and (a["dtype"], a["table_dtype"], a["mode"]) == (1, 0, 2)


def test_refused_calls_never_reach_the_library(fake_kernel, gen):
    x = torch.randn(1, 5, 2, 12, generator=gen).bfloat16()  # head dim 12: not a multiple of 8
    cos, sin = random_tables((1, 5, 1, 12), gen)
    assert torch.equal(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))
    assert fake_kernel.calls == []


def test_a_failed_launch_turns_the_kernel_off_and_falls_back(fake_kernel, monkeypatch, gen):
    fake_kernel.vidattn_rope = lambda ref, stream: 1
    x = torch.randn(1, 5, 2, 16, generator=gen).bfloat16()
    cos, sin = random_tables((1, 5, 1, 16), gen)
    assert torch.equal(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))
    assert "fused RoPE launch failed (fake)" in vidattn.rope_explain(x, cos, sin)


def test_compiles_with_dynamic_shapes(gen):
    torch._dynamo.reset()

    def fn(x, cos, sin):
        return vidattn.rope(x, cos, sin, mode="pairs") + 1

    compiled = torch.compile(fn, fullgraph=True, backend="aot_eager", dynamic=True)
    for b, s in ((2, 9), (3, 13)):
        x = torch.randn(b, s, 3, 16, generator=gen).bfloat16()
        cos, sin = random_tables((s, 16), gen)
        assert torch.equal(compiled(x, cos, sin), fn(x, cos, sin))


# ----------------------------------------------------------------------------------------------------------
# EasyAnimate and LTX-2 (vidattn/diffusers/easyanimate.py, ltx2.py): the stock functions they replace, on the
# families' own tables
# ----------------------------------------------------------------------------------------------------------

def _body(fn):
    import inspect
    return [line.strip() for line in inspect.getsource(fn).splitlines()[1:]]


def test_ltx2_interleaved_rope_is_ltx_videos_code():
    """ltx_apply_rotary_emb stands in for LTX-2's `apply_interleaved_rotary_emb` (and the SANA-WM refiner's copy) on
    the grounds that both are LTX-Video's `apply_rotary_emb` line for line: a diffusers release that changed one
    fails here."""
    from diffusers.models.transformers import transformer_ltx, transformer_ltx2, transformer_sana_wm_refiner
    ref = _body(transformer_ltx.apply_rotary_emb)
    assert len(ref) >= 4 and "out = (x.float() * cos + x_rotated.float() * sin).to(x.dtype)" in ref
    assert _body(transformer_ltx2.apply_interleaved_rotary_emb) == ref
    assert _body(transformer_sana_wm_refiner.apply_interleaved_rotary_emb) == ref


def ltx2_tables(kind, batch, device="cpu", frames=3, height=5, width=7, audio_frames=41):
    """LTX-2 19B's interleaved (cos, sin), (B, S, C) fp32, from diffusers' LTX2AudioVideoRotaryPosEmbed configured as
    the model configures it: "video" (self-attention, C = 4096: 4096 % 6 = 4 channels of cos 1 / sin 0 padding),
    "audio" (2048), "ca_video" (the a2v / v2a cross-attention's video side: 2048, the temporal coordinate only)."""
    from diffusers.models.transformers.transformer_ltx2 import LTX2AudioVideoRotaryPosEmbed
    if kind == "audio":
        rope = LTX2AudioVideoRotaryPosEmbed(2048, base_num_frames=20, scale_factors=[4], modality="audio")
        coords = rope.prepare_audio_coords(batch, audio_frames, device)
    else:
        rope = LTX2AudioVideoRotaryPosEmbed(4096 if kind == "video" else 2048, base_num_frames=20, modality="video")
        coords = rope.prepare_video_coords(batch, frames, height, width, device, fps=24.0)
        coords = coords if kind == "video" else coords[:, 0:1]
    return rope(coords, device=device)


def _ltx2_stocks():
    from diffusers.models.transformers.transformer_ltx2 import apply_interleaved_rotary_emb as ltx2_stock
    from diffusers.models.transformers.transformer_sana_wm_refiner import apply_interleaved_rotary_emb as refiner
    return ltx2_stock, refiner


@pytest.mark.parametrize("kind, width", [("video", 4096), ("audio", 2048), ("ca_video", 2048)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_ltx2_interleaved_equals_diffusers_on_real_tables(kind, width, dtype, gen):
    ltx2_stock, refiner = _ltx2_stocks()
    cos, sin = ltx2_tables(kind, 2)
    assert cos.dtype == torch.float32 and cos.shape[0] == 2 and cos.shape[2] == width
    x = (torch.randn(2, cos.shape[1], width, generator=gen) * 3).to(dtype)
    out = R.ltx_apply_rotary_emb(x, (cos, sin))
    ref = ltx2_stock(x, (cos, sin))
    assert out.dtype == dtype and torch.equal(out, ref) and torch.equal(out, refiner(x, (cos, sin)))
    if dtype != torch.float32:  # the kernel's order (emulated) on the same rows: one C-channel head
        emu = kernel_emulation(x[:, :, None], cos[:, :, None], sin[:, :, None], "pairs")[:, :, 0]
        assert torch.equal(emu, ref)


def test_ltx_apply_rotary_emb_broadcast_batches(gen):
    """Tables of batch 1 broadcast over x's batch (the kernel takes them); tables of a larger batch than x's, which
    diffusers broadcasts x up to and `rope` refuses, go to diffusers' function instead of raising."""
    ltx2_stock, _ = _ltx2_stocks()
    cos, sin = ltx2_tables("ca_video", 2)
    x = torch.randn(2, cos.shape[1], 2048, generator=gen).bfloat16()
    assert torch.equal(R.ltx_apply_rotary_emb(x, (cos[:1], sin[:1])), ltx2_stock(x, (cos[:1], sin[:1])))
    out = R.ltx_apply_rotary_emb(x[:1], (cos, sin))
    assert out.shape == (2, *x.shape[1:]) and torch.equal(out, ltx2_stock(x[:1], (cos, sin)))


@pytest.fixture
def rope_calls(monkeypatch):
    """The (mode, layout) of each vidattn.rope call (the functions the processors import call the module's `rope`)."""
    calls, real = [], R.rope

    def spy(*args, **kwargs):
        calls.append((kwargs.get("mode"), kwargs.get("layout", "bshd")))
        return real(*args, **kwargs)

    monkeypatch.setattr(R, "rope", spy)
    return calls


@pytest.mark.parametrize("module", ["transformer_ltx2", "transformer_sana_wm_refiner"])
def test_ltx2_rope_step_interleaved_through_vidattn_split_stock(module, rope_calls, gen):
    """vidattn.diffusers.ltx2._rope against the stock processor's lines (its module's own functions): interleaved
    through vidattn.rope (a2v tables: video queries, audio keys; then the key reusing the query's tables), split on
    diffusers' torch code (per-head (B, H, T, D/2) tables: not one of the fused op's formulas), bit for bit."""
    import importlib
    from types import SimpleNamespace
    from vidattn.diffusers import ltx2
    mod = f"diffusers.models.transformers.{module}"
    m = importlib.import_module(mod)
    qt, kt = ltx2_tables("ca_video", 2), ltx2_tables("audio", 2)
    q = torch.randn(2, qt[0].shape[1], 2048, generator=gen).bfloat16()
    k = torch.randn(2, kt[0].shape[1], 2048, generator=gen).bfloat16()
    attn = SimpleNamespace(rope_type="interleaved")
    got_q, got_k = ltx2._rope(attn, q, k, qt, kt, mod)
    assert torch.equal(got_q, m.apply_interleaved_rotary_emb(q, qt))
    assert torch.equal(got_k, m.apply_interleaved_rotary_emb(k, kt))
    assert rope_calls == [("pairs", "bshd")] * 2
    got_q, got_k = ltx2._rope(attn, q, q.flip(0), qt, None, mod)
    assert torch.equal(got_k, m.apply_interleaved_rotary_emb(q.flip(0), qt)) and len(rope_calls) == 4

    attn.rope_type = "split"
    heads, t = 32, qt[0].shape[1]
    st = random_tables((2, heads, t, 32), gen)
    got_q, got_k = ltx2._rope(attn, q, q.flip(0), st, None, mod)
    assert torch.equal(got_q, m.apply_split_rotary_emb(q, st))
    assert torch.equal(got_k, m.apply_split_rotary_emb(q.flip(0), st))
    assert len(rope_calls) == 4
    assert ltx2._rope(attn, q, k, None, None, mod) == (q, k)


def easyanimate_tables(frames, height, width):
    """EasyAnimate V5.1's (S, 64) tables as its transformer makes them: EasyAnimateRotaryPosEmbed (patch 2, rope dim
    = head dim 64) on latents of (frames, height, width), on the CPU (the model passes no device)."""
    from diffusers.models.transformers.transformer_easyanimate import EasyAnimateRotaryPosEmbed
    return EasyAnimateRotaryPosEmbed(2, 64)(torch.zeros(1, 16, frames, height, width))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float32])
def test_easyanimate_rope_equals_diffusers_on_real_tables(dtype, gen):
    """The processor's step: the video part of the (B, 48, text + S, 64) query rotated and written back in place."""
    cos, sin = easyanimate_tables(3, 10, 14)
    s, text = 3 * 5 * 7, 97
    assert cos.shape == (s, 64) and cos.dtype == torch.float32 and sin.shape == cos.shape
    q = (torch.randn(2, 48, text + s, 64, generator=gen) * 3).to(dtype)
    ref = q.clone()
    ref[:, :, text:] = diffusers_apply_rotary_emb(ref[:, :, text:], (cos, sin))
    q[:, :, text:] = R.apply_rotary_emb(q[:, :, text:], (cos, sin))
    assert torch.equal(q, ref)
    if dtype != torch.float32:
        x = (torch.randn(2, 48, s, 64, generator=gen) * 3).to(dtype)  # the kernel's order (emulated), as bshd
        emu = kernel_emulation(x.transpose(1, 2), cos[None, :, None], sin[None, :, None], "pairs").transpose(1, 2)
        assert torch.equal(emu, diffusers_apply_rotary_emb(x, (cos, sin)))


def _tiny_forward(name, rope_calls):
    from pipelines.zoo import build_tiny
    model, inputs = build_tiny(name)
    with torch.no_grad():
        stock = model(**inputs, return_dict=False)[0]
        handle = vidattn.apply(model)
        try:
            del rope_calls[:]
            out = model(**inputs, return_dict=False)[0]
        finally:
            handle.restore()
    return out, stock


@pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")
def test_tiny_easyanimate_and_ltx2_processors_call_vidattn_rope(rope_calls):
    """Under vidattn.apply the processors' RoPE is vidattn.rope: tiny EasyAnimate (2 self-attention MMDiT layers: q
    and k each, bhsd) and tiny LTX-2 (2 blocks x 4 RoPE'd attentions: video, audio, a2v, v2a; q and k each; the
    text cross-attentions have none). The output stays stock's (the attention is the CPU fallback here)."""
    out, stock = _tiny_forward("easyanimate", rope_calls)
    assert rope_calls == [("pairs", "bhsd")] * 4
    torch.testing.assert_close(out, stock, atol=1e-5, rtol=1e-5)
    out, stock = _tiny_forward("ltx2", rope_calls)
    assert rope_calls == [("pairs", "bshd")] * 16
    torch.testing.assert_close(out[0] if isinstance(out, (list, tuple)) else out,
                               stock[0] if isinstance(stock, (list, tuple)) else stock, atol=1e-5, rtol=1e-5)
