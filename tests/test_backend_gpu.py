"""The "vidattn" diffusers backend on a Hopper GPU: the kernel runs every call inside its envelope, and the ring
merge of per-chunk kernel results is as accurate as the kernel itself.

- A Wan transformer (4 heads x 128, 2 layers, 1280 video tokens) in bf16 through `set_attention_backend("vidattn")`:
  every attention call reaches the kernel (the library's forward entry is counted), and the output is as close to
  the native backend's as the kernel is to SDPA (relative L2 within 2e-2, the GPU suite's sanity cap; measured on
  the CPU stand-in route the two are identical).
- The ring merge: one attention's keys cut into N chunks, diffusers' own ring template
  (TemplatedRingAttention.forward, run as rank 0 with the all-gather replaced by the chunks, tests/test_backend.py
  `ring_template`) calls the backend's forward op per chunk (the kernel with return_lse) and merges with its own
  formula. Bound, derived and checked element by element against a float64 reference: the merge is a convex
  combination of the chunk outputs with weights from the LSEs, so its error is at most the weighted chunk kernel
  errors sum_i w_i |e_i|, plus the LSE errors' shift of the weights (2 max|dLSE| max|o_i|), plus the final rounding
  to bf16 (one ulp of the result); the unsharded kernel must meet the GPU suite's bound (2x SDPA's max |err| +
  fa_atol), and the merged result the suite's bound with its own per-chunk errors in place of SDPA's.
"""
import math
import sys
from pathlib import Path

import pytest
import torch

from conftest import TINY_WAN, is_hopper

pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not is_hopper(), reason="needs a Hopper (sm_90) GPU")]

diffusers = pytest.importorskip("diffusers")

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
import vidattn  # noqa: E402
from vidattn import _ext  # noqa: E402
from vidattn.diffusers import backend  # noqa: E402
from diffusers.models import attention_dispatch as ad  # noqa: E402
from bench.accuracy import fa_atol  # noqa: E402

from test_backend import ring_template  # noqa: E402
from _support import attention_fp64  # noqa: E402

DEV = "cuda"


@pytest.fixture
def kernel_calls(monkeypatch):
    """Counts the kernel library's forward launches (what runs only when the kernel, not SDPA, does the call)."""
    calls = []
    real = _ext.forward

    def counting(*args, **kwargs):
        calls.append(tuple(args[0].shape))
        return real(*args, **kwargs)

    monkeypatch.setattr(_ext, "forward", counting)
    yield calls


@pytest.fixture(autouse=True)
def restore_global_backend():
    active = ad._AttentionBackendRegistry._active_backend
    yield
    ad._AttentionBackendRegistry.set_active_backend(active)


def rel_l2(a, b):
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def test_wan_bf16_runs_the_kernel_through_the_backend(kernel_calls):
    torch.manual_seed(0)
    model = diffusers.WanTransformer3DModel(**dict(TINY_WAN, num_attention_heads=4, attention_head_dim=128,
                                                   ffn_dim=256)).to(DEV, torch.bfloat16).eval()
    g = torch.Generator(DEV).manual_seed(1)
    x = torch.randn(1, 16, 5, 32, 32, generator=g, device=DEV, dtype=torch.bfloat16)  # 5 x 16 x 16 = 1280 tokens
    t = torch.full((1,), 500, device=DEV, dtype=torch.long)
    ctx = torch.randn(1, 24, TINY_WAN["text_dim"], generator=g, device=DEV, dtype=torch.bfloat16)
    with torch.no_grad():
        reference = model(x, t, ctx, return_dict=False)[0]
        model.set_attention_backend("vidattn")
        backend.reset_route_counts()
        kernel_calls.clear()
        out = model(x, t, ctx, return_dict=False)[0]
    assert backend.route_counts() == {"vidattn": 4}
    assert kernel_calls == [(1, 1280, 4, 128), (1, 1280, 4, 128)] * 2, kernel_calls  # self, cross per layer
    assert rel_l2(out, reference) < 2e-2
    backend.unregister_backend(model)
    backend.register_backend()


