"""The "vidattn" diffusers attention backend (vidattn/diffusers/backend.py) on the CPU.

On the CPU `vidattn.attention` runs PyTorch SDPA, the same numbers as diffusers' native backend, so an output
comparison alone cannot tell whether a call reached vidattn.attention, or with which keys. The model tests
therefore replace `vidattn.attention` with `FakeKernel`: it records every call and computes attention its own way
(each batch row's kept keys sliced out by `kv_lens`, no mask), so a call routed to the wrong path, a mask dropped,
or wrong key lengths all change the output against the stock native backend.
"""
import importlib
import importlib.util
import math
import sys
import types
import warnings

import pytest
import torch
import torch.nn.functional as F

diffusers = pytest.importorskip("diffusers")

import vidattn  # noqa: E402
from vidattn import ops  # noqa: E402
from vidattn.diffusers import backend as _backend_at_import  # noqa: E402,F401  (registers the backend)
from diffusers.models import attention_dispatch as ad  # noqa: E402

from conftest import tiny_wan, tiny_wan_inputs  # noqa: E402
from _support import attention_fp64  # noqa: E402


def backend():
    """The backend module as it is now (a test may reload it)."""
    return importlib.import_module("vidattn.diffusers.backend")


@pytest.fixture(autouse=True)
def clean_state():
    """Every test starts with the backend registered and diffusers' global backend as it was, and leaves it so."""
    b = backend()
    b.register_backend()
    active = ad._AttentionBackendRegistry._active_backend
    b.reset_route_counts()
    b._warned.clear()
    yield
    backend().register_backend()
    ad._AttentionBackendRegistry.set_active_backend(active)


class FakeKernel:
    """Stands in for `vidattn.attention`: records each call and computes it independently of SDPA's masking."""

    def __init__(self, monkeypatch):
        self.calls = []
        monkeypatch.setattr(ops, "attention", self)

    def __call__(self, q, k, v, *, layout="bshd", scale=None, kv_lens=None, return_lse=False, **kw):
        assert layout == "bshd"
        self.calls.append(dict(q=tuple(q.shape), k=tuple(k.shape), kv_lens=None if kv_lens is None else
                               kv_lens.tolist(), scale=scale, return_lse=return_lse))
        causal = kw.get("causal", False)
        if causal:  # recorded only when asked for, so the non-causal calls compare as they always did
            self.calls[-1]["causal"] = causal
        # float64, grouped-query K/V as the kernel reads them (query head i: K/V head i // group)
        out, lse = attention_fp64(q, k, v, scale, kv_lens, causal=causal)
        out = out.to(q.dtype)
        return (out, lse.float()) if return_lse else out


def native(q, k, v, **kw):
    return ad._AttentionBackendRegistry._backends[ad.AttentionBackendName.NATIVE](q, k, v, **kw)


def qkv(b=2, sq=12, skv=10, h=4, d=16, hkv=None, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, sq, h, d, generator=g, dtype=dtype), torch.randn(b, skv, hkv or h, d, generator=g,
            dtype=dtype), torch.randn(b, skv, hkv or h, d, generator=g, dtype=dtype))


# ----------------------------------------------------------------------------------------------------------
# registration
# ----------------------------------------------------------------------------------------------------------

def test_registered_member_and_registry():
    member = backend().register_backend()
    names, registry = ad.AttentionBackendName, ad._AttentionBackendRegistry
    assert names("vidattn") is member and names.VIDATTN is member and names["VIDATTN"] is member
    assert member.value == "vidattn" == vidattn.diffusers.BACKEND_NAME and isinstance(member, names)
    assert "vidattn" in {m.value for m in names.__members__.values()} and list(names)[-1] is member
    assert registry._backends[member] is backend().vidattn_attention
    assert registry._is_context_parallel_available(member)
    assert registry._supported_arg_names[member] == {"query", "key", "value", "attn_mask", "dropout_p", "is_causal",
                                                     "scale", "enable_gqa", "return_lse", "_parallel_config"}
    assert vidattn.register_backend is backend().register_backend  # the lazy export


def test_idempotent_and_survives_reloads():
    member = backend().register_backend()
    n_members = len(ad.AttentionBackendName)
    assert backend().register_backend() is member
    reloaded = importlib.reload(backend())
    assert reloaded.register_backend() is member
    # The reloaded module's function is the one registered (a reload takes effect).
    assert ad._AttentionBackendRegistry._backends[member] is reloaded.vidattn_attention
    importlib.reload(sys.modules["vidattn.diffusers"])
    importlib.reload(vidattn)
    import vidattn.diffusers as integration

    assert integration.register_backend() is member and vidattn.register_backend() is member
    assert len(ad.AttentionBackendName) == n_members


