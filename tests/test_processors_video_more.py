"""The video families routed after the model zoo's first twelve: Latte (generic AttnProcessor2_0, routed inside
LatteTransformer3DModel only), Sana-Video (cross-attention; linear self-attention stock), SANA-WM (softmax modules by
class swap, cross-attention on the backend, GDN stock), the SANA-WM refiner and Kandinsky 6 (backend), and
Wan-Animate-2 (its flex-masked cached pass as two dense attentions merged by LSE).

Each family: a tiny model of the real class, apply, the handle's kernel/backend/stock counts, the number of calls into
vidattn's kernel entry (a family that silently stays stock fails), output against stock, restore. The LSE merge is
also checked on its own in fp64 against a dense attention under the stock block mask (from diffusers' own mask
function), so the CPU's SDPA fallback cannot hide a wrong merge."""
import math
import types
import warnings

import pytest
import torch

import vidattn
from vidattn import ops

diffusers = pytest.importorskip("diffusers")
import vidattn.diffusers as vd  # noqa: E402
from vidattn.diffusers.lse_merge import merge_lse  # noqa: E402
from vidattn.diffusers.wan_animate_2 import cached_mask_reason, in_context_attention  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

_WA2 = "diffusers.models.transformers.transformer_wan_animate_2"


class KernelEntryCount:
    """Calls of vidattn.ops' kernel entry (`_attention_impl`: the kernel, or its SDPA fallback on a CPU)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = ops._attention_impl

        def counted(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(ops, "_attention_impl", counted)


def _g(seed=1):
    return torch.Generator().manual_seed(seed)


# Where the builders put their inputs: the CPU tests keep fp32 on the CPU; the GPU test moves floating tensors of
# two or more dimensions (activations, embeddings, RoPE) to CUDA in bf16 and everything else to CUDA as it is.
_ON = {"device": None, "dtype": None}


def _t(x):
    if _ON["device"] is None:
        return x
    if isinstance(x, dict):
        return {k: _t(u) for k, u in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(_t(u) for u in x)
    if not isinstance(x, torch.Tensor):
        return x
    cast = x.is_floating_point() and x.dim() >= 2
    return x.to(_ON["device"], _ON["dtype"]) if cast else x.to(_ON["device"])


def _model(cls_name, **cfg):
    torch.manual_seed(0)
    return getattr(diffusers, cls_name)(**cfg).eval().requires_grad_(False)


def _first(out):
    out = out[0]
    return out[0] if isinstance(out, (list, tuple)) else out


# ---------------------------------------------------------------------------------------------- tiny families
# Each: (model, run) where run() does the forward(s) of one check and returns the output tensor(s).

def _latte():
    m = _model("LatteTransformer3DModel", num_attention_heads=2, attention_head_dim=72, in_channels=4, out_channels=8,
               num_layers=1, cross_attention_dim=144, sample_size=8, patch_size=2, caption_channels=16,
               video_length=3, norm_type="ada_norm_single", num_embeds_ada_norm=1000)
    g = _g()
    inputs = _t(dict(hidden_states=torch.randn(1, 4, 3, 8, 8, generator=g), timestep=torch.tensor([500]),
                     encoder_hidden_states=torch.randn(1, 6, 16, generator=g), return_dict=False))
    return m, lambda: _first(m(**inputs))


def _sana_video():
    m = _model("SanaVideoTransformer3DModel", in_channels=4, out_channels=4, num_attention_heads=2,
               attention_head_dim=112, num_layers=1, num_cross_attention_heads=2, cross_attention_head_dim=112,
               cross_attention_dim=224, caption_channels=16, sample_size=8)
    g = _g()
    mask = torch.ones(2, 6)
    mask[1, 4:] = 0  # prompt padding: the model makes it a 0/-10000 bias; the backend makes it kv_lens
    inputs = _t(dict(hidden_states=torch.randn(2, 4, 2, 8, 8, generator=g), timestep=torch.tensor([500, 500]),
                     encoder_hidden_states=torch.randn(2, 6, 16, generator=g), encoder_attention_mask=mask,
                     return_dict=False))
    return m, lambda: _first(m(**inputs))


def _sana_wm():
    m = _model("SanaWMTransformer3DModel", in_channels=4, num_layers=2, hidden_size=224, num_attention_heads=2,
               softmax_every_n=2, linear_head_dim=112, caption_channels=16, chunk_plucker_post_attn_blocks=2,
               mlp_ratio=1.0)
    g = _g()
    cam = torch.zeros(1, 3, 20)
    cam[..., :4] = torch.tensor([1.0, 1.0, 0.5, 0.5])
    cam[..., 4:] = torch.eye(4).flatten()
    inputs = _t(dict(hidden_states=torch.randn(1, 4, 3, 4, 4, generator=g), timestep=torch.full((1, 1, 3), 500.0),
                     encoder_hidden_states=torch.randn(1, 1, 6, 16, generator=g), camera_conditions=cam,
                     encoder_attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]), return_dict=False))
    # All frames valid, then the last frame padded: the camera branch's key bias -> kv_lens.
    return m, lambda: (_first(m(**inputs)),
                       _first(m(**inputs, frame_valid_mask=_t(torch.tensor([[1.0, 1.0, 0.0]])))))


def _sana_wm_refiner():
    from diffusers.models.transformers.transformer_sana_wm_refiner import SanaWMRefinerKVCache

    m = _model("SanaWMLTX2RefinerTransformer3DModel", in_channels=8, out_channels=8, num_attention_heads=2,
               attention_head_dim=64, cross_attention_dim=128, audio_num_attention_heads=2,
               audio_attention_head_dim=64, audio_cross_attention_dim=128, num_layers=2, caption_channels=16,
               audio_in_channels=8)
    g = _g()
    rope = m.build_rotary_emb_for_absolute_positions(1, [2, 3], 4, 4, torch.device("cpu"), 25.0)
    inputs = _t(dict(hidden_states=torch.randn(1, 32, 8, generator=g),
                     encoder_hidden_states=torch.randn(1, 6, 16, generator=g), timestep=torch.full((1, 32), 500.0),
                     video_rotary_emb=rope, encoder_attention_mask=torch.tensor([[1, 1, 1, 1, 0, 0]]),
                     return_dict=False))
    cache = SanaWMRefinerKVCache(2)
    for layer in cache.layer_caches:  # recent history: the current block attends to [history + current]
        layer.store_history(_t(torch.randn(1, 16, 128, generator=g)), _t(torch.randn(1, 16, 128, generator=g)))
    return m, lambda: (_first(m(**inputs)), _first(m(**inputs, kv_cache=cache, kv_cache_mode="inject")))


def _kandinsky6():
    m = _model("Kandinsky6Transformer3DModel", in_visual_dim=4, out_visual_dim=4, in_text_dim=16, in_text_dim2=8,
               time_dim=16, patch_size=(1, 2, 2), model_dim=128, ff_dim=64, num_text_blocks=1, num_visual_blocks=2,
               axes_dims=(16, 24, 24))
    g = _g()
    mask = torch.ones(2, 6, dtype=torch.bool)
    mask[1, 4:] = False  # (B, S) prompt padding -> kv_lens in the backend
    inputs = _t(dict(hidden_states=torch.randn(2, 2, 8, 8, 9, generator=g),
                     encoder_hidden_states=torch.randn(2, 6, 16, generator=g),
                     pooled_projections=torch.randn(2, 8, generator=g), timestep=torch.full((2,), 500.0),
                     encoder_attention_mask=mask, return_dict=False))
    return m, lambda: _first(m(**inputs))


def _eager_block_masks(monkeypatch):
    # create_mask asks create_block_mask for a compiled mask builder (over a minute on a CPU); the eager builder
    # gives the same BlockMask for the same mask function.
    import importlib

    wa2 = importlib.import_module(_WA2)
    compiled = wa2.create_block_mask

    def eager(*args, **kwargs):
        kwargs["_compile"] = False
        return compiled(*args, **kwargs)

    monkeypatch.setattr(wa2, "create_block_mask", eager)
    return wa2


def _wan_animate_2(monkeypatch):
    wa2 = _eager_block_masks(monkeypatch)
    m = _model("WanAnimate2Transformer3DModel", patch_size=(1, 2, 2), text_len=8, in_dim=8, dim=128, ffn_dim=32,
               freq_dim=32, text_dim=16, out_dim=4, num_heads=2, num_layers=2, use_img_emb=False)

    def run():
        # F = 2 origin latent frames of O = 20 tokens (64 x 80 pixels); the segment has 3 frames of 16 tokens and
        # one reference frame: the buffers' zero slots, and frame 2's empty reference slot, take part in the softmax.
        g = _g()
        cache = wa2.WanAnimate2KVCache(2)
        txt = _t([torch.randn(5, 16, generator=g)])
        m(**_t(dict(hidden_states=[torch.randn(4, 1, 8, 8, generator=g)], timestep=torch.tensor([500.0]),
                    encoder_hidden_states=txt, condition_latents=[torch.randn(4, 1, 8, 8, generator=g)],
                    offset_grid_sizes=torch.tensor([[1, 4, 4]]))), kv_cache=cache, kv_cache_mode="extract",
          seq_len=16)
        return _first(m(**_t(dict(hidden_states=[torch.randn(4, 3, 8, 8, generator=g)],
                                  timestep=torch.tensor([500.0]), encoder_hidden_states=txt,
                                  condition_latents=[torch.randn(4, 3, 8, 8, generator=g)],
                                  reference_grid_sizes=torch.tensor([[1, 4, 4]]))),
                        kv_cache=cache, kv_cache_mode="cached", seq_len=48, origin_len=4, origin_area=[64, 80],
                        return_dict=False))
    return m, run


# family -> (builder, (kernel, backend, stock) modules in the handle, kernel-entry calls of one run)
FAMILIES = {
    "latte": (_latte, (3, 0, 0), 3),                     # spatial self, text cross, temporal self
    "sana_video": (_sana_video, (0, 1, 1), 1),           # cross on the backend; linear self-attention stock
    "sana_wm": (_sana_wm, (2, 2, 2), 8),                 # 2 runs x (softmax main + camera + 2 cross); GDN stock
    # self-attention (KV cache) on the backend; the 5 LTX-2-style attentions per block on vidattn's LTX-2 processors;
    # 2 runs x 2 blocks x (self + text cross) attend (video only)
    "sana_wm_refiner": (_sana_wm_refiner, (10, 2, 0), 8),
    "kandinsky6": (_kandinsky6, (0, 14, 0), 6),          # video and audio text blocks + 2 x (visual self + cross)
    "wan_animate_2": (_wan_animate_2, (2, 2, 0), 10),    # extract 2 x (self + cross); cached 2 x (2 + cross)
}


def _build(name, monkeypatch):
    builder = FAMILIES[name][0]
    return builder(monkeypatch) if name == "wan_animate_2" else builder()


def _outputs(run):
    with torch.no_grad():
        out = run()
    return out if isinstance(out, tuple) else (out,)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_family_reaches_the_kernel_entry_and_matches_stock(name, monkeypatch):
    model, run = _build(name, monkeypatch)
    expected = _outputs(run)
    count = KernelEntryCount(monkeypatch)

    handle = vidattn.apply(model)
    c = handle.counts()
    assert (c["kernel"], c["backend"], c["stock"]) == FAMILIES[name][1], str(handle)
    got = _outputs(run)
    assert count.n == FAMILIES[name][2], f"{name}: {count.n} kernel-entry calls\n{handle}"
    for a, b in zip(got, expected):
        # SANA-WM attends in bf16 (as stock does): the fallback's explicit scale may round differently.
        tol = 1e-4 if name == "sana_wm" else 1e-5
        torch.testing.assert_close(a, b, atol=tol, rtol=tol)

    assert vidattn.restore(model) == c["kernel"] + c["backend"]
    count.n = 0
    for a, b in zip(_outputs(run), expected):
        torch.testing.assert_close(a, b, atol=0, rtol=0)
    assert count.n == 0


def test_generic_attn_processor_is_routed_only_inside_latte():
    from diffusers.models.attention_processor import Attention, AttnProcessor2_0

    class ImageModel(torch.nn.Module):  # any other model holding diffusers' default processor
        def __init__(self):
            super().__init__()
            self.attn = Attention(query_dim=32, heads=2, dim_head=16)

    image = ImageModel()
    assert type(image.attn.processor) is AttnProcessor2_0
    with pytest.raises(ValueError, match=r"AttnProcessor2_0 in ImageModel \(the generic processor is routed only "
                                         r"inside LatteTransformer3DModel\)") as info:
        vidattn.apply(image)
    assert "AttnProcessor2_0 (in LatteTransformer3DModel)" in str(info.value)  # the supported list says where
    assert type(image.attn.processor) is AttnProcessor2_0

    latte, _ = _latte()

    class Pipe:  # a pipeline with both: Latte is routed, the image model left as it is, each said
        components = {"transformer": latte, "image_model": image}

    text = str(vidattn.apply(Pipe()))
    assert "kernel    3 x AttnProcessor2_0: vidattn.LatteAttnProcessor" in text, text
    assert "stock     1 x AttnProcessor2_0: no vidattn route for diffusers.models.attention_processor." \
           "AttnProcessor2_0 in ImageModel (the generic processor is routed only inside " \
           "LatteTransformer3DModel) [image_model.attn]" in text, text
    assert type(image.attn.processor) is AttnProcessor2_0

    latte, _ = _latte()  # the scope is the model inside torch.compile's wrapper
    handle = vidattn.apply(torch.compile(latte))
    assert len(handle.replaced) == 3, str(handle)


def test_handle_says_why_linear_and_gdn_attention_stay_stock():
    model, _ = _sana_video()
    text = str(vidattn.apply(model))
    assert "stock     1 x SanaLinearAttnProcessor3_0: linear attention (ReLU kernel, no softmax)" in text, text
    assert "backend   1 x SanaAttnProcessor2_0" in text, text
    model, _ = _sana_wm()
    text = str(vidattn.apply(model))
    assert "stock     1 x SanaWMBidirectionalGDNAttention: GDN linear attention" in text, text
    assert "kernel    1 x SanaWMSoftmaxCamAttention: vidattn.VidattnSanaWMSoftmaxCamAttention" in text, text


def test_kandinsky6_sr_is_routed_to_its_processor():
    # Its NABLA BlockMask on the block-sparse path, against stock: tests/test_processors_kandinsky_nabla.py.
    model = _model("Kandinsky6SRTransformer3DModel", in_visual_dim=4, out_visual_dim=4, time_dim=16, model_dim=128,
                   ff_dim=64, num_visual_blocks=1, axes_dims=(16, 24, 24))
    handle = vidattn.apply(model)
    assert len(handle.replaced) == 1 and handle.counts()["stock"] == 0, str(handle)
    assert "vidattn.Kandinsky6SRAttnProcessor" in str(handle)


def test_sana_wm_swapped_modules_restore_and_reapply():
    model, run = _sana_wm()
    vidattn.apply(model)
    swapped = [m for m in model.modules() if isinstance(m, vd.sdpa_common.VidattnModule)]
    assert len(swapped) == 2 and all(type(m).__name__.startswith("VidattnSanaWM") for m in swapped)
    assert all(isinstance(m, m._vidattn_stock_class) for m in swapped)
    handle = vidattn.apply(model)  # twice: already on vidattn, listed as kernel, nothing re-swapped
    assert sum("already uses vidattn.VidattnSanaWM" in why for _, _, _, why in handle.modules) == 2
    assert vidattn.restore(model) == 4
    assert not any(isinstance(m, vd.sdpa_common.VidattnModule) for m in model.modules())


def test_sana_wm_camera_mask_that_is_not_trailing_padding_runs_stock_sdpa(monkeypatch):
    model, _ = _sana_wm()
    cam = next(m for m in model.modules() if type(m).__name__ == "SanaWMSoftmaxCamAttention")
    g = _g(5)
    q, k, v = (torch.randn(1, 16, 2, 112, generator=g) for _ in range(3))
    from diffusers.models.transformers.transformer_sana_wm import _prepare_ucpe_ray_transforms

    cams = torch.zeros(1, 2, 20)
    cams[..., :4] = torch.tensor([1.0, 1.0, 0.5, 0.5])
    cams[..., 4:] = torch.eye(4).flatten()
    rays = _prepare_ucpe_ray_transforms(head_dim=112, camera_conditions=cams, HW=(2, 2, 4), patch_size=(1, 1, 1),
                                        rotary_emb=None)
    valid = torch.tensor([[0.0] * 8 + [1.0] * 8])  # the first frame padded: not a key prefix
    monkeypatch.setattr(ops, "_warned", set())
    with torch.no_grad():
        ref = cam(q, k, v, rays, token_valid_mask=valid)
        vidattn.apply(model)
        count = KernelEntryCount(monkeypatch)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            got = cam(q, k, v, rays, token_valid_mask=valid)
        assert count.n == 0
        assert any("SANA-WM camera attention" in str(w.message) for w in caught)
        torch.testing.assert_close(got, ref, atol=0, rtol=0)
        got = cam(q, k, v, rays, token_valid_mask=torch.tensor([[1.0] * 12 + [0.0] * 4]))
        assert count.n == 1


def _cosmos3_causal_calls(monkeypatch, on_gpu=False):
    """(stock output, vidattn output, [causal= of each vidattn.attention call], census) of a tiny Cosmos3."""
    from pipelines.zoo import build_tiny

    model, inputs = build_tiny("cosmos3")
    if on_gpu:
        model.to("cuda", torch.bfloat16)
        for keep in getattr(model, "_keep_in_fp32_modules", None) or ():
            for mod_name, mod in model.named_modules():
                if keep in mod_name.split("."):
                    mod.float()
        inputs = _t(inputs)
    with torch.no_grad():
        expected = _first(model(**inputs, return_dict=False))
    vidattn.apply(model)
    census = _KernelCensus(monkeypatch) if on_gpu else None
    seen, real = [], ops.attention

    def spy(q, k, v, **kw):
        seen.append((kw.get("causal", False), q.shape[2], k.shape[2]))
        return real(q, k, v, **kw)

    monkeypatch.setattr(ops, "attention", spy)
    with torch.no_grad():
        got = _first(model(**inputs, return_dict=False))
    vidattn.restore(model)
    return expected, got, seen, census


def test_cosmos3_causal_understanding_pathway_reaches_vidattn(monkeypatch):
    """Cosmos3's understanding pathway (is_causal=True, grouped K/V, no mask) goes through the backend to
    vidattn.attention(causal=True) like the generation pathway (causal=False), and the output equals stock."""
    expected, got, seen, _ = _cosmos3_causal_calls(monkeypatch)
    assert seen == [(True, 2, 1), (False, 2, 1)] * 2, seen  # 2 layers x (understanding, generation)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


# ------------------------------------------------------------------------------- Wan-Animate-2: the LSE merge
def _exact_attend(q, k, v):
    """fp64 attention on (B, S, H, D) with its LSE (B, H, S): the merge's inputs without any rounding."""
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    lse = torch.logsumexp(s, dim=-1)
    return torch.einsum("bhqk,bkhd->bqhd", torch.exp(s - lse[..., None]), v), lse


