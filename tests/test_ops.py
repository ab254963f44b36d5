"""vidattn.attention / explain / the custom op, on the CPU (SDPA fallback) and, marked gpu, on CUDA."""
import warnings

import pytest
import torch
import torch.nn.functional as F

import vidattn
from vidattn import ops
from conftest import is_hopper
from _support import attention_fp64 as ref_bshd  # (out, lse (B, H, Sq)) on (B, S, H, D)

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")


def rand_bshd(b, sq, skv, h, d, dtype=torch.float32, device="cpu", seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v = (torch.randn(b, s, h, d, generator=g).to(device=device, dtype=dtype) for s in (sq, skv, skv))
    return q, k, v


@pytest.mark.parametrize("sq,skv", [(5, 5), (7, 13), (1, 1), (33, 2)])
@pytest.mark.parametrize("d", [64, 128, 40])
def test_bshd_matches_reference(sq, skv, d):
    q, k, v = rand_bshd(2, sq, skv, 3, d)
    out = vidattn.attention(q, k, v)
    assert out.shape == (2, sq, 3, d) and out.dtype == q.dtype and out.is_contiguous()
    torch.testing.assert_close(out.double(), ref_bshd(q, k, v)[0], atol=1e-5, rtol=1e-5)


def test_bhsd_layout_matches_bshd():
    q, k, v = rand_bshd(2, 9, 11, 4, 64)
    out_bshd = vidattn.attention(q, k, v)
    qh, kh, vh = (t.transpose(1, 2).contiguous() for t in (q, k, v))
    out_bhsd = vidattn.attention(qh, kh, vh, layout="bhsd")
    assert out_bhsd.shape == (2, 4, 9, 64) and out_bhsd.is_contiguous()
    torch.testing.assert_close(out_bhsd.transpose(1, 2), out_bshd, atol=1e-6, rtol=1e-6)
    # and the same as SDPA itself on the bhsd tensors
    torch.testing.assert_close(out_bhsd, F.scaled_dot_product_attention(qh, kh, vh), atol=1e-6, rtol=1e-6)


def test_strided_views_are_accepted():
    """A fused-QKV projection chunked into views (diffusers' fused path) and a bhsd view of a bshd tensor."""
    qkv = torch.randn(2, 10, 3 * 2 * 64)
    q, k, v = (t.unflatten(2, (2, 64)) for t in qkv.chunk(3, dim=-1))
    assert not q.is_contiguous()
    torch.testing.assert_close(vidattn.attention(q, k, v).double(), ref_bshd(q, k, v)[0], atol=1e-5, rtol=1e-5)
    out = vidattn.attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), layout="bhsd")
    torch.testing.assert_close(out.transpose(1, 2).double(), ref_bshd(q, k, v)[0], atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("scale", [0.05, 1.0, 3])
def test_scale(scale):
    q, k, v = rand_bshd(1, 6, 8, 2, 64)
    torch.testing.assert_close(vidattn.attention(q, k, v, scale=scale).double(), ref_bshd(q, k, v, scale)[0],
                               atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("dtype", [torch.int32, torch.int64])
def test_kv_lens_matches_masked_sdpa(layout, dtype):
    q, k, v = rand_bshd(3, 7, 12, 2, 64)
    kv_lens = torch.tensor([12, 1, 5], dtype=dtype)
    keep = (torch.arange(12)[None, :] < kv_lens[:, None])[:, None, None, :]
    expected = F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q, k, v)), attn_mask=keep)
    if layout == "bshd":
        out = vidattn.attention(q, k, v, kv_lens=kv_lens)
        out = out.transpose(1, 2)
    else:
        out = vidattn.attention(*(t.transpose(1, 2) for t in (q, k, v)), layout="bhsd", kv_lens=kv_lens)
    torch.testing.assert_close(out, expected, atol=1e-6, rtol=1e-6)
    # keys beyond kv_lens do not matter at all
    k2, v2 = k.clone(), v.clone()
    k2[1, 1:] = 1e4
    v2[1, 1:] = -1e4
    out2 = vidattn.attention(q, k2, v2, kv_lens=kv_lens)
    torch.testing.assert_close(out2[1], vidattn.attention(q, k, v, kv_lens=kv_lens)[1])


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
def test_return_lse_matches_fp64_logsumexp(layout, monkeypatch):
    monkeypatch.setattr(ops, "_LSE_CHUNK_ELEMENTS", 2 * 3 * 13 * 4)  # force several chunks over Sq
    q, k, v = rand_bshd(2, 17, 13, 3, 64)
    kv_lens = torch.tensor([13, 4])
    ref_out, ref_lse = ref_bshd(q, k, v, 0.2, kv_lens)
    args = (q, k, v) if layout == "bshd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    out, lse = vidattn.attention(*args, layout=layout, scale=0.2, kv_lens=kv_lens, return_lse=True)
    assert lse.shape == (2, 3, 17) and lse.dtype == torch.float32
    torch.testing.assert_close(lse.double(), ref_lse, atol=1e-5, rtol=1e-5)
    out = out if layout == "bshd" else out.transpose(1, 2)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_on_cpu_falls_back_and_is_close(dtype):
    q, k, v = rand_bshd(1, 20, 24, 2, 64, dtype=dtype)
    out = vidattn.attention(q, k, v)
    assert out.dtype == dtype
    torch.testing.assert_close(out.double(), ref_bshd(q, k, v)[0], atol=2e-2, rtol=2e-2)


