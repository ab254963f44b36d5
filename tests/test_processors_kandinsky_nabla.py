"""Kandinsky 5's NABLA configs and Kandinsky 6 SR, whose attention masks are NABLA flex BlockMasks (whole 64 x 64
blocks), on vidattn's block-sparse path: tiny models, stock against vidattn, routing and the handle's text.

Stock runs these masks on diffusers' `flex` backend. Uncompiled, flex_attention evaluates only a BlockMask's
mask_mod (NABLA's is a no-op) and attends to every key, so the eager stock output on a CPU is dense attention, not
the model's; compiled flex, the kernel and its reference path compute the listed blocks only. The stock reference
here is therefore the stock model with diffusers' flex backend replaced by SDPA under the BlockMask expanded to a
per-key mask (`block_masked_flex`); each test also checks that this reference differs from the eager stock output
(the mask matters in these tiny models) and counts the calls into the op's block-sparse entry.
"""
import warnings

import pytest
import torch

diffusers = pytest.importorskip("diffusers")
pytest.importorskip("torch.nn.attention.flex_attention")

import vidattn  # noqa: E402
import vidattn.diffusers as vd  # noqa: E402
from vidattn import ops, sparse  # noqa: E402
from diffusers.models import attention_dispatch as ad  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")


def block_masked_flex(query, key, value, attn_mask=None, is_causal=False, scale=None, enable_gqa=False,
                      return_lse=False, _parallel_config=None):
    """diffusers' flex backend as compiled flex computes a BlockMask without a mask_mod: SDPA on the listed blocks."""
    assert not return_lse
    q, k, v = (x.transpose(1, 2) for x in (query, key, value))
    mask = None
    if attn_mask is not None:
        assert sparse.block_mask_reason(attn_mask) is None
        bq, bk = attn_mask.BLOCK_SIZE
        mask = (attn_mask.to_dense() != 0).repeat_interleave(bq, -2).repeat_interleave(bk, -1)
        mask = mask[..., :q.shape[2], :k.shape[2]]
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale,
                                                           enable_gqa=enable_gqa)
    return out.transpose(1, 2)