def test_key_padding_mask_runs_the_kernel_with_kv_lens(kernel_calls):
    g = torch.Generator(DEV).manual_seed(2)
    q, k, v = (torch.randn(2, n, 8, 128, generator=g, device=DEV, dtype=torch.bfloat16) for n in (1024, 300, 300))
    keep = torch.arange(300, device=DEV)[None, :] < torch.tensor([300, 217], device=DEV)[:, None]
    bias = torch.zeros(2, 8, 1, 300, device=DEV, dtype=torch.bfloat16).masked_fill(~keep[:, None, None, :], -10000.0)
    for mask in (keep, bias):
        assert backend.explain(q, k, v, attn_mask=mask) is None
        out = backend.vidattn_attention(q, k, v, attn_mask=mask)
        ref = ad._AttentionBackendRegistry._backends[ad.AttentionBackendName.NATIVE](q, k, v, attn_mask=mask)
        assert rel_l2(out, ref) < 2e-2
    assert len(kernel_calls) == 2


def _reference(q, k, v, scale):
    """float64 (out (B, S, H, D), lse (B, S, H): the backend's LSE layout) on the upcast inputs."""
    out, lse = attention_fp64(q, k, v, scale)
    return out, lse.transpose(1, 2)


def _ulp_bf16(x):
    """One bf16 ulp at each element's magnitude (8 significant bits)."""
    e = torch.floor(torch.log2(x.abs().clamp_min(2.0 ** -126)))
    return torch.exp2(e - 7)


@pytest.mark.parametrize("sq,skv,chunks,d", [(2048, 8192, 4, 128), (1536, 3000, 3, 64)])
def test_ring_merge_is_as_accurate_as_the_kernel(monkeypatch, kernel_calls, sq, skv, chunks, d):
    g = torch.Generator(DEV).manual_seed(3)
    q, k, v = (torch.randn(1, n, 8, d, generator=g, device=DEV, dtype=torch.bfloat16) + 0.5 for n in (sq, skv, skv))
    scale = 1.0 / math.sqrt(d)
    ref, ref_lse = _reference(q, k, v, scale)

    # Unsharded kernel against the reference: the GPU suite's bound (2x SDPA's max |err| + fa_atol).
    assert vidattn.explain(q, k, v) is None
    whole = vidattn.attention(q, k, v)
    sdpa = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2),
                                                            v.transpose(1, 2)).transpose(1, 2)
    atol = fa_atol(ref, torch.bfloat16)
    whole_err, sdpa_err = (whole.double() - ref).abs().max().item(), (sdpa.double() - ref).abs().max().item()
    assert whole_err <= 2.0 * sdpa_err + atol, (whole_err, sdpa_err, atol)

    # Each chunk through the backend's forward op, and its own float64 reference.
    kernel_calls.clear()
    merged, merged_lse = ring_template(q, k, v, chunks, monkeypatch)
    assert len(kernel_calls) == chunks, kernel_calls
    assert merged.dtype == torch.bfloat16 and merged_lse.shape == (1, sq, 8)
    chunk_errs, chunk_lse_errs, chunk_refs, chunk_lses = [], [], [], []
    for kc, vc in zip(k.chunk(chunks, dim=1), v.chunk(chunks, dim=1)):
        o, lse = backend._cp_forward_op(None, q, kc, vc, None, 0.0, False, None, False, True)
        o_ref, lse_ref = _reference(q, kc, vc, scale)
        chunk_errs.append((o.double() - o_ref).abs())
        chunk_lse_errs.append((lse.double() - lse_ref).abs().max().item())
        chunk_refs.append(o_ref)
        chunk_lses.append(lse_ref)
    weights = torch.softmax(torch.stack(chunk_lses), dim=0)[..., None]  # exact merge weights, (N, B, S, H, 1)
    weighted_err = (weights * torch.stack(chunk_errs)).sum(0)
    lse_shift = 2.0 * max(chunk_lse_errs) * torch.stack(chunk_refs).abs().amax(0)
    bound = weighted_err + lse_shift + _ulp_bf16(ref) + 1e-6
    err = (merged.double() - ref).abs()
    worst = int((err - bound).argmax())
    assert (err <= bound).all(), (f"merged err {err.flatten()[worst].item():.3e} > bound "
                                  f"{bound.flatten()[worst].item():.3e} at {worst}")
    # In the GPU suite's terms: the merged error within 2x the chunks' largest kernel error + fa_atol.
    assert err.max().item() <= 2.0 * max(e.max().item() for e in chunk_errs) + atol
    assert (merged_lse.double() - ref_lse).abs().max().item() < 1e-3
    # And against the unsharded kernel: both within their bounds of the same reference.
    assert (merged.double() - whole.double()).abs().max().item() <= bound.max().item() + whole_err
