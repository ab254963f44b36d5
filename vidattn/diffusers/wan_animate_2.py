"""Wan-Animate-2 (`WanAnimate2Transformer3DModel`): a drop-in for diffusers' `WanAnimate2AttnProcessor`.

The stock processor has two passes:
- "extract" (the reference pass): dense self-attention over the reference tokens -> the kernel.
- "cached" (every denoising step): hard-coded `flex` with the model's block mask (`create_mask`). Read from
  diffusers' source: the generation queries and keys are scattered into a buffer of (F + 1) frames of O tokens
  (F = `origin_latent_frames`, O = `origin_latent_hw`), the reference keys into a second buffer of F frames, and a
  query of generation frame f attends to
    (a) every key of the generation buffer's first (F + 1) x O slots, and
    (b) the O slots of reference frame f - 1 (for 1 <= f <= F).
  Slots the current segment does not fill (its frames or tokens per frame fewer than the buffer's) hold zero keys
  and values, which take part in the softmax (score 0, value 0).
  (a) and (b) are disjoint, so the masked attention is the log-sum-exp merge of a dense attention over all
  generation keys and a per-frame attention over that frame's reference keys, frames as batch (lse_merge.py); the
  zero slots enter the merge as a count. Two kernel calls per layer, no mask, no padded buffer. (The block mask
  carries a per-token mask_mod, frames of O tokens that need not fall on 64-token blocks, so the kernel's
  block-sparse path, which reads whole 64 x 64 blocks only, cannot take it.)

The cached pass takes this route only when the block mask is the model's own (its mask function and its closure
values are checked against F, O and the buffer sizes) and the segment fits the buffers; otherwise, or under context
parallelism, it runs the stock flex call, with the reason. Everything else is the stock code.
"""
import math
from typing import Optional

import torch

from .. import ops
from ._base import ProcessorBase
from .apply import register_processor
from .lse_merge import merge_weights
from .sdpa_common import StockProcessor, kernel

_WA2 = "diffusers.models.transformers.transformer_wan_animate_2"
_MASK_FN = "create_mask.<locals>.attention_mask_logic"


def _padded(n: int) -> int:
    return math.ceil(n / 128) * 128


def cached_mask_reason(attention_mask, frames: int, hw: int, ref_frames: int, ref_hw: int,
                       origin_frames: int, origin_hw: int) -> Optional[str]:
    """None when the cached pass's `attention_mask` is Wan-Animate-2's own in-context block mask for these buffer
    sizes and the segment fits them (so the two-set merge computes it exactly); else why not."""
    fn = getattr(attention_mask, "mask_mod", None)
    if fn is None or not getattr(fn, "__qualname__", "").endswith(_MASK_FN) or fn.__closure__ is None:
        return "the cached pass's attention_mask is not Wan-Animate-2's in-context block mask"
    cells = dict(zip(fn.__code__.co_freevars, (c.cell_contents for c in fn.__closure__)))
    q_len = (origin_frames + 1) * origin_hw
    want = {"hw": origin_hw, "q_limit": q_len, "k_limit": origin_frames * origin_hw, "q_total": _padded(q_len)}
    if any(cells.get(k) != v for k, v in want.items()):
        return (f"the block mask's parameters {cells} are not those of origin_latent_frames={origin_frames}, "
                f"origin_latent_hw={origin_hw}")
    seq = getattr(attention_mask, "seq_lengths", None)
    if seq is not None and tuple(seq) != (_padded(q_len), _padded(q_len) + _padded(origin_frames * origin_hw)):
        return f"the block mask's lengths {tuple(seq)} do not match its buffers"
    if not (0 < frames <= origin_frames + 1 and 0 < hw <= origin_hw and 0 <= ref_frames <= origin_frames
            and 0 < ref_hw <= origin_hw):
        return (f"the segment (frames {frames} x {hw}, reference {ref_frames} x {ref_hw}) does not fit the block "
                f"mask's buffers ({origin_frames + 1} x {origin_hw}, reference {origin_frames} x {origin_hw})")
    return None


