"""Latte (`LatteTransformer3DModel`, Latte-1: 16 heads x 72): a drop-in for diffusers' generic `AttnProcessor2_0`,
routed only inside `LatteTransformer3DModel`.

`AttnProcessor2_0` is diffusers' default processor for its `Attention` class, so image UNets, PixArt and many other
models hold it too. `vidattn.apply` routes it by the model that holds the module (`register_processor(...,
models=...)`): inside Latte it runs here, anywhere else it stays stock with the reason, so applying vidattn to a
video pipeline does not silently change an image model in the same pipeline.

Latte's blocks attend three ways, all through this processor: spatial self-attention (one batch row per frame),
text cross-attention, and temporal self-attention (sequence = frames, batch = B x H x W). Head dim 72 runs on the
kernel's D=96 build, its columns padded on the fly (no copy of q/k/v). Every step of the stock processor is kept; only
`F.scaled_dot_product_attention` on (B, H, S, D) becomes `vidattn.attention(..., layout="bhsd")` with the same
default scale (the stock call ignores `attn.scale`). A key-padding mask becomes `kv_lens`; any other mask runs the
stock SDPA call, with the reason (the pipeline passes none). The body is `processors_shared.AttnProcessor2Body`
(shared with Allegro).
"""
from typing import Optional

import torch

from .apply import register_processor
from .processors_shared import AttnProcessor2Body
from .sdpa_common import StockProcessor

_ATTN = "diffusers.models.attention_processor"
LATTE_MODEL = "diffusers.models.transformers.latte_transformer_3d.LatteTransformer3DModel"


class LatteAttnProcessor(AttnProcessor2Body):
    """vidattn processor for diffusers' `AttnProcessor2_0` inside `LatteTransformer3DModel`.

    Use through `vidattn.apply(pipe)`, or
    `pipe.transformer.set_attn_processor(vidattn.diffusers.LatteAttnProcessor())`.
    """

    _vidattn_original = StockProcessor(_ATTN, "AttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        temb: Optional[torch.Tensor] = None,
        *args,
        **kwargs,
    ) -> torch.Tensor:
        if len(args) > 0 or kwargs.get("scale", None) is not None:
            from diffusers.utils import deprecate

            deprecate("scale", "1.0.0", "The `scale` argument is deprecated and will be ignored. Please remove it, "
                      "as passing it will raise an error in the future. `scale` should directly be passed while "
                      "calling the underlying pipeline component i.e., via `cross_attention_kwargs`.")

        return self._forward(attn, hidden_states, encoder_hidden_states, attention_mask, temb)

    def _qk(self, attn, query, key):
        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)
        return query, key


register_processor(f"{_ATTN}.AttnProcessor2_0", LatteAttnProcessor,
                   "spatial, text cross and temporal attention; head dim 72 on the D=96 build",
                   models=(LATTE_MODEL,))
