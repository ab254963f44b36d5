"""Every family `vidattn.apply` routes beyond the original nine (pipelines/zoo.py builds a tiny model of each):
which modules it reaches (kernel processor or the vidattn backend), that the kernel entry really runs (counted:
a family that silently stays stock fails), output equal to stock, restore; and the handle's own behaviour
(weak references, hand-set processors, user-chosen backends, precision, repr)."""
import gc
import warnings

import pytest
import torch

import vidattn
from vidattn import ops

diffusers = pytest.importorskip("diffusers")
from pipelines.zoo import ZOO, build_tiny  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

# family -> (kernel processors, backend-routed modules) apply must report for the tiny model
EXPECTED = {
    "ltx2": (12, 0), "helios": (0, 4), "anyflow": (0, 4), "motif_video": (0, 2), "easyanimate": (2, 0),
    "cosmos": (4, 0), "kandinsky5": (0, 5), "wan_vace": (6, 0), "chronoedit": (4, 0), "minimax_h3": (0, 3),
    "cosmos3": (0, 2), "wan_animate": (4, 1),
}


class KernelEntryCount:
    """Counts calls of vidattn.ops' kernel entry (`_attention_impl`: the kernel, or its SDPA fallback on a CPU)."""

    def __init__(self, monkeypatch):
        self.n = 0
        real = ops._attention_impl

        def counted(*args, **kwargs):
            self.n += 1
            return real(*args, **kwargs)

        monkeypatch.setattr(ops, "_attention_impl", counted)


def _first(out):
    out = out[0]
    return out[0] if isinstance(out, (list, tuple)) else out


def _forward(model, inputs):
    with torch.no_grad():
        return _first(model(**inputs, return_dict=False))


def _state(model):
    return [(n, m.processor, vars(m.processor).get("_attention_backend", "absent"))
            for n, m in model.named_modules() if hasattr(m, "processor") and hasattr(m, "set_processor")]


def test_zoo_has_an_expectation_per_family():
    assert set(EXPECTED) == set(ZOO)


@pytest.mark.parametrize("name", sorted(ZOO))
def test_family_reaches_the_kernel_entry_and_matches_stock(name, monkeypatch):
    model, inputs = build_tiny(name)
    before = _state(model)
    expected = _forward(model, inputs)

    count = KernelEntryCount(monkeypatch)
    _forward(model, inputs)
    assert count.n == 0, "stock attention must not reach vidattn"

    handle = vidattn.apply(model)
    kernel, backend = EXPECTED[name]
    assert (len(handle.replaced), len(handle.backend)) == (kernel, backend), str(handle)
    assert handle.counts()["stock"] == 0, str(handle)
    out = _forward(model, inputs)
    assert count.n >= kernel + backend, f"{name}: {count.n} kernel-entry calls for {kernel + backend} modules"
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)

    assert vidattn.restore(model) == kernel + backend
    after = _state(model)
    assert [(n, b) for n, _, b in after] == [(n, b) for n, _, b in before]
    assert all(a is b for (_, a, _), (_, b, _) in zip(after, before))
    count.n = 0
    torch.testing.assert_close(_forward(model, inputs), expected, atol=0, rtol=0)
    assert count.n == 0


def test_handle_print_names_kernel_backend_and_why():
    model, _ = build_tiny("ltx2")
    text = str(vidattn.apply(model))
    assert "12 kernel processors" in text and "kernel   12 x LTX2AudioVideoAttnProcessor" in text
    assert "IC-LoRA's dense bias -> dispatch" in text
    model, _ = build_tiny("helios")
    text = str(vidattn.apply(model))
    assert "backend   4 x HeliosAttnProcessor: stock processor on the vidattn backend" in text


def test_handle_does_not_keep_a_replaced_model_alive():
    class Pipe:
        def __init__(self, transformer):
            self.transformer = transformer

        @property
        def components(self):
            return {"transformer": self.transformer}

    pipe = Pipe(build_tiny("chronoedit")[0])
    handle = vidattn.apply(pipe)
    old = torch.nn.Module  # keep the type; the module itself goes
    ref = __import__("weakref").ref(pipe.transformer)
    pipe.transformer = build_tiny("chronoedit", seed=1)[0]
    gc.collect()
    assert ref() is None, "the apply handle kept the replaced transformer alive"
    assert handle.restore() == 0  # its modules are gone: skipped
    assert old is torch.nn.Module