def in_context_attention(query, key, value, key_ref, value_ref, frames: int, hw: int, ref_frames: int, ref_hw: int,
                         origin_frames: int, origin_hw: int, attend=None):
    """The cached pass's masked attention (module docstring) as two dense attentions merged by LSE.

    query, key, value: (B, frames * hw, H, D) generation tokens; key_ref, value_ref: (B, >= ref_frames * ref_hw,
    H, D) reference tokens. `attend(q, k, v)` -> (out (B, S, H, D), lse (B, H, S)); default `vidattn.attention`
    with `return_lse=True`. Returns (B, frames * hw, H, D) in query's dtype."""
    if attend is None:
        def attend(q, k, v):
            return kernel(q, k, v, None, layout="bshd", return_lse=True)
    b, _, h, d = query.shape
    out_a, lse_a = attend(query, key, value)                              # (a): every generation key
    lse_a = lse_a.transpose(1, 2).reshape(b, frames, hw, h)
    out_a = out_a.reshape(b, frames, hw, h, d)
    # Zero slots per query frame: the generation buffer's unfilled slots, plus the reference frame's (all O of
    # them where the frame has no reference tokens); frame 0 and frames past F have no reference frame.
    zeros = torch.full((frames,), float((origin_frames + 1) * origin_hw - frames * hw), dtype=lse_a.dtype,
                       device=lse_a.device)
    n = max(0, min(frames - 1, ref_frames, origin_frames))               # frames 1..n have reference tokens
    last = min(frames - 1, origin_frames)                                # frames 1..last have a reference slot
    zeros[1:n + 1] += origin_hw - ref_hw
    zeros[n + 1:last + 1] += origin_hw
    lses = [lse_a]
    if n > 0:
        q_f = query.reshape(b, frames, hw, h, d)[:, 1:n + 1].reshape(b * n, hw, h, d)
        k_f = key_ref[:, :ref_frames * ref_hw].reshape(b, ref_frames, ref_hw, h, d)[:, :n].reshape(b * n, ref_hw, h, d)
        v_f = value_ref[:, :ref_frames * ref_hw].reshape(b, ref_frames, ref_hw, h, d)[:, :n]
        out_b, lse_b = attend(q_f, k_f, v_f.reshape(b * n, ref_hw, h, d))  # (b): frames as batch
        lse_full = lse_a.new_full(lse_a.shape, float("-inf"))  # rows without a reference part: weight 0
        lse_full[:, 1:n + 1] = lse_b.transpose(1, 2).reshape(b, n, hw, h)
        lses.append(lse_full)
    weights, _ = merge_weights(lses, zeros.view(1, frames, 1, 1))
    # Accumulated in the LSE's dtype (fp32 from the kernel); the reference part only into the frames that have one.
    out = weights[0].unsqueeze(-1) * out_a.to(weights[0].dtype)
    if n > 0:
        out[:, 1:n + 1] += weights[1][:, 1:n + 1].unsqueeze(-1) * out_b.reshape(b, n, hw, h, d).to(out.dtype)
    return out.reshape(b, frames * hw, h, d).to(query.dtype)


