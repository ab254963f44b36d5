"""SkyReels-V2 (`SkyReelsV2Transformer3DModel`, T2V / I2V / diffusion forcing): a drop-in for diffusers'
`SkyReelsV2AttnProcessor`.

The stock processor is Wan's (QKV projections, fused or not; RMS norms over heads; RoPE on (B, S, H, D); the
I2V image-key branch; text cross-attention) with two differences kept here: diffusers' context-parallel config
is passed to every attention call, and self-attention takes a mask. With `num_frame_per_block > 1` (diffusion
forcing with `causal_block_size`) that mask is block-causal, (1, 1, S, S) boolean: every query row keeps a
prefix of the keys, so each block of frames runs the kernel on its key prefix (one call per block).
"""
from typing import Optional

import torch

from ._base import ProcessorBase
from .sdpa_common import StockProcessor
from .apply import register_processor
from .wan import project_wan


class SkyReelsV2AttnProcessor(ProcessorBase):
    """vidattn processor for diffusers' `SkyReelsV2Attention`.

    Use through `vidattn.apply(pipe)` or `pipe.transformer.set_attn_processor(vidattn.SkyReelsV2AttnProcessor())`.
    Masks: a boolean key-padding mask becomes `kv_lens`; a (1, 1, S, S) boolean mask whose rows keep key
    prefixes (the block-causal diffusion-forcing mask) runs per row block; any other mask, or context
    parallelism, runs diffusers' own attention dispatch.
    """

    _vidattn_original = StockProcessor("diffusers.models.transformers.transformer_skyreels_v2",
                                       "SkyReelsV2AttnProcessor")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        rotary_emb: Optional[tuple] = None,
    ) -> torch.Tensor:
        query, key, value, image_kv = project_wan(attn, hidden_states, encoder_hidden_states, rotary_emb)

        image_out = None
        if image_kv is not None:
            image_out = self._attend(query, *image_kv, None, self._parallel_config)
            image_out = image_out.flatten(2, 3).type_as(query)

        hidden_states = self._attend_row_prefix(query, key, value, attention_mask, self._parallel_config)
        hidden_states = hidden_states.flatten(2, 3).type_as(query)

        if image_out is not None:
            hidden_states = hidden_states + image_out

        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states


register_processor("diffusers.models.transformers.transformer_skyreels_v2.SkyReelsV2AttnProcessor",
                   SkyReelsV2AttnProcessor)
