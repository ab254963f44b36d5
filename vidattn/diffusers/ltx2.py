"""LTX-2 (`LTX2VideoTransformer3DModel`: video 32 heads x 128, audio 32 heads x 64; also the pipelines' text
connectors): drop-ins for diffusers' `LTX2AudioVideoAttnProcessor` and `LTX2PerturbedAttnProcessor`.

Each block has six attentions (video self, audio self, video->text, audio->text, audio->video, video->audio); all
use these processors. Every step of the stock processors is kept (q/k RMS norms, interleaved or split RoPE with
separate query and key tables for the a2v / v2a attentions, the per-head output gates, and in the perturbed one the
STG perturbation: `all_perturbed` skips attention for the value projection, a perturbation mask lerps between
them); only the attention call changes.

Masks: the text masks arrive as the additive bias the model makes of the prompt mask, (1 - m) * -10000, prepared
to (B, H, 1, Skv). Key padding (a prefix of kept keys per row) becomes `kv_lens`; the all-zero mask the stock
pipelines pass (their connectors replace padding with learned registers) becomes the full length. IC-LoRA's dense
(B, T, T) fractional mask is a real bias: it goes to diffusers' dispatch with that reason (the kernel has no
additive bias).
"""
from typing import Optional

import torch

from ._base import ProcessorBase
from .apply import register_processor
from .sdpa_common import StockProcessor

_LTX2 = "diffusers.models.transformers.transformer_ltx2"


def _prepare_mask(attn, attention_mask, hidden_states, encoder_hidden_states):
    """The stock preparation: (B, H, Sq or 1, Skv), and the tensor it came from (the kv_lens memo's key)."""
    batch_size, sequence_length, _ = (
        hidden_states.shape if encoder_hidden_states is None else encoder_hidden_states.shape
    )
    if attention_mask is None:
        return None, None
    prepared = attn.prepare_attention_mask(attention_mask, sequence_length, batch_size)
    return prepared.view(batch_size, attn.heads, -1, prepared.shape[-1]), attention_mask


def _rope(attn, query, key, query_rotary_emb, key_rotary_emb, module: str = _LTX2):
    """The stock RoPE step. Interleaved (the 19B default): diffusers' `apply_interleaved_rotary_emb` is LTX-Video's
    `apply_rotary_emb` line for line (tests/test_rope.py checks both modules' source), so it runs as
    `vidattn.rotary.ltx_apply_rotary_emb`: the same output bits, one kernel on Hopper. Split: the module's own
    `apply_split_rotary_emb`, on torch: its per-head (B, H, T, D/2) tables and `addcmul_` order are a formula the
    fused op does not reproduce."""
    import importlib

    from ..rotary import ltx_apply_rotary_emb as apply_interleaved_rotary_emb

    apply_split_rotary_emb = importlib.import_module(module).apply_split_rotary_emb  # the stock module's own

    if query_rotary_emb is not None:
        if attn.rope_type == "interleaved":
            query = apply_interleaved_rotary_emb(query, query_rotary_emb)
            key = apply_interleaved_rotary_emb(key, key_rotary_emb if key_rotary_emb is not None else query_rotary_emb)
        elif attn.rope_type == "split":
            query = apply_split_rotary_emb(query, query_rotary_emb)
            key = apply_split_rotary_emb(key, key_rotary_emb if key_rotary_emb is not None else query_rotary_emb)
    return query, key


def _gate(attn, hidden_states, gate_logits):
    if attn.to_gate_logits is not None:
        hidden_states = hidden_states.unflatten(2, (attn.heads, -1))  # [B, T, H, D]
        # As in diffusers: zero-initialized gate logits give gates of 1.
        gates = 2.0 * torch.sigmoid(gate_logits)  # [B, T, H]
        hidden_states = hidden_states * gates.unsqueeze(-1)
        hidden_states = hidden_states.flatten(2, 3)
    return hidden_states


class _LTX2Body(ProcessorBase):
    """The steps both stock LTX-2 processors share: the first (`_begin`), the attention (`_attention`) and the last
    (`_finish`); the perturbed one's value projection and STG perturbation stay in its `__call__`. `_rope_module`
    names the module whose RoPE functions they call."""

    _rope_module = _LTX2

    @staticmethod
    def _begin(attn, hidden_states, encoder_hidden_states, attention_mask):
        """(prepared mask, its source tensor, the key/value states: the hidden states themselves for self-attention,
        the gate logits or None)."""
        attention_mask, mask_source = _prepare_mask(attn, attention_mask, hidden_states, encoder_hidden_states)

        if encoder_hidden_states is None:
            encoder_hidden_states = hidden_states

        gate_logits = attn.to_gate_logits(hidden_states) if attn.to_gate_logits is not None else None
        return attention_mask, mask_source, encoder_hidden_states, gate_logits

    @staticmethod
    def _finish(attn, hidden_states, gate_logits):
        """The per-head gates (where the module has them) and the output projection."""
        hidden_states = _gate(attn, hidden_states, gate_logits)

        hidden_states = attn.to_out[0](hidden_states)
        hidden_states = attn.to_out[1](hidden_states)
        return hidden_states

    def _attention(self, attn, hidden_states, encoder_hidden_states, value, attention_mask, mask_source,
                   query_rotary_emb, key_rotary_emb):
        """The q/k (and, where `value` is None, v) projections, q/k RMS norms, RoPE, the head split and attention:
        (B, S, H * D) in the query's dtype. `value`: the value projection the perturbed processor made first."""
        query = attn.to_q(hidden_states)
        key = attn.to_k(encoder_hidden_states)
        if value is None:
            value = attn.to_v(encoder_hidden_states)

        query = attn.norm_q(query)
        key = attn.norm_k(key)

        query, key = _rope(attn, query, key, query_rotary_emb, key_rotary_emb, self._rope_module)

        query = query.unflatten(2, (attn.heads, -1))
        key = key.unflatten(2, (attn.heads, -1))
        value = value.unflatten(2, (attn.heads, -1))

        hidden_states = self._attend_sdpa_mask(query, key, value, attention_mask, mask_source, self._parallel_config)
        hidden_states = hidden_states.flatten(2, 3)
        return hidden_states.to(query.dtype)


