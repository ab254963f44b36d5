"""The fused RoPE kernel (csrc/common/rope.cuh) on the GPU: bitwise equal (torch.equal) to diffusers' eager functions
run on the same GPU, for bf16/fp16 x, fp32/bf16/fp16 tables, odd lengths, batch 2, odd head counts, the strided
chunks of a fused qkv projection, per-batch tables, and through torch.compile (inductor). Every case asserts first
that the kernel, not the torch fallback, ran it (rope_explain is None), so a silent fallback cannot pass."""
from __future__ import annotations

import pytest
import torch

pytest.importorskip("diffusers")
from diffusers.models.embeddings import apply_rotary_emb as diffusers_apply_rotary_emb  # noqa: E402
from diffusers.models.embeddings import get_1d_rotary_pos_embed  # noqa: E402

import vidattn  # noqa: E402
from vidattn import rotary as R  # noqa: E402
from conftest import is_hopper  # noqa: E402
from test_rope import diffusers_wan_rope  # noqa: E402

pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not is_hopper(), reason="the fused RoPE runs on Hopper (sm_90a library)")]
DEV = "cuda"


def _gen():
    seed = torch.seed() % (1 << 31)
    return torch.Generator(device=DEV).manual_seed(seed)


def wan_tables(s, d, device=DEV):
    """WanRotaryPosEmbed's construction: fp64 frequencies, repeat-interleaved, cast to fp32, (1, S, 1, D)."""
    pos = torch.randperm(4 * s)[:s].double()
    cos, sin = get_1d_rotary_pos_embed(d, pos, 10000.0, use_real=True, repeat_interleave_real=True,
                                       freqs_dtype=torch.float64)
    return cos.float().to(device)[None, :, None, :], sin.float().to(device)[None, :, None, :]


def randn(shape, g, dtype, scale=3.0):
    return (torch.randn(shape, generator=g, device=DEV) * scale).to(dtype)


def check(out, ref):
    assert out.shape == ref.shape and out.dtype == ref.dtype
    assert torch.equal(out, ref), f"{(out != ref).sum().item()} of {out.numel()} elements differ"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(1, 1001, 12, 128), (2, 257, 5, 64), (1, 7, 40, 128), (2, 33, 3, 96),
                                   (1, 4097, 1, 128)])
def test_wan_mode_bitwise(dtype, shape):
    g = _gen()
    x = randn(shape, g, dtype)
    cos, sin = wan_tables(shape[1], shape[3])
    assert vidattn.rope_explain(x, cos, sin) is None
    check(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))


@pytest.mark.parametrize("x_dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("table_dtype", [torch.float32, torch.bfloat16, torch.float16])
def test_wan_mode_random_tables_every_dtype(x_dtype, table_dtype):
    """Independent random cos and sin (so a kernel reading the wrong entry differs), in each table dtype: tables of
    x's dtype take the every-op-rounded path (kRoundMid), the others fp32."""
    g = _gen()
    x = randn((2, 515, 6, 128), g, x_dtype)
    cos, sin = randn((1, 515, 1, 128), g, table_dtype, 1.0), randn((1, 515, 1, 128), g, table_dtype, 1.0)
    assert vidattn.rope_explain(x, cos, sin) is None
    check(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))


@pytest.mark.parametrize("unbind", [-1, -2])
@pytest.mark.parametrize("sequence_dim", [1, 2])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_apply_rotary_emb_bitwise(unbind, sequence_dim, dtype):
    g = _gen()
    shape = (2, 1003, 5, 64) if sequence_dim == 1 else (2, 5, 1003, 64)
    x = randn(shape, g, dtype)
    freqs = (randn((1003, 64), g, torch.float32, 1.0), randn((1003, 64), g, torch.float32, 1.0))
    mode = "pairs" if unbind == -1 else "halves"
    layout = "bshd" if sequence_dim == 1 else "bhsd"
    assert vidattn.rope_explain(x, *freqs, mode=mode, layout=layout) is None
    out = R.apply_rotary_emb(x, freqs, use_real=True, use_real_unbind_dim=unbind, sequence_dim=sequence_dim)
    check(out, diffusers_apply_rotary_emb(x, freqs, use_real=True, use_real_unbind_dim=unbind,
                                          sequence_dim=sequence_dim))


