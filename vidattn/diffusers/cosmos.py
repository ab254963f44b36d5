"""Cosmos 1.0 / 2 / 2.5 (`CosmosTransformer3DModel`, also `CosmosControlNetModel`): drop-ins for diffusers'
`CosmosAttnProcessor2_0` and `CosmosAttnProcessor2_5`.

The stock processors call `dispatch_attention_fn` without a `backend=` and have no `_attention_backend`, so
`set_attention_backend` on the model cannot reach them (only the process-wide active backend can): hence processors.
Every step is kept (projections, q/k norms, RoPE, the K/V `repeat_interleave`, 2.5's image-context branch); the
attention call becomes `vidattn.attention`. The pipelines pass no text mask; a boolean key-padding mask (the model
makes (B, 1, 1, S) of a (B, S) mask) becomes `kv_lens`, any other mask runs diffusers' dispatch as the stock one.
"""
from typing import Optional

import torch

from ._base import ProcessorBase
from .apply import register_processor
from .sdpa_common import StockProcessor

_COSMOS = "diffusers.models.transformers.transformer_cosmos"


def _project(attn, hidden_states, context, image_rotary_emb):
    query = attn.to_q(hidden_states)
    key = attn.to_k(context)
    value = attn.to_v(context)

    query = query.unflatten(2, (attn.heads, -1)).transpose(1, 2)
    key = key.unflatten(2, (attn.heads, -1)).transpose(1, 2)
    value = value.unflatten(2, (attn.heads, -1)).transpose(1, 2)

    query = attn.norm_q(query)
    key = attn.norm_k(key)

    if image_rotary_emb is not None:
        from ..rotary import apply_rotary_emb  # diffusers' function, fused on Hopper (same bits)

        query = apply_rotary_emb(query, image_rotary_emb, use_real=True, use_real_unbind_dim=-2)
        key = apply_rotary_emb(key, image_rotary_emb, use_real=True, use_real_unbind_dim=-2)

    # As in diffusers (its "GQA" step repeats along the last dim by D // D = 1: a no-op kept for fidelity).
    key = key.repeat_interleave(query.size(3) // key.size(3), dim=3)
    value = value.repeat_interleave(query.size(3) // value.size(3), dim=3)
    return query, key, value


class CosmosAttnProcessor(ProcessorBase):
    """vidattn processor for diffusers' `CosmosAttnProcessor2_0` (Cosmos 1.0 and 2)."""

    _vidattn_original = StockProcessor(_COSMOS, "CosmosAttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states

        query, key, value = _project(attn, hidden_states, encoder_hidden_states, image_rotary_emb)

        hidden_states = self._attend(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                     attention_mask)
        hidden_states = hidden_states.flatten(2, 3).type_as(query)
        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states


class Cosmos25AttnProcessor(ProcessorBase):
    """vidattn processor for diffusers' `CosmosAttnProcessor2_5` (Cosmos 2.5: text and image-context branches)."""

    _vidattn_original = StockProcessor(_COSMOS, "CosmosAttnProcessor2_5")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: tuple,
        attention_mask: tuple,
        image_rotary_emb=None,
    ) -> torch.Tensor:
        if not isinstance(encoder_hidden_states, tuple):
            raise ValueError("Expected encoder_hidden_states as (text_context, img_context) tuple.")

        text_context, img_context = encoder_hidden_states if encoder_hidden_states else (None, None)
        text_mask, img_mask = attention_mask if attention_mask else (None, None)

        if text_context is None:
            text_context = hidden_states

        query, key, value = _project(attn, hidden_states, text_context, image_rotary_emb)

        attn_out = self._attend(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2), text_mask)
        attn_out = attn_out.flatten(2, 3).type_as(query)

        if img_context is not None:
            q_img = attn.q_img(hidden_states)
            k_img = attn.k_img(img_context)
            v_img = attn.v_img(img_context)

            batch_size = hidden_states.shape[0]
            dim_head = attn.out_dim // attn.heads

            q_img = q_img.view(batch_size, -1, attn.heads, dim_head).transpose(1, 2)
            k_img = k_img.view(batch_size, -1, attn.heads, dim_head).transpose(1, 2)
            v_img = v_img.view(batch_size, -1, attn.heads, dim_head).transpose(1, 2)

            q_img = attn.q_img_norm(q_img)
            k_img = attn.k_img_norm(k_img)

            k_img = k_img.repeat_interleave(q_img.size(3) // k_img.size(3), dim=3)
            v_img = v_img.repeat_interleave(q_img.size(3) // v_img.size(3), dim=3)

            img_out = self._attend(q_img.transpose(1, 2), k_img.transpose(1, 2), v_img.transpose(1, 2), img_mask)
            img_out = img_out.flatten(2, 3).type_as(q_img)
            hidden_states = attn_out + img_out
        else:
            hidden_states = attn_out

        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states


register_processor(f"{_COSMOS}.CosmosAttnProcessor2_0", CosmosAttnProcessor,
                   "its processors pass no backend=, so only a processor reaches them per model")
register_processor(f"{_COSMOS}.CosmosAttnProcessor2_5", Cosmos25AttnProcessor,
                   "text and image-context branches; no backend= in the stock processor")
