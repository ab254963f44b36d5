"""Transformer calls that read a KV cache an earlier pass fills: Wan-Animate-2's generation ("cached") pass and the
SANA-WM LTX-2 refiner's denoising ("inject") pass, built offline for one timed forward.

The registry builds these families in two steps. `make_*` draws the random inputs on the CPU (the cached call's and
the filling pass's latents and text); `fill_*` then runs the filling pass on the built model, untimed, with the
processors the model has at build time (diffusers' own), and returns the keyword arguments of the cached call with
the cache in them. The cached call only reads the cache, so every timed forward (SDPA and vidattn, warm-up and
timed) sees the same cache, and the rel-L2 between the paths is the cached pass's alone. How long the filling pass
took is in `fill_ms(inputs)`.

- Wan-Animate-2 (`WanAnimate2ModularPipeline`, one segment at the modular pipeline's default 81 frames): the
  "extract" pass encodes the driving-video segment (F latent frames + its 20 condition channels) and stores every
  layer's pre-RoPE reference K/V; the timed call is one denoising step of the conditional branch over the F + 1
  generation frames, whose self-attention is the in-context block mask (every generation key plus the query frame's
  reference frame). The model's block mask is built during the fill too (diffusers compiles it on first use).
- SANA-WM refiner (`SanaWMLTX2Refiner`, block_size 3, kv_max_frames 11, sink 1): the steady-state AR block, whose
  keys are [1 sink frame + 10 history frames + the 3 current frames]. The fill runs the sink's "capture_pre_rope"
  pass and one "inject_and_capture_post_rope" pass over the 10 history frames (the pipeline builds its history over
  several blocks; the cache's shapes are the same), then sets the sink RoPE at the offset the pipeline uses.

Wan-Animate-2's stock cached pass calls diffusers' flex backend eagerly, which materialises the full score matrix
(40 heads x 79 200 x 151 552 fp32 at the default size: about 1.9 TB); it cannot run at the default size. The SDPA
column of that family is `WanAnimate2SdpaBaseline` (`install_sdpa_baseline`): vidattn's own processor with both
dense attentions on PyTorch's SDPA (FlashAttention with its log-sum-exp on CUDA) and the same log-sum-exp merge, so
the comparison is the attention kernels under one decomposition; a CPU test checks it against the stock flex call.
"""
from __future__ import annotations

import math
import time

import torch

# ---------------------------------------------------------------------------------------------------- helpers


def _rn(g, *shape, std=1.0):
    return torch.randn(*shape, generator=g) * std


def _now_ms(device) -> float:
    if torch.device(device).type == "cuda":
        torch.cuda.synchronize(device)
    return time.perf_counter() * 1e3


FILL_MS = "_fill_ms"  # attribute set on the cache object: the filling pass's wall milliseconds


def fill_ms(inputs: dict) -> float | None:
    """Milliseconds the filling pass of these inputs took (None for a family without one)."""
    cache = inputs.get("kv_cache")
    return getattr(cache, FILL_MS, None)


# ------------------------------------------------------------------------------------------------ Wan-Animate-2
WAN_ANIMATE2_SEGMENT = 81  # the modular pipeline's segment_frame_length default
WAN_ANIMATE2_TINY = dict(dim=128, ffn_dim=64, freq_dim=32, text_dim=16, num_heads=2, num_layers=2, text_len=8)


