"""LTX-Video (`LTXVideoTransformer3DModel`: 0.9.x with 32 heads x 64, 13B with 32 heads x 128): a drop-in for
diffusers' `LTXVideoAttnProcessor` (what the deprecated `LTXVideoAttentionProcessor2_0` constructs).

Every step of the stock processor is kept (RMS norms across heads on q/k, RoPE on the flat (B, S, H*D)
projections, the text mask prepared as diffusers prepares it) and only the attention call changes to
`vidattn.attention(..., layout="bshd")`. The text cross-attention mask arrives as the additive bias the model
makes of the pipeline's 0/1 prompt mask, (1 - m) * -10000; when it pads a prefix of keys (the tokenizer's
padding) it becomes `kv_lens`; any other mask, or context parallelism, runs diffusers' own dispatch.
"""
from typing import Optional

import torch

from .. import ops
from .apply import register_processor
from .sdpa_common import StockProcessor, VidattnProcessor, kernel, prepare_sdpa_mask, sdpa_mask_to_kv_lens


class LTXVideoAttnProcessor(VidattnProcessor):
    """vidattn processor for diffusers' `LTXVideoAttnProcessor` (`LTXAttention`).

    Use through `vidattn.apply(pipe)` or `pipe.transformer.set_attn_processor(vidattn.LTXVideoAttnProcessor())`.
    """

    # Read and written by diffusers (set_attention_backend, enable_parallelism); used on the fallback path.
    _attention_backend = None
    _parallel_config = None
    _vidattn_original = StockProcessor("diffusers.models.transformers.transformer_ltx", "LTXVideoAttnProcessor")

    def _dispatch(self, query, key, value, attention_mask, reason: Optional[str]):
        """diffusers' stock attention call, for what the kernel cannot express."""
        from diffusers.models.attention_dispatch import dispatch_attention_fn

        if reason is not None and not torch.compiler.is_compiling():
            ops.warn_fallback(reason)
        return dispatch_attention_fn(query, key, value, attn_mask=attention_mask, dropout_p=0.0, is_causal=False,
                                     backend=self._attention_backend, parallel_config=self._parallel_config)

    def _attend(self, query, key, value, attention_mask, mask_source=None):
        if self._parallel_config is not None:
            return self._dispatch(query, key, value, attention_mask,
                                  "context parallelism is configured: diffusers' dispatch runs the ring")
        if attention_mask is None:
            return kernel(query, key, value, self.precision, layout="bshd")
        b, sq, h, _ = query.shape
        kv_lens, reason = sdpa_mask_to_kv_lens(attention_mask, b, h, sq, key.shape[1], source=mask_source)
        if kv_lens is None:
            return self._dispatch(query, key, value, attention_mask, reason)
        return kernel(query, key, value, self.precision, layout="bshd", kv_lens=kv_lens)

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        batch_size, sequence_length, _ = (
            hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
        )

        attention_mask, mask_source = prepare_sdpa_mask(attn, attention_mask, sequence_length, batch_size)

        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states

        query = attn.to_q(hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        query = attn.norm_q(query)
        key = attn.norm_k(key)

        if image_rotary_emb is not None:
            from ..rotary import ltx_apply_rotary_emb as apply_rotary_emb  # diffusers' function, fused (same bits)

            query = apply_rotary_emb(query, image_rotary_emb)
            key = apply_rotary_emb(key, image_rotary_emb)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        hidden_states = self._attend(query, key, value, attention_mask, mask_source)
        hidden_states = hidden_states.flatten(2, 3)
        hidden_states = hidden_states.to(query.dtype)

        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states


register_processor("diffusers.models.transformers.transformer_ltx.LTXVideoAttnProcessor", LTXVideoAttnProcessor)