def test_explain_on_cpu_gives_a_reason():
    q, k, v = rand_bshd(1, 4, 4, 2, 64, dtype=torch.bfloat16)
    reason = vidattn.explain(q, k, v)
    assert isinstance(reason, str) and "CUDA" in reason
    # The device is said first, whatever else is outside the envelope: on a CPU that is the one thing to know.
    for args in (rand_bshd(1, 4, 4, 2, 64), rand_bshd(1, 4, 4, 2, 96, dtype=torch.float16)):
        assert vidattn.explain(*args) == reason


def test_explain_names_the_envelope_once_the_device_could_run(monkeypatch):
    monkeypatch.setattr(ops._ext, "device_reason", lambda device: None)
    monkeypatch.setattr(ops._ext, "runtime_reason", lambda: "no library in this test")
    assert "dtype" in vidattn.explain(*rand_bshd(1, 4, 4, 2, 64))  # fp32
    assert "head dim" in vidattn.explain(*rand_bshd(1, 4, 4, 2, 264, dtype=torch.float16))


def test_kernel_available_agrees_with_explain():
    q, k, v = rand_bshd(1, 256, 256, 2, 64, dtype=torch.bfloat16, device="cuda" if torch.cuda.is_available() else "cpu")
    assert vidattn.kernel_available() is (vidattn.explain(q, k, v) is None)
    if not torch.cuda.is_available():
        assert vidattn.kernel_available() is False
    elif is_hopper() and vidattn.kernel_available():
        assert vidattn.explain(q, k, v) is None


def test_explain_reports_autograd(monkeypatch):
    monkeypatch.setattr(ops._ext, "device_reason", lambda device: None)  # without a GPU the device is said first
    monkeypatch.setattr(ops._ext, "runtime_reason", lambda: "no library in this test")  # never build one here
    q, k, v = rand_bshd(1, 4, 4, 2, 64, dtype=torch.bfloat16)
    q.requires_grad_(True)
    assert "grad" in vidattn.explain(q, k, v)
    with torch.no_grad():
        assert "grad" not in vidattn.explain(q, k, v)


