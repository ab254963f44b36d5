"""The "vidattn" diffusers backend with a flex `BlockMask` as `attn_mask` (vidattn/diffusers/backend.py), on the CPU.

A BlockMask without a mask_mod whose block sizes are multiples of 64 (what Kandinsky 5's NABLA builds) goes to
`vidattn.attention(..., block_mask=)` with the same mask object; any other BlockMask goes to diffusers' flex backend,
as stock runs it, with the reason counted, warned and given by `explain`. On the CPU the op runs its reference path
(SDPA block by block), so the outputs are checked against a float64 attention with the block mask expanded to a
per-key mask (what compiled flex computes), and against the unmasked attention they must differ from.
"""

import pytest
import torch

diffusers = pytest.importorskip("diffusers")
fa = pytest.importorskip("torch.nn.attention.flex_attention")

import vidattn  # noqa: E402
from vidattn import ops  # noqa: E402
from diffusers.models import attention_dispatch as ad  # noqa: E402

# The backend module as it is now, and the backend tests' autouse fixture (the backend registered, its route counts
# and warnings cleared, diffusers' global backend put back), shared rather than copied.
from test_backend import backend, clean_state  # noqa: E402,F401


class Spy:
    """Records every `vidattn.attention` call the backend makes (its block_mask object among them)."""

    def __init__(self, monkeypatch):
        self.calls = []
        self._real = ops.attention
        monkeypatch.setattr(ops, "attention", self)

    def __call__(self, q, k, v, **kw):
        self.calls.append(dict(q=tuple(q.shape), k=tuple(k.shape), **kw))
        return self._real(q, k, v, **kw)


def qkv(b=1, s=256, h=2, d=64, hkv=None, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randn(b, s, h, d, generator=g), torch.randn(b, s, hkv or h, d, generator=g),
            torch.randn(b, s, hkv or h, d, generator=g))


def blocks(b=1, h=2, n=4, seed=1, empty_row=False):
    """A random (B, H, n, n) block pattern, every row block keeping its diagonal block (as NABLA's prior does)."""
    g = torch.Generator().manual_seed(seed)
    m = (torch.rand(b, h, n, n, generator=g) < 0.4) | torch.eye(n, dtype=torch.bool)
    if empty_row:
        m[:, :, 1] = False  # the second 64-row block sees no key: its rows give 0 (flex's convention)
    return m


def block_mask(dense, block=64, mask_mod=None, seq_lengths=None):
    """A flex BlockMask of whole blocks, built the way NABLA builds its own (`from_kv_blocks`, full blocks only)."""
    nb = dense.sum(-1).to(torch.int32)
    idx = dense.to(torch.int8).argsort(dim=-1, descending=True, stable=True).to(torch.int32)
    return fa.BlockMask.from_kv_blocks(torch.zeros_like(nb), idx, nb, idx, BLOCK_SIZE=block, mask_mod=mask_mod,
                                       seq_lengths=seq_lengths)


