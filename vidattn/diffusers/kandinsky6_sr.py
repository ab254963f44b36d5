"""Kandinsky 6 SR (`Kandinsky6SRTransformer3DModel`): a drop-in for diffusers' `Kandinsky6SRAttnProcessor`.

The stock processor builds a NABLA block mask per call (`nabla_block_mask`: the 64-token block means of q and k,
the key blocks that hold the threshold's share of each query block's softmax mass, OR'ed with the sliding-tile
prior) and hard-codes diffusers' `flex` backend with it. That BlockMask is whole 64 x 64 blocks: built with
`BlockMask.from_kv_blocks(..., BLOCK_SIZE=64, mask_mod=None)`, every listed block a full block. So the kernel's
block-sparse path computes it as given: `vidattn.attention(..., block_mask=)` with the same mask object, the blocks
it lists and no others, what compiled flex computes. (Uncompiled, flex_attention evaluates only the mask_mod, which
is a no-op here, and so attends to every key: the eager stock output is dense attention, not the model's NABLA.)

A block mask the kernel's path cannot read (`vidattn.sparse.block_mask_reason`: a mask_mod, a block size not a
multiple of 64; not what the model builds), or context parallelism, runs the stock flex call, with the reason.
Everything else is the stock code: projections, q/k norms, RoPE, the mask builder.
"""
from typing import Any

import torch

from .. import ops, sparse
from .apply import register_processor
from .sdpa_common import StockProcessor, VidattnProcessor, kernel

_K6SR = "diffusers.models.transformers.transformer_kandinsky6_sr"


def block_mask_reason(block_mask, parallel_config=None):
    """None when the vidattn op takes the processor's BlockMask as whole 64 x 64 blocks; else why the stock flex
    call runs it."""
    if parallel_config is not None:
        return "context parallelism is configured: the stock flex call runs it"
    if not sparse.is_block_mask(block_mask):
        return f"the attention mask is a {type(block_mask).__name__}, not a flex BlockMask"
    return sparse.block_mask_reason(block_mask)


class Kandinsky6SRAttnProcessor(VidattnProcessor):
    """vidattn processor for diffusers' `Kandinsky6SRAttnProcessor` (Kandinsky 6 SR's NABLA self-attention)."""

    # Read and written by diffusers (enable_parallelism); the stock processor names no backend of its own.
    _parallel_config = None
    _vidattn_original = StockProcessor(_K6SR, "Kandinsky6SRAttnProcessor")

    def __call__(self, attn, hidden_states: torch.Tensor, rotary_emb: torch.Tensor,
                 sparse_params: dict[str, Any]) -> torch.Tensor:
        from diffusers.models.transformers.transformer_kandinsky6_sr import apply_rotary, nabla_block_mask

        query = attn.to_query(hidden_states).unflatten(-1, (attn.num_heads, -1))
        key = attn.to_key(hidden_states).unflatten(-1, (attn.num_heads, -1))
        value = attn.to_value(hidden_states).unflatten(-1, (attn.num_heads, -1))
        query = attn.query_norm(query.float()).type_as(query)
        key = attn.key_norm(key.float()).type_as(key)
        query = apply_rotary(query, rotary_emb)
        key = apply_rotary(key, rotary_emb)

        # As stock: the block statistics from the (B, heads, S, D) layout the mask builder expects.
        attn_mask = nabla_block_mask(
            query.transpose(1, 2),
            key.transpose(1, 2),
            sparse_params["sta_mask"],
            thr=sparse_params["threshold"],
        )
        reason = block_mask_reason(attn_mask, self._parallel_config)
        if reason is None:
            hidden_states = kernel(query, key, value, self.precision, layout="bshd", block_mask=attn_mask)
        else:
            hidden_states = self._flex(query, key, value, attn_mask, reason)
        return attn.out_layer(hidden_states.flatten(2, 3))

    def _flex(self, query, key, value, attn_mask, reason):
        """The stock call: diffusers' flex backend with the block mask, (B, S, H, D)."""
        from diffusers.models.attention_dispatch import AttentionBackendName, dispatch_attention_fn
        from diffusers.models.transformers.transformer_kandinsky6_sr import _warn_uncompiled_flex_attention

        if not torch.compiler.is_compiling():
            ops.warn_fallback(f"Kandinsky 6 SR attention: {reason}")
            _warn_uncompiled_flex_attention()
        return dispatch_attention_fn(query, key, value, attn_mask=attn_mask, backend=AttentionBackendName.FLEX,
                                     parallel_config=self._parallel_config)


register_processor(f"{_K6SR}.Kandinsky6SRAttnProcessor", Kandinsky6SRAttnProcessor,
                   "NABLA's flex BlockMask (whole 64x64 blocks) on the kernel's block-sparse path")
