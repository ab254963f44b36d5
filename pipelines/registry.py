"""One registry of every video DiT family vidattn routes: what scripts/generate_video.py, scripts/e2e_report.py and
scripts/family_table.py build for `--family NAME`.

For each family: the diffusers transformer class, the real architecture config of the released checkpoint it
names, the pipeline's default video size (height, width, frames) and text length, a builder of the inputs that
pipeline hands one transformer call at that size (random latents and text embeddings of the real encoders' widths,
the masks, indices and RoPE positions it builds), a tiny config of the same structure for CPU tests, and the config
keys that count its blocks (the GPU runner warms the kernels up on a 1-block copy at full size). The ten families of
pipelines/families.py keep their builders there; this module adds the rest and one interface for all.

    from pipelines import registry
    registry.names()                                     # every family
    built = registry.build("helios", "default", device="cuda", dtype=torch.bfloat16)
    out = built.forward()                                # one transformer forward (no grad)
    python3 -m pipelines.registry --list                 # families, default sizes, estimated H200 cost

Random weights: the outputs mean nothing; every tensor has the real shape and every forward does the real work.
Nothing is downloaded.
"""
from __future__ import annotations

import copy
import dataclasses
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import torch

from . import cached
from . import families as fams
from .families import FamilyError, Size

# -------------------------------------------------------------------------------------------------- geometry
@dataclass(frozen=True)
class Geo:
    """What an input builder needs: batch, latent frames / height / width (before patching), text tokens."""
    b: int
    t: int
    h: int
    w: int
    text: int


def _rn(g, *shape, std=1.0):
    return torch.randn(*shape, generator=g) * std


def _wan_geo(size: Size, spatial=8, temporal=4) -> tuple[int, int, int]:
    return (size.frames - 1) // temporal + 1, size.height // spatial, size.width // spatial


# ---------------------------------------------------------------------------------------------- input builders
# Each returns the keyword arguments of one `model(...)` call (CPU tensors; `return_dict` is added by `build`).

def _in_wan_like(cfg, geo: Geo, g, extra=None):
    c = cfg.get("in_channels", 16)
    d = dict(hidden_states=_rn(g, geo.b, c, geo.t, geo.h, geo.w), timestep=torch.full((geo.b,), 500),
             encoder_hidden_states=_rn(g, geo.b, geo.text, cfg.get("text_dim", 4096), std=0.25))
    d.update(extra or {})
    return d


def _in_wan_vace(cfg, geo, g):
    return _in_wan_like(cfg, geo, g, dict(
        control_hidden_states=_rn(g, geo.b, cfg.get("vace_in_channels", 96), geo.t, geo.h, geo.w)))


def _in_chronoedit(cfg, geo, g):
    # ChronoEditPipeline: I2V-style input (latents + condition channels) and CLIP image keys (257 tokens, 1280 wide).
    d = _in_wan_like(cfg, geo, g)
    if cfg.get("image_dim"):
        d["encoder_hidden_states_image"] = _rn(g, geo.b, 257, cfg["image_dim"], std=0.25)
    return d


def _in_anyflow(cfg, geo, g):
    c = cfg.get("in_channels", 16)
    # AnyFlowPipeline: latents in (B, F, C, H, W), one (t, r) timestep pair per latent frame.
    return dict(hidden_states=_rn(g, geo.b, geo.t, c, geo.h, geo.w), timestep=torch.full((geo.b, geo.t), 500.0),
                r_timestep=torch.full((geo.b, geo.t), 250.0),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg.get("text_dim", 4096), std=0.25))


def _in_anyflow_far(cfg, geo, g):
    """The pipeline's denoising call of the last chunk (the longest key sequence): the chunk's latents against the KV
    cache the earlier chunks filled, dense attention over [compressed cache, full cache, current chunk] (the kernel's
    pass; the block-causal cache-encode pass stays on flex). The cache has the pipeline's capacity (3 full chunks of
    full tokens, the rest at the 4x4-compressed patch); its values are random, one tensor shared by every layer
    (the denoising call only reads it)."""
    part = list(cfg.get("chunk_partition") or (1, 3, 3, 3, 3, 3, 3, 2))
    if sum(part) != geo.t:  # tiny sizes: 1-frame chunks
        part = [1] * geo.t
    c = cfg.get("in_channels", 16)
    p, cp = cfg.get("patch_size", (1, 2, 2)), cfg.get("compressed_patch_size", (1, 4, 4))
    h, d, limit = cfg["num_attention_heads"], cfg["attention_head_dim"], cfg.get("full_chunk_limit", 3)
    full_tok = (geo.h // p[1]) * (geo.w // p[2])
    comp_tok = (geo.h // cp[1]) * (geo.w // cp[2])
    cache = {"full_cache": _rn(g, 2, geo.b, h, limit * max(part) * full_tok, d, std=0.5),
             "compressed_cache": _rn(g, 2, geo.b, h, max(len(part) - limit + 1, 1) * max(part) * comp_tok, d,
                                     std=0.5)}
    n = part[-1]
    return dict(hidden_states=_rn(g, geo.b, n, c, geo.h, geo.w), timestep=torch.full((geo.b, n), 500.0),
                r_timestep=torch.full((geo.b, n), 250.0),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg.get("text_dim", 4096), std=0.25),
                chunk_partition=part, kv_cache={i: cache for i in range(cfg["num_layers"])},
                kv_cache_flag={"num_cached_chunks": len(part) - 1, "is_cache_step": False})


def _in_helios(cfg, geo, g):
    c = cfg.get("in_channels", 16)
    # HeliosPipeline: the current chunk plus short (2), mid (2) and long (16) history latents at the same size.
    hs, hm, hl = (1, 1, 4) if geo.t <= 2 else (2, 2, 16)
    return dict(hidden_states=_rn(g, geo.b, c, geo.t, geo.h, geo.w), timestep=torch.full((geo.b,), 500),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg.get("text_dim", 4096), std=0.25),
                indices_hidden_states=torch.arange(geo.t)[None].repeat(geo.b, 1) + hs + hm + hl,
                indices_latents_history_short=torch.arange(hs)[None].repeat(geo.b, 1) + hm + hl,
                indices_latents_history_mid=torch.arange(hm)[None].repeat(geo.b, 1) + hl,
                indices_latents_history_long=torch.arange(hl)[None].repeat(geo.b, 1),
                latents_history_short=_rn(g, geo.b, c, hs, geo.h, geo.w),
                latents_history_mid=_rn(g, geo.b, c, hm, geo.h, geo.w),
                latents_history_long=_rn(g, geo.b, c, hl, geo.h, geo.w))


def _in_wan_animate(cfg, geo, g):
    # WanAnimatePipeline: one 77-frame segment = 21 latent frames (+1 reference frame in front), pose latents for the
    # 20 generated ones, face crops (77 frames of 512x512 for the real motion encoder), CLIP image keys.
    c = cfg.get("in_channels", 36)
    lc = cfg.get("latent_channels", 16)
    fs = cfg.get("motion_encoder_size", 512)
    return dict(hidden_states=_rn(g, geo.b, c, geo.t + 1, geo.h, geo.w), timestep=torch.full((geo.b,), 500),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg.get("text_dim", 4096), std=0.25),
                encoder_hidden_states_image=_rn(g, geo.b, 257, cfg.get("image_dim") or 1280, std=0.25),
                pose_hidden_states=_rn(g, geo.b, lc, geo.t, geo.h, geo.w),
                face_pixel_values=_rn(g, geo.b, 3, 77, fs, fs).clamp(-1, 1))