def test_merge_lse_equals_attention_over_the_union_fp64():
    g = _g(7)
    q = torch.randn(2, 5, 3, 8, generator=g, dtype=torch.float64)
    k = torch.randn(2, 11, 3, 8, generator=g, dtype=torch.float64)
    v = torch.randn(2, 11, 3, 8, generator=g, dtype=torch.float64)
    ref, ref_lse = _exact_attend(q, torch.cat([k, torch.zeros_like(k[:, :4])], 1),
                                 torch.cat([v, torch.zeros_like(v[:, :4])], 1))
    parts = [_exact_attend(q, k[:, :6], v[:, :6]), _exact_attend(q, k[:, 6:], v[:, 6:])]
    out, lse = merge_lse([(o, lse.transpose(1, 2)) for o, lse in parts], zero_keys=4)
    torch.testing.assert_close(out, ref, atol=1e-12, rtol=1e-12)
    torch.testing.assert_close(lse, ref_lse.transpose(1, 2), atol=1e-12, rtol=1e-12)
    empty = (torch.full_like(out, 123.0), torch.full_like(lse, float("-inf")))  # a set no row attends to
    out2, _ = merge_lse([(o, lse.transpose(1, 2)) for o, lse in parts] + [empty], zero_keys=4)
    torch.testing.assert_close(out2, ref, atol=1e-12, rtol=1e-12)


