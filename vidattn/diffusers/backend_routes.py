"""Families routed to the registered "vidattn" diffusers backend instead of a vidattn processor.

Their stock processors attend through `dispatch_attention_fn(..., backend=self._attention_backend)` with nothing
the backend cannot take: no mask, a key-padding mask (the backend turns it into `kv_lens`), grouped-query K/V
(read in place per group), causal calls without a mask (the kernel's top-left causal mask), or calls that must
stay on SDPA (causal with a mask, dropout), which the backend sends to diffusers' native path with the reason. So
`vidattn.apply` sets the stock processor's `_attention_backend` and keeps diffusers' own code, rather than carrying
a copy of each processor. A processor whose backend the user already chose is left as it is, except where the route
takes that backend over: Kandinsky 5's NABLA configs need `flex` to run stock (their attention mask is a flex
`BlockMask` of whole 64 x 64 blocks, which only flex takes); the vidattn backend runs that BlockMask on the kernel's
block-sparse path, and sends a BlockMask it cannot read (a mask_mod, other block sizes) to flex, so the route takes
`flex` over (restore sets it back).

Also here: the attention apply leaves stock on purpose (linear attention), so the handle says why instead of
"no vidattn route".
"""
from .apply import register_backend_route, register_stock, register_stock_module

_T = "diffusers.models.transformers."

BACKEND_ROUTES = {
    _T + "transformer_helios.HeliosAttnProcessor":
        "self-attention over [history + current] tokens and text cross-attention, no masks",
    _T + "transformer_anyflow.AnyFlowAttnProcessor": "self-attention, no mask",
    _T + "transformer_anyflow.AnyFlowCrossAttnProcessor": "text cross-attention, no mask",
    _T + "transformer_anyflow_far.AnyFlowAttnProcessor": "bidirectional self-attention, no mask",
    _T + "transformer_anyflow_far.AnyFlowCrossAttnProcessor": "text cross-attention, no mask",
    _T + "transformer_kandinsky6.Kandinsky6AttnProcessor":
        "text, visual, audio and cross attentions; (B, S) prompt padding -> kv_lens in the backend",
    _T + "transformer_motif_video.MotifVideoAttnProcessor2_0":
        "joint video+text with a boolean key-padding prefix -> kv_lens in the backend",
    _T + "transformer_motif_video.MotifVideoCrossAttnProcessor2_0": "text cross-attention; key padding -> kv_lens",
    _T + "transformer_minimax_h3.MiniMaxH3AttnProcessor": "one packed joint sequence, no mask",
    _T + "transformer_sana_wm_refiner.SanaWMLTX2RefinerAttnProcessor":
        "current block over [sink + history + current] KV cache, no mask",
    _T + "transformer_wan_animate.WanAnimateFaceBlockAttnProcessor":
        "face adapter: per-frame cross-attention to 5 motion tokens (short keys: little to gain)",
    _T + "transformer_wan_animate_2.WanAnimate2CrossAttnProcessor": "text and image cross-attention, no mask",
    _T + "transformer_sana_video.SanaAttnProcessor2_0":
        "text cross-attention, head dim 112; the 0/-10000 prompt padding bias -> kv_lens in the backend",
    _T + "transformer_sana_wm.SanaWMCrossAttnProcessor":
        "text cross-attention, head dim 112; boolean prompt padding -> kv_lens in the backend",
    _T + "transformer_cosmos3.Cosmos3AttnProcessor":
        "generation pathway and the causal understanding pathway (is_causal -> the kernel's top-left causal "
        "mask), grouped K/V read in place",
}

for _stock, _note in BACKEND_ROUTES.items():
    register_backend_route(_stock, _note)

# Routes that also take over a backend the user set on the stock processor (module docstring).
BACKEND_ROUTES_TAKING = {
    _T + "transformer_kandinsky.Kandinsky5AttnProcessor": (
        "regular configs dense; NABLA configs' flex BlockMask (whole 64x64 blocks) on the kernel's block-sparse "
        "path", ("flex",)),
}
for _stock, (_note, _takes) in BACKEND_ROUTES_TAKING.items():
    register_backend_route(_stock, _note, takes=_takes)

# Attention the kernel cannot compute, listed in the handle with the reason rather than as "no vidattn route".
STOCK_REASONS = {
    _T + "transformer_sana_video.SanaLinearAttnProcessor3_0":
        "linear attention (ReLU kernel, no softmax): not the kernel's computation",
}
STOCK_MODULE_REASONS = {
    _T + "transformer_sana_wm.SanaWMBidirectionalGDNAttention":
        "GDN linear attention (a gated delta-rule recurrence, no softmax): not the kernel's computation",
    _T + "transformer_sana_wm.SanaWMBidirectionalGDNCamAttention":
        "GDN linear attention of the camera branch (no softmax): not the kernel's computation",
}

for _stock, _why in STOCK_REASONS.items():
    register_stock(_stock, _why)
for _stock, _why in STOCK_MODULE_REASONS.items():
    register_stock_module(_stock, _why)