def make_wan_animate2(cfg, geo, g) -> dict:
    """Random inputs of the extract pass and of one cached denoising step. geo.t = the segment's latent frames F
    (geo.h, geo.w: latent height and width); the generation latents carry F + 1 frames (the reference image's
    slot)."""
    f, h, w = geo.t, geo.h, geo.w
    lat = cfg.get("out_dim", 16)
    cond = cfg.get("in_dim", 36) - lat  # the 4 mask channels + the condition latents
    text = min(geo.text, cfg.get("text_len", 512))
    return {
        "_ref_latents": _rn(g, lat, f, h, w), "_ref_condition": _rn(g, cond, f, h, w),
        "_ref_text": _rn(g, text, cfg.get("text_dim", 4096), std=0.25),
        "hidden_states": [_rn(g, lat, f + 1, h, w)], "condition_latents": [_rn(g, cond, f + 1, h, w)],
        "encoder_hidden_states": [_rn(g, text, cfg.get("text_dim", 4096), std=0.25)],
        "encoder_hidden_states_image": _rn(g, 1, 257, 1280, std=0.25),
        "timestep": torch.tensor([500.0]),
        "_geo": (f, h, w),
    }


def fill_wan_animate2(model, inputs: dict) -> dict:
    """Run the extract pass (fills a WanAnimate2KVCache) and build the block mask; return the cached call's kwargs."""
    from diffusers.models.transformers.transformer_wan_animate_2 import WanAnimate2KVCache

    inputs = dict(inputs)
    f, h, w = inputs.pop("_geo")
    ref, cond, text = inputs.pop("_ref_latents"), inputs.pop("_ref_condition"), inputs.pop("_ref_text")
    p = model.config.patch_size
    grid_ref = torch.tensor([[f // p[0], h // p[1], w // p[2]]], dtype=torch.long)
    cache = WanAnimate2KVCache(model.config.num_layers)
    dev = next(model.parameters()).device
    t0 = _now_ms(dev)
    with torch.no_grad():
        model([ref], timestep=inputs["timestep"], encoder_hidden_states=[text],
              encoder_hidden_states_image=inputs["encoder_hidden_states_image"], condition_latents=[cond],
              kv_cache=cache, kv_cache_mode="extract", seq_len=grid_ref.prod().item(), offset_grid_sizes=grid_ref,
              return_dict=False)
        # The segment is the whole default-length video: origin_len frames of (8h x 8w) pixels.
        origin_len = (f - 1) * 4 + 1
        origin_area = [h * 8, w * 8]
        key = (origin_len // 4 + 1, origin_area[0] * origin_area[1] // 256)
        if key not in model.block_masks:
            model.block_masks[key] = model.create_mask(*key, dev)
    setattr(cache, FILL_MS, _now_ms(dev) - t0)
    inputs.update(kv_cache=cache, kv_cache_mode="cached", seq_len=(f + 1) * (h // p[1]) * (w // p[2]),
                  reference_grid_sizes=grid_ref, origin_len=origin_len, origin_area=origin_area,
                  is_uncondtion=False)
    return inputs


# Elements of the block mask's dense (query x key) grid up to which prebuild_block_mask builds it eagerly (a few bytes
# per element at the peak: ~8 GB at 720x1280x17, the sweep's size); larger grids compile the mask function as the
# model does (81 frames at 720p: ~1.2e10 elements).
EAGER_MASK_ELEMENTS = 2 ** 31


def prebuild_block_mask(model, segment_frames: int, height: int, width: int) -> dict:
    """Build the in-context block mask that the cached pass's forward builds on first use for this segment, before any
    timed call. The model builds it with `create_block_mask(_compile=True)`: Inductor compiling the mask function
    took ~47 s of the first denoising step on a fresh H200 (the first timed path paid it, the second found it
    built). Small enough grids are built eagerly (the same BlockMask, no compilation); the rest through the model's
    own compiled call. Neither timed path reads the mask beyond checking that it is the model's (both compute the
    masked attention as two dense attentions merged by log-sum-exp). Returns what was done, for the record."""
    import diffusers.models.transformers.transformer_wan_animate_2 as wa2

    key = (segment_frames // 4 + 1, height * width // 256)   # the forward's (origin_latent_frames, origin_latent_hw)
    if key in model.block_masks:
        return {"key": list(key), "built": False}
    f, hw = key
    q = math.ceil((f + 1) * hw / 128) * 128
    elements = q * (q + math.ceil(f * hw / 128) * 128)
    eager = elements <= EAGER_MASK_ELEMENTS
    dev = next(model.parameters()).device
    stock = wa2.create_block_mask
    if eager:
        wa2.create_block_mask = lambda *a, **k: stock(*a, **{**k, "_compile": False})
    t0 = _now_ms(dev)
    try:
        model.block_masks[key] = model.create_mask(f, hw, dev)
    finally:
        wa2.create_block_mask = stock
    return {"key": list(key), "built": True, "eager": eager, "elements": elements, "ms": _now_ms(dev) - t0}


def sdpa_lse(q, k, v):
    """(out (B, S, H, D), lse (B, H, S) fp32) of dense attention on BSHD tensors through PyTorch: FlashAttention
    (aten._scaled_dot_product_flash_attention, which returns its log-sum-exp) on CUDA, the math path on the CPU."""
    qh, kh, vh = (t.transpose(1, 2) for t in (q, k, v))
    if q.is_cuda and q.dtype in (torch.float16, torch.bfloat16):
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention(qh, kh, vh, 0.0, False, False)[:2]
    else:
        from vidattn.ops import sdpa_fallback

        out, lse = sdpa_fallback(qh, kh, vh, q.shape[-1] ** -0.5, None, True)
    return out.transpose(1, 2), lse


def _baseline_class():
    from vidattn.diffusers.wan_animate_2 import WanAnimate2AttnProcessor

    class WanAnimate2SdpaBaseline(WanAnimate2AttnProcessor):
        """vidattn's Wan-Animate-2 processor with both dense attentions on PyTorch SDPA (module docstring)."""

        def _attend(self, query, key, value, attention_mask=None, parallel_config=None):
            import torch.nn.functional as F

            out = F.scaled_dot_product_attention(query.transpose(1, 2), key.transpose(1, 2), value.transpose(1, 2))
            return out.transpose(1, 2)

        def _attend_lse(self, q, k, v):
            from . import cached  # looked up per call: the attention timer wraps it

            return cached.sdpa_lse(q, k, v)

    return WanAnimate2SdpaBaseline


def install_sdpa_baseline(model):
    """Give every Wan-Animate-2 self-attention the SDPA baseline processor; returns a callable that puts the
    stock processors back."""
    cls = _baseline_class()
    saved = []
    for m in model.modules():
        proc = getattr(m, "processor", None)
        if proc is not None and type(proc).__name__ == "WanAnimate2AttnProcessor" and \
                type(proc).__module__.startswith("diffusers."):
            saved.append((m, proc))
            m.set_processor(cls())
    if not saved:
        raise ValueError("no stock WanAnimate2AttnProcessor in this model (vidattn applied already?)")

    def restore():
        for m, proc in saved:
            m.set_processor(proc)
    return restore


# --------------------------------------------------------------------------------------------- SANA-WM refiner
REFINER_DEFAULT = dict(sink=1, history=10, block=3)   # block_size 3, kv_max_frames 11 = 1 sink + 10 history
REFINER_TINY = dict(sink=1, history=1, block=1)
REFINER_FPS = 24.0


def refiner_window(short: bool) -> dict:
    """The pipeline's window; a video too short for it (CPU tests) gets a 1-frame sink, history and block."""
    return REFINER_TINY if short else REFINER_DEFAULT


def make_sana_wm_refiner(cfg, geo, g) -> dict:
    """Random stage-1 latents of the window [sink | history | current block] and the prompt (connector output width,
    `caption_channels`) with its mask. geo.t = the video's latent frames; the window is its steady-state AR block
    (the last block whose history is full)."""
    win = refiner_window(geo.t < sum(REFINER_DEFAULT.values()))
    need = sum(win.values())
    if geo.t < need:
        raise ValueError(f"sana_wm_refiner: {geo.t} latent frames, the smallest window needs {need}")
    c = cfg.get("in_channels", 128)
    tpf = geo.h * geo.w  # patch 1
    mask = torch.zeros(geo.b, geo.text, dtype=torch.long)
    mask[:, : max(1, min(64, geo.text))] = 1
    return {"_sink": _rn(g, geo.b, win["sink"] * tpf, c), "_history": _rn(g, geo.b, win["history"] * tpf, c),
            "hidden_states": _rn(g, geo.b, win["block"] * tpf, c),
            "encoder_hidden_states": _rn(g, geo.b, geo.text, cfg.get("caption_channels", 3840), std=0.25),
            "encoder_attention_mask": mask, "timestep": torch.full((geo.b, win["block"] * tpf), 0.725 * 1000),
            "_geo": (geo.t, geo.h, geo.w, win)}


def fill_sana_wm_refiner(model, inputs: dict) -> dict:
    """The sink's capture_pre_rope pass and the history's inject_and_capture_post_rope pass; return the inject
    call's kwargs (the block's RoPE at its absolute frames, the sink RoPE slid as the pipeline slides it)."""
    from diffusers.models.transformers.transformer_sana_wm_refiner import SanaWMRefinerKVCache

    inputs = dict(inputs)
    inputs["timestep"] = inputs["timestep"].float()  # the pipeline's fp32 sigma * 1000 (the registry casts to dtype)
    t, h, w, win = inputs.pop("_geo")
    sink, history = inputs.pop("_sink"), inputs.pop("_history")
    dev = next(model.parameters()).device
    b = sink.shape[0]
    s, n_hist, n_blk = win["sink"], win["history"], win["block"]
    # The steady-state block: the last full block whose history is full, frames [start, start + block).
    start = s + ((t - s) // n_blk - 1) * n_blk
    start = max(start, s + n_hist)

    def rope(frames):
        return model.build_rotary_emb_for_absolute_positions(batch_size=b, frame_positions=list(frames), height=h,
                                                               width=w, device=dev, fps=REFINER_FPS)

    text, mask = inputs["encoder_hidden_states"], inputs["encoder_attention_mask"]
    cache = SanaWMRefinerKVCache(len(model.transformer_blocks))
    t0 = _now_ms(dev)
    with torch.no_grad():
        zeros = torch.zeros(b, sink.shape[1], device=dev)
        model(hidden_states=sink, encoder_hidden_states=text, timestep=zeros, video_rotary_emb=rope(range(s)),
              encoder_attention_mask=mask, kv_cache=cache, kv_cache_mode="capture_pre_rope", return_dict=False)
        for i in range(len(cache)):
            lc = cache.get(i)
            lc.store_sink(*lc.get_captured_pre_rope())
        hist_frames = range(start - n_hist, start)
        cache.sink_pe = rope(range(hist_frames[0] - s, hist_frames[0]))
        model(hidden_states=history, encoder_hidden_states=text,
              timestep=torch.zeros(b, history.shape[1], device=dev), video_rotary_emb=rope(hist_frames),
              encoder_attention_mask=mask, kv_cache=cache, kv_cache_mode="inject_and_capture_post_rope",
              return_dict=False)
        for i in range(len(cache)):
            lc = cache.get(i)
            lc.store_history(*lc.get_captured_post_rope())
        offset = start - n_hist - s  # the pipeline's sink_rope_offset: the sink right before the history
        cache.sink_pe = rope(range(offset, offset + s))
        block_rope = rope(range(start, start + n_blk))
    setattr(cache, FILL_MS, _now_ms(dev) - t0)
    inputs.update(video_rotary_emb=block_rope, kv_cache=cache, kv_cache_mode="inject")
    return inputs


def refiner_keys(latent_frames: int, tokens_per_frame: int) -> tuple[int, int]:
    """(queries, keys) of the refiner's timed self-attention call."""
    win = refiner_window(latent_frames < sum(REFINER_DEFAULT.values()))
    return win["block"] * tokens_per_frame, (win["sink"] + win["history"] + win["block"]) * tokens_per_frame