def _stock_mask(wa2, monkeypatch, origin_frames, origin_hw):
    """Wan-Animate-2's own block mask for these buffers, its mask function kept (create_block_mask captured)."""
    monkeypatch.setattr(wa2, "create_block_mask", lambda fn, B, H, Q_LEN, KV_LEN, **kw: types.SimpleNamespace(
        mask_mod=fn, seq_lengths=(Q_LEN, KV_LEN)))
    return wa2.WanAnimate2Transformer3DModel.create_mask(None, origin_frames, origin_hw, "cpu")


def _masked_reference(mask_mod, seq_lengths, q, k, v, kr, vr, frames, hw, ref_frames, ref_hw, F, O):
    """The stock cached pass in fp64: the buffers as the stock processor packs them, attention under the dense
    mask that its mask function gives (every row and column), the generation rows gathered back."""
    b, _, h, d = q.shape
    qlen, klen = seq_lengths
    plen = qlen
    qp, kp, vp = (q.new_zeros(b, n, h, d) for n in (qlen, klen, klen))
    for dst, src in ((qp, q), (kp, k), (vp, v)):
        dst[:, :frames * O].view(b, frames, O, h, d)[:, :, :hw] = src.view(b, frames, hw, h, d)
    for dst, src in ((kp, kr), (vp, vr)):
        dst[:, plen:plen + ref_frames * O].view(b, ref_frames, O, h, d)[:, :, :ref_hw] = \
            src[:, :ref_frames * ref_hw].view(b, ref_frames, ref_hw, h, d)
    qi, ki = torch.arange(qlen, device=q.device)[:, None], torch.arange(klen, device=q.device)[None, :]
    allowed = mask_mod(0, 0, qi, ki)
    s = torch.einsum("bqhd,bkhd->bhqk", qp, kp) / math.sqrt(d)
    s = s.masked_fill(~allowed, float("-inf"))
    out = torch.einsum("bhqk,bkhd->bqhd", torch.softmax(s, dim=-1), vp)
    return out[:, :frames * O].view(b, frames, O, h, d)[:, :, :hw].reshape(b, frames * hw, h, d)