class SparseEntryCount:
    """Calls of the op's block-sparse entry (`_sparse_impl`: the kernel, or its block-by-block SDPA on a CPU), and
    the block masks' densities."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = ops._sparse_impl

        def counted(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(ops, "_sparse_impl", counted)


def _forward(model, inputs, monkeypatch=None, reference=False):
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if not reference:
            return model(**inputs)[0]
        with monkeypatch.context() as m:
            m.setitem(ad._AttentionBackendRegistry._backends, ad.AttentionBackendName.FLEX, block_masked_flex)
            return model(**inputs)[0]


def _densities(monkeypatch, module, name, model, inputs):
    """The densities of the block masks the model builds in one forward (`module.name` is its mask builder)."""
    seen = []
    real = getattr(module, name)

    def spy(*a, **k):
        bm = real(*a, **k)
        seen.append((bm.to_dense() != 0).float().mean().item())
        return bm

    with monkeypatch.context() as m:
        m.setattr(module, name, spy)
        _forward(model, inputs)
    return seen


# ---------------------------------------------------------------------------------------------- Kandinsky 5 NABLA

def _kandinsky5_nabla(backend="flex"):
    from diffusers.models.transformers.transformer_kandinsky import Kandinsky5Modulation

    torch.manual_seed(0)
    p = 0.4
    model = diffusers.Kandinsky5Transformer3DModel(
        in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, out_visual_dim=4, patch_size=(1, 2, 2),
        model_dim=128, ff_dim=64, num_text_blocks=1, num_visual_blocks=2, axes_dims=(16, 24, 24),
        attention_type="nabla", attention_P=p, attention_wT=1, attention_wH=1, attention_wW=1).eval()
    # diffusers zero-initialises every modulation (gates included): attention would not reach the output.
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for mod in model.modules():
            if isinstance(mod, Kandinsky5Modulation):
                mod.out_layer.weight.copy_(torch.randn(mod.out_layer.weight.shape, generator=g) * 0.1)
                mod.out_layer.bias.copy_(torch.randn(mod.out_layer.bias.shape, generator=g) * 0.5)
    if backend is not None:  # what a NABLA config needs to run stock: the flex backend on its processors
        for mod in model.modules():
            if hasattr(mod, "set_processor"):
                mod.processor._attention_backend = backend
    t, h, w = 2, 32, 32  # latent; patch (1, 2, 2): 2 x 16 x 16 = 512 tokens, 8 fractal blocks of 64
    sta = diffusers.Kandinsky5T2VPipeline.fast_sta_nabla(t, h // 2 // 8, w // 2 // 8, 1, 1, 1, device="cpu")
    g = torch.Generator().manual_seed(1)
    inputs = dict(hidden_states=torch.randn(1, t, h, w, 4, generator=g),
                  encoder_hidden_states=torch.randn(1, 8, 16, generator=g), timestep=torch.tensor([500.0]),
                  pooled_projections=torch.randn(1, 8, generator=g),
                  visual_rope_pos=(torch.arange(t), torch.arange(h // 2), torch.arange(w // 2)),
                  text_rope_pos=torch.arange(8),
                  sparse_params={"sta_mask": sta[None, None], "to_fractal": True, "P": p, "attention_type": "nabla"},
                  return_dict=False)
    return model, inputs


def _backends(model):
    return [getattr(m.processor, "_attention_backend", None) for m in model.modules() if hasattr(m, "set_processor")]


def test_kandinsky5_nabla_runs_block_sparse_on_the_vidattn_backend(monkeypatch):
    from diffusers.models.transformers import transformer_kandinsky as k5

    model, inputs = _kandinsky5_nabla()
    stock_eager = _forward(model, inputs)
    expected = _forward(model, inputs, monkeypatch, reference=True)
    assert (stock_eager - expected).abs().max() > 1e-2  # the block mask changes the output
    assert all(0.3 < d < 0.7 for d in _densities(monkeypatch, k5, "nablaT_v2", model, inputs))

    handle = vidattn.apply(model)
    assert (len(handle.replaced), len(handle.backend), handle.counts()["stock"]) == (0, 5, 0), str(handle)
    text = str(handle)
    assert "backend   5 x Kandinsky5AttnProcessor: stock processor on the vidattn backend in place of its 'flex' " \
           "backend (restore sets it back)" in text, text
    assert "NABLA configs' flex BlockMask (whole 64x64 blocks) on the kernel's block-sparse path" in text, text

    from vidattn.diffusers import backend
    backend.reset_route_counts()
    count = SparseEntryCount(monkeypatch)
    out = _forward(model, inputs)
    assert count.n == 2  # the visual self-attention of each block; text and cross-attention dense
    assert backend.route_counts() == {"vidattn": 5}
    torch.testing.assert_close(out, expected, atol=2e-4, rtol=2e-3)
    assert (out - stock_eager).abs().max() > 1e-2

    assert vidattn.restore(model) == 5
    assert _backends(model) == ["flex"] * 5


def test_kandinsky5_nabla_without_flex_set_runs_on_vidattn(monkeypatch):
    """A NABLA config left on diffusers' default backend cannot run stock (SDPA takes no BlockMask); routed, it
    runs, with the flex reference's output."""
    model, inputs = _kandinsky5_nabla(backend=None)
    with pytest.raises(Exception):
        _forward(model, inputs)
    handle = vidattn.apply(model)
    assert "in place of" not in str(handle) and len(handle.backend) == 5
    out = _forward(model, inputs)
    vidattn.restore(model)
    for m in model.modules():
        if hasattr(m, "set_processor"):
            m.processor._attention_backend = "flex"
    torch.testing.assert_close(out, _forward(model, inputs, monkeypatch, reference=True), atol=2e-4, rtol=2e-3)


def test_kandinsky5_on_a_backend_other_than_flex_is_left_alone():
    model, _ = _kandinsky5_nabla(backend="_native_math")
    with pytest.raises(ValueError, match="'_native_math' backend chosen for it; left as is"):
        vidattn.apply(model)
    assert _backends(model) == ["_native_math"] * 5