def test_second_copy_of_the_module_shares_the_member():
    """A second import of the module file under another name (a vendored copy, an import by path) finds the member
    by value instead of adding another."""
    member = backend().register_backend()
    spec = importlib.util.spec_from_file_location("vidattn.diffusers._backend_copy", backend().__file__)
    copy = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = copy
    try:
        spec.loader.exec_module(copy)
        assert copy.register_backend() is member
        assert ad._AttentionBackendRegistry._backends[member] is copy.vidattn_attention
    finally:
        del sys.modules[spec.name]
        backend().register_backend()


def test_diffusers_without_registry_gets_a_clear_error(monkeypatch):
    fake_diffusers = types.ModuleType("diffusers")
    fake_diffusers.__version__ = "0.30.0"
    fake_dispatch = types.ModuleType("diffusers.models.attention_dispatch")
    monkeypatch.setitem(sys.modules, "diffusers", fake_diffusers)
    monkeypatch.setitem(sys.modules, "diffusers.models.attention_dispatch", fake_dispatch)
    with pytest.raises(RuntimeError, match=r"diffusers 0\.30\.0 lacks AttentionBackendName, _AttentionBackendRegistry"):
        backend().register_backend()
    fake_dispatch.AttentionBackendName = ad.AttentionBackendName
    fake_dispatch._AttentionBackendRegistry = type("Registry", (), {"_backends": {}})
    with pytest.raises(RuntimeError, match=r"lacks _AttentionBackendRegistry\.register"):
        backend().register_backend()


def test_no_diffusers_gets_a_clear_error(monkeypatch):
    b = backend()
    monkeypatch.setitem(sys.modules, "diffusers", None)
    monkeypatch.setitem(sys.modules, "diffusers.models.attention_dispatch", None)
    with pytest.raises(RuntimeError, match=r"needs diffusers >= 0\.42 .*\(no diffusers\)"):
        b.register_backend()


def test_environment_variable_gets_a_helpful_error(monkeypatch):
    b = backend()
    monkeypatch.setenv("DIFFUSERS_ATTN_BACKEND", "vidattn")

    def failing_import(name, *a):
        raise ValueError("'vidattn' is not a valid AttentionBackendName")

    monkeypatch.setattr(importlib, "import_module", failing_import)
    with pytest.raises(RuntimeError, match=r"Unset the variable.*set_attention_backend\('vidattn'\)"):
        b.register_backend()


def test_default_and_unregister_restore_the_global_backend():
    b = backend()
    registry = ad._AttentionBackendRegistry
    registry.set_active_backend(ad.AttentionBackendName.NATIVE)
    member = b.register_backend(default=True)
    assert registry._active_backend is member
    model = tiny_wan()
    model.set_attention_backend("vidattn")
    b.unregister_backend(model)
    assert registry._active_backend == "native"
    assert member not in registry._backends and "vidattn" not in registry._supports_context_parallel
    assert all(p._attention_backend is None for p in model.attn_processors.values())
    with pytest.raises(ValueError, match="not registered"):
        with ad.attention_backend("vidattn"):
            pass
    assert b.register_backend() is member  # the enum member survives unregistering


# ----------------------------------------------------------------------------------------------------------
# routing of single calls
# ----------------------------------------------------------------------------------------------------------

def call(**kw):
    return backend().vidattn_attention(**kw)


def test_plain_call_goes_to_vidattn_and_scale_passes(monkeypatch):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv()
    out = call(query=q, key=k, value=v, scale=0.3)
    torch.testing.assert_close(out, native(q, k, v, scale=0.3), atol=1e-5, rtol=1e-5)
    assert fake.calls == [dict(q=(2, 12, 4, 16), k=(2, 10, 4, 16), kv_lens=None, scale=0.3, return_lse=False)]
    assert backend().route_counts() == {"vidattn": 1}


def _padding(kind, lens, b=2, h=4, skv=10):
    keep = torch.arange(skv)[None, :] < torch.tensor(lens)[:, None]
    bias = torch.zeros(b, skv).masked_fill(~keep, -10000.0)
    return {
        "bool (B, Skv)": keep,
        "bool (B, 1, 1, Skv)": keep[:, None, None, :],
        "bool (B, H, 1, Skv)": keep[:, None, None, :].expand(b, h, 1, skv),
        "bool (B, H, Sq, Skv) same rows": keep[:, None, None, :].expand(b, h, 12, skv),
        "additive -10000 (B, Skv)": bias,
        "additive -10000 (B, H, 1, Skv)": bias[:, None, None, :].expand(b, h, 1, skv).contiguous(),
        "additive -inf (B, 1, 1, Skv)": torch.zeros(b, 1, 1, skv).masked_fill(~keep[:, None, None, :], float("-inf")),
        "additive bf16 (B, 1, 1, Skv)": bias.to(torch.bfloat16)[:, None, None, :],
    }[kind]