# (F, O, frames, hw, ref_frames, ref_hw): full segment; fewer tokens per frame; fewer reference frames than
# generation frames need (frame 2's reference slot all zeros); a short segment; one generation frame only.
MERGE_CASES = [(2, 16, 3, 16, 2, 16), (2, 20, 3, 16, 2, 12), (3, 20, 4, 16, 1, 16), (3, 12, 2, 12, 3, 12),
               (2, 8, 1, 8, 2, 8)]


@pytest.mark.parametrize("case", MERGE_CASES)
def test_in_context_attention_equals_the_stock_block_mask_fp64(case, monkeypatch):
    import importlib

    wa2 = importlib.import_module(_WA2)
    F, O, frames, hw, ref_frames, ref_hw = case
    mask = _stock_mask(wa2, monkeypatch, F, O)
    assert cached_mask_reason(mask, frames, hw, ref_frames, ref_hw, F, O) is None
    g = _g(11)
    b, h, d = 2, 2, 8
    q, k, v = (torch.randn(b, frames * hw, h, d, generator=g, dtype=torch.float64) for _ in range(3))
    kr, vr = (torch.randn(b, ref_frames * ref_hw + 3, h, d, generator=g, dtype=torch.float64) for _ in range(2))
    ref = _masked_reference(mask.mask_mod, mask.seq_lengths, q, k, v, kr, vr, frames, hw, ref_frames, ref_hw, F, O)
    got = in_context_attention(q, k, v, kr, vr, frames, hw, ref_frames, ref_hw, F, O, attend=_exact_attend)
    torch.testing.assert_close(got, ref, atol=1e-12, rtol=1e-12)