def test_kandinsky5_nabla_block_mask_with_a_mask_mod_stays_on_flex(monkeypatch):
    """A BlockMask the block-sparse path cannot read (here the model's own with a mask_mod added) runs on flex,
    as stock, with the reason."""
    from diffusers.models.transformers import transformer_kandinsky as k5
    from torch.nn.attention.flex_attention import BlockMask

    real = k5.nablaT_v2

    def with_mask_mod(*a, **k):
        bm = real(*a, **k)
        return BlockMask.from_kv_blocks(bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks,
                                        bm.full_kv_indices, BLOCK_SIZE=64, mask_mod=lambda b, h, q, kv: q >= 0)

    monkeypatch.setattr(k5, "nablaT_v2", with_mask_mod)
    model, inputs = _kandinsky5_nabla()
    stock = _forward(model, inputs)
    vidattn.apply(model)
    from vidattn.diffusers import backend
    backend.reset_route_counts()
    count = SparseEntryCount(monkeypatch)
    out = _forward(model, inputs)
    assert count.n == 0
    counts = backend.route_counts()
    assert counts.pop("vidattn") == 3 and list(counts.values()) == [2], counts
    assert "mask_mod" in next(iter(counts)), counts
    torch.testing.assert_close(out, stock, atol=2e-4, rtol=2e-3)


# ---------------------------------------------------------------------------------------------- Kandinsky 6 SR

def _kandinsky6_sr():
    torch.manual_seed(0)
    model = diffusers.Kandinsky6SRTransformer3DModel(
        in_visual_dim=4, out_visual_dim=4, time_dim=16, model_dim=128, ff_dim=64, num_visual_blocks=2,
        axes_dims=(16, 24, 24), nabla_threshold=0.3, nabla_window=(1, 1, 1)).eval()
    g = torch.Generator().manual_seed(1)
    # (B, T, H, W, 2 * 4 + 1): 2 x 16 x 16 tokens, 8 fractal blocks of 64
    inputs = dict(hidden_states=torch.randn(1, 2, 16, 16, 9, generator=g), timestep=torch.tensor([500.0]),
                  return_dict=False)
    return model, inputs


def test_kandinsky6_sr_runs_its_nabla_mask_on_the_block_sparse_path(monkeypatch):
    from diffusers.models.transformers import transformer_kandinsky6_sr as k6
    from diffusers.models.transformers.transformer_kandinsky6_sr import Kandinsky6SRAttnProcessor as Stock

    model, inputs = _kandinsky6_sr()
    stock_eager = _forward(model, inputs)
    expected = _forward(model, inputs, monkeypatch, reference=True)
    assert (stock_eager - expected).abs().max() > 1e-3
    assert all(0.3 < d < 0.7 for d in _densities(monkeypatch, k6, "nabla_block_mask", model, inputs))
    originals = [m.processor for m in model.modules() if hasattr(m, "set_processor")]

    handle = vidattn.apply(model)
    assert (len(handle.replaced), len(handle.backend), handle.counts()["stock"]) == (2, 0, 0), str(handle)
    assert "kernel    2 x Kandinsky6SRAttnProcessor: vidattn.Kandinsky6SRAttnProcessor (NABLA's flex BlockMask " \
           "(whole 64x64 blocks) on the kernel's block-sparse path)" in str(handle), str(handle)
    spy = []
    real = ops.attention

    def recording(q, k, v, **kw):
        spy.append(kw)
        return real(q, k, v, **kw)

    monkeypatch.setattr(ops, "attention", recording)
    count = SparseEntryCount(monkeypatch)
    out = _forward(model, inputs)
    assert count.n == 2 and all(sparse.is_block_mask(kw["block_mask"]) and kw["layout"] == "bshd" for kw in spy)
    torch.testing.assert_close(out, expected, atol=2e-4, rtol=2e-3)

    assert vidattn.restore(model) == 2
    assert [m.processor for m in model.modules() if hasattr(m, "set_processor")] == originals
    assert all(type(p) is Stock for p in originals)


