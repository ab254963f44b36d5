"""The SDPA fallback's contract on inputs the kernel's own tests cover on the GPU (CPU; found by a fuzz of the public
API against a float64 reference): keys past kv_lens ignored even when non-finite, a NaN query row NaN, a
differentiable LSE, kv_lens read as GPU lengths when their values cannot be checked (torch.compile, FakeTensorMode,
make_fx), use_precision across threads, and clear errors for two odd arguments."""
import math
import threading
import warnings

import pytest
import torch

import vidattn
from vidattn import precision


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        yield


def ref_attention(q, k, v, scale, kv_lens=None, causal=None):
    """float64 (B, S, H, D) reference and its LSE (B, H, Sq); rows without keys give 0 and -inf."""
    qd, kd, vd = (t.double() for t in (q, k, v))
    hq, hk = q.shape[2], k.shape[2]
    kd, vd = (t.repeat_interleave(hq // hk, dim=2) for t in (kd, vd))
    s = torch.einsum("bqhd,bkhd->bhqk", qd, kd) * scale
    sq, skv = q.shape[1], k.shape[1]
    i = torch.arange(sq)[:, None]
    j = torch.arange(skv)[None, :]
    lens = kv_lens if kv_lens is not None else torch.full((q.shape[0],), skv)
    keep = j[None] < lens[:, None, None]
    if causal == "bottom_right":
        keep = keep & (j[None] <= i[None] + (lens[:, None, None] - sq))
    elif causal:
        keep = keep & (j <= i)[None]
    s = s.masked_fill(~keep[:, None], -math.inf)
    lse = torch.logsumexp(s, dim=-1)
    p = torch.exp(s - lse[..., None]).masked_fill((lse == -math.inf)[..., None], 0.0)  # NaN stays NaN
    return torch.einsum("bhqk,bkhd->bqhd", p, vd), lse


def qkv(b=2, sq=9, skv=13, h=4, hk=4, d=16, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, sq, h, d, generator=g, dtype=dtype), torch.randn(b, skv, hk, d, generator=g, dtype=dtype),
            torch.randn(b, skv, hk, d, generator=g, dtype=dtype))


@pytest.mark.parametrize("causal", [False, True, "bottom_right"])
@pytest.mark.parametrize("where", ["k", "v", "both", "inf_v"])
def test_non_finite_keys_past_kv_lens_are_ignored(where, causal):
    q, k, v = qkv(hk=2)
    lens = torch.tensor([7, 13])
    ref, ref_lse = ref_attention(q, k, v, 0.25, lens, causal)
    fill = float("inf") if where == "inf_v" else float("nan")
    if where in ("k", "both"):
        k[0, 7:] = fill
    if where in ("v", "both", "inf_v"):
        v[0, 7:] = fill
    out, lse = vidattn.attention(q, k, v, scale=0.25, kv_lens=lens, return_lse=True, causal=causal)
    assert torch.isfinite(out).all() and not torch.isnan(lse).any(), where
    torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64])
@pytest.mark.parametrize("causal", [False, "bottom_right"])
def test_nan_query_gives_a_nan_row(dtype, causal):
    """float64 math gives a NaN row for a NaN query (PyTorch's CPU flash kernel gives zeros); a row that sees no key
    stays 0 with an LSE of -inf, as the kernel's."""
    q, k, v = qkv(sq=15, skv=13, dtype=dtype)  # bottom-right: queries 0 and 1 see no key
    q[1, 5, 2, 3] = float("nan")
    q[0, 0, 1, 0] = float("nan")
    out, lse = vidattn.attention(q, k, v, return_lse=True, causal=causal)
    ref, ref_lse = ref_attention(q, k, v, 0.25, causal=causal)
    assert torch.equal(torch.isnan(out), torch.isnan(ref)), causal
    assert torch.isnan(out[1, 5, 2]).all() and torch.isnan(lse[1, 2, 5])
    if causal:
        assert torch.equal(out[0, 0, 1], torch.zeros_like(out[0, 0, 1])) and lse[0, 1, 0] == -math.inf
    fin = ~torch.isnan(ref)
    tol = 2e-2 if dtype == torch.bfloat16 else 1e-5
    torch.testing.assert_close(out.double()[fin], ref[fin], atol=tol, rtol=tol)


@pytest.mark.parametrize("kw", [{"kv_lens": torch.tensor([9, 13])}, {"causal": "bottom_right"}, {"causal": True}])
def test_lse_is_differentiable(kw):
    """With autograd on, gradients through the LSE (a ring merge of partial results trains through it) are the
    float64 reference's, GQA included."""
    q, k, v = (t.double().requires_grad_() for t in qkv(hk=2))
    out, lse = vidattn.attention(q, k, v, scale=0.25, return_lse=True, **kw)
    assert lse.requires_grad
    ref, ref_lse = ref_attention(q, k, v, 0.25, kw.get("kv_lens"), kw.get("causal"))
    w = torch.randn_like(ref_lse).masked_fill(torch.isinf(ref_lse), 0.0)
    wo = torch.randn_like(ref)
    got = torch.autograd.grad((lse.double().nan_to_num(0.0, neginf=0.0) * w).sum() + (out * wo).sum(), (q, k, v))
    want = torch.autograd.grad((ref_lse.nan_to_num(0.0, neginf=0.0) * w).sum() + (ref * wo).sum(), (q, k, v))
    for a, b, name in zip(got, want, "qkv"):
        torch.testing.assert_close(a, b, atol=1e-5, rtol=1e-5, msg=f"grad {name}")


def test_lse_without_autograd_keeps_no_graph():
    q, k, v = qkv()
    with torch.no_grad():
        _, lse = vidattn.attention(*(t.requires_grad_() for t in (q, k, v)), return_lse=True)
    assert not lse.requires_grad