def test_in_context_attention_through_the_kernel_entry(monkeypatch):
    import importlib

    wa2 = importlib.import_module(_WA2)
    F, O, frames, hw, ref_frames, ref_hw = 3, 20, 4, 16, 2, 12
    mask = _stock_mask(wa2, monkeypatch, F, O)
    g = _g(13)
    q, k, v = (torch.randn(1, frames * hw, 2, 64, generator=g) for _ in range(3))
    kr, vr = (torch.randn(1, ref_frames * ref_hw, 2, 64, generator=g) for _ in range(2))
    ref = _masked_reference(mask.mask_mod, mask.seq_lengths, *(t.double() for t in (q, k, v, kr, vr)), frames, hw,
                            ref_frames, ref_hw, F, O)
    count = KernelEntryCount(monkeypatch)
    got = in_context_attention(q, k, v, kr, vr, frames, hw, ref_frames, ref_hw, F, O)
    assert count.n == 2 and got.dtype == torch.float32
    torch.testing.assert_close(got.double(), ref, atol=2e-6, rtol=2e-6)


def test_cached_mask_reason_refuses_other_masks(monkeypatch):
    import importlib

    wa2 = importlib.import_module(_WA2)
    mask = _stock_mask(wa2, monkeypatch, 2, 16)
    assert cached_mask_reason(mask, 3, 16, 2, 16, 2, 16) is None
    assert "not Wan-Animate-2's in-context block mask" in cached_mask_reason(
        types.SimpleNamespace(mask_mod=lambda b, h, q, k: q >= k), 3, 16, 2, 16, 2, 16)
    assert "not Wan-Animate-2's in-context block mask" in cached_mask_reason(None, 3, 16, 2, 16, 2, 16)
    assert "are not those of" in cached_mask_reason(mask, 3, 16, 2, 16, 3, 16)  # built for other buffers
    assert "does not fit" in cached_mask_reason(mask, 4, 16, 2, 16, 2, 16)      # more frames than the buffer


