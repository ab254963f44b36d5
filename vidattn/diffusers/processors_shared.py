"""Processor bodies that two families' stock processors share, so each family keeps only the lines where its stock
processor differs:

- `AttnProcessor2Body`: diffusers' generic `AttnProcessor2_0` (Latte) and `AllegroAttnProcessor2_0` (a copy of it
  with RoPE on self-attention q/k in place of the q/k norms). Works in (B, H, S, D) like the stock processors; the
  SDPA call becomes `attend_bhsd`.
- `HunyuanJointBody`: `HunyuanVideoAttnProcessor2_0` and `HunyuanVideo15AttnProcessor2_0` (video stream, then the
  text stream's added projections, joint attention, output split). They differ before the text stream (HunyuanVideo
  also has a single-stream form; 1.5 always normalises q/k) and in their masks, so those are the subclasses' hooks.
- `project_heads`: the q/k/v projections split into heads and the optional q/k norms, of the main stream or of the
  text stream's added projections (Mochi, EasyAnimate, the HunyuanVideo text stream).
"""
from typing import Optional

import torch

from ._base import ProcessorBase
from .sdpa_common import VidattnProcessor, attend_bhsd, prepare_sdpa_mask


class AttnProcessor2Body(VidattnProcessor):
    """Every step of diffusers' `AttnProcessor2_0` but the attention call. A subclass keeps its stock `__call__`
    signature, calls `_forward` and overrides `_qk`, the step between the head split and attention."""

    def _qk(self, attn, query, key, **extra):
        """(query, key) on (B, H, S, D) as attention takes them; `extra` is what `__call__` passed `_forward`."""
        return query, key

    def _forward(self, attn, hidden_states, encoder_hidden_states, attention_mask, temb, **extra):
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

        query, key = self._qk(attn, query, key, **extra)

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


def split_heads(attn, hidden_states: torch.Tensor):
    """The QKV projections of `hidden_states`, each (B, S, H, D)."""
    return tuple(proj(hidden_states).unflatten(2, (attn.heads, -1)) for proj in (attn.to_q, attn.to_k, attn.to_v))


def project_heads(attn, hidden_states: torch.Tensor, added: bool = False, bhsd: bool = False):
    """(query, key, value) of `hidden_states`, each split into heads, (B, S, H, D) or with `bhsd` (B, H, S, D), then
    the q/k norms the module has (a None norm is skipped): the main stream's (to_q/to_k/to_v, norm_q/norm_k) or with
    `added` the text stream's (add_q_proj/add_k_proj/add_v_proj, norm_added_q/norm_added_k). The stock processors'
    order: the three projections, then the norms, each norm on the layout the heads are in."""
    if added:
        projs = (attn.add_q_proj, attn.add_k_proj, attn.add_v_proj)
        norm_q, norm_k = attn.norm_added_q, attn.norm_added_k
    else:
        projs, (norm_q, norm_k) = (attn.to_q, attn.to_k, attn.to_v), (attn.norm_q, attn.norm_k)
    query, key, value = (proj(hidden_states).unflatten(2, (attn.heads, -1)) for proj in projs)
    if bhsd:
        query, key, value = query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2)
    if norm_q is not None:
        query = norm_q(query)
    if norm_k is not None:
        key = norm_k(key)
    return query, key, value


class HunyuanJointBody(ProcessorBase):
    """The stock HunyuanVideo processors' steps around two family hooks: `_joint_qkv` (the video stream's
    projections, q/k norms and RoPE, then the text stream's: (B, S_video + S_text, H, D) each) and `_attend_joint`
    (attention with the model's mask). The output split and projections are shared."""

    def _joint_qkv(self, attn, hidden_states, encoder_hidden_states, image_rotary_emb):
        raise NotImplementedError

    def _attend_joint(self, query, key, value, attention_mask):
        raise NotImplementedError

    @staticmethod
    def _add_text_stream(attn, encoder_hidden_states, query, key, value):
        """The text stream's added projections and norms, its tokens appended after the video's."""
        encoder_query, encoder_key, encoder_value = project_heads(attn, encoder_hidden_states, added=True)

        query = torch.cat([query, encoder_query], dim=1)
        key = torch.cat([key, encoder_key], dim=1)
        value = torch.cat([value, encoder_value], dim=1)
        return query, key, value

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ):
        query, key, value = self._joint_qkv(attn, hidden_states, encoder_hidden_states, image_rotary_emb)

        hidden_states = self._attend_joint(query, key, value, attention_mask)
        hidden_states = hidden_states.flatten(2, 3)
        hidden_states = hidden_states.to(query.dtype)

        if encoder_hidden_states is not None:
            n_text = encoder_hidden_states.shape[1]
            hidden_states, encoder_hidden_states = hidden_states[:, :-n_text], hidden_states[:, -n_text:]

            if getattr(attn, "to_out", None) is not None:
                hidden_states = attn.to_out[0](hidden_states)
                hidden_states = attn.to_out[1](hidden_states)

            if getattr(attn, "to_add_out", None) is not None:
                encoder_hidden_states = attn.to_add_out(encoder_hidden_states)

        return hidden_states, encoder_hidden_states
