"""The shared processor bodies (vidattn.diffusers.processors_shared) on the branches the model-level tests do not
reach: the generic `AttnProcessor2_0` body's 4-D input, group and cross-attention norms, q/k norms, residual and
output rescale, and its deprecated `scale` argument (Latte); Allegro's RoPE skipped on cross-attention. Each
against the stock processor on one diffusers `Attention`."""
import warnings

import pytest
import torch

import vidattn
from family_helpers import AttentionSpy

diffusers = pytest.importorskip("diffusers")
from diffusers.models.attention_processor import AllegroAttnProcessor2_0, Attention, AttnProcessor2_0  # noqa: E402

from vidattn.diffusers.processors_shared import AttnProcessor2Body, HunyuanJointBody  # noqa: E402

pytestmark = pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning")

TEXT, LENS = 6, [6, 4]


def _g(seed=3):
    return torch.Generator().manual_seed(seed)


def _text_mask():
    return (torch.arange(TEXT)[None, :] < torch.tensor(LENS)[:, None]).long()


def _randomize(module, seed=0):
    """Norm layers start as identities: random affine weights make a skipped norm show."""
    torch.manual_seed(seed)
    with torch.no_grad():
        for p in module.parameters():
            p.copy_(torch.randn_like(p) * 0.5 + (1.0 if p.dim() == 1 else 0.0))
    return module.eval()


def _compare(stock, ours, attn, *args, **kwargs):
    with torch.no_grad():
        expected = stock(attn, *args, **kwargs)
        got = ours(attn, *args, **kwargs)
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)
    return got


def test_latte_body_4d_input_group_norm_qk_norm_residual_and_rescale(monkeypatch):
    attn = _randomize(Attention(query_dim=32, heads=2, dim_head=72, qk_norm="layer_norm", norm_num_groups=4,
                                residual_connection=True, rescale_output_factor=2.0))
    spy = AttentionSpy(monkeypatch)
    hidden = torch.randn(2, 32, 3, 4, generator=_g())  # (B, C, H, W): flattened to 12 tokens and back
    out = _compare(AttnProcessor2_0(), vidattn.LatteAttnProcessor(), attn, hidden)
    assert out.shape == hidden.shape
    assert [(c["q"], c["layout"], c["kv_lens"]) for c in spy.calls] == [((2, 2, 12, 72), "bhsd", None)]


def test_latte_body_cross_attention_norm_and_padding_mask(monkeypatch):
    attn = _randomize(Attention(query_dim=32, cross_attention_dim=16, heads=2, dim_head=16,
                                cross_attention_norm="layer_norm", qk_norm="rms_norm"))
    spy = AttentionSpy(monkeypatch)
    hidden = torch.randn(2, 12, 32, generator=_g(4))
    text = torch.randn(2, TEXT, 16, generator=_g(5))
    bias = ((1 - _text_mask().float()) * -10000.0).unsqueeze(1)  # as the models make it
    _compare(AttnProcessor2_0(), vidattn.LatteAttnProcessor(), attn, hidden, text, attention_mask=bias)
    assert [c["kv_lens"].tolist() for c in spy.calls] == [LENS]


def test_latte_deprecated_scale_warns_as_stock_and_is_ignored():
    attn = _randomize(Attention(query_dim=32, heads=2, dim_head=16))
    hidden = torch.randn(1, 5, 32, generator=_g())
    messages = []
    for proc in (AttnProcessor2_0(), vidattn.LatteAttnProcessor()):
        for args, kwargs in (((None, None, None, 0.5), {}), ((), {"scale": 0.5})):
            with torch.no_grad(), warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                out = proc(attn, hidden, *args, **kwargs)
            messages.append([str(w.message) for w in caught if issubclass(w.category, FutureWarning)])
            with torch.no_grad():
                torch.testing.assert_close(out, AttnProcessor2_0()(attn, hidden), atol=1e-5, rtol=1e-5)
    assert messages[0] and all("`scale` argument is deprecated" in m[0] for m in messages), messages
    assert messages[:2] == messages[2:]


def test_allegro_rope_rotates_self_attention_only():
    from diffusers.models.embeddings import get_3d_rotary_pos_embed_allegro

    freqs_t, freqs_h, freqs_w, grid_t, grid_h, grid_w = get_3d_rotary_pos_embed_allegro(
        embed_dim=96, crops_coords=((0, 0), (2, 2)), grid_size=(2, 2), temporal_size=3,
        interpolation_scale=(2.2, 2.0, 2.0))
    pos = torch.cartesian_prod(grid_t.long(), grid_h.long(), grid_w.long()).transpose(0, 1).reshape(3, 1, -1)
    rope = ((freqs_t, freqs_h, freqs_w), tuple(pos))
    hidden = torch.randn(2, 12, 64, generator=_g(6))

    self_attn = _randomize(Attention(query_dim=64, heads=2, dim_head=96))
    rotated = _compare(AllegroAttnProcessor2_0(), vidattn.AllegroAttnProcessor(), self_attn, hidden,
                       image_rotary_emb=rope)
    with torch.no_grad():
        plain = vidattn.AllegroAttnProcessor()(self_attn, hidden)
    assert not torch.allclose(rotated, plain, atol=1e-3)  # the rotation reached self-attention

    # A cross-attention handed the video's RoPE leaves it out: the text has neither the video's length nor grid.
    cross = _randomize(Attention(query_dim=64, cross_attention_dim=16, heads=2, dim_head=96))
    text = torch.randn(2, TEXT, 16, generator=_g(7))
    bias = ((1 - _text_mask().float()) * -10000.0).unsqueeze(1)
    _compare(AllegroAttnProcessor2_0(), vidattn.AllegroAttnProcessor(), cross, hidden, text, attention_mask=bias,
             image_rotary_emb=rope)


def test_each_family_keeps_its_own_class_and_the_shared_body():
    from vidattn.diffusers import processors_shared

    for cls, body in ((vidattn.AllegroAttnProcessor, AttnProcessor2Body),
                      (vidattn.LatteAttnProcessor, AttnProcessor2Body),
                      (vidattn.HunyuanVideoAttnProcessor, HunyuanJointBody),
                      (vidattn.HunyuanVideo15AttnProcessor, HunyuanJointBody)):
        assert issubclass(cls, body) and cls.__module__ != processors_shared.__name__
    # apply routes by the exact class: one family's processor is not the other's
    assert not issubclass(vidattn.HunyuanVideo15AttnProcessor, vidattn.HunyuanVideoAttnProcessor)
    assert not issubclass(vidattn.LatteAttnProcessor, vidattn.AllegroAttnProcessor)
    with pytest.raises(NotImplementedError):
        HunyuanJointBody()._joint_qkv(None, None, None, None)