def test_kandinsky6_sr_falls_back_to_flex_with_the_reason(monkeypatch, fresh_warnings):
    from diffusers.models.transformers import transformer_kandinsky6_sr as k6
    from torch.nn.attention.flex_attention import BlockMask

    real = k6.nabla_block_mask

    def with_mask_mod(*a, **k):  # the model's mask with a mask_mod the kernel's path cannot read
        bm = real(*a, **k)
        return BlockMask.from_kv_blocks(bm.kv_num_blocks, bm.kv_indices, bm.full_kv_num_blocks, bm.full_kv_indices,
                                        BLOCK_SIZE=64, mask_mod=lambda b, h, q, kv: q >= kv)

    model, inputs = _kandinsky6_sr()
    vidattn.apply(model)
    monkeypatch.setattr(k6, "nabla_block_mask", with_mask_mod)
    count = SparseEntryCount(monkeypatch)
    with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = model(**inputs)[0]
    assert count.n == 0
    assert any("Kandinsky 6 SR attention: the block mask has a mask_mod" in str(w.message) for w in caught), \
        [str(w.message) for w in caught]
    vidattn.restore(model)
    torch.testing.assert_close(out, _forward(model, inputs), atol=2e-4, rtol=2e-3)  # stock flex, same mask


def test_kandinsky6_sr_block_mask_reason():
    from vidattn.diffusers.kandinsky6_sr import block_mask_reason
    from torch.nn.attention.flex_attention import BlockMask

    nb = torch.ones(1, 1, 2, dtype=torch.int32)
    idx = torch.tensor([[[[0, 1], [1, 0]]]], dtype=torch.int32)
    bm = BlockMask.from_kv_blocks(torch.zeros_like(nb), idx, nb, idx, BLOCK_SIZE=64, mask_mod=None)
    assert block_mask_reason(bm) is None
    assert "context parallelism" in block_mask_reason(bm, parallel_config=object())
    assert "not a flex BlockMask" in block_mask_reason(torch.ones(1, 1, 2, 2, dtype=torch.bool))


def test_processors_and_exports():
    assert vidattn.Kandinsky6SRAttnProcessor is vd.Kandinsky6SRAttnProcessor
    assert "Kandinsky6SRAttnProcessor" in vd.__all__


# ---------------------------------------------------------------------------------------------- on the GPU

def _to_cuda_bf16(model, inputs):
    model = model.to("cuda", torch.bfloat16)
    for keep in getattr(model, "_keep_in_fp32_modules", None) or ():  # as from_pretrained(torch_dtype=bf16) keeps them
        for name, mod in model.named_modules():
            if keep in name.split("."):
                mod.float()

    def move(x):
        if isinstance(x, dict):
            return {k: move(u) for k, u in x.items()}
        if isinstance(x, tuple):
            return tuple(move(u) for u in x)
        if not isinstance(x, torch.Tensor):
            return x
        return x.to("cuda", torch.bfloat16) if x.is_floating_point() and x.dim() >= 2 else x.to("cuda")

    return model, move(inputs)


@pytest.mark.gpu
@pytest.mark.parametrize("family", ["kandinsky5_nabla", "kandinsky6_sr"])
def test_gpu_nabla_runs_the_block_sparse_kernel(family, monkeypatch):
    """bf16: every NABLA call reaches the block-sparse kernel itself (vidattn.explain per call: None) and the output
    stays within bf16 error of stock with its BlockMask applied as a per-key mask."""
    from pipelines.census import AttentionCensus
    from pipelines.measure import rel_l2

    model, inputs = _kandinsky5_nabla() if family == "kandinsky5_nabla" else _kandinsky6_sr()
    model, inputs = _to_cuda_bf16(model, inputs)
    expected = _forward(model, inputs, monkeypatch, reference=True)
    vidattn.apply(model)
    seen = []
    real = ops.attention

    def recording(q, k, v, **kw):
        if kw.get("block_mask") is not None:
            seen.append(vidattn.explain(q, k, v, **{n: a for n, a in kw.items() if n != "return_lse"}))
        return real(q, k, v, **kw)

    monkeypatch.setattr(ops, "attention", recording)
    with AttentionCensus() as census:  # wraps the recording op: both see every call
        out = _forward(model, inputs)
    s = census.summary()
    assert seen == [None, None], seen
    assert s["kernel"] >= 2 and not s["fallback"], s
    assert rel_l2(out.float(), expected.float()) < 2e-2
    vidattn.restore(model)
