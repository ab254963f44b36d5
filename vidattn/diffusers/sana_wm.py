"""SANA-WM (`SanaWMTransformer3DModel`, 20 heads x 112): its softmax layers on vidattn.

Every `softmax_every_n`-th block of SANA-WM runs softmax attention instead of GDN linear attention, in two
parameter-free modules that call `F.scaled_dot_product_attention` in their own `forward` (no processor, so no
diffusers backend reaches them): `SanaWMSoftmaxAttention` (the main branch) and `SanaWMSoftmaxCamAttention` (the
UCPE camera branch). `vidattn.apply` swaps these modules' class for a subclass whose `forward` is the one below: the
stock code line for line, with the SDPA call replaced by `vidattn.attention(..., layout="bhsd")`.

- Main branch: no mask (padded frames are zeroed in q, k and v, and still attend, as in stock); the stock code casts
  fp32 to bf16 before attention, so the kernel always gets bf16.
- Camera branch: stock pads head dim 112 to 128 with zeros for FlashAttention, which leaves the scores unchanged but
  makes SDPA's default scale 1/sqrt(128). The kernel takes 112 as it is (padded on the fly) with that same scale.
  Padded frames are dropped from the keys by a -1e9 bias: trailing padded frames become `kv_lens`; any other pattern
  runs the stock padded SDPA call, with the reason.

GDN linear attention (the other blocks) is not softmax attention and stays stock; the text cross-attention
(`SanaWMCrossAttnProcessor`) is on the vidattn backend (backend_routes.py).
"""
from typing import Optional

import torch
import torch.nn.functional as F

from .. import ops
from .apply import register_module
from .sdpa_common import kernel, sdpa_mask_to_kv_lens

_WM = "diffusers.models.transformers.transformer_sana_wm"


