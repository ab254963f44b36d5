"""HunyuanVideo 1.5 (`HunyuanVideo15Transformer3DModel`): a drop-in for diffusers' `HunyuanVideo15AttnProcessor2_0`.

Every step of the stock processor is kept (QKV projections, RMS norms over heads, RoPE on the video tokens, the
text stream's added projections, output split and projections); only the attention call changes. The text stream
and the output are `processors_shared.HunyuanJointBody`'s, shared with HunyuanVideo.

The stock processor takes the text mask (B, N_text), pads it with True for the video tokens to `keep` (B, S)
and attends with the (B, 1, S, S) mask `keep[i] & keep[j]`. The model orders every row's valid text tokens
first, so `keep` is a prefix of length `L_b`: valid query rows attend to the first `L_b` keys (`kv_lens`), and
padded query rows keep no key at all, for which SDPA returns zeros: those rows are zeroed here too. A `keep`
that is not a prefix goes through diffusers' dispatch with the stock mask (fallback warning).

The token refiner (`AttnProcessor2_0`) is left as it is and listed as skipped by `vidattn.apply`.
"""
import torch
import torch.nn.functional as F

from .apply import register_processor
from .masks import LastMaskMemo, prefix_lengths
from .processors_shared import HunyuanJointBody, split_heads
from .sdpa_common import StockProcessor, kernel


def _stock_mask(keep: torch.Tensor) -> torch.Tensor:
    b, s = keep.shape
    rows = keep.view(b, 1, 1, s).repeat(1, 1, s, 1)
    return rows & rows.transpose(2, 3)


_MEMO = LastMaskMemo()  # one text mask per forward, handed to every block


def _kv_lens_of(keep: torch.Tensor, batch: int, seq_len: int):
    """(kv_lens, reason, any row padded), read back from the device once."""
    lens, ok = prefix_lengths(keep)
    flags = torch.stack([ok, (lens < seq_len).any()]).tolist()  # the one device sync
    if not flags[0]:
        return None, "attention_mask keeps keys that are not a non-empty prefix of each row", False
    return lens.to(torch.int32), None, bool(flags[1])


class HunyuanVideo15AttnProcessor(HunyuanJointBody):
    """vidattn processor for diffusers' HunyuanVideo 1.5 dual-stream blocks (see the module docstring for the
    mask). Use through `vidattn.apply(pipe)` or `module.set_processor(vidattn.HunyuanVideo15AttnProcessor())`."""

    _vidattn_original = StockProcessor("diffusers.models.transformers.transformer_hunyuan_video15",
                                       "HunyuanVideo15AttnProcessor2_0")

    def _attend_joint(self, query, key, value, text_mask):
        batch, seq_len = query.shape[0], query.shape[1]
        if text_mask is None:
            return self._attend(query, key, value, None, self._parallel_config)
        keep = F.pad(text_mask, (seq_len - text_mask.shape[1], 0), value=True).bool()
        if self._parallel_config is not None:
            return self._dispatch(query, key, value, _stock_mask(keep), self._parallel_config,
                                  "context parallelism is configured: diffusers' dispatch runs the ring")
        if torch.compiler.is_compiling():
            return self._dispatch(query, key, value, _stock_mask(keep), None,
                                  "attention_mask under torch.compile: the key-padding test needs the mask's values")
        kv_lens, reason, padded = _MEMO.get(text_mask, (batch, seq_len), lambda: _kv_lens_of(keep, batch, seq_len))
        if kv_lens is None:
            return self._dispatch(query, key, value, _stock_mask(keep), None, reason)
        out = kernel(query, key, value, self.precision, layout="bshd", kv_lens=kv_lens)
        if padded:
            out = out.masked_fill(~keep[:, :, None, None], 0.0)  # padded query rows: no key kept -> zeros
        return out

    def _joint_qkv(self, attn, hidden_states, encoder_hidden_states, image_rotary_emb):
        query, key, value = split_heads(attn, hidden_states)

        query = attn.norm_q(query)
        key = attn.norm_k(key)

        if image_rotary_emb is not None:
            from ..rotary import apply_rotary_emb  # diffusers' function, fused on Hopper (same bits)

            query = apply_rotary_emb(query, image_rotary_emb, sequence_dim=1)
            key = apply_rotary_emb(key, image_rotary_emb, sequence_dim=1)

        if encoder_hidden_states is not None:
            query, key, value = self._add_text_stream(attn, encoder_hidden_states, query, key, value)
        return query, key, value


register_processor("diffusers.models.transformers.transformer_hunyuan_video15.HunyuanVideo15AttnProcessor2_0",
                   HunyuanVideo15AttnProcessor)