def test_warns_once_per_reason(fresh_warnings):
    q, k, v = rand_bshd(1, 4, 4, 2, 64)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        vidattn.attention(q, k, v)
        vidattn.attention(q, k, v)
        vidattn.attention(q.half(), k.half(), v.half())  # the same reason on the CPU: the device comes first
        vidattn.attention(q.half(), k.half(), v.half())
        vidattn.attention(q.requires_grad_(), k, v)
    msgs = [str(w.message) for w in caught if issubclass(w.category, vidattn.VidattnFallbackWarning)]
    if torch.cuda.is_available():
        assert len(msgs) >= 1 and "cpu" in msgs[0]
    else:
        assert len(msgs) == 1 and "no CUDA GPU" in msgs[0], msgs  # said once, not once per dtype or autograd
    assert all("vidattn.explain" in m for m in msgs)
    assert caught[0].filename == __file__  # points at the caller, not at vidattn or torch internals


def test_autograd_falls_back_and_matches_sdpa_grads():
    q, k, v = rand_bshd(2, 5, 6, 2, 64)
    q1, k1, v1 = (t.clone().requires_grad_(True) for t in (q, k, v))
    q2, k2, v2 = (t.clone().requires_grad_(True) for t in (q, k, v))
    vidattn.attention(q1, k1, v1).square().sum().backward()
    F.scaled_dot_product_attention(*(t.transpose(1, 2) for t in (q2, k2, v2))).square().sum().backward()
    for a, b in ((q1, q2), (k1, k2), (v1, v2)):
        torch.testing.assert_close(a.grad, b.grad, atol=1e-6, rtol=1e-6)


def _bad_calls():
    q, k, v = rand_bshd(2, 5, 6, 3, 64)
    return [
        ((q.numpy(), k, v), {}, TypeError, "q must be a torch.Tensor"),
        ((q, k, v), {"layout": "sbhd"}, ValueError, "layout must be"),
        ((q[0], k, v), {}, ValueError, "q must be 4-D"),
        ((q.int(), k.int(), v.int()), {}, TypeError, "floating-point"),
        ((q, k.double(), v), {}, TypeError, "share a dtype"),
        ((q, k[:1], v[:1]), {}, ValueError, "batch sizes differ"),
        ((q, k[:, :, :2], v[:, :, :2]), {}, ValueError, "multiple of k/v's"),
        ((q, k[..., :32], v[..., :32]), {}, ValueError, "head dims differ"),
        ((q, k, v[:, :4]), {}, ValueError, "same sequence length"),
        ((q, k[:, :0], v[:, :0]), {}, ValueError, ">= 1"),
        ((q, k, v), {"scale": "0.1"}, TypeError, "scale must be a float"),
        ((q, k, v), {"scale": float("nan")}, ValueError, "finite"),
        ((q, k, v), {"kv_lens": [3, 4]}, TypeError, "kv_lens must be a torch.Tensor"),
        ((q, k, v), {"kv_lens": torch.tensor([3.0, 4.0])}, TypeError, "int32 or int64"),
        ((q, k, v), {"kv_lens": torch.tensor([3])}, ValueError, "shape (batch,)"),
        ((q, k, v), {"kv_lens": torch.tensor([[3, 4]])}, ValueError, "shape (batch,)"),
        ((q, k, v), {"kv_lens": torch.tensor([0, 4])}, ValueError, "[1, 6]"),
        ((q, k, v), {"kv_lens": torch.tensor([3, 7])}, ValueError, "[1, 6]"),
        ((q, k.to("meta"), v), {}, ValueError, "one device"),
    ]


@pytest.mark.parametrize("case", range(len(_bad_calls())))
@pytest.mark.parametrize("fn", ["attention", "explain"])
def test_bad_inputs_raise_clear_errors(case, fn):
    args, kwargs, exc, fragment = _bad_calls()[case]
    with pytest.raises(exc) as info:
        getattr(vidattn, fn)(*args, **kwargs)
    assert fragment in str(info.value)
    assert str(info.value).startswith(f"vidattn.{fn}: ")  # the function the caller called


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("return_lse", [False, True])
@pytest.mark.parametrize("with_lens", [False, True])
def test_custom_op_passes_opcheck(layout, return_lse, with_lens):
    """Schema, fake (meta) implementation and dispatch of vidattn::attention agree with the real one."""
    q, k, v = rand_bshd(2, 5, 7, 3, 64)
    if layout == "bhsd":
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))
    kv_lens = torch.tensor([3, 7], dtype=torch.int32) if with_lens else None
    torch.library.opcheck(torch.ops.vidattn.attention.default, (q, k, v, layout, None, kv_lens, return_lse))
    torch.library.opcheck(torch.ops.vidattn.attention.default, (q, k, v, layout, 0.3, kv_lens, return_lse))


