"""CogVideoX (`CogVideoXTransformer3DModel`, also ConsisID and CogView3-Plus): drop-ins for diffusers'
`CogVideoXAttnProcessor2_0` and `FusedCogVideoXAttnProcessor2_0` (what `fuse_qkv_projections()` sets).

Joint attention: the text tokens are concatenated in front of the video tokens, RoPE rotates the video part of
q (and of k, for self-attention) only. Every step of the stock processors is kept (including the fused one's
mask length, taken from the text tokens as in diffusers); only `F.scaled_dot_product_attention` on (B, H, S, D)
becomes `vidattn.attention(..., layout="bhsd")`. CogVideoX itself passes no attention mask; a key-padding
mask becomes `kv_lens`, any other mask runs the stock SDPA call.
"""
from typing import Optional

import torch

from .apply import register_processor
from .sdpa_common import StockProcessor, VidattnProcessor, attend_bhsd, prepare_sdpa_mask


def _joint_attention(attn, query, key, value, batch_size, text_seq_length, attention_mask, image_rotary_emb,
                     mask_source=None, precision=None):
    inner_dim = key.shape[-1]
    head_dim = inner_dim // attn.heads

    query = query.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
    key = key.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
    value = value.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)

    if attn.norm_q is not None:
        query = attn.norm_q(query)
    if attn.norm_k is not None:
        key = attn.norm_k(key)

    if image_rotary_emb is not None:
        from ..rotary import apply_rotary_emb  # diffusers' function, fused on Hopper (same bits)

        query[:, :, text_seq_length:] = apply_rotary_emb(query[:, :, text_seq_length:], image_rotary_emb)
        if not attn.is_cross_attention:
            key[:, :, text_seq_length:] = apply_rotary_emb(key[:, :, text_seq_length:], image_rotary_emb)

    hidden_states = attend_bhsd(query, key, value, attention_mask, mask_source, precision)

    hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, attn.heads * head_dim)

    hidden_states = attn.to_out[0](hidden_states)
    hidden_states = attn.to_out[1](hidden_states)

    encoder_hidden_states, hidden_states = hidden_states.split(
        [text_seq_length, hidden_states.size(1) - text_seq_length], dim=1
    )
    return hidden_states, encoder_hidden_states


class CogVideoXAttnProcessor(VidattnProcessor):
    """vidattn processor for diffusers' `CogVideoXAttnProcessor2_0` (CogVideoX 2B/5B/1.5: 30 or 48 heads x 64).

    Use through `vidattn.apply(pipe)` or `pipe.transformer.set_attn_processor(vidattn.CogVideoXAttnProcessor())`.
    """

    _vidattn_original = StockProcessor("diffusers.models.attention_processor", "CogVideoXAttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        text_seq_length = encoder_hidden_states.size(1)

        hidden_states = torch.cat([encoder_hidden_states, hidden_states], dim=1)

        batch_size, sequence_length, _ = hidden_states.shape

        attention_mask, mask_source = prepare_sdpa_mask(attn, attention_mask, sequence_length, batch_size)

        query = attn.to_q(hidden_states)
        key = attn.to_k(hidden_states)
        value = attn.to_v(hidden_states)
        return _joint_attention(attn, query, key, value, batch_size, text_seq_length, attention_mask,
                                image_rotary_emb, mask_source, self.precision)


class FusedCogVideoXAttnProcessor(VidattnProcessor):
    """vidattn processor for diffusers' `FusedCogVideoXAttnProcessor2_0` (after `fuse_qkv_projections()`)."""

    _vidattn_original = StockProcessor("diffusers.models.attention_processor", "FusedCogVideoXAttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        text_seq_length = encoder_hidden_states.size(1)

        hidden_states = torch.cat([encoder_hidden_states, hidden_states], dim=1)

        # As in diffusers: the batch size and mask length come from the text tokens here.
        batch_size, sequence_length, _ = (
            hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        )

        attention_mask, mask_source = prepare_sdpa_mask(attn, attention_mask, sequence_length, batch_size)

        qkv = attn.to_qkv(hidden_states)
        split_size = qkv.shape[-1] // 3
        query, key, value = torch.split(qkv, split_size, dim=-1)
        return _joint_attention(attn, query, key, value, batch_size, text_seq_length, attention_mask,
                                image_rotary_emb, mask_source, self.precision)


register_processor("diffusers.models.attention_processor.CogVideoXAttnProcessor2_0", CogVideoXAttnProcessor)
register_processor("diffusers.models.attention_processor.FusedCogVideoXAttnProcessor2_0", FusedCogVideoXAttnProcessor)