def test_restore_of_processors_set_by_hand_uses_the_stock_class():
    from diffusers.models.transformers.transformer_cosmos import CosmosAttnProcessor2_0

    model, inputs = build_tiny("cosmos")
    expected = _forward(model, inputs)
    for m in model.modules():  # Cosmos has no set_attn_processor: per module, as a user would
        if hasattr(m, "set_processor"):
            m.set_processor(vidattn.CosmosAttnProcessor())
    assert vidattn.restore(model) == 4
    assert all(type(m.processor) is CosmosAttnProcessor2_0 for m in model.modules() if hasattr(m, "set_processor"))
    torch.testing.assert_close(_forward(model, inputs), expected, atol=0, rtol=0)


def test_restore_of_hand_set_hunyuan_video_processors():
    from diffusers.models.transformers.transformer_hunyuan_video import HunyuanVideoAttnProcessor2_0
    from pipelines.families import build

    built = build("hunyuan_video", "tiny", dtype=torch.float32)
    blocks = [m for n, m in built.model.named_modules() if hasattr(m, "set_processor") and "refiner" not in n]
    for m in blocks:
        m.set_processor(vidattn.HunyuanVideoAttnProcessor())
    assert vidattn.restore(built.model) == len(blocks)
    assert all(type(m.processor) is HunyuanVideoAttnProcessor2_0 for m in blocks)


def test_a_backend_the_user_chose_is_left_alone():
    # (Kandinsky 5's route takes "flex" over, which its NABLA configs need: tests/test_processors_kandinsky_nabla.py.)
    model, inputs = build_tiny("kandinsky5")
    for m in model.modules():
        if hasattr(m, "set_processor"):
            m.processor._attention_backend = "_native_math"
    with pytest.raises(ValueError) as info:
        vidattn.apply(model)
    assert "'_native_math' backend chosen for it" in str(info.value) and "supported:" in str(info.value)


def test_unknown_and_mixed_models_are_named():
    class Other:
        def __call__(self, attn, hidden_states, *a, **k):
            return hidden_states

    model, inputs = build_tiny("helios")
    model.blocks[0].attn1.set_processor(Other())
    handle = vidattn.apply(model)
    text = str(handle)
    assert "stock     1 x Other: no vidattn route for" in text and "backend   3 x HeliosAttnProcessor" in text


def test_ltx2_dense_bias_goes_to_dispatch_with_the_reason(monkeypatch):
    model, _ = build_tiny("ltx2")
    attn = model.transformer_blocks[0].attn1
    attn.set_processor(vidattn.LTX2AudioVideoAttnProcessor())
    x = torch.randn(2, 16, attn.to_q.in_features)
    count = KernelEntryCount(monkeypatch)
    bias = torch.rand(2, 16, 16) * -3.0  # IC-LoRA-style fractional bias: not key padding
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with torch.no_grad():
            out = attn(x, attention_mask=bias)
    assert count.n == 0
    assert any("a bias, not key padding" in str(w.message) for w in caught)
    from diffusers.models.transformers.transformer_ltx2 import LTX2AudioVideoAttnProcessor as Stock
    attn.set_processor(Stock())
    with torch.no_grad():
        torch.testing.assert_close(out, attn(x, attention_mask=bias), atol=1e-6, rtol=1e-6)


def test_ltx2_all_perturbed_skips_attention(monkeypatch):
    from diffusers.models.transformers.transformer_ltx2 import LTX2PerturbedAttnProcessor as Stock

    model, _ = build_tiny("ltx2")
    attn = model.transformer_blocks[0].attn1
    x = torch.randn(2, 16, attn.to_q.in_features)
    mask = torch.ones(2, 16, 1)
    mask[0] = 0.0
    attn.set_processor(Stock())
    with torch.no_grad():
        ref = attn(x, perturbation_mask=mask), attn(x, perturbation_mask=torch.zeros(2, 16, 1))
    attn.set_processor(vidattn.LTX2PerturbedAttnProcessor())
    count = KernelEntryCount(monkeypatch)
    with torch.no_grad():
        got = attn(x, perturbation_mask=mask), attn(x, perturbation_mask=torch.zeros(2, 16, 1))
    assert count.n == 1  # the all-perturbed call never attends
    for a, b in zip(got, ref):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-6)