def test_fused_qkv_chunks_and_cogvideox_slice():
    """Wan's fused to_qkv(...).chunk(3, -1) views (seq stride 3*H*D), and CogVideoX's query[:, :, text:] slice of a
    (B, H, S, D) tensor with an odd text length."""
    g = _gen()
    b, s, h, d = 2, 1777, 12, 128
    qkv = randn((b, s, 3 * h * d), g, torch.bfloat16)
    cos, sin = wan_tables(s, d)
    for t in qkv.chunk(3, dim=-1)[:2]:
        x = t.unflatten(2, (h, d))
        assert vidattn.rope_explain(x, cos, sin) is None
        check(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))
    q = randn((b, h, 226 + s, 64), g, torch.bfloat16)
    freqs = (randn((s, 64), g, torch.float32, 1.0), randn((s, 64), g, torch.float32, 1.0))
    expected = q.clone()
    expected[:, :, 226:] = diffusers_apply_rotary_emb(expected[:, :, 226:], freqs)
    assert vidattn.rope_explain(q[:, :, 226:], *freqs, mode="pairs", layout="bhsd") is None
    q[:, :, 226:] = R.apply_rotary_emb(q[:, :, 226:], freqs)
    check(q, expected)


def test_per_batch_tables():
    g = _gen()
    x = randn((2, 301, 4, 128), g, torch.bfloat16)
    cos, sin = randn((2, 301, 1, 128), g, torch.float32, 1.0), randn((2, 301, 1, 128), g, torch.float32, 1.0)
    assert vidattn.rope_explain(x, cos, sin) is None
    check(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))


@pytest.mark.parametrize("mode", ["wan", "pairs", "halves"])
def test_poisoned_output_fully_written_and_nothing_else(mode):
    """The launch into a NaN-filled, strided output view (gaps between rows): every element of the view is written
    with the right bits, every gap keeps its NaN."""
    g = _gen()
    b, s, h, d = 2, 129, 3, 64
    x = randn((b, s, h, d), g, torch.bfloat16)
    cos, sin = randn((1, s, 1, d), g, torch.float32, 1.0), randn((1, s, 1, d), g, torch.float32, 1.0)
    buf = torch.full((b, s, h + 1, d + 8), float("nan"), dtype=torch.bfloat16, device=DEV)
    out_v = buf[:, :, :h, :d]
    R._launch(*R._prepare(x, cos, sin, "bshd"), out_v, mode)
    check(out_v, R.rope_reference(x, cos, sin, mode))
    gaps = torch.ones_like(buf, dtype=torch.bool)
    gaps[:, :, :h, :d] = False
    assert buf[gaps].isnan().all()


def test_in_place():
    """out == x (the ABI allows it): each element is read before the same thread writes it."""
    g = _gen()
    x = randn((1, 999, 12, 128), g, torch.bfloat16)
    cos, sin = wan_tables(999, 128)
    ref = diffusers_wan_rope(x, cos, sin)
    xv, cv, sv = R._prepare(x, cos, sin, "bshd")
    R._launch(xv, cv, sv, x, "wan")
    check(x, ref)


def test_unaligned_view_falls_back_and_is_still_right():
    g = _gen()
    x = randn((1, 65, 4, 72), g, torch.bfloat16)[..., 4:68]  # base 8 bytes in: not 16-byte aligned
    cos, sin = wan_tables(65, 64)
    assert "16-byte" in vidattn.rope_explain(x, cos, sin)
    check(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))


def test_wan_1_3b_shape_bitwise():
    g = _gen()
    x = randn((1, 32760, 12, 128), g, torch.bfloat16)
    cos, sin = wan_tables(32760, 128)
    assert vidattn.rope_explain(x, cos, sin) is None
    check(vidattn.rope(x, cos, sin), diffusers_wan_rope(x, cos, sin))


