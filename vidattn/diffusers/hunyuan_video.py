"""HunyuanVideo (`HunyuanVideoTransformer3DModel`, also the token-replace I2V variant and FramePack's
`HunyuanVideoFramepackTransformer3DModel`): a drop-in for diffusers' `HunyuanVideoAttnProcessor2_0`.

Every step of the stock processor is kept (joint video + text attention: QKV projections, RMS norms over
heads, RoPE on the video tokens only, the text stream's added projections, output split and projections);
only the attention call changes. The text stream and the output are `processors_shared.HunyuanJointBody`'s, shared
with HunyuanVideo 1.5. The model's mask, (B, 1, 1, S) boolean with the valid text tokens right after the video
tokens, is a key prefix per batch row: it becomes `kv_lens`.

The token refiner's attention (`context_embedder`, plain `Attention` with diffusers' `AttnProcessor2_0`, at
most 256 text tokens, < 0.1% of a forward) is left as it is; `vidattn.apply` lists those modules as skipped.
"""
import torch

from .apply import register_processor
from .processors_shared import HunyuanJointBody, split_heads
from .sdpa_common import StockProcessor


class HunyuanVideoAttnProcessor(HunyuanJointBody):
    """vidattn processor for the dual- and single-stream blocks of diffusers' HunyuanVideo transformers.

    Use through `vidattn.apply(pipe)` (the blocks' `HunyuanVideoAttnProcessor2_0` are replaced, the token
    refiner is skipped) or per module with `module.set_processor(vidattn.HunyuanVideoAttnProcessor())`.
    Masks: a boolean key-padding mask ((B, S) or (B, 1, 1, S), a prefix per row) becomes `kv_lens`; any other
    mask, or context parallelism, runs diffusers' own attention dispatch.
    """

    _vidattn_original = StockProcessor("diffusers.models.transformers.transformer_hunyuan_video",
                                       "HunyuanVideoAttnProcessor2_0")

    def _joint_qkv(self, attn, hidden_states, encoder_hidden_states, image_rotary_emb):
        # Single-stream blocks (no added projections) project video and text together and rotate the video only.
        single_stream = attn.add_q_proj is None and encoder_hidden_states is not None
        if single_stream:
            hidden_states = torch.cat([hidden_states, encoder_hidden_states], dim=1)

        query, key, value = split_heads(attn, hidden_states)

        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)

        if image_rotary_emb is not None:
            from ..rotary import apply_rotary_emb  # diffusers' function, fused on Hopper (same bits)

            if single_stream:
                n_text = encoder_hidden_states.shape[1]
                query = torch.cat([apply_rotary_emb(query[:, :-n_text], image_rotary_emb, sequence_dim=1),
                                   query[:, -n_text:]], dim=1)
                key = torch.cat([apply_rotary_emb(key[:, :-n_text], image_rotary_emb, sequence_dim=1),
                                 key[:, -n_text:]], dim=1)
            else:
                query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
                key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)

        if attn.add_q_proj is not None and encoder_hidden_states is not None:
            query, key, value = self._add_text_stream(attn, encoder_hidden_states, query, key, value)
        return query, key, value

    def _attend_joint(self, query, key, value, attention_mask):
        return self._attend(query, key, value, attention_mask, self._parallel_config)


register_processor("diffusers.models.transformers.transformer_hunyuan_video.HunyuanVideoAttnProcessor2_0",
                   HunyuanVideoAttnProcessor)