@pytest.mark.parametrize("kind", ["bool (B, Skv)", "bool (B, 1, 1, Skv)", "bool (B, H, 1, Skv)",
                                  "bool (B, H, Sq, Skv) same rows", "additive -10000 (B, Skv)",
                                  "additive -10000 (B, H, 1, Skv)", "additive -inf (B, 1, 1, Skv)",
                                  "additive bf16 (B, 1, 1, Skv)"])
def test_key_padding_masks_become_kv_lens(monkeypatch, kind):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv()
    mask = _padding(kind, [7, 10])
    out = call(query=q, key=k, value=v, attn_mask=mask)
    ref_mask = mask.float() if mask.dtype == torch.bfloat16 else mask
    torch.testing.assert_close(out, native(q, k, v, attn_mask=ref_mask), atol=1e-5, rtol=1e-5)
    assert [c["kv_lens"] for c in fake.calls] == [[7, 10]]
    assert backend().route_counts() == {"vidattn": 1}


def test_batch_one_mask_broadcasts(monkeypatch):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv()
    keep = (torch.arange(10) < 6)[None, :]  # (1, Skv): SDPA broadcasts it to every batch row and query
    out = call(query=q, key=k, value=v, attn_mask=keep)
    torch.testing.assert_close(out, native(q, k, v, attn_mask=keep), atol=1e-5, rtol=1e-5)
    assert [c["kv_lens"] for c in fake.calls] == [[6, 6]]


def _not_padding(kind):
    g = torch.Generator().manual_seed(3)
    keep = torch.ones(2, 10, dtype=torch.bool)
    keep[0, 3] = False
    per_query = torch.ones(2, 1, 12, 10, dtype=torch.bool).tril(diagonal=0)
    per_query[..., 0] = True
    per_head = torch.ones(2, 4, 1, 10, dtype=torch.bool)
    per_head[:, 1, :, 8:] = False
    return {
        "dense bias": (torch.randn(2, 1, 12, 10, generator=g), "values other than 0"),
        "hole in the keys": (keep, "not a non-empty prefix"),
        "per-query (block-causal)": (per_query, "differs between heads or query positions"),
        "per-head": (per_head, "differs between heads or query positions"),
        "all keys dropped": (torch.zeros(2, 10, dtype=torch.bool) | (torch.arange(10) < 4)[None] & (
            torch.tensor([True, False])[:, None]), "not a non-empty prefix"),
        "constant bias": (torch.ones(2, 10), "values other than 0"),
    }[kind]


@pytest.mark.parametrize("kind", ["dense bias", "hole in the keys", "per-query (block-causal)", "per-head",
                                  "all keys dropped", "constant bias"])
def test_other_masks_go_native_with_the_reason(monkeypatch, kind):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv()
    mask, why = _not_padding(kind)
    with pytest.warns(ops.VidattnFallbackWarning, match="native attention runs this call"):
        out = call(query=q, key=k, value=v, attn_mask=mask)
    expected = native(q, k, v, attn_mask=mask)
    assert torch.equal(torch.isnan(out), torch.isnan(expected))
    torch.testing.assert_close(out.nan_to_num(), expected.nan_to_num(), atol=0, rtol=0)
    assert fake.calls == []
    [(reason, n)] = backend().route_counts().items()
    assert why in reason and n == 1
    assert why in backend().explain(q, k, v, attn_mask=mask)


