"""Mochi (`MochiTransformer3DModel`, 24 heads x 128): a drop-in for diffusers' `MochiAttnProcessor2_0`.

The model has no `set_attn_processor`: `vidattn.apply` sets the processor on each `MochiAttention` itself.

The stock processor loops over the batch: for each sample it keeps the valid prompt tokens (mask != 0), runs SDPA
on [video tokens, valid text tokens] (joint attention, queries and keys alike), and pads the output with zero
rows, so the text outputs are the valid tokens' outputs first, then zeros. Here one batched call does the same:
the valid text tokens of every sample are moved to the front of its text block (stably, as the loop's indexing
orders them), `kv_lens = video tokens + valid text tokens` drops the rest as keys, and their query rows are
zeroed. The projections, per-head RMS norms, RoPE (video tokens only) and output projections are the stock ones.
"""
from typing import Optional

import torch

from .apply import register_processor
from .processors_shared import project_heads
from .sdpa_common import StockProcessor, VidattnProcessor, kernel


def _apply_rotary_emb(x, freqs_cos, freqs_sin):
    """diffusers' Mochi RoPE: rotate interleaved channel pairs in fp32, back to x's dtype."""
    x_even = x[..., 0::2].float()
    x_odd = x[..., 1::2].float()

    cos = (x_even * freqs_cos - x_odd * freqs_sin).to(x.dtype)
    sin = (x_even * freqs_sin + x_odd * freqs_cos).to(x.dtype)

    return torch.stack([cos, sin], dim=-1).flatten(-2)


class MochiAttnProcessor(VidattnProcessor):
    """vidattn processor for diffusers' `MochiAttnProcessor2_0` (`MochiAttention`).

    Use through `vidattn.apply(pipe)`, or set `module.processor = vidattn.MochiAttnProcessor()` on each
    `MochiAttention`. `attention_mask` (B, T): nonzero = valid prompt token, any positions; None = all valid.
    """

    _vidattn_original = StockProcessor("diffusers.models.attention_processor", "MochiAttnProcessor2_0")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: torch.Tensor,
        attention_mask: torch.Tensor,
        image_rotary_emb: Optional[torch.Tensor] = None,
    ) -> torch.Tensor:
        query, key, value = project_heads(attn, hidden_states)
        encoder_query, encoder_key, encoder_value = project_heads(attn, encoder_hidden_states, added=True)

        if image_rotary_emb is not None:
            query = _apply_rotary_emb(query, *image_rotary_emb)
            key = _apply_rotary_emb(key, *image_rotary_emb)

        batch_size, sequence_length = query.shape[:2]
        encoder_sequence_length = encoder_query.shape[1]

        # Valid prompt tokens first (in order), padding after: what the stock loop's nonzero() indexing keeps.
        if attention_mask is None:
            n_valid = torch.full((batch_size,), encoder_sequence_length, device=query.device)
        else:
            valid = attention_mask.reshape(batch_size, -1) != 0
            order = torch.argsort((~valid).to(torch.uint8), dim=1, stable=True).to(query.device)
            n_valid = valid.sum(dim=1).to(query.device)
            index = order[:, :, None, None]
            encoder_query = torch.take_along_dim(encoder_query, index, dim=1)
            encoder_key = torch.take_along_dim(encoder_key, index, dim=1)
            encoder_value = torch.take_along_dim(encoder_value, index, dim=1)

        query = torch.cat([query, encoder_query], dim=1)
        key = torch.cat([key, encoder_key], dim=1)
        value = torch.cat([value, encoder_value], dim=1)
        kv_lens = (n_valid + sequence_length).to(torch.int32)

        hidden_states = kernel(query, key, value, self.precision, layout="bshd", kv_lens=kv_lens)
        if attention_mask is not None:  # the stock loop's zero padding for the dropped text tokens
            rows = torch.arange(hidden_states.shape[1], device=hidden_states.device)[None, :] < kv_lens[:, None]
            hidden_states = hidden_states.masked_fill(~rows[:, :, None, None], 0)
        hidden_states = hidden_states.flatten(2, 3)

        hidden_states, encoder_hidden_states = hidden_states.split_with_sizes(
            (sequence_length, encoder_sequence_length), dim=1
        )

        # linear proj
        hidden_states = attn.to_out[0](hidden_states)
        # dropout
        hidden_states = attn.to_out[1](hidden_states)

        if hasattr(attn, "to_add_out"):
            encoder_hidden_states = attn.to_add_out(encoder_hidden_states)

        return hidden_states, encoder_hidden_states


register_processor("diffusers.models.attention_processor.MochiAttnProcessor2_0", MochiAttnProcessor)