@pytest.mark.parametrize("given,reads_as", [(0, 0), (-3, 0), (21, 13), (2 ** 32 + 5, 13)])
def test_compiled_host_kv_lens_read_as_gpu_lengths(given, reads_as):
    """Eager checks host kv_lens values; a compiled call cannot read them, so it clamps them to [0, Skv] as the GPU
    path does: above Skv reads as Skv (no int32 wrap: 2^32 + 5 is not 5), <= 0 gives zero rows and an LSE of -inf,
    and the bottom-right diagonal aligns to the clamped length."""
    q, k, v = qkv(sq=5)
    lens = torch.tensor([given, 13], dtype=torch.int64)
    with pytest.raises(ValueError, match="kv_lens values"):
        vidattn.attention(q, k, v, kv_lens=lens)

    def f(q, k, v, lens):
        return vidattn.attention(q, k, v, kv_lens=lens, return_lse=True, causal="bottom_right")

    out, lse = torch.compile(f, fullgraph=True, backend="aot_eager")(q, k, v, lens)
    if reads_as == 0:
        assert torch.equal(out[0], torch.zeros_like(out[0])) and bool((lse[0] == -math.inf).all())
    else:
        ref, ref_lse = ref_attention(q, k, v, 0.25, torch.tensor([reads_as, 13]), "bottom_right")
        torch.testing.assert_close(out.double(), ref, atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)


def test_host_kv_lens_under_fake_tensor_mode_and_make_fx():
    from torch._subclasses.fake_tensor import FakeTensorMode
    from torch.fx.experimental.proxy_tensor import make_fx

    q, k, v = qkv()
    lens = torch.tensor([5, 13])
    with FakeTensorMode() as mode:
        fq, fk, fv = (mode.from_tensor(t) for t in (q, k, v))
        flens = mode.from_tensor(lens)
        out = vidattn.attention(fq, fk, fv, kv_lens=flens)
        assert out.shape == q.shape and vidattn.explain(fq, fk, fv, kv_lens=flens)

    def f(q, k, v, lens):
        return vidattn.attention(q, k, v, kv_lens=lens)

    for mode in ("fake", "symbolic"):
        gm = make_fx(f, tracing_mode=mode)(q, k, v, lens)
        torch.testing.assert_close(gm(q, k, v, lens), f(q, k, v, lens))


def test_use_precision_blocks_closed_out_of_order_leave_exact():
    """Two threads' blocks closed in the other order than opened: while one is open its value holds, and once both
    have closed the default is "exact" again (a saved-and-restored value would have left "8bit" behind)."""
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    seen = {}

    def a():
        with vidattn.use_precision("8bit"):
            a_in.set()
            b_in.wait(5)
        a_out.set()

    def b():
        a_in.wait(5)
        with vidattn.use_precision("exact"):
            b_in.set()
            a_out.wait(5)
            seen["inside"] = precision.current_precision()

    ta, tb = threading.Thread(target=a), threading.Thread(target=b)
    ta.start(), tb.start()
    ta.join(10), tb.join(10)
    assert seen["inside"] == "exact"
    assert precision.current_precision() == "exact"


def test_use_precision_nests_and_checks_its_value_at_once():
    with vidattn.use_precision("8bit"):
        with vidattn.use_precision("exact"):
            assert precision.current_precision() == "exact"
        assert precision.current_precision() == "8bit"
    assert precision.current_precision() == "exact"
    with pytest.raises(ValueError, match="precision must be one of"):
        vidattn.use_precision("bogus")
    assert precision.current_precision() == "exact"


def test_use_precision_object_entered_again_and_inside_itself():
    """use_precision returns a reusable context manager (a class, which Dynamo before torch 2.7 can trace, not a
    one-shot generator): entered twice in a row, and once inside itself, every exit closes exactly its own entry."""
    block = vidattn.use_precision("8bit")
    for _ in range(2):
        with block:
            assert precision.current_precision() == "8bit"
        assert precision.current_precision() == "exact"
    with block:
        with vidattn.use_precision("exact"):
            with block:
                assert precision.current_precision() == "8bit"
            assert precision.current_precision() == "exact"
        assert precision.current_precision() == "8bit"
    assert precision.current_precision() == "exact" and precision._active == []
    with pytest.raises(RuntimeError, match="inside"):
        with block:
            raise RuntimeError("an error inside the block")
    assert precision.current_precision() == "exact" and precision._active == []


def test_odd_arguments_get_clear_errors():
    q, k, v = qkv()
    with pytest.raises(ValueError, match="scale must be finite"):
        vidattn.attention(q, k, v, scale=10 ** 400)
    with pytest.raises(TypeError, match="exact_blocks must be an iterable"):
        vidattn.PrecisionPolicy("8bit", exact_blocks=3)
    with pytest.raises(ValueError, match="scale must be finite"):
        vidattn.explain(q, k, v, scale=10 ** 400)


def test_fallback_warning_from_a_processor_points_at_the_callers_line(fresh_warnings):
    """A fallback warning raised inside a diffusers model (a vidattn processor under its blocks) names the line that
    called the model, not a line of diffusers, torch or vidattn."""
    pytest.importorskip("diffusers")
    from conftest import tiny_wan, tiny_wan_inputs

    model = tiny_wan()
    vidattn.apply(model)
    x, t, ctx = tiny_wan_inputs()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        with torch.no_grad():
            model(hidden_states=x, timestep=t, encoder_hidden_states=ctx)
    ours = [r for r in w if issubclass(r.category, vidattn.VidattnFallbackWarning)]
    assert ours and all(r.filename == __file__ for r in ours), [(r.filename, r.lineno) for r in ours]