def test_causal_dropout_and_grouped_heads(monkeypatch):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv(sq=10)
    torch.testing.assert_close(call(query=q, key=k, value=v, is_causal=True), native(q, k, v, is_causal=True),
                               atol=1e-6, rtol=1e-6)
    # A causal call without a mask goes where the backend's routing says: to vidattn.attention with SDPA's
    # top-left causal mask where the kernel takes causal calls, else to diffusers' native path with the reason.
    *_, causal_reason = backend()._route(q, k, v, None, 0.0, True, False)
    torch.manual_seed(0)
    call(query=q, key=k, value=v, dropout_p=0.5)
    counts = backend().route_counts()
    if causal_reason is None:
        assert [c.get("causal") for c in fake.calls] == [True]
        assert counts == {"vidattn": 1, "dropout_p=0.5: the kernel has no dropout": 1}
    else:
        assert fake.calls == []
        assert counts == {causal_reason: 1, "dropout_p=0.5: the kernel has no dropout": 1}
        assert "is_causal" in causal_reason and "is_causal" in backend().explain(q, k, v, is_causal=True)
    fake.calls.clear()
    # Grouped-query attention: K/V with their own head count straight to vidattn.attention (the kernel reads each
    # K/V head in place for its group).
    q, k, v = qkv(h=8, hkv=2)
    mask = _padding("bool (B, Skv)", [5, 9])
    out = call(query=q, key=k, value=v, attn_mask=mask, enable_gqa=True)
    torch.testing.assert_close(out, native(q, k, v, attn_mask=mask, enable_gqa=True), atol=1e-5, rtol=1e-5)
    assert fake.calls == [dict(q=(2, 12, 8, 16), k=(2, 10, 2, 16), kv_lens=[5, 9], scale=None, return_lse=False)]
    # At 8 bits too: the 8-bit kernel reads grouped K/V in place as well, so the backend no longer repeats them.
    fake.calls.clear()
    with vidattn.use_precision("8bit"):
        call(query=q, key=k, value=v, attn_mask=mask, enable_gqa=True)
    assert fake.calls == [dict(q=(2, 12, 8, 16), k=(2, 10, 2, 16), kv_lens=[5, 9], scale=None, return_lse=False)]


def test_return_lse_layout(monkeypatch):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv()
    mask = _padding("bool (B, 1, 1, Skv)", [4, 10])
    out, lse = call(query=q, key=k, value=v, attn_mask=mask, return_lse=True, scale=0.2)
    assert lse.shape == (2, 12, 4) and lse.dtype == torch.float32 and out.shape == (2, 12, 4, 16)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * 0.2
    expected = torch.logsumexp(s.masked_fill(~mask, float("-inf")), dim=-1).transpose(1, 2)
    torch.testing.assert_close(lse, expected, atol=1e-5, rtol=1e-5)
    assert fake.calls[0]["return_lse"] is True
    # The real vidattn.attention (SDPA on the CPU) gives the same layout.
    monkeypatch.undo()
    out2, lse2 = call(query=q, key=k, value=v, attn_mask=mask, return_lse=True, scale=0.2)
    torch.testing.assert_close(lse2, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out2, out, atol=1e-5, rtol=1e-5)
    # Native path with return_lse (which diffusers' native backend refuses): the LSE of the biased scores.
    bias = _not_padding("dense bias")[0]
    with pytest.warns(ops.VidattnFallbackWarning):
        out3, lse3 = call(query=q, key=k, value=v, attn_mask=bias, return_lse=True)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / 4.0 + bias
    torch.testing.assert_close(lse3, torch.logsumexp(s, -1).transpose(1, 2), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(out3, native(q, k, v, attn_mask=bias), atol=1e-6, rtol=1e-6)


def test_masks_under_compile_fall_back_without_reading_values(monkeypatch):
    q, k, v = qkv()
    mask = _padding("bool (B, Skv)", [7, 10])
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert "torch.compile" in backend().explain(q, k, v, attn_mask=mask)


def test_compiled_call_with_a_mask_matches_native():
    q, k, v = qkv()
    mask = _padding("bool (B, Skv)", [7, 10])
    compiled = torch.compile(backend().vidattn_attention, backend="eager", fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v, attn_mask=mask), native(q, k, v, attn_mask=mask))


def test_explain_for_kernel_route_is_vidattn_explain():
    q, k, v = qkv(dtype=torch.bfloat16, d=64)
    mask = _padding("bool (B, Skv)", [7, 10])
    assert backend().explain(q, k, v, attn_mask=mask) == vidattn.explain(q, k, v, kv_lens=torch.tensor([7, 10]))


# ----------------------------------------------------------------------------------------------------------
# context parallelism: the forward op as the templates call it (one process; two processes: test_cp_gloo.py)
# ----------------------------------------------------------------------------------------------------------

def _config(ring: int, ulysses: int = 1):
    return types.SimpleNamespace(context_parallel_config=types.SimpleNamespace(ring_degree=ring,
                                                                               ulysses_degree=ulysses))


