"""HunyuanVideo (`HunyuanVideoTransformer3DModel`, also the token-replace I2V variant and FramePack's
`HunyuanVideoFramepackTransformer3DModel`): a drop-in for diffusers' `HunyuanVideoAttnProcessor2_0`.

Every step of the stock processor is kept (joint video + text attention: QKV projections, RMS norms over
heads, RoPE on the video tokens only, the text stream's added projections, output split and projections);
only the attention call changes. The model's mask, (B, 1, 1, S) boolean with the valid text tokens right after
the video tokens, is a key prefix per batch row: it becomes `kv_lens`.

The token refiner's attention (`context_embedder`, plain `Attention` with diffusers' `AttnProcessor2_0`, at
most 256 text tokens, < 0.1% of a forward) is left as it is; `vidattn.apply` lists those modules as skipped.
"""
from typing import Optional

import torch

from ._base import ProcessorBase
from .sdpa_common import StockProcessor
from .apply import register_processor


class HunyuanVideoAttnProcessor(ProcessorBase):
    """vidattn processor for the dual- and single-stream blocks of diffusers' HunyuanVideo transformers.

    Use through `vidattn.apply(pipe)` (the blocks' `HunyuanVideoAttnProcessor2_0` are replaced, the token
    refiner is skipped) or per module with `module.set_processor(vidattn.HunyuanVideoAttnProcessor())`.
    Masks: a boolean key-padding mask ((B, S) or (B, 1, 1, S), a prefix per row) becomes `kv_lens`; any other
    mask, or context parallelism, runs diffusers' own attention dispatch.
    """

    _vidattn_original = StockProcessor("diffusers.models.transformers.transformer_hunyuan_video",
                                       "HunyuanVideoAttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ):
        if attn.add_q_proj is None and encoder_hidden_states is not None:
            hidden_states = torch.cat([hidden_states, encoder_hidden_states], dim=1)

        query = attn.to_q(hidden_states)
        key = attn.to_k(hidden_states)
        value = attn.to_v(hidden_states)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)

        if image_rotary_emb is not None:
            from diffusers.models.embeddings import apply_rotary_emb

            if attn.add_q_proj is None and encoder_hidden_states is not None:
                n_text = encoder_hidden_states.shape[1]
                query = torch.cat([apply_rotary_emb(query[:, :-n_text], image_rotary_emb, sequence_dim=1),
                                   query[:, -n_text:]], dim=1)
                key = torch.cat([apply_rotary_emb(key[:, :-n_text], image_rotary_emb, sequence_dim=1),
                                 key[:, -n_text:]], dim=1)
            else:
                query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
                key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)

        if attn.add_q_proj is not None and encoder_hidden_states is not None:
            encoder_query = attn.add_q_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            encoder_key = attn.add_k_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))
            encoder_value = attn.add_v_proj(encoder_hidden_states).unflatten(2, (attn.heads, -1))

            if attn.norm_added_q is not None:
                encoder_query = attn.norm_added_q(encoder_query)
            if attn.norm_added_k is not None:
                encoder_key = attn.norm_added_k(encoder_key)

            query = torch.cat([query, encoder_query], dim=1)
            key = torch.cat([key, encoder_key], dim=1)
            value = torch.cat([value, encoder_value], dim=1)

        hidden_states = self._attend(query, key, value, attention_mask, self._parallel_config)
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


register_processor("diffusers.models.transformers.transformer_hunyuan_video.HunyuanVideoAttnProcessor2_0",
                   HunyuanVideoAttnProcessor)
