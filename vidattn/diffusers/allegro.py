"""Allegro (`AllegroTransformer3DModel`, 24 heads x 96): a drop-in for diffusers' `AllegroAttnProcessor2_0`.

Every step of the stock processor is kept (spatial/group norms, RoPE on self-attention q/k, residual and output
rescale) and only `F.scaled_dot_product_attention` on (B, H, S, D) becomes `vidattn.attention(...,
layout="bhsd")`. Allegro's head dim, 96, runs on the kernel's own D=96 build (no padding, no copy of q/k/v).
The text mask, (1 - m) * -10000 as the model
makes it, becomes `kv_lens` when it pads a prefix of keys; any other mask runs the stock SDPA call.
The stock processor is diffusers' `AttnProcessor2_0` with RoPE for the q/k norms: both run on
`processors_shared.AttnProcessor2Body` (shared with Latte), which calls `_qk` here.
"""
from typing import Optional

import torch

from .apply import register_processor
from .processors_shared import AttnProcessor2Body
from .sdpa_common import StockProcessor


class AllegroAttnProcessor(AttnProcessor2Body):
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
        return self._forward(attn, hidden_states, encoder_hidden_states, attention_mask, temb,
                             image_rotary_emb=image_rotary_emb)

    def _qk(self, attn, query, key, image_rotary_emb=None):
        # Allegro's stock processor has no q/k norms; it rotates self-attention's q and k instead.
        if image_rotary_emb is not None and not attn.is_cross_attention:
            from ..rotary import allegro_apply_rotary_emb as apply_rotary_emb_allegro  # fused, same bits

            query = apply_rotary_emb_allegro(query, image_rotary_emb[0], image_rotary_emb[1])
            key = apply_rotary_emb_allegro(key, image_rotary_emb[0], image_rotary_emb[1])
        return query, key


register_processor("diffusers.models.attention_processor.AllegroAttnProcessor2_0", AllegroAttnProcessor)