def test_wan_animate_2_foreign_block_mask_stays_on_flex(monkeypatch):
    """A block mask other than the model's own (here: the model's with every reference key dropped) runs the stock
    flex call, with the reason; the output equals stock under that mask."""
    from torch.nn.attention.flex_attention import create_block_mask

    model, run = _wan_animate_2(monkeypatch)

    def gen_only(b, h, q_idx, kv_idx):
        return kv_idx < 60  # (F + 1) x O generation slots of F = 2, O = 20

    foreign = create_block_mask(gen_only, B=None, H=None, Q_LEN=128, KV_LEN=256, device="cpu", _compile=False)
    model.block_masks[(2, 20)] = foreign
    monkeypatch.setattr(ops, "_warned", set())
    expected = _outputs(run)
    vidattn.apply(model)
    count = KernelEntryCount(monkeypatch)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        got = _outputs(run)
    assert any("Wan-Animate-2 cached pass: the cached pass's attention_mask is not" in str(w.message)
               for w in caught)
    assert count.n == 6  # extract 2 x (self + cross) + cached 2 x cross: the masked self-attention ran flex
    torch.testing.assert_close(got[0], expected[0], atol=1e-5, rtol=1e-5)
    vidattn.restore(model)


# ------------------------------------------------------------------------------------------------------ GPU
class _KernelCensus:
    """Every vidattn.attention call of a forward, asked vidattn.explain with the same arguments: None = the kernel
    ran it. Calls a processor sent to SDPA itself never reach vidattn.attention and are not counted."""

    def __init__(self, monkeypatch):
        self.kernel, self.fallback = 0, []
        real = ops.attention

        def spy(q, k, v, **kw):
            reason = ops.explain(q, k, v, **{n: a for n, a in kw.items() if n != "return_lse"})
            if reason is None:
                self.kernel += 1
            else:
                self.fallback.append(reason)
            return real(q, k, v, **kw)

        monkeypatch.setattr(ops, "attention", spy)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_gpu_family_runs_the_kernel(name, monkeypatch):
    """bf16 on the H200: every vidattn.attention call of the family runs the kernel itself (head dims 72 and 112
    included) and the output stays within bf16 attention error of stock."""
    from pipelines.measure import rel_l2

    monkeypatch.setitem(_ON, "device", "cuda")
    monkeypatch.setitem(_ON, "dtype", torch.bfloat16)
    model, run = _build(name, monkeypatch)
    model.to("cuda", torch.bfloat16)
    for keep in getattr(model, "_keep_in_fp32_modules", None) or ():
        for mod_name, mod in model.named_modules():
            if keep in mod_name.split("."):
                mod.float()
    expected = _outputs(run)
    vidattn.apply(model)
    census = _KernelCensus(monkeypatch)
    got = _outputs(run)
    assert census.kernel >= FAMILIES[name][2] and not census.fallback, (census.kernel, census.fallback)
    for a, b in zip(got, expected):
        assert rel_l2(a.float(), b.float()) < 2e-2
    vidattn.restore(model)