def softmax_attention_forward(
    self,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    rotary_emb: Optional[torch.Tensor] = None,
    token_valid_mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """`SanaWMSoftmaxAttention.forward` with the attention call on vidattn."""
    from diffusers.models.transformers.transformer_sana_wm import _apply_rotary_emb

    batch_size, seq_len, num_heads, head_dim = query.shape
    dtype_orig = value.dtype

    if rotary_emb is not None:
        query = _apply_rotary_emb(query.permute(0, 2, 3, 1), rotary_emb).permute(0, 3, 1, 2)
        key = _apply_rotary_emb(key.permute(0, 2, 3, 1), rotary_emb).permute(0, 3, 1, 2)

    if token_valid_mask is not None:
        token_mask = token_valid_mask.view(batch_size, seq_len, 1, 1)
        query = query * token_mask
        key = key * token_mask
        value = value * token_mask

    query = query.transpose(1, 2)  # (B, H, N, D)
    key = key.transpose(1, 2)
    value = value.transpose(1, 2)

    if query.dtype == torch.float32:  # as stock: attention runs in bf16
        query, key, value = query.bfloat16(), key.bfloat16(), value.bfloat16()

    hidden_states = kernel(query, key, value, self.precision, layout="bhsd")
    return hidden_states.transpose(1, 2).reshape(batch_size, seq_len, num_heads * head_dim).to(dtype_orig)


def _stock_cam_sdpa(query, key, value, bias, head_dim):
    """The stock camera-branch call: head dims outside FlashAttention's set padded with zeros, SDPA, sliced."""
    need_pad = head_dim not in (32, 64, 128, 256) and head_dim < 256
    if need_pad:
        pad_size = (128 if head_dim <= 128 else 256) - head_dim
        query, key, value = F.pad(query, (0, pad_size)), F.pad(key, (0, pad_size)), F.pad(value, (0, pad_size))
    out = F.scaled_dot_product_attention(query, key, value, attn_mask=bias)
    return out[..., :head_dim] if need_pad else out


def _cam_attention(query, key, value, bias, head_dim, precision):
    # The camera branch hands over (B, H, D, N) tensors transposed to (B, H, N, D): the kernel's TMA needs the head
    # dim innermost, so one copy each (stock's zero padding copies them too).
    query, key, value = (t if t.stride(-1) == 1 else t.contiguous() for t in (query, key, value))
    # Zero columns add nothing to q.k; what stock's padding changes is SDPA's default scale (1/sqrt(padded dim)).
    padded = head_dim if head_dim in (32, 64, 128, 256) or head_dim >= 256 else (128 if head_dim <= 128 else 256)
    scale = padded ** -0.5
    if bias is None:
        return kernel(query, key, value, precision, layout="bhsd", scale=scale)
    b, h, sq, _ = query.shape
    kv_lens, reason = sdpa_mask_to_kv_lens(bias, b, h, sq, key.shape[2])
    if kv_lens is None:
        if not torch.compiler.is_compiling():
            ops.warn_fallback(f"SANA-WM camera attention: {reason}")
        return _stock_cam_sdpa(query, key, value, bias, head_dim)
    return kernel(query, key, value, precision, layout="bhsd", scale=scale, kv_lens=kv_lens)


def softmax_cam_attention_forward(
    self,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    ray_transforms: tuple,
    token_valid_mask: Optional[torch.Tensor] = None,
) -> torch.Tensor:
    """`SanaWMSoftmaxCamAttention.forward` with the attention call on vidattn."""
    from diffusers.models.transformers.transformer_sana_wm import (_apply_ucpe_transform,
                                                                   _downscale_to_reference_rms)

    batch_size, seq_len, num_heads, head_dim = query.shape
    dtype_orig = value.dtype

    query = query.permute(0, 2, 3, 1).contiguous()
    key = key.permute(0, 2, 3, 1).contiguous()
    value = value.permute(0, 2, 3, 1).contiguous()

    P, P_T, P_inv, rotary_emb_cam = ray_transforms
    query_ucpe = _apply_ucpe_transform(query.transpose(-1, -2), P_T, rotary_emb_cam).transpose(-1, -2).contiguous()
    key_value = torch.cat([key, value], dim=1)
    key_value_ucpe = (
        _apply_ucpe_transform(key_value.transpose(-1, -2), P_inv, rotary_emb_cam).transpose(-1, -2).contiguous()
    )
    key_ucpe, value_ucpe = torch.chunk(key_value_ucpe, chunks=2, dim=1)

    query_ucpe = _downscale_to_reference_rms(query, query_ucpe)
    key_ucpe = _downscale_to_reference_rms(key, key_ucpe)
    value_ucpe = _downscale_to_reference_rms(value, value_ucpe)

    if token_valid_mask is not None:
        token_mask_qkv = token_valid_mask.view(batch_size, 1, 1, seq_len)
        query_ucpe = query_ucpe * token_mask_qkv
        value_ucpe = value_ucpe * token_mask_qkv

    query_sdpa = query_ucpe.transpose(-1, -2)
    key_sdpa = key_ucpe.transpose(-1, -2)
    value_sdpa = value_ucpe.transpose(-1, -2)

    query_sdpa, key_sdpa, value_sdpa = query_sdpa.float(), key_sdpa.float(), value_sdpa.float()
    if query_sdpa.dtype == torch.float32:  # as stock: attention runs in bf16
        query_sdpa, key_sdpa, value_sdpa = query_sdpa.bfloat16(), key_sdpa.bfloat16(), value_sdpa.bfloat16()

    invalid_kv_logit_bias = None
    if token_valid_mask is not None and not bool(token_valid_mask.all()):
        invalid_kv_logit_bias = torch.where(
            token_valid_mask.bool().view(batch_size, 1, 1, -1),
            torch.zeros((), dtype=query_sdpa.dtype, device=query_sdpa.device),
            torch.full((), -1e9, dtype=query_sdpa.dtype, device=query_sdpa.device),
        )

    hidden_states = _cam_attention(query_sdpa, key_sdpa, value_sdpa, invalid_kv_logit_bias, head_dim,
                                   self.precision)

    hidden_states = hidden_states.transpose(-1, -2)
    if hidden_states.dtype != dtype_orig:
        hidden_states = hidden_states.to(dtype_orig)
    if token_valid_mask is not None:
        hidden_states = hidden_states * token_valid_mask.view(batch_size, 1, 1, seq_len).to(hidden_states.dtype)

    hidden_states = (
        _apply_ucpe_transform(hidden_states.transpose(-1, -2), P, rotary_emb_cam, inverse_rope=True)
        .transpose(-1, -2)
        .contiguous()
    )
    hidden_states = hidden_states.reshape(batch_size, num_heads * head_dim, seq_len).permute(0, 2, 1)
    if token_valid_mask is not None:
        hidden_states = hidden_states * token_valid_mask.view(batch_size, seq_len, 1).to(hidden_states.dtype)
    return hidden_states


register_module(f"{_WM}.SanaWMSoftmaxAttention", softmax_attention_forward,
                "softmax main branch of every softmax_every_n-th block: no mask, bf16 as in stock")
register_module(f"{_WM}.SanaWMSoftmaxCamAttention", softmax_cam_attention_forward,
                "softmax UCPE camera branch: stock's head-dim padding kept as its scale; trailing padded frames "
                "-> kv_lens")