class LTX2AudioVideoAttnProcessor(_LTX2Body):
    """vidattn processor for diffusers' `LTX2AudioVideoAttnProcessor` (`LTX2Attention`, all six per block).

    Use through `vidattn.apply(pipe)` or `pipe.transformer.set_attn_processor(vidattn.LTX2AudioVideoAttnProcessor())`.
    """

    _vidattn_original = StockProcessor(_LTX2, "LTX2AudioVideoAttnProcessor")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        query_rotary_emb: Optional[tuple] = None,
        key_rotary_emb: Optional[tuple] = None,
    ) -> torch.Tensor:
        attention_mask, mask_source, encoder_hidden_states, gate_logits = self._begin(
            attn, hidden_states, encoder_hidden_states, attention_mask)

        hidden_states = self._attention(attn, hidden_states, encoder_hidden_states, None, attention_mask, mask_source,
                                        query_rotary_emb, key_rotary_emb)

        return self._finish(attn, hidden_states, gate_logits)


class LTX2PerturbedAttnProcessor(_LTX2Body):
    """vidattn processor for diffusers' `LTX2PerturbedAttnProcessor` (LTX-2.X: STG perturbation, per-head gates).

    Use through `vidattn.apply(pipe)` or `pipe.transformer.set_attn_processor(vidattn.LTX2PerturbedAttnProcessor())`.
    """

    _vidattn_original = StockProcessor(_LTX2, "LTX2PerturbedAttnProcessor")

    def __call__(
        self,
        attn,
        hidden_states: torch.Tensor,
        encoder_hidden_states: Optional[torch.Tensor] = None,
        attention_mask: Optional[torch.Tensor] = None,
        query_rotary_emb: Optional[tuple] = None,
        key_rotary_emb: Optional[tuple] = None,
        perturbation_mask: Optional[torch.Tensor] = None,
        all_perturbed: Optional[bool] = None,
    ) -> torch.Tensor:
        attention_mask, mask_source, encoder_hidden_states, gate_logits = self._begin(
            attn, hidden_states, encoder_hidden_states, attention_mask)

        value = attn.to_v(encoder_hidden_states)
        if all_perturbed is None:
            all_perturbed = torch.all(perturbation_mask == 0) if perturbation_mask is not None else False

        if all_perturbed:
            # As in diffusers: a fully perturbed (STG) pass skips attention and uses the value projection.
            hidden_states = value
        else:
            hidden_states = self._attention(attn, hidden_states, encoder_hidden_states, value, attention_mask,
                                            mask_source, query_rotary_emb, key_rotary_emb)

            if perturbation_mask is not None:
                hidden_states = torch.lerp(value, hidden_states, perturbation_mask)

        return self._finish(attn, hidden_states, gate_logits)


register_processor(f"{_LTX2}.LTX2AudioVideoAttnProcessor", LTX2AudioVideoAttnProcessor,
                   "six attentions per block; text padding bias -> kv_lens, IC-LoRA's dense bias -> dispatch")
register_processor(f"{_LTX2}.LTX2PerturbedAttnProcessor", LTX2PerturbedAttnProcessor,
                   "STG perturbation and per-head gates kept; text padding bias -> kv_lens")


# The SANA-WM LTX-2 refiner carries diffusers' copies of both processors (the same bodies and RoPE functions). Through
# the "vidattn" backend its prepared text mask, a new tensor in each of the 48 layers, was tested for key padding in
# every call: a host sync each, ~11 ms of a 215 ms forward, so the transformer ran 0.96x SDPA in a generation
# (bench/results/h200_2026-12-02_pm/call_h/fam). These processors key the test on the model's one mask.
_REFINER = "diffusers.models.transformers.transformer_sana_wm_refiner"


class SanaWMLTX2AudioVideoAttnProcessor(LTX2AudioVideoAttnProcessor):
    """vidattn processor for the SANA-WM refiner's `SanaWMLTX2AudioVideoAttnProcessor` (LTX-2's, copied)."""

    _vidattn_original = StockProcessor(_REFINER, "SanaWMLTX2AudioVideoAttnProcessor")
    _rope_module = _REFINER


class SanaWMLTX2PerturbedAttnProcessor(LTX2PerturbedAttnProcessor):
    """vidattn processor for the SANA-WM refiner's `SanaWMLTX2PerturbedAttnProcessor` (LTX-2's, copied)."""

    _vidattn_original = StockProcessor(_REFINER, "SanaWMLTX2PerturbedAttnProcessor")
    _rope_module = _REFINER


register_processor(f"{_REFINER}.SanaWMLTX2AudioVideoAttnProcessor", SanaWMLTX2AudioVideoAttnProcessor,
                   "the refiner's LTX-2-style attentions; the text padding bias -> kv_lens, tested once per forward")
register_processor(f"{_REFINER}.SanaWMLTX2PerturbedAttnProcessor", SanaWMLTX2PerturbedAttnProcessor,
                   "the refiner's LTX-2-style perturbed attentions; text padding bias -> kv_lens")