def test_ring_merge_of_forward_op_chunks_matches_unsharded(monkeypatch):
    FakeKernel(monkeypatch)
    q, k, v = qkv(skv=24)
    prev_out = prev_lse = None
    for chunk in range(3):  # diffusers' ring merge (TemplatedRingAttention.forward), chunk by chunk
        sl = slice(8 * chunk, 8 * (chunk + 1))
        out, lse = backend()._cp_forward_op(None, q, k[:, sl], v[:, sl], None, 0.0, False, None, False, True,
                                            _save_ctx=chunk == 0, _parallel_config=_config(3))
        out, lse = out.float(), lse.float().unsqueeze(-1)
        if prev_out is not None:
            out = prev_out - torch.sigmoid(lse - prev_lse) * (prev_out - out)
            lse = prev_lse - F.logsigmoid(prev_lse - lse)
        prev_out, prev_lse = out, lse
    torch.testing.assert_close(prev_out, native(q, k, v), atol=1e-5, rtol=1e-5)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / 4.0
    torch.testing.assert_close(prev_lse.squeeze(-1), torch.logsumexp(s, -1).transpose(1, 2), atol=1e-5, rtol=1e-5)


def ring_template(q, k, v, chunks: int, monkeypatch, scale=None):
    """diffusers' own TemplatedRingAttention.forward in one process, as rank 0 of `chunks` ranks: the all-gather
    of K/V is replaced by the concatenation of the key chunks (equal lengths), so its loop calls the backend's
    forward op once per chunk and merges with its own formula. Returns (out, lse (B, S, H))."""
    kc, vc = k.chunk(chunks, dim=1), v.chunk(chunks, dim=1)
    assert len({c.shape for c in kc}) == 1, "the ring template needs equal key chunks"
    gathered = torch.cat([torch.cat([a.flatten(), b.flatten()]) for a, b in zip(kc, vc)])
    monkeypatch.setattr(ad, "funcol", types.SimpleNamespace(all_gather_tensor=lambda buf, gather_dim, group: gathered))
    mesh = types.SimpleNamespace(get_group=lambda: None)
    config = types.SimpleNamespace(context_parallel_config=types.SimpleNamespace(
        _ring_mesh=mesh, _ring_local_rank=0, ring_degree=chunks, ulysses_degree=1, convert_to_fp32=True))
    ctx = types.SimpleNamespace()
    b = backend()
    return ad.TemplatedRingAttention.forward(ctx, q, kc[0].contiguous(), vc[0].contiguous(), None, 0.0, False, scale,
                                            False, True, b._cp_forward_op, b._cp_backward_op, config)


def test_diffusers_ring_template_with_the_forward_op(monkeypatch):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv(skv=24)
    out, lse = ring_template(q, k, v, 4, monkeypatch, scale=0.3)
    assert [c["k"] for c in fake.calls] == [(2, 6, 4, 16)] * 4 and all(c["return_lse"] for c in fake.calls)
    torch.testing.assert_close(out, native(q, k, v, scale=0.3), atol=1e-5, rtol=1e-5)
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) * 0.3
    torch.testing.assert_close(lse, torch.logsumexp(s, -1).transpose(1, 2), atol=1e-5, rtol=1e-5)


def test_ring_refuses_a_mask_that_drops_keys(monkeypatch):
    q, k, v = qkv()
    b = backend()
    # Before the template (one process, no torch.distributed: the decision is this rank's alone): a mask that keeps
    # every key is dropped, any other is refused.
    assert b._ring_mask(q, k, torch.ones(2, 10, dtype=torch.bool), _config(2)) is None
    assert b._ring_mask(q, k, torch.zeros(2, 1, 1, 10), _config(2)) is None
    with pytest.raises(ValueError, match="ring attention .* one mask to every rotated key chunk"):
        b._ring_mask(q, k, _padding("bool (B, Skv)", [7, 10]), _config(2))
    with pytest.raises(ValueError, match="values other than 0"):
        b._ring_mask(q, k, _not_padding("dense bias")[0], _config(2))
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    with pytest.raises(ValueError, match="torch.compile"):
        b._ring_mask(q, k, torch.ones(2, 10, dtype=torch.bool), _config(2))
    monkeypatch.undo()
    # The forward op itself never applies a mask per ring chunk.
    with pytest.raises(ValueError, match="ring attention"):
        b._cp_forward_op(None, q, k, v, torch.ones(2, 10, dtype=torch.bool), 0.0, False, None, False, True,
                         _parallel_config=_config(2))
    with pytest.raises(ValueError, match="dropout"):
        b._cp_forward_op(None, q, k, v, None, 0.1, False, None, False, True, _parallel_config=_config(2))
    with pytest.raises(NotImplementedError, match="forward-only"):
        b._cp_backward_op(None, torch.zeros(1))