def reference(q, k, v, keep, scale=None):
    """float64 attention with `keep` (B or 1, H or 1, Sq, Skv); (out (B, S, H, D), lse (B, S, H)); rows that keep
    no key give 0 and LSE -inf."""
    qh, kh, vh = (x.transpose(1, 2).double() for x in (q, k, v))
    if kh.shape[1] != qh.shape[1]:
        kh = kh.repeat_interleave(qh.shape[1] // kh.shape[1], 1)
        vh = vh.repeat_interleave(qh.shape[1] // vh.shape[1], 1)
    s = qh @ kh.transpose(-1, -2) * (scale if scale is not None else qh.shape[-1] ** -0.5)
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    p = torch.exp(s - torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)[..., None])
    out = (p @ vh).nan_to_num()
    return out.transpose(1, 2).float(), lse.transpose(1, 2).float()


def per_key(dense, block, sq, skv):
    return dense.repeat_interleave(block, -2).repeat_interleave(block, -1)[..., :sq, :skv]


def call(**kw):
    return backend().vidattn_attention(**kw)


def test_block_mask_goes_to_vidattn_attention_with_the_same_mask(monkeypatch):
    spy = Spy(monkeypatch)
    q, k, v = qkv()
    dense = blocks(empty_row=True)
    bm = block_mask(dense)
    out = call(query=q, key=k, value=v, attn_mask=bm)
    assert len(spy.calls) == 1 and spy.calls[0]["block_mask"] is bm and spy.calls[0]["layout"] == "bshd"
    assert backend().route_counts() == {"vidattn": 1}
    want, _ = reference(q, k, v, per_key(dense, 64, 256, 256))
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert torch.all(out[:, 64:128] == 0)  # the row block that keeps no key
    # The mask matters: the unmasked attention is far from it.
    assert (out - reference(q, k, v, torch.ones(256, 256, dtype=torch.bool))[0]).abs().max() > 1e-2
    assert backend().explain(q, k, v, attn_mask=bm) == vidattn.explain(q, k, v, block_mask=bm)


def test_dispatch_attention_fn_hands_the_block_mask_to_the_backend(monkeypatch):
    spy = Spy(monkeypatch)
    q, k, v = qkv(seed=3)
    dense = blocks(seed=4)
    bm = block_mask(dense)
    out = ad.dispatch_attention_fn(q, k, v, attn_mask=bm, backend="vidattn")
    assert [c["block_mask"] for c in spy.calls] == [bm]
    torch.testing.assert_close(out, reference(q, k, v, per_key(dense, 64, 256, 256))[0], atol=1e-5, rtol=1e-5)


def test_128_blocks_grouped_heads_and_the_lse(monkeypatch):
    spy = Spy(monkeypatch)
    q, k, v = qkv(h=4, hkv=2, s=256)
    dense = blocks(h=4, n=2, seed=7)
    bm = block_mask(dense, block=128)
    out, lse = call(query=q, key=k, value=v, attn_mask=bm, enable_gqa=True, return_lse=True, scale=0.2)
    # Grouped K/V reach the op with their own head count (the kernel reads each in place for its group).
    assert [(c["k"], c["return_lse"], c["scale"]) for c in spy.calls] == [((1, 256, 2, 64), True, 0.2)]
    want, want_lse = reference(q, k, v, per_key(dense, 128, 256, 256), scale=0.2)
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    assert lse.shape == (1, 256, 4) and lse.dtype == torch.float32
    torch.testing.assert_close(lse, want_lse, atol=1e-5, rtol=1e-5)


def test_block_mask_with_a_mask_mod_goes_to_flex_with_the_reason(monkeypatch):
    spy = Spy(monkeypatch)
    q, k, v = qkv(seed=5)

    def causal(b, h, q_idx, kv_idx):
        return q_idx >= kv_idx

    bm = fa.create_block_mask(causal, 1, 1, 256, 256, device="cpu", BLOCK_SIZE=64)
    with pytest.warns(ops.VidattnFallbackWarning, match="flex attention runs this call.*mask_mod"):
        out = call(query=q, key=k, value=v, attn_mask=bm)
    assert spy.calls == []
    [(reason, n)] = backend().route_counts().items()
    assert "mask_mod" in reason and n == 1
    assert backend().explain(q, k, v, attn_mask=bm).startswith("diffusers' flex backend: the block mask has a mask_mod")
    # What stock runs (diffusers' flex backend), and what that computes: causal attention.
    stock = ad._AttentionBackendRegistry._backends[ad.AttentionBackendName.FLEX](q, k, v, attn_mask=bm)
    torch.testing.assert_close(out, stock, atol=0, rtol=0)
    want, want_lse = reference(q, k, v, torch.ones(256, 256, dtype=torch.bool).tril())
    torch.testing.assert_close(out, want, atol=1e-5, rtol=1e-5)
    # return_lse on the flex path (diffusers' own flex function cannot return it): (B, S, H) fp32.
    out2, lse = call(query=q, key=k, value=v, attn_mask=bm, return_lse=True)
    torch.testing.assert_close(out2, want, atol=1e-5, rtol=1e-5)
    assert lse.shape == (1, 256, 2) and lse.dtype == torch.float32
    torch.testing.assert_close(lse, want_lse, atol=1e-4, rtol=1e-5)


def test_block_size_not_a_multiple_of_64_goes_to_flex(monkeypatch):
    spy = Spy(monkeypatch)
    q, k, v = qkv(seed=6)
    bm = block_mask(blocks(n=8, seed=8), block=32)
    with pytest.warns(ops.VidattnFallbackWarning, match="flex attention runs this call"):
        out = call(query=q, key=k, value=v, attn_mask=bm)
    assert spy.calls == []
    [(reason, n)] = backend().route_counts().items()
    assert "block size (32, 32) is not a multiple of 64" in reason and n == 1
    stock = ad._AttentionBackendRegistry._backends[ad.AttentionBackendName.FLEX](q, k, v, attn_mask=bm)
    torch.testing.assert_close(out, stock, atol=0, rtol=0)


@pytest.mark.parametrize("case, why", [
    ("is_causal", "is_causal=True with a block mask"),
    ("dropout", "dropout_p=0.1"),
    ("other lengths", "the block mask is for 256 queries and 256 keys, the call has 192 and 256"),
    ("per-head mask of other heads", "do not broadcast to the call's (1, 2)"),
    ("grouped heads without enable_gqa", "without enable_gqa"),
])
def test_calls_the_kernel_path_cannot_take_go_to_flex(case, why):
    q, k, v = qkv()
    bm = block_mask(blocks())
    kw = {}
    if case == "is_causal":
        kw["is_causal"] = True
    elif case == "dropout":
        kw["dropout_p"] = 0.1
    elif case == "other lengths":
        q = q[:, :192]
    elif case == "per-head mask of other heads":
        bm = block_mask(blocks(h=3))
    else:
        k, v = k[:, :, :1], v[:, :, :1]
    reason = backend().explain(q, k, v, attn_mask=bm, **kw)
    assert reason.startswith("diffusers' flex backend: ") and why in reason, reason


def test_compiled_call_with_a_block_mask_runs_the_op():
    q, k, v = qkv(seed=9)
    dense = blocks(seed=10)
    bm = block_mask(dense)
    compiled = torch.compile(backend().vidattn_attention, backend="eager", fullgraph=True)
    out = compiled(q, k, v, attn_mask=bm)
    torch.testing.assert_close(out, reference(q, k, v, per_key(dense, 64, 256, 256))[0], atol=1e-5, rtol=1e-5)


# ----------------------------------------------------------------------------------------------------------
# context parallelism (one process; two gloo processes: tests/test_cp_gloo.py)
# ----------------------------------------------------------------------------------------------------------

def _config(ring: int, ulysses: int = 1):
    import types

    return types.SimpleNamespace(context_parallel_config=types.SimpleNamespace(ring_degree=ring,
                                                                               ulysses_degree=ulysses))


def test_ulysses_shard_takes_a_one_head_block_mask(monkeypatch):
    spy = Spy(monkeypatch)
    q, k, v = qkv(h=2, seed=11)  # one Ulysses shard: every token, a slice of the heads
    dense = blocks(h=1, seed=12)
    bm = block_mask(dense)
    op = backend()._cp_forward_op
    out = op(None, q, k, v, bm, 0.0, False, None, False, False, _parallel_config=_config(1, 2))
    assert [c["block_mask"] for c in spy.calls] == [bm]
    torch.testing.assert_close(out, reference(q, k, v, per_key(dense, 64, 256, 256))[0], atol=1e-5, rtol=1e-5)
    # With a mask_mod: flex on the shard, with the reason.
    causal = fa.create_block_mask(lambda b, h, qi, ki: qi >= ki, 1, 1, 256, 256, device="cpu", BLOCK_SIZE=64)
    with pytest.warns(ops.VidattnFallbackWarning, match="mask_mod"):
        out = op(None, q, k, v, causal, 0.0, False, None, False, False, _parallel_config=_config(1, 2))
    assert len(spy.calls) == 1
    torch.testing.assert_close(out, reference(q, k, v, torch.ones(256, 256, dtype=torch.bool).tril())[0],
                               atol=1e-5, rtol=1e-5)
    # A per-head mask cannot follow the head slice; a mask of other lengths describes no call of the shard.
    with pytest.raises(ValueError, match="2 heads under Ulysses"):
        op(None, q, k, v, block_mask(blocks(h=2)), 0.0, False, None, False, False, _parallel_config=_config(1, 2))
    with pytest.raises(ValueError, match="is for 256 queries and 256 keys, the call has 128 and 128"):
        op(None, q[:, :128], k[:, :128], v[:, :128], bm, 0.0, False, None, False, False,
           _parallel_config=_config(1, 2))


def test_context_parallel_refuses_block_masks_it_cannot_apply():
    q, k, v = qkv()
    b = backend()
    bm = block_mask(blocks(h=1))
    with pytest.raises(ValueError, match="ring attention .*a flex BlockMask"):
        b.vidattn_attention(q, k, v, attn_mask=bm, _parallel_config=_config(2))
    # Under Ulysses, a mask over this rank's own keys (the template would gather it as a tensor).
    with pytest.raises(ValueError, match="BlockMask over this rank's shard of the keys"):
        b.vidattn_attention(q, k, v, attn_mask=bm, _parallel_config=_config(1, 2))


@pytest.mark.gpu
@pytest.mark.parametrize("d, h, hkv, block", [(64, 4, 4, 64), (128, 4, 2, 128)])
def test_gpu_block_mask_runs_the_block_sparse_kernel(d, h, hkv, block):
    q, k, v = (t.to("cuda", torch.bfloat16) for t in qkv(b=2, s=1000, h=h, d=d, hkv=hkv, seed=13))
    n = -(-1000 // block)
    dense = blocks(b=2, h=h, n=n, seed=14)
    bm = block_mask(dense.cuda(), block=block, seq_lengths=(1000, 1000))
    assert backend().explain(q, k, v, attn_mask=bm, enable_gqa=hkv != h) is None
    out, lse = call(query=q, key=k, value=v, attn_mask=bm, enable_gqa=hkv != h, return_lse=True)
    assert backend().route_counts() == {"vidattn": 1}
    want, want_lse = reference(q.float(), k.float(), v.float(), per_key(dense.cuda(), block, 1000, 1000))
    err = (out.float() - want).norm() / want.norm()
    assert err < 1e-2, err
    torch.testing.assert_close(lse, want_lse, atol=2e-2, rtol=0)