def _in_framepack(cfg, geo, g):
    # HunyuanVideoFramepackPipeline, one section: a 9-latent-frame window, the clean prefix + 1x history frame,
    # 2 frames of 2x history and 16 of 4x history, SigLIP image tokens (729 x 1152), Llama text with its mask.
    window = geo.t
    hist = [16, 2, 1] if window > 2 else [2, 1, 1]
    idx = torch.arange(0, 1 + sum(hist) + window)
    i_pre, i_4x, i_2x, i_1x, i_lat = idx.split([1, *hist, window])
    c = cfg.get("in_channels", 16)
    b = geo.b
    L = geo.text
    mask = torch.zeros(b, L, dtype=torch.long)
    mask[:, : max(1, min(64, L // 4 if L < 64 else 64))] = 1
    n_img = 729 if window > 2 else 9
    return dict(hidden_states=_rn(g, b, c, window, geo.h, geo.w), timestep=torch.full((b,), 500),
                encoder_hidden_states=_rn(g, b, L, cfg.get("text_embed_dim", 4096), std=0.25),
                encoder_attention_mask=mask,
                pooled_projections=_rn(g, b, cfg.get("pooled_projection_dim", 768), std=0.25),
                image_embeds=_rn(g, b, n_img, cfg.get("image_proj_dim", 1152), std=0.25),
                indices_latents=i_lat, guidance=torch.full((b,), 10.0 * 1000.0),
                latents_clean=_rn(g, b, c, 2, geo.h, geo.w),
                indices_latents_clean=torch.cat([i_pre, i_1x]),
                latents_history_2x=_rn(g, b, c, hist[1], geo.h, geo.w),
                indices_latents_history_2x=i_2x,
                latents_history_4x=_rn(g, b, c, hist[0], geo.h, geo.w),
                indices_latents_history_4x=i_4x)


def _consisid_rope(cfg, geo):
    if not cfg.get("use_rotary_positional_embeddings"):
        return None
    from types import SimpleNamespace

    # ConsisIDPipeline's method is CogVideoXPipeline's (a "Copied from"); ConsisIDPipeline itself needs opencv.
    from diffusers import CogVideoXPipeline

    fake = SimpleNamespace(vae_scale_factor_spatial=8,
                           transformer=SimpleNamespace(config=SimpleNamespace(**{"patch_size_t": None, **cfg})))
    return CogVideoXPipeline._prepare_rotary_positional_embeddings(fake, geo.h * 8, geo.w * 8, geo.t,
                                                                  torch.device("cpu"))


def _in_consisid(cfg, geo, g):
    # ConsisIDPipeline: latents (B, F, C, H, W) with the image latents concatenated on channels, T5 226 tokens, the
    # face embedding (1280) and the 5 ViT hidden states (577 x 1024) of the face encoder for the perceivers.
    b = geo.b
    d = dict(hidden_states=_rn(g, b, geo.t, cfg["in_channels"], geo.h, geo.w),
             encoder_hidden_states=_rn(g, b, geo.text, cfg["text_embed_dim"], std=0.25),
             timestep=torch.full((b,), 500, dtype=torch.long), image_rotary_emb=_consisid_rope(cfg, geo))
    if cfg.get("is_train_face"):
        n_vit = 577 if geo.h > 8 else 5
        d["id_cond"] = _rn(g, b, cfg["LFE_id_dim"], std=0.25)
        d["id_vit_hidden"] = [_rn(g, b, n_vit, cfg["LFE_vit_dim"], std=0.25) for _ in range(cfg["LFE_num_scale"])]
    return d


def _in_latte(cfg, geo, g):
    # LattePipeline: latents (B, C, F, H, W) with no temporal compression, T5 120 tokens, CFG batched.
    return dict(hidden_states=_rn(g, geo.b, cfg["in_channels"], geo.t, geo.h, geo.w),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg["caption_channels"], std=0.25),
                timestep=torch.full((geo.b,), 500, dtype=torch.long), enable_temporal_attentions=True)


def _in_sana_video(cfg, geo, g):
    # SanaVideoPipeline: Wan-VAE latents, Gemma-2 text 300 tokens with its mask, CFG batched.
    mask = torch.zeros(geo.b, geo.text, dtype=torch.long)
    mask[:, : max(1, min(40, geo.text))] = 1
    return dict(hidden_states=_rn(g, geo.b, cfg["in_channels"], geo.t, geo.h, geo.w),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg["caption_channels"], std=0.25),
                encoder_attention_mask=mask, timestep=torch.full((geo.b,), 500.0))


def _in_easyanimate(cfg, geo, g):
    # EasyAnimatePipeline: latents (B, C, F, H, W), Qwen2-VL text (3584 wide), CFG batched, no mask reaches the
    # attention.
    c = cfg.get("in_channels") or 16
    return dict(hidden_states=_rn(g, geo.b, c, geo.t, geo.h, geo.w), timestep=torch.full((geo.b,), 500),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg["text_embed_dim"], std=0.25))


def _in_cosmos(cfg, geo, g):
    # CosmosTextToWorldPipeline: T5 512 tokens (1024 wide), fps 30. The padding-mask channel is an input channel
    # only (no attention work); it is left out with `concat_padding_mask` off.
    return dict(hidden_states=_rn(g, geo.b, cfg.get("in_channels", 16), geo.t, geo.h, geo.w),
                timestep=torch.full((geo.b,), 500.0),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg.get("text_embed_dim", 1024), std=0.25), fps=30)


def _in_motif(cfg, geo, g):
    # MotifVideoPipeline: CFG batched (empty negative prompt, a 64-token prompt), T5 512 tokens with the mask.
    c = cfg.get("in_channels", 33)
    mask = torch.zeros(geo.b, geo.text, dtype=torch.bool)
    mask[0, :1] = True
    mask[1:, : min(64, geo.text)] = True
    return dict(hidden_states=_rn(g, geo.b, c, geo.t, geo.h, geo.w), timestep=torch.full((geo.b,), 500),
                encoder_hidden_states=_rn(g, geo.b, geo.text, cfg.get("text_embed_dim", 4096), std=0.25),
                encoder_attention_mask=mask)