def test_ulysses_op_takes_key_padding_and_sends_other_masks_to_sdpa(monkeypatch):
    fake = FakeKernel(monkeypatch)
    q, k, v = qkv()
    op = backend()._cp_forward_op
    mask = _padding("additive -10000 (B, H, 1, Skv)", [3, 8])
    out = op(None, q, k, v, mask, 0.0, False, None, False, False, _parallel_config=_config(1, 2))
    torch.testing.assert_close(out, native(q, k, v, attn_mask=mask), atol=1e-5, rtol=1e-5)
    assert [c["kv_lens"] for c in fake.calls] == [[3, 8]]
    bias = _not_padding("dense bias")[0]
    with pytest.warns(ops.VidattnFallbackWarning):
        out, lse = op(None, q, k, v, bias, 0.0, False, None, False, True, _parallel_config=_config(1, 2))
    torch.testing.assert_close(out, native(q, k, v, attn_mask=bias), atol=1e-6, rtol=1e-6)
    assert lse.shape == (2, 12, 4) and len(fake.calls) == 1


# ----------------------------------------------------------------------------------------------------------
# tiny models of several families: set_attention_backend and the attention_backend context manager
# ----------------------------------------------------------------------------------------------------------

def _g(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed))


def _wan():
    x, t, ctx = tiny_wan_inputs(batch=2)
    return tiny_wan(), dict(hidden_states=x, timestep=t, encoder_hidden_states=ctx), [None] * 4


def _ltx2():
    torch.manual_seed(0)
    model = diffusers.LTX2VideoTransformer3DModel(
        in_channels=4, out_channels=4, patch_size=1, patch_size_t=1, num_attention_heads=2, attention_head_dim=8,
        cross_attention_dim=16, audio_in_channels=4, audio_out_channels=4, audio_num_attention_heads=2,
        audio_attention_head_dim=4, audio_cross_attention_dim=8, num_layers=1, qk_norm="rms_norm_across_heads",
        caption_channels=16, rope_double_precision=False).eval()
    mask = torch.arange(16)[None, :] < torch.tensor([16, 11])[:, None]  # the model turns it into a -10000 bias
    inputs = dict(hidden_states=_g(2, 32, 4), audio_hidden_states=_g(2, 9, 4, seed=1),
                  encoder_hidden_states=_g(2, 16, 16, seed=2), audio_encoder_hidden_states=_g(2, 16, 16, seed=3),
                  timestep=torch.tensor([300.0, 700.0]), encoder_attention_mask=mask,
                  audio_encoder_attention_mask=mask, num_frames=2, height=4, width=4, audio_num_frames=9, fps=25.0)
    # video self, audio self, video->text, audio->text, audio->video, video->audio
    return model, inputs, [None, None, [16, 11], [16, 11], None, None]


def _helios():
    torch.manual_seed(0)
    model = diffusers.HeliosTransformer3DModel(
        patch_size=(1, 2, 2), num_attention_heads=2, attention_head_dim=12, in_channels=4, out_channels=4,
        text_dim=16, freq_dim=32, ffn_dim=32, num_layers=1, cross_attn_norm=True, qk_norm="rms_norm_across_heads",
        rope_dim=(4, 4, 4)).eval()
    c, f, hw = 4, 2, 8
    inputs = dict(hidden_states=_g(1, c, f, hw, hw), timestep=torch.tensor([500]),
                  encoder_hidden_states=_g(1, 12, 16, seed=1), indices_hidden_states=torch.ones(1, f),
                  indices_latents_history_short=torch.ones(1, f - 1), indices_latents_history_mid=torch.ones(1, f - 1),
                  indices_latents_history_long=torch.ones(1, (f - 1) * 4),
                  latents_history_short=_g(1, c, f - 1, hw, hw, seed=2),
                  latents_history_mid=_g(1, c, f - 1, hw, hw, seed=3),
                  latents_history_long=_g(1, c, (f - 1) * 4, hw, hw, seed=4))
    return model, inputs, [None, None]