@pytest.mark.parametrize("gated", [False, True])
@pytest.mark.parametrize("kind", ["audio_video", "perturbed"])
def test_ltx2_split_rope_key_tables_and_gates_match_stock(kind, gated, monkeypatch):
    """The LTX-2.X attention forms the tiny zoo model lacks (its RoPE is interleaved, it has no gates): split RoPE
    with separate query and key tables (the a2v / v2a attentions), per-head output gates, and a padded text mask
    (cross-attention) or, in the perturbed processor, a partial perturbation mask (self-attention: the perturbed
    rows take the value projection); each processor against its stock one."""
    import diffusers.models.transformers.transformer_ltx2 as ltx2

    torch.manual_seed(0)
    attn = ltx2.LTX2Attention(query_dim=64, heads=2, kv_heads=2, dim_head=32, cross_attention_dim=48,
                              rope_type="split", apply_gated_attention=gated).eval()
    g = torch.Generator().manual_seed(3)
    x = torch.randn(2, 10, 64, generator=g)
    n_kv = 10 if kind == "perturbed" else 7
    q_rope = tuple(torch.randn(2, 2, 10, 16, generator=g) for _ in range(2))  # (cos, sin): (B, H, T, D / 2)
    k_rope = tuple(torch.randn(2, 2, n_kv, 16, generator=g) for _ in range(2))
    kw = dict(query_rotary_emb=q_rope, key_rotary_emb=k_rope)
    if kind == "perturbed":
        stock, ours = ltx2.LTX2PerturbedAttnProcessor(), vidattn.LTX2PerturbedAttnProcessor()
        attn.to_k, attn.to_v = torch.nn.Linear(64, 64), torch.nn.Linear(64, 64)  # self-attention
        kw["perturbation_mask"] = torch.tensor([1.0, 0.0]).view(2, 1, 1)  # sample 1 perturbed: value only
    else:
        stock, ours = ltx2.LTX2AudioVideoAttnProcessor(), vidattn.LTX2AudioVideoAttnProcessor()
        keep = torch.ones(2, n_kv)
        keep[1, 4:] = 0
        kw.update(encoder_hidden_states=torch.randn(2, n_kv, 48, generator=g),
                  attention_mask=((1 - keep) * -10000.0).unsqueeze(1))
    with torch.no_grad():
        attn.set_processor(stock)
        ref = attn(x, **kw)
        attn.set_processor(ours)
        count = KernelEntryCount(monkeypatch)
        got = attn(x, **kw)
    assert count.n == 1
    torch.testing.assert_close(got, ref, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("case", ["text_in_the_stream", "no_text"])
def test_easyanimate_forms_without_added_text_projections_match_stock(case, monkeypatch):
    """EasyAnimate's attention forms the tiny zoo model (all MMDiT blocks, text given) does not reach: a block without
    added projections (the text tokens joined to the stream before the projections, RoPE on the video part of q and
    k), and an MMDiT block called without text (no split, the output projection alone)."""
    from diffusers.models.attention_processor import Attention
    from diffusers.models.transformers.transformer_easyanimate import EasyAnimateAttnProcessor2_0

    mmdit = case == "no_text"
    torch.manual_seed(0)
    attn = Attention(query_dim=64, dim_head=32, heads=2, qk_norm="layer_norm", eps=1e-6, bias=True,
                     added_proj_bias=True, added_kv_proj_dim=64 if mmdit else None,
                     context_pre_only=False if mmdit else None, processor=EasyAnimateAttnProcessor2_0()).eval()
    assert (attn.add_q_proj is None) == (not mmdit)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(2, 12, 64, generator=g)
    text = None if mmdit else torch.randn(2, 5, 64, generator=g)
    rope = None if mmdit else (torch.randn(12, 32, generator=g), torch.randn(12, 32, generator=g))
    with torch.no_grad():
        ref = EasyAnimateAttnProcessor2_0()(attn, x, text, image_rotary_emb=rope)
        count = KernelEntryCount(monkeypatch)
        got = vidattn.EasyAnimateAttnProcessor()(attn, x, text, image_rotary_emb=rope)
    assert count.n == 1 and (got[1] is None) == (ref[1] is None) == mmdit
    for a, b in zip(got, ref):  # video, then text (the joined stream's text rows) where there is text
        if b is not None:
            torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5)