def _in_kandinsky5(cfg, geo, g):
    # Kandinsky5T2VPipeline: channels-last latents (B, F, H, W, C) with the zero visual condition and its mask
    # concatenated, Qwen2.5-VL text, CLIP pooled text, RoPE positions per axis (patch (1, 2, 2)).
    c = cfg.get("in_visual_dim", 4)
    lat = _rn(g, geo.b, geo.t, geo.h, geo.w, c)
    if cfg.get("visual_cond"):
        lat = torch.cat([lat, torch.zeros_like(lat), torch.zeros_like(lat[..., :1])], dim=-1)
    p = cfg.get("patch_size", (1, 2, 2))
    return dict(hidden_states=lat, encoder_hidden_states=_rn(g, geo.b, geo.text, cfg["in_text_dim"], std=0.25),
                timestep=torch.full((geo.b,), 500.0), pooled_projections=_rn(g, geo.b, cfg["in_text_dim2"], std=0.25),
                visual_rope_pos=(torch.arange(geo.t // p[0]), torch.arange(geo.h // p[1]),
                                 torch.arange(geo.w // p[2])),
                text_rope_pos=torch.arange(geo.text))


def _in_kandinsky6(cfg, geo, g):
    # Kandinsky6TI2VAPipeline (text to video, no audio head in this config): channels-last latents with the zero
    # condition and mask, Qwen text (3584) with a (B, S) key-padding mask, CLIP pooled text.
    c = cfg.get("in_visual_dim", 16)
    lat = _rn(g, geo.b, geo.t, geo.h, geo.w, c)
    if cfg.get("visual_cond", True):
        lat = torch.cat([lat, torch.zeros_like(lat), torch.zeros_like(lat[..., :1])], dim=-1)
    mask = torch.zeros(geo.b, geo.text, dtype=torch.bool)
    mask[:, : max(1, min(64, geo.text))] = True
    return dict(hidden_states=lat, encoder_hidden_states=_rn(g, geo.b, geo.text, cfg["in_text_dim"], std=0.25),
                pooled_projections=_rn(g, geo.b, cfg["in_text_dim2"], std=0.25), timestep=torch.full((geo.b,), 500.0),
                encoder_attention_mask=mask)


def _in_minimax_h3(cfg, geo, g):
    """One packed sequence [text, audio, video] as MiniMax-H3's modular pipeline packs it (video patched 1x2x2)."""
    p = cfg.get("patch_size", (1, 2, 2))
    nv = (geo.t // p[0]) * (geo.h // p[1]) * (geo.w // p[2])
    nt = geo.text
    # audio latents at 40 per second of 24 fps video (the modular pipeline's audio_latent_num_frames)
    na = int(round(((geo.t - 2) // 5 * 17 + 5) / 24 * 40)) if geo.h > 8 else 6
    n = nt + na + nv
    text, audio, video = torch.arange(nt), torch.arange(nt, nt + na), torch.arange(nt + na, n)
    tags = torch.empty(n, dtype=torch.long)
    tags[text], tags[audio], tags[video] = 1, 2, 0
    tsi = torch.zeros(n, dtype=torch.long)
    tsi[audio] = 1
    pos = torch.zeros(n, 3)
    pos[:, 0] = torch.arange(n, dtype=torch.float32)
    gw = geo.w // p[2]
    gh = geo.h // p[1]
    vi = torch.arange(nv)
    pos[video, 0] = (nt + na + vi // (gh * gw)).float()
    pos[video, 1] = ((vi // gw) % gh).float()
    pos[video, 2] = (vi % gw).float()
    pv = p[0] * p[1] * p[2] * cfg.get("in_channels", 24)
    return dict(hidden_states=_rn(g, 1, nv, pv), audio_hidden_states=_rn(g, 1, na, cfg.get("audio_in_channels", 32)),
                encoder_hidden_states=_rn(g, 1, nt, cfg.get("text_dim", 5120), std=0.25),
                timestep=torch.tensor([0.7, 0.3]), timestep_indices=tsi, token_tags=tags, position_ids=pos,
                video_indices=video, audio_indices=audio, text_indices=text)


def _in_cosmos3(cfg, geo, g):
    """The generation pathway of one Cosmos3-Omni call: the prompt tokens (understanding part, causal) then one
    video's latent tokens (patched 2x2 over 48 channels)."""
    ps = cfg.get("latent_patch_size", 2)
    t, h, w = geo.t, geo.h // ps * ps, geo.w // ps * ps
    nv = t * (h // ps) * (w // ps)
    nt = geo.text
    seq = nt + nv
    idx = torch.arange(nt, seq)
    return dict(input_ids=torch.randint(0, cfg.get("vocab_size", 151936), (nt,), generator=g),
                text_indexes=torch.arange(nt), position_ids=torch.zeros((3, seq), dtype=torch.long), und_len=nt,
                sequence_length=seq, vision_tokens=[_rn(g, 1, cfg.get("latent_channel", 48), t, h, w)],
                vision_token_shapes=[(t, h // ps, w // ps)], vision_sequence_indexes=idx, vision_mse_loss_indexes=idx,
                vision_timesteps=torch.ones(nv), vision_noisy_frame_indexes=[torch.arange(t)])


# ---------------------------------------------------------------------------------------------------- entries
_NO_PIPE = ("a full pipeline with random weights (its VAE, text encoder(s) and scheduler built from their real "
            "configs) is not built offline here")


@dataclass(frozen=True)
class Entry:
    name: str
    display: str
    cls_name: str
    checkpoint: str
    config: dict                    # the real config (keys over the class defaults; {} = the class defaults)
    size: Size                      # the pipeline's default video size
    text: int                       # text tokens one call gets
    batch: int                      # batch of one transformer call (2 where the pipeline batches CFG)
    pipeline: str
    note: str
    make: Callable | None = None    # input builder (None: pipelines/families.py builds it)
    spatial: int = 8                # VAE factors, for the latent geometry
    temporal: int = 4
    tiny: dict = field(default_factory=dict)     # tiny config: keys over `config`
    tiny_size: Size = Size(64, 64, 5)
    tiny_text: int = 8
    layer_keys: tuple = ("num_layers",)
    one_block: dict = field(default_factory=dict)  # extra keys of the 1-block warm-up copy
    route: str = "kernel"           # what vidattn runs (docs/support.md): kernel, partly, outside
    measure: str | None = None      # why the GPU runner cannot build this family's forward (None: it can)
    generate: str | None = _NO_PIPE  # why generate_video.py cannot build the full pipeline (None: it can)
    heads_key: str = "num_attention_heads"
    head_dim_key: str = "attention_head_dim"
    latent_frames: Callable | None = None
    fill: Callable | None = None    # (model, inputs) -> inputs: the pass that fills the call's KV cache (cached.py)
    baseline: Callable | None = None  # (model) -> restore: what the SDPA column runs where stock cannot run
    baseline_note: str | None = None

    def geo(self, size: Size, tiny: bool, batch: int | None = None) -> Geo:
        t = self.latent_frames(size.frames) if self.latent_frames else (size.frames - 1) // self.temporal + 1
        return Geo(self.batch if batch is None else batch, t, size.height // self.spatial,
                   size.width // self.spatial, self.tiny_text if tiny else self.text)



# Wan-lineage tiny: 2 heads x 64, the real RoPE split works at that head dim.
_WAN_TINY = dict(num_attention_heads=2, attention_head_dim=64, text_dim=16, freq_dim=32, ffn_dim=32, num_layers=2,
                 rope_max_seq_len=32)

_GEN_OK = {"wan", "wan14b", "ltx2"}

_FAM_NAMES = {"wan": "wan", "wan14b": "wan14b", "skyreels_v2": "skyreels_v2", "hunyuan_video": "hunyuan_video",
              "hunyuan_video15": "hunyuan_video15", "cogvideox": "cogvideox", "ltx": "ltx", "ltx2": "ltx2",
              "mochi": "mochi", "allegro": "allegro"}


def _from_families(name: str, route: str = "kernel", layer_keys=("num_layers",)) -> Entry:
    f = fams.family(name)
    return Entry(name, f.display, f.cls_name, f.checkpoint, f.config, f.sizes["default"], f.text["tokens"], f.batch,
                 f.pipeline, f.note, None, f.vae_spatial, f.vae_temporal, tiny_size=fams.TINY_SIZES[name],
                 layer_keys=layer_keys, route=route,
                 generate=None if name in _GEN_OK else _NO_PIPE)


ENTRIES: dict[str, Entry] = {}


def _add(e: Entry) -> None:
    ENTRIES[e.name] = e


for _n in ("wan", "wan14b"):
    _add(_from_families(_n))
_add(Entry("wan_vace", "Wan2.1-VACE-14B", "WanVACETransformer3DModel", "Wan-AI/Wan2.1-VACE-14B-diffusers",
           {}, Size(480, 832, 81), 512, 1, "WanVACEPipeline",
           "CFG as two batch-1 calls; UMT5 512 tokens; 96 control channels (8 VACE blocks, the class defaults)",
           _in_wan_vace, tiny={**_WAN_TINY, "in_channels": 4, "out_channels": 4, "vace_layers": [0],
                               "vace_in_channels": 8},
           one_block={"vace_layers": [0]}))
_add(Entry("wan_animate", "Wan2.2-Animate-14B", "WanAnimateTransformer3DModel", "Wan-AI/Wan2.2-Animate-14B-Diffusers",
           {}, Size(720, 1280, 77), 512, 1, "WanAnimatePipeline",
           "one 77-frame segment (21 latent frames + the reference frame), pose latents, 77 face crops of 512x512, "
           "CLIP image keys; guidance 1.0 (one call per step)", _in_wan_animate,
           tiny={**_WAN_TINY, "in_channels": 12, "latent_channels": 4, "out_channels": 4, "image_dim": 16,
                 "motion_encoder_channel_sizes": {"4": 16, "8": 16, "16": 16}, "motion_encoder_size": 16,
                 "motion_style_dim": 8, "motion_dim": 4, "motion_encoder_dim": 16, "face_encoder_hidden_dim": 16,
                 "face_encoder_num_heads": 2, "inject_face_latents_blocks": 2},
           tiny_size=Size(64, 64, 77), one_block={"inject_face_latents_blocks": 1}))
_add(Entry("wan_animate2", "Wan-Animate-2 (14B)", "WanAnimate2Transformer3DModel", "(class defaults: dim 5120, 40 x 128)",
           {}, Size(720, 1280, cached.WAN_ANIMATE2_SEGMENT), 512, 1, "WanAnimate2ModularPipeline",
           "one denoising step (conditional branch) of an 81-frame segment: 21 + 1 generation latent frames against "
           "the reference K/V that the extract pass (untimed, before) stored for the 21 driving-video frames; the "
           "in-context block mask (every generation key + the query frame's reference frame)",
           cached.make_wan_animate2, tiny=cached.WAN_ANIMATE2_TINY, tiny_size=Size(64, 64, 5), route="kernel",
           heads_key="num_heads", head_dim_key=None, fill=cached.fill_wan_animate2,
           baseline=cached.install_sdpa_baseline,
           baseline_note="stock runs this pass on diffusers' flex backend eagerly, which materialises the full "
                         "score matrix (~1.9 TB at this size): the SDPA column is the same two-attention "
                         "log-sum-exp decomposition on PyTorch's FlashAttention (pipelines/cached.py)"))
_add(_from_families("skyreels_v2"))
_add(Entry("chronoedit", "ChronoEdit-14B", "ChronoEditTransformer3DModel", "nvidia/ChronoEdit-14B-Diffusers",
           {"in_channels": 36, "image_dim": 1280, "added_kv_proj_dim": 5120}, Size(480, 832, 81), 512, 1,
           "ChronoEditPipeline",
           "CFG as two batch-1 calls; I2V input (16 latent + 20 condition channels), CLIP image keys (257)",
           _in_chronoedit, tiny={**_WAN_TINY, "in_channels": 4, "out_channels": 4, "image_dim": 16,
                                 "added_kv_proj_dim": 128}))
_add(Entry("helios", "Helios-14B", "HeliosTransformer3DModel", "(class defaults: Wan-14B lineage, 40 x 128)",
           {}, Size(384, 640, 33), 512, 1, "HeliosPipeline",
           "one 33-frame chunk (9 latent frames) with 2 short, 2 mid and 16 long history latents; UMT5 512 tokens",
           _in_helios, tiny={**{k: v for k, v in _WAN_TINY.items() if k != "rope_max_seq_len"}, "in_channels": 4,
                             "out_channels": 4, "rope_dim": (16, 24, 24)},
           tiny_size=Size(64, 64, 5)))
_add(Entry("anyflow", "AnyFlow-Wan2.1-T2V-14B", "AnyFlowTransformer3DModel", "(class defaults: Wan2.1-T2V-14B)",
           {}, Size(480, 832, 81), 512, 1, "AnyFlowPipeline", "guidance 1.0: one call per step; UMT5 512 tokens",
           _in_anyflow, tiny={**_WAN_TINY, "in_channels": 4, "out_channels": 4}))
_add(Entry("anyflow_far", "AnyFlow-FAR-1.3B", "AnyFlowFARTransformer3DModel", "(FAR-1.3B: 30 layers, 12 x 128)",
           {"num_attention_heads": 12, "ffn_dim": 8960, "num_layers": 30}, Size(480, 832, 81), 512, 1,
           "AnyFlowFARPipeline",
           "the denoising call of the last chunk (2 latent frames) against the KV cache of the 7 before it (3 full "
           "chunks + 4x4-compressed older ones): dense attention, the pass the kernel runs; guidance 1.0. The stock "
           "processor forces diffusers' flex backend (eager, without torch.compile): the SDPA column is that path",
           _in_anyflow_far, tiny={**_WAN_TINY, "in_channels": 4, "out_channels": 4, "full_chunk_limit": 3},
           route="partly"))
for _n in ("hunyuan_video",):
    _add(_from_families(_n, layer_keys=("num_layers", "num_single_layers")))
_add(Entry("framepack", "HunyuanVideo-FramePack (13B)", "HunyuanVideoFramepackTransformer3DModel",
           "lllyasviel/FramePackI2V_HY", {"has_image_proj": True, "image_proj_dim": 1152,
                                          "has_clean_x_embedder": True},
           Size(720, 1280, 33), 256, 1, "HunyuanVideoFramepackPipeline",
           "one section: a 9-latent-frame window (33 frames) with 1x/2x/4x history latents (2+2+16 frames), "
           "SigLIP image tokens, Llama text 256 tokens (64 valid)", _in_framepack,
           tiny={"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 64,
                 "num_layers": 1, "num_single_layers": 1, "num_refiner_layers": 1, "mlp_ratio": 2.0,
                 "text_embed_dim": 32, "pooled_projection_dim": 16, "rope_axes_dim": (16, 24, 24),
                 "image_proj_dim": 16},
           tiny_size=Size(64, 64, 5), layer_keys=("num_layers", "num_single_layers")))
_add(_from_families("hunyuan_video15"))
_add(_from_families("cogvideox"))
_add(Entry("consisid", "ConsisID (CogVideoX-5B-I2V base)", "ConsisIDTransformer3DModel", "BestWishYsh/ConsisID-preview",
           {"num_attention_heads": 48, "num_layers": 42, "in_channels": 32, "use_rotary_positional_embeddings": True,
            "use_learned_positional_embeddings": True, "is_train_face": True, "is_kps": False},
           Size(480, 720, 49), 226, 2, "ConsisIDPipeline",
           "CFG batched (batch 2); T5 226 tokens; the face embedding and 5 ViT hidden states for the perceivers "
           "(hand-written attention: stock)", _in_consisid,
           tiny={"num_attention_heads": 3, "in_channels": 8, "out_channels": 4, "time_embed_dim": 16,
                 "text_embed_dim": 32, "num_layers": 2, "sample_width": 8, "sample_height": 8, "sample_frames": 9,
                 "max_text_seq_length": 8, "cross_attn_dim_head": 64, "cross_attn_num_heads": 2, "LFE_id_dim": 16,
                 "LFE_vit_dim": 16, "LFE_depth": 5, "LFE_dim_head": 8, "LFE_num_heads": 2, "LFE_num_querie": 4,
                 "LFE_output_dim": 128, "LFE_num_scale": 5, "cross_attn_interval": 1},
           one_block={"cross_attn_interval": 1},
           route="partly"))
_add(_from_families("ltx"))
_add(_from_families("ltx2"))
_add(_from_families("mochi"))
_add(_from_families("allegro"))
_add(Entry("latte", "Latte-1", "LatteTransformer3DModel", "maxin-cn/Latte-1",
           {"num_attention_heads": 16, "attention_head_dim": 72, "in_channels": 4, "out_channels": 8,
            "num_layers": 28, "cross_attention_dim": 1152, "attention_bias": True, "sample_size": 64, "patch_size": 2,
            "activation_fn": "gelu-approximate", "num_embeds_ada_norm": 1000, "norm_type": "ada_norm_single",
            "norm_elementwise_affine": False, "norm_eps": 1e-6, "caption_channels": 4096, "video_length": 16},
           Size(512, 512, 16), 120, 2, "LattePipeline",
           "CFG batched (batch 2); 16 frames, no temporal compression; T5 120 tokens; spatial attention per frame, "
           "temporal attention per pixel", _in_latte, temporal=1,
           tiny={"num_attention_heads": 2, "attention_head_dim": 64, "num_layers": 2, "cross_attention_dim": 128,
                 "sample_size": 8, "caption_channels": 32, "video_length": 4},
           tiny_size=Size(64, 64, 4), latent_frames=lambda f: f, route="kernel"))
_add(Entry("easyanimate", "EasyAnimate-V5.1-12B", "EasyAnimateTransformer3DModel",
           "alibaba-pai/EasyAnimateV5.1-12b-zh", {"in_channels": 16, "out_channels": 16, "patch_size": 2},
           Size(512, 512, 49), 256, 2, "EasyAnimatePipeline",
           "CFG batched (batch 2); Qwen2-VL text 256 tokens; joint text+video attention", _in_easyanimate,
           tiny={"num_attention_heads": 2, "in_channels": 4, "out_channels": 4, "sample_width": 8,
                 "sample_height": 8, "num_layers": 2, "mmdit_layers": 2, "time_embed_dim": 16, "text_embed_dim": 16}))
_add(Entry("sana_video", "SANA-Video-2B", "SanaVideoTransformer3DModel", "(class defaults: SANA-Video 2B)",
           {}, Size(480, 832, 81), 300, 2, "SanaVideoPipeline",
           "CFG batched (batch 2); Gemma-2 text 300 tokens with its mask; linear self-attention (no softmax), "
           "softmax cross-attention at D=112", _in_sana_video,
           tiny={"num_attention_heads": 2, "attention_head_dim": 64, "num_layers": 2, "num_cross_attention_heads": 2,
                 "cross_attention_head_dim": 64, "cross_attention_dim": 128, "caption_channels": 32, "in_channels": 4,
                 "out_channels": 4, "sample_size": 8, "rope_max_seq_len": 32},
           route="partly"))
_add(Entry("sana_wm_refiner", "SANA-WM LTX-2 refiner", "SanaWMLTX2RefinerTransformer3DModel",
           "(class defaults: LTX-2 shape, 32 x 128 video)", {}, Size(704, 1280, 161), 1024, 1, "SanaWMLTX2Refiner",
           "one denoising step of the steady-state AR block: 3 latent frames (2640 tokens) against [1 sink + 10 "
           "history + 3 current] frames of K/V (12 320 keys), the cache filled first (untimed) by the sink's "
           "capture pass and a history pass; Gemma-3 text through the connectors, 1024 tokens (64 valid)",
           cached.make_sana_wm_refiner, spatial=32, temporal=8,
           tiny={k: v for k, v in fams.TINY["ltx2"].items()}, tiny_size=Size(64, 64, 17),
           fill=cached.fill_sana_wm_refiner))
_add(Entry("kandinsky5", "Kandinsky-5.0-T2V-Lite", "Kandinsky5Transformer3DModel",
           "kandinskylab/Kandinsky-5.0-T2V-Lite-sft-5s-Diffusers",
           {"in_visual_dim": 16, "out_visual_dim": 16, "time_dim": 512, "model_dim": 1792, "ff_dim": 7168,
            "num_text_blocks": 2, "num_visual_blocks": 32, "axes_dims": (16, 24, 24), "visual_cond": True},
           Size(512, 768, 121), 512, 1, "Kandinsky5T2VPipeline",
           "CFG as two batch-1 calls; Qwen2.5-VL text 512 tokens, CLIP pooled; regular (dense) attention",
           _in_kandinsky5,
           tiny={"in_visual_dim": 4, "out_visual_dim": 4, "in_text_dim": 16, "in_text_dim2": 8, "time_dim": 16,
                 "model_dim": 128, "ff_dim": 64, "num_text_blocks": 1, "num_visual_blocks": 2},
           layer_keys=("num_text_blocks", "num_visual_blocks"), heads_key=None, head_dim_key=None,
           route="kernel"))  # the class: NABLA configs too (their BlockMask on the block-sparse path); this config is dense
_add(Entry("kandinsky6", "Kandinsky-6 TI2VA", "Kandinsky6Transformer3DModel", "(class defaults: model_dim 4096, 60 "
           "visual blocks)", {}, Size(512, 768, 121), 1024, 1, "Kandinsky6TI2VAPipeline",
           "CFG as two batch-1 calls; Qwen text 1024 tokens with a (B, S) padding mask, CLIP pooled; no audio head",
           _in_kandinsky6,
           tiny={"in_visual_dim": 4, "out_visual_dim": 4, "in_text_dim": 16, "in_text_dim2": 8, "time_dim": 16,
                 "model_dim": 128, "ff_dim": 64, "num_text_blocks": 1, "num_visual_blocks": 2,
                 "axes_dims": (16, 24, 24)},
           layer_keys=("num_text_blocks", "num_visual_blocks"), heads_key=None, head_dim_key=None))
_add(Entry("cosmos", "Cosmos-1.0-Diffusion-7B-Text2World", "CosmosTransformer3DModel",
           "nvidia/Cosmos-1.0-Diffusion-7B-Text2World", {"concat_padding_mask": False},
           Size(704, 1280, 121), 512, 1, "CosmosTextToWorldPipeline",
           "CFG as two batch-1 calls; T5 512 tokens; 8x temporal compression; the padding-mask channel left out",
           _in_cosmos, temporal=8,
           tiny={"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 64,
                 "num_layers": 2, "mlp_ratio": 2.0, "text_embed_dim": 16, "adaln_lora_dim": 4,
                 "max_size": (4, 32, 32)},
           tiny_size=Size(64, 64, 9)))
_add(Entry("cosmos3", "Cosmos3-Omni", "Cosmos3OmniTransformer", "(class defaults: 36 layers, 32 q / 8 kv heads x 128)",
           {}, Size(704, 1280, 121), 256, 1, "Cosmos3OmniPipeline",
           "the generation pathway: 256 prompt tokens, then one video's latent tokens (16x spatial VAE, 48 channels, "
           "patch 2); Cosmos3OmniPipeline's height, width and frames default to None: 704x1280x121 is Cosmos' "
           "usual size (assumed)", _in_cosmos3, spatial=16,
           tiny={"head_dim": 64, "hidden_act": "relu2", "hidden_size": 128, "intermediate_size": 64,
                 "latent_channel": 2, "latent_patch_size": 1, "num_attention_heads": 2, "num_hidden_layers": 2,
                 "num_key_value_heads": 1, "patch_latent_dim": 2, "qk_norm_for_text": False, "rms_norm_eps": 1e-5,
                 "rope_axes_dim": [16, 8, 8], "rope_theta": 1e4, "vocab_size": 32},
           tiny_size=Size(32, 32, 1), tiny_text=3, layer_keys=("num_hidden_layers",), route="kernel",
           head_dim_key="head_dim"))
_add(Entry("motif_video", "Motif-Video-2B", "MotifVideoTransformer3DModel", "(class defaults)",
           {"num_single_layers": 40}, Size(736, 1280, 121), 512, 2, "MotifVideoPipeline",
           "CFG batched (batch 2: empty negative prompt, a 64-token prompt); T5 512 tokens with the mask",
           _in_motif,
           tiny={"in_channels": 4, "out_channels": 4, "num_attention_heads": 2, "attention_head_dim": 64,
                 "num_layers": 1, "num_single_layers": 1, "mlp_ratio": 2.0, "text_embed_dim": 16,
                 "rope_axes_dim": (16, 24, 24)},
           layer_keys=("num_layers", "num_single_layers")))
_add(Entry("minimax_h3", "MiniMax-H3", "MiniMaxH3Transformer3DModel", "(class defaults: 50 layers, 56 x 128)",
           {}, Size(768, 1344, 124), 512, 1, "MiniMaxH3ModularPipeline",
           "one packed [text, audio, video] sequence, no mask: 124 frames (the default; 37 latent frames, 17n+5 -> "
           "5n+2) on the 16:9 canvas of 768x1344, 207 audio latents; 512 text tokens (assumed)",
           _in_minimax_h3, spatial=16, latent_frames=lambda f: (f - 5) // 17 * 5 + 2,
           tiny={"num_attention_heads": 2, "attention_head_dim": 64, "hidden_size": 96, "num_layers": 2,
                 "num_refiner_layers": 1, "ffn_dim": 64, "in_channels": 4, "audio_in_channels": 6, "text_dim": 8,
                 "freq_dim": 8, "time_embed_hidden_dim": 24, "time_embed_dim": 16, "rope_freq_dim": 8},
           tiny_size=Size(32, 32, 22), tiny_text=4))

# Families whose full pipeline is built offline with random weights (wan, wan14b: pipelines/wan.py; ltx2:
# pipelines/ltx2.py; the rest: the adapters of pipelines/generate.py, which a test keeps in step with this list).
GENERATES = ("wan", "wan14b", "ltx2", "skyreels_v2", "anyflow", "anyflow_far", "wan_vace", "helios", "chronoedit",
             "sana_video", "motif_video", "hunyuan_video", "hunyuan_video15", "cogvideox", "ltx", "mochi", "allegro",
             "latte", "easyanimate", "kandinsky5", "kandinsky6", "framepack",
             "wan_animate", "consisid", "cosmos", "cosmos3", "sana_wm_refiner",
             "minimax_h3", "wan_animate2")
for _n in GENERATES:
    ENTRIES[_n] = dataclasses.replace(ENTRIES[_n], generate=None)

# The order of the GPU table: cheap first within each group.
ORDER = list(ENTRIES)


class RegistryError(FamilyError):
    """A user-facing problem: unknown family or preset, or a family this machine cannot build."""


def pick_device(requested, tiny: bool, what: str):
    """The torch device a runner uses: `requested` ("cuda", "cpu" or None for CUDA when there is one). SystemExit
    when CUDA is asked for and absent, or when the CPU would run the real sizes (`what` names them)."""
    import torch

    cuda = torch.cuda.is_available()
    try:
        device = torch.device(requested or ("cuda" if cuda else "cpu"))
    except RuntimeError:
        raise SystemExit(f"error: --device {requested!r} is no device torch knows (cuda, cuda:N or cpu)") from None
    if device.type not in ("cuda", "cpu"):
        raise SystemExit(f"error: --device {requested!r}: the runners take cuda, cuda:N or cpu")
    if device.type == "cuda" and not cuda:
        raise SystemExit("error: --device cuda requested but CUDA is not available")
    if device.type == "cpu" and not tiny:
        raise SystemExit(f"error: {what} need a CUDA GPU; --tiny --device cpu checks the plumbing")
    return device


def names() -> list[str]:
    return list(ENTRIES)


def entry(name: str) -> Entry:
    if name not in ENTRIES:
        raise RegistryError(f"unknown model family {name!r} (choose from {', '.join(ENTRIES)})")
    return ENTRIES[name]


def in_families(name: str) -> bool:
    return name in fams.FAMILIES


def class_defaults(cls) -> dict:
    import inspect

    return {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items()
            if k != "self" and p.default is not inspect.Parameter.empty}


def model_class(name: str):
    import diffusers

    return getattr(diffusers, entry(name).cls_name)


def config_for(name: str, preset: str = "default") -> dict:
    """The constructor keywords: the real config, or the tiny one (preset "tiny")."""
    e = entry(name)
    if in_families(name):
        return fams.config_for(name, "default" if preset != "tiny" else "tiny")
    cfg = copy.deepcopy(e.config)
    if preset == "tiny":
        cfg.update(copy.deepcopy(e.tiny))
    return cfg


def full_config(name: str, preset: str = "default") -> dict:
    """The config with the class defaults filled in (what the model will read)."""
    return {**class_defaults(model_class(name)), **config_for(name, preset)}


def size_for(name: str, preset: str = "default") -> Size:
    e = entry(name)
    if in_families(name):
        return fams.size_for(name, preset)
    if preset == "tiny":
        return e.tiny_size
    if preset != "default":
        raise RegistryError(f"model family {name}: unknown preset {preset!r} (choose from default, tiny)")
    return e.size


def presets(name: str) -> list[str]:
    return fams.family(name).presets() if in_families(name) else ["default", "tiny"]


def heads_and_dim(name: str, cfg: dict) -> tuple[int | None, int | None]:
    e = entry(name)
    if name.startswith("kandinsky"):
        d = sum(cfg["axes_dims"])
        return cfg["model_dim"] // d, d
    if name == "wan_animate2":
        return cfg["num_heads"], cfg["dim"] // cfg["num_heads"]
    h = cfg.get(e.heads_key) if e.heads_key else None
    d = cfg.get(e.head_dim_key) if e.head_dim_key else None
    return h, d


def layers_text(name: str, cfg: dict) -> str:
    keys = entry(name).layer_keys
    return " + ".join(f"{cfg.get(k)} {k.replace('num_', '').replace('_layers', '').replace('_blocks', '')}"
                      if len(keys) > 1 else str(cfg.get(k)) for k in keys)


def check_buildable(name: str) -> None:
    e = entry(name)
    if e.measure is not None and e.make is None:
        raise RegistryError(f"{name}: {e.measure}")


def video_tokens(name: str, size: Size, cfg: dict, tiny: bool = False) -> int:
    e = entry(name)
    if in_families(name):
        return fams.video_tokens(name, size, config_for(name, "tiny" if tiny else "default"))
    geo = e.geo(size, tiny)
    p = cfg.get("patch_size", 2)
    if name == "sana_wm_refiner":  # the queries of one AR block
        return cached.refiner_keys(geo.t, geo.h * geo.w)[0]
    if name == "wan_animate2":  # the generation latents: the segment's frames + the reference image's slot
        return (geo.t + 1) * (geo.h // p[1]) * (geo.w // p[2])
    if name == "cosmos3":
        p = cfg.get("latent_patch_size", 2)
        return geo.t * (geo.h // p) * (geo.w // p)
    if isinstance(p, (list, tuple)):
        pt, ph, pw = p
    else:
        pt, ph, pw = 1, p, p
    return (geo.t // pt) * (geo.h // ph) * (geo.w // pw)


def check_size(name: str, size: Size, preset: str = "default") -> None:
    if in_families(name):
        fams.check_size(name, size, fams.config_for(name, "tiny" if preset == "tiny" else "default"))
        return
    e = entry(name)
    cfg = full_config(name, preset)
    p = cfg.get("patch_size", cfg.get("latent_patch_size", 2))
    ps = p[1] if isinstance(p, (list, tuple)) else p
    mult = e.spatial * ps
    for what, v in (("height", size.height), ("width", size.width)):
        if v <= 0 or v % mult:
            raise RegistryError(f"{name}: --{what} must be a positive multiple of {mult} (VAE {e.spatial}x times "
                                f"patch {ps}), got {v}")
    if size.frames < 1 or (e.latent_frames is None and (size.frames - 1) % e.temporal):
        raise RegistryError(f"{name}: --frames must be {e.temporal}k+1, got {size.frames}")


def _move(x, device, dtype, memo: dict | None = None):
    """Floating tensors of 2+ dims (activations, embeddings) in the model dtype; the rest as they are. A tensor
    shared between entries (AnyFlow-FAR's per-layer cache) stays shared."""
    memo = {} if memo is None else memo
    if isinstance(x, torch.Tensor):
        if id(x) not in memo:
            cast = x.is_floating_point() and x.dim() >= 2
            memo[id(x)] = x.to(device, dtype) if cast else x.to(device)
        return memo[id(x)]
    if isinstance(x, (list, tuple)):
        return type(x)(_move(v, device, dtype, memo) for v in x)
    if isinstance(x, dict):
        return {k: _move(v, device, dtype, memo) for k, v in x.items()}
    return x


def build_model(name: str, preset: str = "default", *, device="cpu", dtype=torch.bfloat16, seed: int = 0,
                overrides: dict | None = None):
    """The family's transformer with seeded random weights, initialised on `device` itself (a CUDA build never
    touches the CPU), cast as `from_pretrained(torch_dtype=...)` would (fp32-kept modules stay fp32)."""
    if in_families(name):
        return fams.build_model(name, "tiny" if preset == "tiny" else "default", device=device, dtype=dtype,
                                seed=seed, overrides=overrides)
    device = torch.device(device)
    cls = model_class(name)
    cfg = {**config_for(name, preset), **(overrides or {})}
    direct = construct_in_dtype(name, preset, device, dtype, overrides)
    previous = torch.get_default_dtype()
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        if device.type == "cuda":
            torch.cuda.manual_seed(seed)
        try:
            if direct:
                torch.set_default_dtype(dtype)
            with torch.device(device):
                model = cls(**cfg)
        finally:
            torch.set_default_dtype(previous)
    model = fams._cast(model, dtype).eval().requires_grad_(False)
    model._vidattn_constructed_in = str(dtype if direct else torch.float32).replace("torch.", "")
    return model


def construct_in_dtype(name: str, preset: str, device, dtype, overrides: dict | None = None) -> bool:
    """True where an fp32 construction would not fit on the GPU (Kandinsky 6, 48B; MiniMax-H3, 33B): those models
    are built in `dtype` directly (parameters and the buffers computed at construction), the rest in fp32 then
    cast, as `from_pretrained(torch_dtype=...)` loads them."""
    device = torch.device(device)
    if device.type != "cuda" or dtype == torch.float32 or preset == "tiny" or overrides:
        return False
    params = (load_flops().get(name) or {}).get("params") or param_count(name, preset)
    total = torch.cuda.get_device_properties(device).total_memory
    return params * 4 > 0.6 * total


def make_inputs(name: str, model, size: Size, *, dtype, preset: str = "default", batch: int | None = None,
                seed: int = 1) -> dict:
    """Keyword arguments of one forward as the family's pipeline builds them (return_dict=False); random tensors
    are drawn on the CPU from `seed` (identical on every device), then moved to the model's device and dtype."""
    if in_families(name):
        return fams.make_inputs(name, model, size, dtype=dtype, batch=batch, seed=seed, tiny=(preset == "tiny"))
    e = entry(name)
    if e.make is None:
        raise RegistryError(f"{name}: {e.measure}")
    dev = next(model.parameters()).device
    cfg = dict(model.config)
    g = torch.Generator(device="cpu").manual_seed(seed)
    inputs = _move(e.make(cfg, e.geo(size, preset == "tiny", batch), g), dev, dtype)
    if e.fill is not None:
        inputs = e.fill(model, inputs)  # the filling pass, untimed (cached.fill_ms says how long it took)
    return {**inputs, "return_dict": False}


def first_output(out):
    """The video prediction of a `return_dict=False` output (a tuple; some families return lists per sample)."""
    out = out[0]
    while isinstance(out, (list, tuple)):
        out = out[0]
    return out


class Built(fams.Built):
    """A family's transformer and the inputs of one forward at one size: families.Built's fields, for every registry
    family (first_output takes any model's output; info reads the registry's entry)."""

    def forward(self) -> torch.Tensor:
        with torch.no_grad():
            return first_output(self.model(**self.inputs))

    def info(self) -> dict:
        e = entry(self.name)
        tiny = self.preset == "tiny"
        cfg = self.config
        h, d = heads_and_dim(self.name, cfg)
        out = {"model_family": self.name, "model": e.display + (" (tiny)" if tiny else ""),
               "checkpoint": None if tiny else e.checkpoint, "class": e.cls_name, "pipeline": e.pipeline,
               "preset": self.preset, "height": self.size.height, "width": self.size.width,
               "frames": self.size.frames, "batch": self.batch,
               "tokens": video_tokens(self.name, self.size, cfg, tiny), "text_tokens": e.tiny_text if tiny else e.text,
               "heads": h, "head_dim": d, "layers": layers_text(self.name, cfg),
               "params": sum(p.numel() for p in self.model.parameters()), "inputs_note": e.note, "route": e.route,
               "input_shapes": {k: (list(v.shape) if isinstance(v, torch.Tensor) else
                                    (None if v is None else type(v).__name__))
                                for k, v in self.inputs.items() if k != "return_dict"}}
        if in_families(self.name):
            shapes = fams.attention_shapes(self.name, self.size, cfg, self.batch)
            out.update(attention_shapes=shapes, attention_flops=fams.attention_flops(shapes))
        return out


def build(name: str, preset: str = "default", *, device="cpu", dtype=torch.bfloat16, seed: int = 0,
          size: Size | None = None, batch: int | None = None, overrides: dict | None = None) -> Built:
    """The family's transformer and the inputs of one forward at the preset's size (or `size`)."""
    e = entry(name)
    check_buildable(name)
    size = size or size_for(name, preset)
    check_size(name, size, preset)
    model = build_model(name, preset, device=device, dtype=dtype, seed=seed, overrides=overrides)
    b = e.batch if batch is None else batch
    inputs = make_inputs(name, model, size, dtype=dtype, preset=preset, batch=b, seed=seed + 1)
    cfg = {**class_defaults(type(model)), **config_for(name, preset), **(overrides or {})}
    return Built(name, preset, model, inputs, size, b, cfg)


def param_count(name: str, preset: str = "default") -> int:
    """Parameters of the architecture, counted on the meta device (nothing allocated)."""
    with torch.device("meta"):
        model = model_class(name)(**config_for(name, preset))
    return sum(p.numel() for p in model.parameters())


def one_block_overrides(name: str) -> dict:
    """Config keys of the 1-block copy: every block count 1 (the attention shapes are the full model's)."""
    e = entry(name)
    return {**{k: 1 for k in e.layer_keys}, **e.one_block}


def n_blocks(name: str, preset: str = "default") -> int:
    cfg = full_config(name, preset)
    return sum(int(cfg.get(k) or 0) for k in entry(name).layer_keys)


# ------------------------------------------------------------------------------------------------ estimates
# Time model of one bf16 forward on an H200, for budgeting device time (never a result): the FLOPs of one forward
# counted on the meta device (torch.utils.flop_counter; no memory, no GPU), attention at ~600 TFLOPS under SDPA and
# the rest (linears, convolutions) at ~650 TFLOPS, plus a fixed 25 % for elementwise work (norms, RoPE, modulation).
# The counts are stored in pipelines/family_flops.json (`python3 -m pipelines.registry --write-flops`).
ATTN_TFLOPS = 600e12
LINEAR_TFLOPS = 650e12
ELEMENTWISE = 0.25
FLOPS_FILE = Path(__file__).with_name("family_flops.json")


def count_flops(name: str, preset: str = "default") -> dict:
    """{"attention": F, "other": F, "params": P} of one forward, counted on the meta device. Attention is the
    batched matmuls (SDPA's math path on meta) over 2 * B * H * Sq * Skv * D each."""
    from torch.utils.flop_counter import FlopCounterMode

    check_buildable(name)
    cls = model_class(name)
    cfg = config_for(name, preset)
    # fp32 on meta: the FLOPs are the same, and some RoPE code paths refuse bf16 there
    with torch.device("meta"):
        model = cls(**cfg).eval().requires_grad_(False)
    params = sum(p.numel() for p in model.parameters())
    size = size_for(name, preset)
    if in_families(name):
        inputs = fams.make_inputs(name, model, size, dtype=torch.float32, tiny=preset == "tiny")
    else:
        e = entry(name)
        g = torch.Generator(device="cpu").manual_seed(1)
        raw = e.make(dict(model.config), e.geo(size, preset == "tiny"), g)
        inputs = {**_move(raw, "meta", torch.float32), "return_dict": False}
    counter = FlopCounterMode(display=False)
    try:
        with counter, torch.no_grad():
            model(**inputs)
    except Exception as exc:  # noqa: BLE001 - data-dependent ops (.item(), autocast) do not run on meta
        # A stock processor on a backend the meta device lacks (AnyFlow-FAR's flex) may still count through vidattn's
        # processors, which compute the same attention (SDPA off the GPU).
        try:
            import vidattn

            import warnings

            from .census import AttentionCensus

            vidattn.apply(model)
            counter = FlopCounterMode(display=False)
            with counter, torch.no_grad(), warnings.catch_warnings(), AttentionCensus() as census:
                warnings.simplefilter("ignore")
                model(**inputs)
        except Exception:  # noqa: BLE001
            return {"params": params, "error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        # vidattn's op has no FLOP formula on meta: its calls are counted from the census (4 * B * H * Sq * Skv * D)
        attn = 0
        for r in census.records:
            q, k = r["q"], r["k"]
            if r["layout"] == "bshd":
                attn += 4 * q[0] * q[2] * q[1] * k[1] * q[3]
            else:
                attn += 4 * q[0] * q[1] * q[2] * k[2] * q[3]
        total = counter.get_total_flops()
        by_op = {str(k): int(v) for k, v in counter.get_flop_counts()["Global"].items()}
        sdpa = sum(v for k, v in by_op.items() if "bmm" in k or "attention" in k)
        return {"attention": attn + sdpa, "other": total - sdpa, "params": params, "by_op": by_op,
                "method": "meta FLOP count (vidattn processors; their calls counted from the census)"}
    by_op = {str(k): int(v) for k, v in counter.get_flop_counts()["Global"].items()}
    attn = sum(v for k, v in by_op.items() if "bmm" in k or "attention" in k)
    return {"attention": attn, "other": counter.get_total_flops() - attn, "params": params, "by_op": by_op}


def load_flops() -> dict:
    try:
        return json.loads(FLOPS_FILE.read_text())
    except (OSError, ValueError):
        return {}


def analytic_flops(name: str, params: int) -> dict:
    """Where the meta device cannot run a forward (data-dependent `.item()`, autocast on meta): every block
    attending jointly over video + text tokens, 2 FLOPs per parameter per token, times 1.3 for what this leaves
    out (history or image tokens, refiners)."""
    e = entry(name)
    cfg = full_config(name)
    size = size_for(name)
    n = video_tokens(name, size, cfg) + e.text
    h, d = heads_and_dim(name, cfg)
    blocks = n_blocks(name)
    attn = 4.0 * e.batch * h * d * n * n * blocks
    return {"attention": 1.3 * attn, "other": 1.3 * 2.0 * params * e.batch * n, "params": params,
            "method": "analytic"}


def estimate(name: str, flops: dict | None = None) -> dict:
    """Estimated seconds of one default-size forward on an H200 and what the GPU runner spends on the family
    (build, 1-block warm-up of both paths, one timed forward per path); None where FLOPs are not known."""
    e = entry(name)
    fl = (flops if flops is not None else load_flops()).get(name)
    if fl and "attention" not in fl and fl.get("params") and (e.make is not None or in_families(name)) \
            and e.measure is None:
        fl = {**analytic_flops(name, fl["params"]), "why_analytic": fl.get("error")}
    if not fl or "attention" not in fl:
        return {"family": name, "forward_s": None, "runner_s": None, "params": (fl or {}).get("params"),
                "why": (fl or {}).get("error") or e.measure or "no FLOP count"}
    fwd = fl["attention"] / ATTN_TFLOPS + fl["other"] / LINEAR_TFLOPS
    fwd *= 1 + ELEMENTWISE
    params = fl["params"]
    nb = max(n_blocks(name), 1)
    # build: seeded init on the GPU and the bf16 cast, measured at 4.4-6.7 s for 1.4-19B parameters on the H200
    # (bench/results/h200_2026-12-01_reach/family/*/report.json build_s): 4 s + 0.15 s per 1e9 parameters, twice
    # (the 1-block copy is a second, smaller build: counted as 2 s); warm-up: the 1-block copy, two forwards per path
    # (4 / nb of a forward, plus ~3 s of first calls); timed: one forward per path (the vidattn one counted at the
    # SDPA estimate: an upper bound); 2 s for the comparison and freeing.
    build_s = 4 + 0.15 * params / 1e9
    runner = build_s + 2 + 3 + (4 / nb) * fwd + 2 * fwd + 2
    return {"family": name, "forward_s": fwd, "attention_s": fl["attention"] / ATTN_TFLOPS * (1 + ELEMENTWISE),
            "runner_s": runner, "params": params, "attention_flops": fl["attention"], "other_flops": fl["other"],
            "method": fl.get("method", "meta FLOP count")}


def write_flops(names_: list[str] | None = None, path: Path = FLOPS_FILE) -> dict:
    out = load_flops() if path.exists() else {}
    for name in names_ or names():
        try:
            fl = count_flops(name)
            fl.pop("by_op", None)
            out[name] = fl
        except RegistryError as exc:
            out[name] = {"error": str(exc)[:200]}
        except Exception as exc:  # noqa: BLE001 - a family the meta device cannot run keeps its reason
            out[name] = {"error": f"{type(exc).__name__}: {str(exc)[:200]}"}
        print(f"{name}: {out[name]}", flush=True)
    path.write_text(json.dumps(out, indent=1, sort_keys=True) + "\n")
    return out


def listing() -> list[dict]:
    rows = []
    flops = load_flops()
    for name in names():
        e = entry(name)
        s = size_for(name)
        est = estimate(name, flops)
        rows.append({"family": name, "model": e.display, "class": e.cls_name, "height": s.height, "width": s.width,
                     "frames": s.frames, "text_tokens": e.text, "batch": e.batch, "route": e.route,
                     "generate": e.generate is None, "measure": e.measure is None or e.make is not None,
                     "est_forward_s": est["forward_s"], "est_runner_s": est["runner_s"]})
    return rows


def print_listing() -> None:
    print(f"{'family':16} {'model':36} {'H x W x frames':>16} {'text':>5} {'batch':>5} {'route':>7} "
          f"{'generate':>8} {'est fwd':>8} {'est run':>8}")
    rows = listing()
    for r in rows:
        f = "—" if r["est_forward_s"] is None else f"{r['est_forward_s']:.2f}s"
        run = "—" if r["est_runner_s"] is None else f"{r['est_runner_s']:.0f}s"
        print(f"{r['family']:16} {r['model'][:36]:36} {r['height']:>5}x{r['width']}x{r['frames']:<4} "
              f"{r['text_tokens']:>5} {r['batch']:>5} {r['route']:>7} {'yes' if r['generate'] else 'no':>8} "
              f"{f:>8} {run:>8}")
    print("est fwd / est run: one SDPA forward and the GPU runner's time for the family on an H200, from FLOPs "
          "(estimates for budgeting, not measurements)")
    from . import generate as gen  # imports this module: here, not at the top

    no = [r["family"] for r in rows if not r["generate"]]
    if no:
        print("generate 'no' (scripts/generate_video.py --family NAME), why:")
        for name in no:
            print(f"  {name}: {gen.why_not(name)}")
    subs = [(n, a.substitute) for n, a in gen.ADAPTERS.items() if a.substitute]
    if subs:
        print("generated with a stand-in:")
        for n, what in subs:
            print(f"  {n}: {what}")


def main(argv: list[str] | None = None) -> None:
    import argparse

    p = argparse.ArgumentParser(description="Video DiT families vidattn routes: default sizes and H200 estimates.")
    p.add_argument("--list", action="store_true", help="the families with their default sizes (default action)")
    p.add_argument("--write-flops", nargs="*", default=None, metavar="FAMILY",
                   help=f"count each family's forward FLOPs on the meta device into {FLOPS_FILE.name}")
    args = p.parse_args(argv)
    if args.write_flops is not None:
        write_flops(args.write_flops or None)
        return
    print_listing()


if __name__ == "__main__":
    main()