@pytest.mark.gpu
@pytest.mark.parametrize("case", MERGE_CASES + [(4, 390, 5, 390, 4, 390), (4, 390, 5, 300, 2, 280)])
def test_gpu_in_context_attention_on_the_kernel(case, monkeypatch):
    """The cached pass's merge with both attentions on the kernel in bf16 against the stock block mask in fp32
    (dense reference; the last cases: frames of 390 tokens, buffers not a multiple of 128)."""
    import importlib

    wa2 = importlib.import_module(_WA2)
    F, O, frames, hw, ref_frames, ref_hw = case
    mask = _stock_mask(wa2, monkeypatch, F, O)
    g = torch.Generator(device="cuda").manual_seed(17)
    h = 2
    q, k, v = (torch.randn(1, frames * hw, h, 128, generator=g, device="cuda", dtype=torch.bfloat16)
               for _ in range(3))
    kr, vr = (torch.randn(1, ref_frames * ref_hw, h, 128, generator=g, device="cuda", dtype=torch.bfloat16)
              for _ in range(2))
    census = _KernelCensus(monkeypatch)
    got = in_context_attention(q, k, v, kr, vr, frames, hw, ref_frames, ref_hw, F, O)
    # Frames 1..n have a reference part (frame 0 never does): a second, per-frame attention only when n > 0.
    calls = 2 if min(frames - 1, ref_frames, F) > 0 else 1
    assert census.kernel == calls and not census.fallback, (census.kernel, census.fallback)
    ref = _masked_reference(mask.mask_mod, mask.seq_lengths, *(t.float() for t in (q, k, v, kr, vr)), frames, hw,
                            ref_frames, ref_hw, F, O)
    err = (got.float() - ref).norm() / ref.norm()
    assert err < 1e-2, float(err)


# ------------------------------------------------------------------------------------------ registry and docs
def _resolve(key):
    import importlib

    module, _, name = key.rpartition(".")
    obj = importlib.import_module(module)
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def test_every_registered_route_names_a_real_diffusers_class():
    """A typo in a route's "module.QualName" would leave that family silently stock: every key must resolve."""
    from vidattn.diffusers.apply import MODULE_ROUTES, ROUTES, SCOPED_ROUTES

    keys = set(ROUTES) | set(MODULE_ROUTES) | {k for pair in SCOPED_ROUTES for k in pair}
    missing = []
    for key in sorted(keys):
        try:
            assert isinstance(_resolve(key), type)
        except (ImportError, AttributeError, AssertionError):
            missing.append(key)
    assert not missing, missing