class WanAnimate2AttnProcessor(ProcessorBase):
    """vidattn processor for diffusers' `WanAnimate2AttnProcessor` (Wan-Animate-2 self-attention)."""

    _vidattn_original = StockProcessor(_WA2, "WanAnimate2AttnProcessor")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        rotary_emb: torch.Tensor,
        grid_sizes: torch.Tensor,
        kv_cache,
        kv_cache_mode: str,
        rope_stride: int = 1,
        reference_rotary_emb: Optional[torch.Tensor] = None,
        reference_grid_sizes: Optional[torch.Tensor] = None,
        reference_rope_stride: int = 1,
        attention_mask=None,
        origin_latent_frames: Optional[int] = None,
        origin_latent_hw: Optional[int] = None,
    ) -> torch.Tensor:
        from diffusers.models.transformers.transformer_wan_animate_2 import _get_qkv_projections, rope_apply

        query, key, value = _get_qkv_projections(attn, hidden_states, None)

        query = attn.norm_q(query)
        key = attn.norm_k(key)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        if kv_cache_mode == "extract":
            kv_cache.store(key, value)

            # `rope_apply` computes in float64 and returns float32; attention runs in the model dtype.
            query = rope_apply(query, grid_sizes, rotary_emb, rope_stride).type_as(value)
            key = rope_apply(key, grid_sizes, rotary_emb, rope_stride).type_as(value)

            hidden_states = self._attend(query, key, value, None, self._parallel_config)
        elif kv_cache_mode == "cached":
            query = rope_apply(query, grid_sizes, rotary_emb, rope_stride).type_as(value)
            key = rope_apply(key, grid_sizes, rotary_emb, rope_stride).type_as(value)

            key_ref, value_ref = kv_cache.get()
            key_ref = rope_apply(key_ref, reference_grid_sizes, reference_rotary_emb, reference_rope_stride).type_as(
                value
            )

            frames, height, width = grid_sizes[0].tolist()
            ref_frames, ref_height, ref_width = reference_grid_sizes[0].tolist()
            hw, ref_hw = height * width, ref_height * ref_width
            valid_length = frames * hw

            if self._parallel_config is not None:
                reason = "context parallelism is configured: the stock flex call runs the cached pass"
            else:
                reason = cached_mask_reason(attention_mask, frames, hw, ref_frames, ref_hw, origin_latent_frames,
                                            origin_latent_hw)
            if reason is None:
                hidden_states = in_context_attention(
                    query[:, :valid_length], key[:, :valid_length], value[:, :valid_length], key_ref, value_ref,
                    frames, hw, ref_frames, ref_hw, origin_latent_frames, origin_latent_hw,
                    attend=self._attend_lse)
            else:
                if not torch.compiler.is_compiling():
                    ops.warn_fallback(f"Wan-Animate-2 cached pass: {reason}")
                hidden_states = self._flex(query, key, value, key_ref, value_ref, attention_mask, frames, hw,
                                           ref_frames, ref_hw, origin_latent_frames, origin_latent_hw)
            # Padded query positions are not attended and pass through unchanged.
            hidden_states = torch.cat([hidden_states, query[:, valid_length:]], dim=1)
        else:
            raise ValueError(f"`kv_cache_mode` must be either 'extract' or 'cached', got {kv_cache_mode}.")

        hidden_states = hidden_states.flatten(2, 3).type_as(query)
        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states

    def _attend_lse(self, q, k, v):
        return kernel(q, k, v, self.precision, layout="bshd", return_lse=True)

    def _flex(self, query, key, value, key_ref, value_ref, attention_mask, frames, hw, ref_frames, ref_hw,
              origin_latent_frames, origin_latent_hw):
        """The stock cached-pass call: scatter into the block mask's buffers, flex, gather the generation rows."""
        from diffusers.models.attention_dispatch import AttentionBackendName, dispatch_attention_fn

        valid_length, ref_valid_length = frames * hw, ref_frames * ref_hw
        batch_size, _, heads, head_dim = query.shape
        packed_length = _padded((origin_latent_frames + 1) * origin_latent_hw)
        packed_ref_length = _padded(origin_latent_frames * origin_latent_hw)

        query_packed = query.new_zeros(batch_size, packed_length, heads, head_dim)
        key_packed = key.new_zeros(batch_size, packed_length + packed_ref_length, heads, head_dim)
        value_packed = value.new_zeros(batch_size, packed_length + packed_ref_length, heads, head_dim)

        generation = slice(0, frames * origin_latent_hw)
        for packed, src in ((query_packed, query), (key_packed, key), (value_packed, value)):
            packed[:, generation].view(batch_size, frames, origin_latent_hw, heads, head_dim)[:, :, :hw] = src[
                :, :valid_length
            ].view(batch_size, frames, hw, heads, head_dim)

        reference = slice(packed_length, packed_length + ref_frames * origin_latent_hw)
        for packed, src in ((key_packed, key_ref), (value_packed, value_ref)):
            packed[:, reference].view(batch_size, ref_frames, origin_latent_hw, heads, head_dim)[:, :, :ref_hw] = src[
                :, :ref_valid_length
            ].view(batch_size, ref_frames, ref_hw, heads, head_dim)

        hidden_states = dispatch_attention_fn(query_packed, key_packed, value_packed, attn_mask=attention_mask,
                                              backend=AttentionBackendName.FLEX,
                                              parallel_config=self._parallel_config)
        return (hidden_states[:, generation].view(batch_size, frames, origin_latent_hw, heads, head_dim)[:, :, :hw]
                .reshape(batch_size, valid_length, heads, head_dim))


register_processor(f"{_WA2}.WanAnimate2AttnProcessor", WanAnimate2AttnProcessor,
                   "extract pass dense; cached pass's block mask (all generation tokens + the frame's reference "
                   "frame) as two dense attentions merged by LSE")