def _minimax_h3():
    torch.manual_seed(0)
    model = diffusers.MiniMaxH3Transformer3DModel(
        num_attention_heads=2, attention_head_dim=16, hidden_size=24, num_layers=1, num_refiner_layers=1, ffn_dim=32,
        in_channels=4, audio_in_channels=6, patch_size=(1, 2, 2), text_dim=8, freq_dim=8, time_embed_hidden_dim=24,
        time_embed_dim=16, rope_freq_dim=2).eval()
    n_text, n_audio, n_video = 4, 6, 8
    s = n_text + n_audio + n_video
    text, audio, video = torch.arange(n_text), torch.arange(n_text, n_text + n_audio), torch.arange(n_text + n_audio, s)
    tags = torch.zeros(s, dtype=torch.long)
    tags[text], tags[audio] = 1, 2
    t_idx = torch.zeros(s, dtype=torch.long)
    t_idx[audio] = 1
    pos = torch.zeros(s, 3)
    pos[:, 0] = torch.arange(s).float()
    pos[video, 1] = torch.arange(n_video).float() % 4
    pos[video, 2] = torch.arange(n_video).float() % 2
    inputs = dict(hidden_states=_g(2, n_video, 16), audio_hidden_states=_g(2, n_audio, 6, seed=1),
                  encoder_hidden_states=_g(2, n_text, 8, seed=2), timestep=torch.tensor([0.7, 0.3]),
                  timestep_indices=t_idx, token_tags=tags, position_ids=pos, video_indices=video,
                  audio_indices=audio, text_indices=text)
    return model, inputs, [None, None]


def _motif():
    torch.manual_seed(0)
    model = diffusers.MotifVideoTransformer3DModel(
        in_channels=33, out_channels=16, num_attention_heads=2, attention_head_dim=12, num_layers=1,
        num_single_layers=1, num_decoder_layers=0, patch_size=1, patch_size_t=1, text_embed_dim=32, image_embed_dim=4,
        rope_axes_dim=(4, 4, 4)).eval()
    mask = torch.arange(12)[None, :] < torch.tensor([7, 12])[:, None]
    inputs = dict(hidden_states=_g(2, 33, 3, 4, 4), encoder_hidden_states=_g(2, 12, 32, seed=1),
                  timestep=torch.tensor([100, 900]), encoder_attention_mask=mask)
    # joint [48 video, 12 text] keys: the padded text is a suffix
    return model, inputs, [[55, 60], [55, 60]]


def _kandinsky5():
    torch.manual_seed(0)
    model = diffusers.Kandinsky5Transformer3DModel(
        in_visual_dim=4, in_text_dim=16, in_text_dim2=8, time_dim=16, out_visual_dim=4, patch_size=(1, 2, 2),
        model_dim=64, ff_dim=64, num_text_blocks=1, num_visual_blocks=1, axes_dims=(8, 12, 12)).eval()
    inputs = dict(hidden_states=_g(1, 2, 8, 8, 4), encoder_hidden_states=_g(1, 10, 16, seed=1),
                  timestep=torch.tensor([500.0]), pooled_projections=_g(1, 8, seed=2),
                  visual_rope_pos=[torch.arange(2), torch.arange(4), torch.arange(4)], text_rope_pos=torch.arange(10),
                  scale_factor=(1.0, 1.0, 1.0))
    return model, inputs, [None, None, None]


def _cosmos():
    torch.manual_seed(0)
    model = diffusers.CosmosTransformer3DModel(
        in_channels=4, out_channels=4, num_attention_heads=2, attention_head_dim=12, num_layers=1, mlp_ratio=2,
        text_embed_dim=16, adaln_lora_dim=4, max_size=(4, 32, 32), patch_size=(1, 2, 2), rope_scale=(2.0, 1.0, 1.0),
        concat_padding_mask=False, extra_pos_embed_type="learnable").eval()
    inputs = dict(hidden_states=_g(1, 4, 1, 8, 8), timestep=torch.tensor([500]),
                  encoder_hidden_states=_g(1, 12, 16, seed=1), fps=30)
    return model, inputs, [None, None]


FAMILIES = {"wan": _wan, "ltx2": _ltx2, "helios": _helios, "minimax_h3": _minimax_h3, "motif": _motif,
            "kandinsky5": _kandinsky5, "cosmos": _cosmos}


@pytest.mark.parametrize("family", list(FAMILIES))
def test_family_runs_on_the_backend(monkeypatch, family):
    """Every attention call of the model reaches vidattn.attention with the right key lengths, through
    set_attention_backend and through the context manager, and the output equals the stock native backend's.
    Cosmos's processors name no backend: it is reached through diffusers' global active backend only."""
    model, inputs, expected_lens = FAMILIES[family]()
    with torch.no_grad():
        reference = model(**inputs, return_dict=False)[0]
        fake = FakeKernel(monkeypatch)
        with ad.attention_backend("vidattn"):
            out_ctx = model(**inputs, return_dict=False)[0]
        assert ad._AttentionBackendRegistry._active_backend != "vidattn"
        ctx_calls = list(fake.calls)
        fake.calls.clear()
        model.set_attention_backend("vidattn")
        out_set = model(**inputs, return_dict=False)[0]
    torch.testing.assert_close(out_ctx, reference, atol=2e-5, rtol=1e-4)
    torch.testing.assert_close(out_set, reference, atol=2e-5, rtol=1e-4)
    assert [c["kv_lens"] for c in fake.calls] == expected_lens
    assert [c["kv_lens"] for c in ctx_calls] == expected_lens
    assert backend().route_counts() == {"vidattn": 2 * len(expected_lens)}
    backend().unregister_backend(model)
    assert ad._AttentionBackendRegistry._active_backend != "vidattn"


