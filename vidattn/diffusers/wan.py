"""Wan 2.1 / 2.2 (`WanTransformer3DModel`): a drop-in for diffusers' `WanAttnProcessor`.

Every step of the stock processor is kept (QKV projections, fused or not; RMS norms over heads; RoPE on
(B, S, H, D); the I2V image-key branch; text cross-attention). Two things change: the attention call, now
`vidattn.attention(..., layout="bshd")`, and RoPE, one fused kernel with the same output bits (`vidattn.rope`).
At 8-bit precision the q/k RMS norms and RoPE run as one kernel per tensor (`vidattn.rotary.norm_rope`: one pass over
q and k instead of two; the norm's 1/rms may differ from torch's in its last bit, so the exact precision keeps the
two steps; `VIDATTN_NORM_ROPE=0` turns it off).
"""
from typing import Optional

import torch

from .. import rotary
from ..precision import resolve_precision
from ..rotary import rope
from ._base import ProcessorBase
from .sdpa_common import StockProcessor


def _qkv(attn, hidden_states, encoder_hidden_states):
    context = hidden_states if encoder_hidden_states is None else encoder_hidden_states
    if getattr(attn, "fused_projections", False):
        if not attn.is_cross_attention:
            return attn.to_qkv(hidden_states).chunk(3, dim=-1)
        key, value = attn.to_kv(context).chunk(2, dim=-1)
        return attn.to_q(hidden_states), key, value
    return attn.to_q(hidden_states), attn.to_k(context), attn.to_v(context)


def _image_kv(attn, image_states):
    if getattr(attn, "fused_projections", False):
        return attn.to_added_kv(image_states).chunk(2, dim=-1)
    return attn.add_k_proj(image_states), attn.add_v_proj(image_states)


def _rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """Rotate interleaved channel pairs (x[2i], x[2i+1]) of a (B, S, H, D) tensor: diffusers' WanAttnProcessor
    arithmetic bit for bit, in one fused kernel on Hopper (vidattn.rope, mode "wan"; its torch ops elsewhere)."""
    return rope(x, cos, sin, mode="wan")


def project_wan(attn, hidden_states, encoder_hidden_states, rotary_emb, fuse_norm_rope: bool = False):
    """The stock Wan processor up to its attention calls: (query, key, value) as (B, S, H, D) with the norms and
    RoPE applied, and the I2V image (key, value) pair (None without image tokens). Shared with SkyReels-V2.
    fuse_norm_rope: q's and k's RMSNorm and RoPE as one pass each (rotary.norm_rope) where its kernel runs."""
    image_states = None
    if attn.add_k_proj is not None:
        # I2V: image tokens come first; the text context is the last 512 tokens (as in diffusers).
        n_image = encoder_hidden_states.shape[1] - 512
        image_states = encoder_hidden_states[:, :n_image]
        encoder_hidden_states = encoder_hidden_states[:, n_image:]

    query, key, value = _qkv(attn, hidden_states, encoder_hidden_states)
    value = value.unflatten(2, (attn.heads, -1))
    if rotary_emb is not None and fuse_norm_rope:
        # The norms and RoPE in one pass each where the fused kernel runs (rotary.norm_rope), else the same two
        # steps as below.
        query = rotary.norm_rope(attn.norm_q, query, attn.heads, *rotary_emb)
        key = rotary.norm_rope(attn.norm_k, key, attn.heads, *rotary_emb)
    else:
        query = attn.norm_q(query)
        key = attn.norm_k(key)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))

        if rotary_emb is not None:
            query = _rope(query, *rotary_emb)
            key = _rope(key, *rotary_emb)

    image_kv = None
    if image_states is not None:
        key_img, value_img = _image_kv(attn, image_states)
        key_img = attn.norm_added_k(key_img)
        image_kv = (key_img.unflatten(2, (attn.heads, -1)), value_img.unflatten(2, (attn.heads, -1)))
    return query, key, value, image_kv


class WanAttnProcessor(ProcessorBase):
    """vidattn processor for diffusers' `WanAttention` (Wan 2.1 T2V/I2V, Wan 2.2 T2V/I2V/TI2V).

    Use through `vidattn.apply(pipe)` or `pipe.transformer.set_attn_processor(vidattn.WanAttnProcessor())`.
    Masks: a boolean key-padding mask ((B, Skv) or (B, 1, 1, Skv), True = keep, a prefix per row)
    becomes `kv_lens`; any other mask, or context parallelism, runs diffusers' own attention dispatch.
    """

    _vidattn_original = StockProcessor("diffusers.models.transformers.transformer_wan", "WanAttnProcessor")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        rotary_emb: Optional[tuple] = None,
    ) -> torch.Tensor:
        query, key, value, image_kv = project_wan(attn, hidden_states, encoder_hidden_states, rotary_emb,
                                                  self._fuse_norm_rope())

        image_out = None
        if image_kv is not None:
            image_out = self._attend(query, *image_kv)
            image_out = image_out.flatten(2, 3).type_as(query)

        parallel_config = self._parallel_config if encoder_hidden_states is None else None
        hidden_states = self._attend(query, key, value, attention_mask, parallel_config)
        hidden_states = hidden_states.flatten(2, 3).type_as(query)

        if image_out is not None:
            hidden_states = hidden_states + image_out

        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states

    def _fuse_norm_rope(self) -> bool:
        """Whether q's and k's norms and RoPE may run as one pass (rotary.norm_rope): the switch is on (the default;
        VIDATTN_NORM_ROPE=0 turns it off) and this call runs at 8-bit precision. The fused norm's 1/rms can differ
        from torch's in its last bit; the exact precision keeps diffusers' steps bit for bit, the 8-bit one quantizes
        q and k anyway."""
        return rotary.norm_rope_enabled and resolve_precision(self.precision) == "8bit"
