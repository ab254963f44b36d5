"""EasyAnimate (`EasyAnimateTransformer3DModel`, V5.1: 48 heads x 64): a drop-in for diffusers'
`EasyAnimateAttnProcessor2_0`.

Joint MMDiT attention: text tokens first, then video tokens; RoPE on the video part of q (and of k for
self-attention). The stock processor calls `F.scaled_dot_product_attention` on (B, H, S, D) directly, so no
diffusers backend can reach it: this processor keeps every other line and calls `vidattn.attention(...,
layout="bhsd")`. The block passes no mask; a key-padding mask would become `kv_lens`, any other the stock SDPA call.
The RoPE is diffusers' `apply_rotary_emb` (CogVideoX's: interleaved pairs, (S, D) tables) through `vidattn.rope`:
the same output bits, one kernel on Hopper.
"""
from typing import Optional

import torch

from .apply import register_processor
from .processors_shared import project_heads
from .sdpa_common import StockProcessor, VidattnProcessor, attend_bhsd

_EASYANIMATE = "diffusers.models.transformers.transformer_easyanimate"


class EasyAnimateAttnProcessor(VidattnProcessor):
    """vidattn processor for diffusers' `EasyAnimateAttnProcessor2_0`.

    Use through `vidattn.apply(pipe)` or `pipe.transformer.set_attn_processor(vidattn.EasyAnimateAttnProcessor())`.
    """

    _vidattn_original = StockProcessor(_EASYANIMATE, "EasyAnimateAttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if attn.add_q_proj is None and encoder_hidden_states is not None:
            hidden_states = torch.cat([encoder_hidden_states, hidden_states], dim=1)

        query, key, value = project_heads(attn, hidden_states, bhsd=True)

        if attn.add_q_proj is not None and encoder_hidden_states is not None:
            encoder_query, encoder_key, encoder_value = project_heads(attn, encoder_hidden_states, added=True,
                                                                      bhsd=True)
            query = torch.cat([encoder_query, query], dim=2)
            key = torch.cat([encoder_key, key], dim=2)
            value = torch.cat([encoder_value, value], dim=2)

        if image_rotary_emb is not None:
            from ..rotary import apply_rotary_emb  # diffusers' function, fused on Hopper (same bits)

            query[:, :, encoder_hidden_states.shape[1]:] = apply_rotary_emb(
                query[:, :, encoder_hidden_states.shape[1]:], image_rotary_emb
            )
            if not attn.is_cross_attention:
                key[:, :, encoder_hidden_states.shape[1]:] = apply_rotary_emb(
                    key[:, :, encoder_hidden_states.shape[1]:], image_rotary_emb
                )

        hidden_states = attend_bhsd(query, key, value, attention_mask, precision=self.precision)
        hidden_states = hidden_states.transpose(1, 2).flatten(2, 3)
        hidden_states = hidden_states.to(query.dtype)

        if encoder_hidden_states is not None:
            encoder_hidden_states, hidden_states = (
                hidden_states[:, :encoder_hidden_states.shape[1]],
                hidden_states[:, encoder_hidden_states.shape[1]:],
            )

            if getattr(attn, "to_out", None) is not None:
                hidden_states = attn.to_out[0](hidden_states)
                hidden_states = attn.to_out[1](hidden_states)

            if getattr(attn, "to_add_out", None) is not None:
                encoder_hidden_states = attn.to_add_out(encoder_hidden_states)
        else:
            if getattr(attn, "to_out", None) is not None:
                hidden_states = attn.to_out[0](hidden_states)
                hidden_states = attn.to_out[1](hidden_states)

        return hidden_states, encoder_hidden_states


register_processor(f"{_EASYANIMATE}.EasyAnimateAttnProcessor2_0", EasyAnimateAttnProcessor,
                   "joint text+video; the stock processor calls F.sdpa directly")