def test_inductor_compile_bitwise():
    torch._dynamo.reset()
    g = _gen()
    x = randn((2, 513, 12, 128), g, torch.bfloat16)
    cos, sin = wan_tables(513, 128)

    def fn(x, cos, sin):
        return vidattn.rope(x, cos, sin) + 1

    out = torch.compile(fn, fullgraph=True)(x, cos, sin)
    check(out, diffusers_wan_rope(x, cos, sin) + 1)


def test_tiny_wan_processor_qk_match_stock_rope():
    """project_wan (vidattn's Wan processor) against the stock processor's RoPE arithmetic on a real WanAttention."""
    from conftest import tiny_wan
    from vidattn.diffusers.wan import project_wan
    model = tiny_wan().to(DEV, torch.bfloat16)
    attn = model.blocks[0].attn1
    g = _gen()
    hs = randn((2, 61, attn.to_q.in_features), g, torch.bfloat16, 1.0)
    d = attn.to_q.out_features // attn.heads
    cos, sin = wan_tables(61, d)
    with torch.no_grad():
        q, k, _, _ = project_wan(attn, hs, None, (cos, sin))
        q0 = attn.norm_q(attn.to_q(hs)).unflatten(2, (attn.heads, -1))
        k0 = attn.norm_k(attn.to_k(hs)).unflatten(2, (attn.heads, -1))
    check(q, diffusers_wan_rope(q0, cos, sin))
    check(k, diffusers_wan_rope(k0, cos, sin))


@pytest.mark.parametrize("width", [2048, 4096])
def test_ltx_row_rope_bitwise(width):
    """LTX-Video (C = 2048) and LTX-2 video (4096): (B, S, C) rows with per-batch tables, the whole row one C-channel
    head (256 and 512 threads per position)."""
    from diffusers.models.transformers.transformer_ltx import apply_rotary_emb as ltx_stock
    g = _gen()
    x = randn((2, 1537, width), g, torch.bfloat16)
    freqs = (randn((2, 1537, width), g, torch.float32, 1.0), randn((2, 1537, width), g, torch.float32, 1.0))
    assert vidattn.rope_explain(x[:, :, None], freqs[0][:, :, None], freqs[1][:, :, None], mode="pairs") is None
    check(R.ltx_apply_rotary_emb(x, freqs), ltx_stock(x, freqs))


def test_allegro_chunks_bitwise():
    """Allegro: D = 96 in three 32-channel chunks (views 64 bytes apart), halves formula, gathered tables."""
    from diffusers.models.embeddings import apply_rotary_emb_allegro as allegro_stock
    g = _gen()
    x = randn((2, 24, 1001, 96), g, torch.bfloat16)
    freqs = tuple((randn((300, 32), g, torch.float32, 1.0), randn((300, 32), g, torch.float32, 1.0))
                  for _ in range(3))
    pos = tuple(torch.randint(0, 300, (1, 1001), device=DEV) for _ in range(3))
    cos = torch.nn.functional.embedding(pos[1], freqs[1][0])[:, None]
    assert vidattn.rope_explain(x.chunk(3, -1)[1], cos, cos, mode="halves", layout="bhsd") is None
    check(R.allegro_apply_rotary_emb(x, freqs, pos), allegro_stock(x, freqs, pos))


def test_tiny_wan_forward_same_bits_with_and_without_the_fused_rope(monkeypatch):
    """A whole (tiny) Wan forward under vidattn.apply: the fused RoPE changes no output bit against diffusers' torch
    ops (VIDATTN_ROPE_KERNEL=0's path), with fused projections too (q/k as strided chunks of to_qkv's output)."""
    from conftest import tiny_wan, tiny_wan_inputs
    for fuse in (False, True):
        model = tiny_wan().to(DEV, torch.bfloat16)
        if fuse:
            model.fuse_qkv_projections()
        x, t, ctx = (a.to(DEV) for a in tiny_wan_inputs(batch=2, frames=5, size=16, text=40))
        x, ctx = x.bfloat16(), ctx.bfloat16()
        handle = vidattn.apply(model)
        try:
            with torch.no_grad():
                monkeypatch.setattr(R, "kernel_enabled", True)
                fused = model(x, t, ctx).sample
                monkeypatch.setattr(R, "kernel_enabled", False)
                stock = model(x, t, ctx).sample
        finally:
            handle.restore()
        check(fused, stock)


