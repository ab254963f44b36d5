"""AnyFlow-FAR (`AnyFlowFARTransformer3DModel`): a drop-in for diffusers' `AnyFlowCausalAttnProcessor`.

The stock processor hard-codes the `flex` backend for every pass. Two kinds of pass reach it:
- denoising with a KV cache (`attention_mask=None`): dense attention of the current chunk over
  [compressed cache, full cache, current chunk]. That runs on the kernel here (Sq != Skv is fine).
- the cache-encode and training passes, with a block-causal `BlockMask` made by `create_block_mask` from a per-token
  `mask_mod` (frame-causal over token ranges that need not fall on 64-token blocks, noise/clean rules, padding). The
  kernel's block-sparse path computes whole 64 x 64 blocks only (`vidattn.sparse.block_mask_reason` refuses a
  mask_mod), so these passes stay on `flex` exactly as the stock processor runs them.

The stock processor pads the sequence to a multiple of 128 for flex with zero rows, and with no block mask those
zero keys take part in the softmax (score 0, value 0: they add exp(-max) to each row's sum). The kernel call keeps
them, so the dense pass computes what the stock one does; the padded query rows are not computed (stock discards
them). Everything else is the stock code: projections, norms, cache writes and reads, RoPE.
"""
import math
from typing import Any, Dict, Optional

import torch
import torch.nn.functional as F

from ._base import ProcessorBase
from .apply import register_processor
from .sdpa_common import StockProcessor, kernel

_FAR = "diffusers.models.transformers.transformer_anyflow_far"


class AnyFlowCausalAttnProcessor(ProcessorBase):
    """vidattn processor for diffusers' `AnyFlowCausalAttnProcessor` (AnyFlow-FAR self-attention)."""

    _attention_backend = "flex"  # what the block-masked passes need, as in the stock processor
    _SUPPORTED_BACKENDS = ("flex", "_native_flex")
    _vidattn_original = StockProcessor(_FAR, "AnyFlowCausalAttnProcessor")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[Any] = None,
        rotary_emb: Optional[Dict[str, torch.Tensor]] = None,
        kv_cache: Optional[Dict[str, torch.Tensor]] = None,
        kv_cache_flag: Optional[Dict[str, Any]] = None,
    ) -> torch.Tensor:
        from diffusers.models.attention_dispatch import dispatch_attention_fn
        from diffusers.models.transformers.transformer_anyflow_far import apply_rotary_emb

        if self._attention_backend not in self._SUPPORTED_BACKENDS:
            raise ValueError(
                f"AnyFlowCausalAttnProcessor requires the 'flex' attention backend for its block-masked passes "
                f"(got {self._attention_backend!r})."
            )

        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states
        target_dtype = hidden_states.dtype

        query = attn.to_q(hidden_states)
        key = attn.to_k(encoder_hidden_states)
        value = attn.to_v(encoder_hidden_states)

        if attn.norm_q is not None:
            query = attn.norm_q(query)
        if attn.norm_k is not None:
            key = attn.norm_k(key)

        # As in diffusers: the RMS norms upcast to fp32; back to the compute dtype.
        query = query.to(target_dtype)
        key = key.to(target_dtype)

        query = query.unflatten(2, (attn.heads, -1)).transpose(1, 2)
        key = key.unflatten(2, (attn.heads, -1)).transpose(1, 2)
        value = value.unflatten(2, (attn.heads, -1)).transpose(1, 2)

        if kv_cache is not None:
            if kv_cache_flag["is_cache_step"]:
                n_comp, n_full = kv_cache_flag["num_compressed_tokens"], kv_cache_flag["num_full_tokens"]
                kv_cache["compressed_cache"][0, :, :, :n_comp, :] = key[:, :, :n_comp]
                kv_cache["compressed_cache"][1, :, :, :n_comp, :] = value[:, :, :n_comp]
                kv_cache["full_cache"][0, :, :, :n_full, :] = key[:, :, n_comp:]
                kv_cache["full_cache"][1, :, :, :n_full, :] = value[:, :, n_comp:]
            else:
                n_comp, n_full = kv_cache_flag["num_cached_compressed_tokens"], kv_cache_flag["num_cached_full_tokens"]
                key = torch.cat([kv_cache["compressed_cache"][0, :, :, :n_comp, :],
                                 kv_cache["full_cache"][0, :, :, :n_full, :], key], dim=2)
                value = torch.cat([kv_cache["compressed_cache"][1, :, :, :n_comp, :],
                                   kv_cache["full_cache"][1, :, :, :n_full, :], value], dim=2)

        if rotary_emb is not None:
            query = apply_rotary_emb(query, rotary_emb["query"])
            key = apply_rotary_emb(key, rotary_emb["key"])

        seq_len = query.shape[2]
        head_dim = query.shape[3]
        padded_length = int(math.ceil(seq_len / 128.0) * 128.0 - seq_len)
        if padded_length > 0:
            pad_shape = [key.shape[0], key.shape[1], padded_length, head_dim]
            key = torch.cat([key, torch.zeros(pad_shape, device=key.device, dtype=key.dtype)], dim=2)
            value = torch.cat([value, torch.zeros(pad_shape, device=value.device, dtype=value.dtype)], dim=2)

        if attention_mask is None:
            # The dense (cached denoising) pass: the kernel, with stock's zero padding keys kept.
            hidden_states = kernel(query, key, value, self.precision, layout="bhsd").transpose(1, 2)
        else:
            hidden_states = self._flex(dispatch_attention_fn, query, key, value, attention_mask, padded_length)

        hidden_states = hidden_states.flatten(2, 3)
        hidden_states = hidden_states.type_as(query)
        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states

    def _flex(self, dispatch_attention_fn, query, key, value, attention_mask, padded_length):
        """The stock block-masked call on `flex` (padded queries, head dims below 16 padded with an explicit
        scale), returning (B, S, H, D) for the unpadded queries."""
        seq_len, head_dim = query.shape[2], query.shape[3]
        if padded_length > 0:
            pad_shape = [query.shape[0], query.shape[1], padded_length, head_dim]
            query = torch.cat([query, torch.zeros(pad_shape, device=query.device, dtype=query.dtype)], dim=2)
        head_pad = max(0, 16 - head_dim)
        scale = 1.0 / (head_dim**0.5) if head_pad > 0 else None
        if head_pad > 0:
            query = F.pad(query, (0, head_pad))
            key = F.pad(key, (0, head_pad))
            value = F.pad(value, (0, head_pad))
        out = dispatch_attention_fn(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2),
                                    attn_mask=attention_mask, dropout_p=0.0, is_causal=False, scale=scale,
                                    backend=self._attention_backend, parallel_config=self._parallel_config)
        if head_pad > 0:
            out = out[..., :head_dim]
        return out[:, :seq_len]


register_processor(f"{_FAR}.AnyFlowCausalAttnProcessor", AnyFlowCausalAttnProcessor,
                   "dense cached denoising pass on the kernel; block-causal cache-encode/training passes stay on "
                   "flex (their BlockMask has a per-token mask_mod, not whole 64x64 blocks)")
