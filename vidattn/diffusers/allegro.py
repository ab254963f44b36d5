"""Allegro (`AllegroTransformer3DModel`, 24 heads x 96): a drop-in for diffusers' `AllegroAttnProcessor2_0`.

Every step of the stock processor is kept (spatial/group norms, RoPE on self-attention q/k, residual and output
rescale) and only `F.scaled_dot_product_attention` on (B, H, S, D) becomes `vidattn.attention(...,
layout="bhsd")`. Allegro's head dim, 96, runs on the kernel's own D=96 build (no padding, no copy of q/k/v).
The text mask, (1 - m) * -10000 as the model
makes it, becomes `kv_lens` when it pads a prefix of keys; any other mask runs the stock SDPA call.
"""
from typing import Optional

import torch

from .apply import register_processor
from .sdpa_common import StockProcessor, VidattnProcessor, attend_bhsd, prepare_sdpa_mask


class AllegroAttnProcessor(VidattnProcessor):
    """vidattn processor for diffusers' `AllegroAttnProcessor2_0` (diffusers' `Attention`).

    Use through `vidattn.apply(pipe)` (the model has no `set_attn_processor`: apply sets each `Attention`'s).
    """

    _vidattn_original = StockProcessor("diffusers.models.attention_processor", "AllegroAttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        temb: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        residual = hidden_states

        if attn.spatial_norm is not None:
            hidden_states = attn.spatial_norm(hidden_states, temb)

        input_ndim = hidden_states.ndim

        if input_ndim == 4:
            batch_size, channel, height, width = hidden_states.shape
            hidden_states = hidden_states.view(batch_size, channel, height * width).transpose(1, 2)

        batch_size, sequence_length, _ = (
            hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        )

        attention_mask, mask_source = prepare_sdpa_mask(attn, attention_mask, sequence_length, batch_size)

        if attn.group_norm is not None:
            hidden_states = attn.group_norm(hidden_states.transpose(1, 2)).transpose(1, 2)

        query = attn.to_q(hidden_states)

        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        elif attn.norm_cross:
            encoder_hidden_states = attn.norm_encoder_hidden_states(encoder_hidden_states)

        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        inner_dim = key.shape[-1]
        head_dim = inner_dim // attn.heads

        query = query.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
        key = key.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)
        value = value.view(batch_size, -1, attn.heads, head_dim).transpose(1, 2)

        if image_rotary_emb is not None and not attn.is_cross_attention:
            from diffusers.models.embeddings import apply_rotary_emb_allegro

            query = apply_rotary_emb_allegro(query, image_rotary_emb[0], image_rotary_emb[1])
            key = apply_rotary_emb_allegro(key, image_rotary_emb[0], image_rotary_emb[1])

        hidden_states = attend_bhsd(query, key, value, attention_mask, mask_source, self.precision)

        hidden_states = hidden_states.transpose(1, 2).reshape(batch_size, -1, attn.heads * head_dim)
        hidden_states = hidden_states.to(query.dtype)

        # linear proj
        hidden_states = attn.to_out[0](hidden_states)
        # dropout
        hidden_states = attn.to_out[1](hidden_states)

        if input_ndim == 4:
            hidden_states = hidden_states.transpose(-1, -2).reshape(batch_size, channel, height, width)

        if attn.residual_connection:
            hidden_states = hidden_states + residual

        hidden_states = hidden_states / attn.rescale_output_factor

        return hidden_states


register_processor("diffusers.models.attention_processor.AllegroAttnProcessor2_0", AllegroAttnProcessor)