# EasyAnimate and LTX-2 (vidattn/diffusers/easyanimate.py, ltx2.py), on the tables their models make

@pytest.mark.parametrize("kind, width", [("video", 4096), ("audio", 2048), ("ca_video", 2048)])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_ltx2_interleaved_real_tables_bitwise(kind, width, dtype):
    """LTX-2 19B's interleaved RoPE (video self-attention 4096 channels with 4 of padding, audio 2048, the a2v / v2a
    video side 2048), tables from diffusers' LTX2AudioVideoRotaryPosEmbed on the GPU, 1785 video / 251 audio tokens:
    bitwise LTX-2's apply_interleaved_rotary_emb and the SANA-WM refiner's copy."""
    from diffusers.models.transformers.transformer_ltx2 import apply_interleaved_rotary_emb as ltx2_stock
    from diffusers.models.transformers.transformer_sana_wm_refiner import apply_interleaved_rotary_emb as refiner
    from test_rope import ltx2_tables
    g = _gen()
    cos, sin = ltx2_tables(kind, 2, DEV, frames=7, height=15, width=17, audio_frames=251)
    assert cos.shape[2] == width and cos.dtype == torch.float32
    x = randn((2, cos.shape[1], width), g, dtype)
    assert vidattn.rope_explain(x[:, :, None], cos[:, :, None], sin[:, :, None], mode="pairs") is None
    out = R.ltx_apply_rotary_emb(x, (cos, sin))
    check(out, ltx2_stock(x, (cos, sin)))
    check(out, refiner(x, (cos, sin)))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_easyanimate_query_slice_bitwise(dtype):
    """EasyAnimate V5.1: 48 heads x 64, the video part (latents 13 x 60 x 104, patch 2: S = 20280) of the
    (B, H, text + S, D) query after 226 text tokens, written back in place; the (S, 64) tables made on the CPU as the
    model does."""
    from test_rope import easyanimate_tables
    g = _gen()
    cos, sin = easyanimate_tables(13, 60, 104)
    s, text = cos.shape[0], 226
    q = randn((2, 48, text + s, 64), g, dtype)
    expected = q.clone()
    expected[:, :, text:] = diffusers_apply_rotary_emb(expected[:, :, text:], (cos, sin))
    assert vidattn.rope_explain(q[:, :, text:], cos.to(DEV), sin.to(DEV), mode="pairs", layout="bhsd") is None
    q[:, :, text:] = R.apply_rotary_emb(q[:, :, text:], (cos, sin))
    check(q, expected)


@pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")
@pytest.mark.parametrize("name", ["easyanimate", "ltx2"])
def test_tiny_family_forward_same_bits_with_and_without_the_fused_rope(name, monkeypatch):
    """A whole tiny EasyAnimate / LTX-2 forward (bf16) under vidattn.apply: the kernel runs the RoPE (its launches
    counted) and no output bit changes against diffusers' torch ops (VIDATTN_ROPE_KERNEL=0's path)."""
    from pipelines.zoo import build_tiny
    model, inputs = build_tiny(name)
    model = model.to(DEV, torch.bfloat16)
    inputs = {k: (v.to(DEV, torch.bfloat16) if torch.is_tensor(v) and v.is_floating_point() and v.dim() >= 3
                  else v.to(DEV) if torch.is_tensor(v) else v) for k, v in inputs.items()}
    launches, real = [], R._launch
    monkeypatch.setattr(R, "_launch", lambda *a: launches.append(a[-1]) or real(*a))
    handle = vidattn.apply(model)
    try:
        with torch.no_grad():
            monkeypatch.setattr(R, "kernel_enabled", True)
            fused = model(**inputs, return_dict=False)
            n_fused = len(launches)
            monkeypatch.setattr(R, "kernel_enabled", False)
            stock = model(**inputs, return_dict=False)
    finally:
        handle.restore()
    assert n_fused == {"easyanimate": 4, "ltx2": 16}[name] and len(launches) == n_fused
    assert len(fused) == len(stock) == {"easyanimate": 1, "ltx2": 2}[name]  # LTX-2: video and audio
    for a, b in zip(fused, stock):
        check(a, b)