def test_repr_and_precision(monkeypatch):
    from vidattn.diffusers import sdpa_common

    p = vidattn.EasyAnimateAttnProcessor(precision="exact")
    assert repr(p) == "vidattn.EasyAnimateAttnProcessor(precision='exact')"
    assert repr(vidattn.WanAttnProcessor()) == "vidattn.WanAttnProcessor(precision=None)"
    seen = []
    monkeypatch.setattr(ops, "attention", lambda q, k, v, **kw: seen.append(kw) or q)
    sdpa_common.kernel(torch.zeros(1), None, None, "8bit", layout="bshd")
    sdpa_common.kernel(torch.zeros(1), None, None, None, layout="bshd")
    assert seen == [{"layout": "bshd", "precision": "8bit"}, {"layout": "bshd"}]
    # a wrapper put on ops.attention before vidattn.diffusers was imported (a logging shim) passes precision through
    monkeypatch.setattr(ops, "attention", lambda *a, **kw: seen.append(kw) or a[0])
    sdpa_common.kernel(torch.zeros(1), None, None, "exact")
    assert seen[-1] == {"precision": "exact"}


def _far_model():
    cfg = dict(patch_size=(1, 2, 2), compressed_patch_size=(1, 4, 4), full_chunk_limit=3, num_attention_heads=2,
               attention_head_dim=64, in_channels=4, out_channels=4, text_dim=16, freq_dim=32, ffn_dim=32,
               num_layers=2, rope_max_seq_len=32)
    torch.manual_seed(0)
    return diffusers.AnyFlowFARTransformer3DModel(**cfg).eval().requires_grad_(False)


def test_anyflow_far_dense_cached_pass_runs_the_kernel_and_matches_stock(monkeypatch):
    """The denoising pass with a KV cache read (no block mask): dense over [compressed, full cache, current], with
    the stock processor's zero padding keys kept; the kernel entry runs it."""
    from diffusers.models.transformers.transformer_anyflow_far import AnyFlowCausalAttnProcessor as Stock

    attn = _far_model().blocks[0].attn1
    g = torch.Generator().manual_seed(3)
    x = torch.randn(1, 40, 128, generator=g)
    cache = {"compressed_cache": torch.randn(2, 1, 2, 16, 64, generator=g),
             "full_cache": torch.randn(2, 1, 2, 24, 64, generator=g)}
    flag = {"is_cache_step": False, "num_cached_compressed_tokens": 10, "num_cached_full_tokens": 20}
    outs = []
    for proc in (Stock(), vidattn.AnyFlowCausalAttnProcessor()):
        attn.set_processor(proc)
        count = KernelEntryCount(monkeypatch)
        with torch.no_grad():
            outs.append((attn(x, kv_cache=cache, kv_cache_flag=flag), attn(x), count.n))
    (ref_cached, ref_plain, n_stock), (got_cached, got_plain, n_vidattn) = outs
    assert n_stock == 0 and n_vidattn == 2
    torch.testing.assert_close(got_cached, ref_cached, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(got_plain, ref_plain, atol=1e-5, rtol=1e-5)


def test_anyflow_far_block_masked_pass_stays_on_flex(monkeypatch):
    """The training / cache-encode rollout (a block-causal BlockMask): apply routes the modules, the masked
    self-attention stays on flex (no kernel-entry call from it) and the model's output equals stock."""
    model = _far_model()
    g = torch.Generator().manual_seed(4)
    inputs = dict(hidden_states=torch.randn(1, 4, 4, 16, 16, generator=g), timestep=torch.full((1, 4), 500.0),
                  r_timestep=torch.full((1, 4), 250.0), encoder_hidden_states=torch.randn(1, 12, 16, generator=g),
                  chunk_partition=[2, 2])
    expected = _forward(model, inputs)
    handle = vidattn.apply(model)
    assert (len(handle.replaced), len(handle.backend)) == (2, 2), str(handle)
    count = KernelEntryCount(monkeypatch)
    torch.testing.assert_close(_forward(model, inputs), expected, atol=1e-5, rtol=1e-5)
    assert count.n == 2  # the two cross-attentions (backend); the block-masked self-attentions ran flex


# ------------------------------------------------------------------------------------------------ GPU
def _to_device(obj, dtype):
    """Inputs on CUDA: floating tensors of 2+ dims in `dtype` (activations, embeddings), the rest as they are
    (timesteps, indices, position ids)."""
    if isinstance(obj, torch.Tensor):
        cast = obj.is_floating_point() and obj.dim() >= 2
        return obj.to("cuda", dtype) if cast else obj.to("cuda")
    if isinstance(obj, (list, tuple)):
        return type(obj)(_to_device(o, dtype) for o in obj)
    if isinstance(obj, dict):
        return {k: _to_device(v, dtype) for k, v in obj.items()}
    return obj


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(ZOO))
def test_gpu_family_runs_the_kernel(name):
    """bf16 on the H200: apply reaches the kernel itself (the census asks vidattn.explain per call; the backend's
    calls count too) and the output stays within bf16 attention error of stock SDPA."""
    from pipelines.census import AttentionCensus
    from pipelines.measure import rel_l2

    model, inputs = build_tiny(name)
    model = model.to("cuda", torch.bfloat16)
    # What from_pretrained(torch_dtype=bf16) does: modules the model names stay fp32 (Kandinsky 5's embeddings and
    # modulations take fp32 inputs).
    for keep in getattr(model, "_keep_in_fp32_modules", None) or ():
        for mod_name, mod in model.named_modules():
            if keep in mod_name.split("."):
                mod.float()
    inputs = _to_device(inputs, torch.bfloat16)
    expected = _forward(model, inputs)
    vidattn.apply(model)
    with AttentionCensus() as census:
        out = _forward(model, inputs)
    s = census.summary()
    assert s["kernel"] > 0, s
    assert rel_l2(out.float(), expected.float()) < 2e-2
    vidattn.restore(model)