def test_lse_placeholder_when_not_requested():
    q, k, v = rand_bshd(1, 3, 3, 1, 64)
    out, lse = torch.ops.vidattn.attention(q, k, v, "bshd", None, None, False)
    assert lse.shape == (0,) and lse.dtype == torch.float32 and out.shape == q.shape


# ---------------------------------------------------------------------------------------------- GPU
@pytest.mark.gpu
@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("d", [64, 128])
def test_gpu_dispatch_and_accuracy(layout, d):
    q, k, v = rand_bshd(2, 300, 257, 4, d, dtype=torch.bfloat16, device="cuda")
    kv_lens = torch.tensor([257, 100], device="cuda")
    args = (q, k, v) if layout == "bshd" else tuple(t.transpose(1, 2) for t in (q, k, v))
    reason = vidattn.explain(*args, layout=layout, kv_lens=kv_lens)
    if is_hopper():
        assert reason is None, reason
    else:
        assert reason is not None
    out, lse = vidattn.attention(*args, layout=layout, kv_lens=kv_lens, return_lse=True)
    out = out if layout == "bshd" else out.transpose(1, 2)
    ref_out, ref_lse = ref_bshd(q.cpu(), k.cpu(), v.cpu(), kv_lens=kv_lens.cpu())
    torch.testing.assert_close(out.cpu().double(), ref_out, atol=2e-2, rtol=2e-2)
    torch.testing.assert_close(lse.cpu().double(), ref_lse, atol=1e-3, rtol=1e-3)


@pytest.mark.gpu
def test_gpu_fp32_falls_back_with_reason():
    q, k, v = rand_bshd(1, 16, 16, 2, 64, device="cuda")
    assert "dtype" in vidattn.explain(q, k, v)
    torch.testing.assert_close(vidattn.attention(q, k, v).cpu().double(), ref_bshd(q.cpu(), k.cpu(), v.cpu())[0],
                               atol=1e-3, rtol=1e-3)


def test_eager_call_keeps_the_op_name_in_profiles(fresh_warnings):
    """An eager call runs the op's body without the custom op's dispatch; under torch's profiler it still shows as
    a `vidattn::attention` range (which pipelines.measure counts as attention), and outside it no range is opened."""
    from torch.profiler import ProfilerActivity, profile

    q, k, v = rand_bshd(1, 8, 8, 2, 16)
    assert not ops._profiler_on()
    with pytest.warns(UserWarning), profile(activities=[ProfilerActivity.CPU]) as prof:
        assert ops._profiler_on()
        out = vidattn.attention(q, k, v, layout="bshd")
    assert not ops._profiler_on()
    names = [e.name for e in prof.events()]
    assert names.count("vidattn::attention") == 1
    torch.testing.assert_close(out.double(), ref_bshd(q, k, v)[0], atol=1e-5, rtol=1e-5)


def test_fake_tensors_and_dispatch_modes_take_the_custom_op():
    """Under FakeTensorMode (and any other dispatch mode, or with tensor subclasses) an eager call goes through the
    custom op, whose fake implementation gives the output without touching data; plain tensors take the fast path."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16)
    assert ops._eager_fast_path(q, q, q)
    with FakeTensorMode() as mode:
        fq = mode.from_tensor(q)
        assert not ops._eager_fast_path(fq, fq, fq)
        out, lse = vidattn.attention(fq, fq, fq, layout="bshd", return_lse=True)
    assert out.shape == (1, 8, 2, 64) and lse.shape == (1, 2, 8)
    assert not ops._eager_fast_path(torch.nn.Parameter(q), q, q)