def test_wan_in_bf16_hands_the_kernel_its_envelope(monkeypatch, fresh_warnings):
    """At Wan's real head dim in bf16 every call's tensors are inside the kernel's envelope (strides, alignment,
    dtype, head dim): only the missing GPU keeps the kernel from running here."""
    from vidattn import _ext

    model = tiny_wan().to(torch.bfloat16)
    x, t, ctx = tiny_wan_inputs()
    seen = []
    real = ops.attention

    def spy(q, k, v, **kw):
        lens = kw.get("kv_lens")
        seen.append(_ext.envelope_reason(q, k, v, lens, 1.0 / math.sqrt(q.shape[-1])))
        return real(q, k, v, **kw)

    monkeypatch.setattr(ops, "attention", spy)
    model.set_attention_backend("vidattn")
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore", ops.VidattnFallbackWarning)
        model(x.bfloat16(), t, ctx.bfloat16(), return_dict=False)
    assert seen == [None] * 4


def test_environment_variable_with_the_real_import(monkeypatch):
    """diffusers reads DIFFUSERS_ATTN_BACKEND (through utils.constants) when attention_dispatch is first imported and
    refuses "vidattn" with a ValueError; a fresh import of that module here, with the variable set, gets the
    explanation instead, and `import vidattn.diffusers` fails with it (backend._register_at_import)."""
    from diffusers.utils import constants

    b = backend()
    monkeypatch.setenv("DIFFUSERS_ATTN_BACKEND", "vidattn")
    monkeypatch.setattr(constants, "DIFFUSERS_ATTN_BACKEND", "vidattn")
    monkeypatch.delitem(sys.modules, "diffusers.models.attention_dispatch")
    with pytest.raises(RuntimeError, match="Unset the variable") as info:
        b._register_at_import()
    assert isinstance(info.value.__cause__, ValueError) and "vidattn" in str(info.value.__cause__)


def test_precision_policy_on_the_backend_route(monkeypatch):
    """PrecisionPolicy on a model whose attention runs through set_attention_backend("vidattn") (no vidattn
    processors): each attention module's calls reach vidattn.attention at its block's precision for the step."""
    from vidattn.precision import current_precision

    model, inputs, _ = _wan()  # two blocks, self and cross attention each
    fake = FakeKernel(monkeypatch)
    seen = []
    real_call = fake.__call__
    monkeypatch.setattr(ops, "attention", lambda *a, **kw: seen.append(current_precision()) or real_call(*a, **kw))
    model.set_attention_backend("vidattn")
    handle = vidattn.PrecisionPolicy("8bit", exact_blocks=(0,), exact_first_steps=1).install(model)
    with torch.no_grad():
        for t in (900.0, 500.0):
            model(**{**inputs, "timestep": torch.tensor([t, t])}, return_dict=False)
    assert seen == ["exact"] * 4 + ["exact", "exact", "8bit", "8bit"] and handle.step == 1
    handle.remove()
    seen.clear()
    with torch.no_grad():
        model(**inputs, return_dict=False)
    assert seen == ["exact"] * 4
    backend().unregister_backend(model)


def test_precision_policy_on_the_backend_route_under_compile(monkeypatch):
    """The same under torch.compile: the module hooks' use_precision blocks are traced, and each call reads its
    block's precision for the step at run time (the spy is kept out of the graph so it sees what the call sees)."""
    from vidattn.precision import current_precision

    model, inputs, _ = _wan()
    seen = []
    real = ops.attention

    @torch.compiler.disable
    def spy(*a, **kw):
        seen.append(current_precision())
        return real(*a, **kw)

    monkeypatch.setattr(ops, "attention", spy)
    model.set_attention_backend("vidattn")
    handle = vidattn.PrecisionPolicy("8bit", exact_blocks=(0,), exact_first_steps=1).install(model)
    compiled = torch.compile(model)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for t in (900.0, 500.0, 300.0):
            compiled(**{**inputs, "timestep": torch.tensor([t, t])}, return_dict=False)
    assert seen == ["exact"] * 6 + ["8bit", "8bit", "exact", "exact", "8bit", "8bit"]
    handle.remove()
    backend().unregister_backend(model)
    torch._dynamo.reset()