def test_support_table_counts_match_its_rows():
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "docs" / "support.md").read_text()
    rows = [line.split("|") for line in text.splitlines() if re.match(r"\| \d+ \| `", line)]
    assert len(rows) == 30
    status = [r[3].strip() for r in rows]
    m = re.search(r"Counts: (\d+) on the kernel, (\d+) partly .*?, (\d+) outside", text, flags=re.S)
    assert m, "the counts line is missing"
    assert tuple(map(int, m.groups())) == (status.count("kernel"), status.count("partly"), status.count("outside"))
    for r in rows:  # a routed class has a tiny-model test
        if r[4].strip() != "stock":
            assert r[6].strip() != "—", r[2]


@pytest.mark.gpu
def test_gpu_cosmos3_both_pathways_on_the_kernel(monkeypatch):
    """bf16: the causal grouped-query understanding pathway runs the kernel's causal mask, not SDPA."""
    from pipelines.measure import rel_l2

    monkeypatch.setitem(_ON, "device", "cuda")
    monkeypatch.setitem(_ON, "dtype", torch.bfloat16)
    expected, got, seen, census = _cosmos3_causal_calls(monkeypatch, on_gpu=True)
    assert [c for c, _, _ in seen] == [True, False] * 2
    assert census.kernel == 4 and not census.fallback, census.fallback
    assert rel_l2(got.float(), expected.float()) < 2e-2


def test_family_registry_routes_match_the_support_table():
    """`generate_video.py --list` prints each family's route from pipelines/registry.py; it must say what
    docs/support.md says of the family's transformer class (kernel, partly, outside)."""
    import re
    from pathlib import Path

    from pipelines import registry

    text = (Path(__file__).resolve().parent.parent / "docs" / "support.md").read_text()
    status = {r[2].strip().strip("`"): r[3].strip() for r in
              (line.split("|") for line in text.splitlines() if re.match(r"\| \d+ \| `", line))}
    checked = 0
    for name in registry.names():
        e = registry.entry(name)
        if e.cls_name in status:
            want = status[e.cls_name]
            assert e.route == want, f"{name} ({e.cls_name}): registry {e.route!r}, support.md {want!r}"
            checked += 1
    assert checked >= 25, checked


def _vidattn_backends(model) -> set:
    return {str(getattr(mod.processor, "_attention_backend", None)) for _, mod in model.named_modules()
            if hasattr(mod, "processor") and not isinstance(mod.processor, torch.nn.Module)}


def test_restore_after_applying_a_transformer_then_its_pipeline():
    """apply(pipe.transformer), then apply(pipe), then restore(pipe): the backend-routed processors get their own
    (stock) backend back, not the vidattn backend the second apply found on them."""
    from pipelines import registry

    b = registry.build("kandinsky5", "tiny", dtype=torch.float32)
    pipe = types.SimpleNamespace(transformer=b.model, components={"transformer": b.model})
    vidattn.apply(pipe.transformer)
    assert any("VIDATTN" in x or "vidattn" in x for x in _vidattn_backends(b.model))
    h = vidattn.apply(pipe)
    assert h.counts()["backend"] > 0
    assert vidattn.restore(pipe) > 0
    assert _vidattn_backends(b.model) == {"None"}
    assert vidattn.restore(pipe.transformer) == 0


def test_an_applied_model_pickles_and_a_deep_copy_restores_alone():
    """apply keeps its handle outside the model: the model pickles (torch.save of a whole model), and restoring a deep
    copy changes the copy's modules only, the original keeps vidattn's (module swaps, processors and backend routes)."""
    import copy
    import io
    import pickle

    from vidattn.diffusers.sdpa_common import VidattnModule
    from pipelines import registry

    m, _ = _sana_wm()
    vidattn.apply(m)

    def swapped(model):
        return sum(isinstance(x, VidattnModule) for x in model.modules())

    n = swapped(m)
    assert n > 0
    torch.save(m, io.BytesIO())
    back = pickle.loads(pickle.dumps(m))
    assert swapped(back) == n
    c = copy.deepcopy(m)
    assert vidattn.restore(c) > 0 and swapped(c) == 0
    assert swapped(m) == n
    assert vidattn.restore(m) > 0 and swapped(m) == 0

    b = registry.build("kandinsky5", "tiny", dtype=torch.float32)
    vidattn.apply(b.model)
    c = copy.deepcopy(b.model)
    assert vidattn.restore(c) > 0 and _vidattn_backends(c) == {"None"}
    assert _vidattn_backends(b.model) != {"None"}
    pickle.dumps(b.model)
    assert vidattn.restore(b.model) > 0 and _vidattn_backends(b.model) == {"None"}