def test_backend_routes_stay_stock_with_the_reason_when_the_backend_is_missing(monkeypatch):
    import importlib

    apply_mod = importlib.import_module("vidattn.diffusers.apply")  # the module (the package exports the function)

    monkeypatch.setattr(apply_mod, "backend_member",
                        lambda: (None, "the vidattn diffusers backend is not available (test)"))
    model, _ = build_tiny("helios")
    with pytest.raises(ValueError, match="backend is not available"):
        vidattn.apply(model)
    model, _ = build_tiny("wan_animate")  # kernel processors still apply; the face adapter is listed as stock
    handle = vidattn.apply(model)
    assert len(handle.replaced) == 4 and handle.backend == []
    assert "stock     1 x WanAnimateFaceBlockAttnProcessor: the vidattn diffusers backend is not available" \
        in str(handle)


def test_sana_wm_refiner_text_mask_is_tested_once_per_forward(monkeypatch):
    """The SANA-WM refiner's LTX-2-style attentions run vidattn's LTX-2 processors, not the backend: the text padding
    bias the model hands every layer (each layer prepares a new copy) is tested for key padding once per forward,
    not once per layer (each test is a host sync: ~11 ms of a 215 ms forward on the H200 through the backend);
    output equal to stock."""
    from pipelines import registry
    from vidattn.diffusers import _base, masks, sdpa_common

    built = registry.build("sana_wm_refiner", "tiny", device="cpu", dtype=torch.float32)
    expected = built.forward()
    handle = vidattn.apply(built.model)
    try:
        procs = [m.processor for m in built.model.modules() if hasattr(m, "processor")]
        assert any(type(p).__name__ == "SanaWMLTX2AudioVideoAttnProcessor" and type(p).__module__.startswith(
            "vidattn.") for p in procs), str(handle)
        monkeypatch.setattr(sdpa_common, "_MEMO", masks.LastMaskMemo())  # nothing remembered from the fill
        tests, masked = [], []
        real_convert, real_attend = sdpa_common._convert, _base.ProcessorBase._attend_sdpa_mask
        monkeypatch.setattr(sdpa_common, "_convert", lambda *a: tests.append(1) or real_convert(*a))

        def attend(self, q, k, v, mask, *rest, **kw):
            if mask is not None:
                masked.append(1)
            return real_attend(self, q, k, v, mask, *rest, **kw)

        monkeypatch.setattr(_base.ProcessorBase, "_attend_sdpa_mask", attend)
        out = built.forward()
    finally:
        vidattn.restore(built.model)
    assert len(masked) >= 2 and len(tests) == 1, (len(masked), len(tests))
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
