"""One Kandinsky 6 SR transformer forward with NABLA block-sparse attention, stock against vidattn, random weights.

`Kandinsky6SRTransformer3DModel` (diffusers 0.42.1) is text-free: 32 blocks of self-attention and feed-forward over
one latent video tile. Its stock processor builds a NABLA BlockMask in every block (`nabla_block_mask`: the 64-token
block means of q and k, the key blocks holding `nabla_threshold` of each query block's pooled softmax mass, OR'ed with
the sliding-tile prior that `forward` builds once from `nabla_window`) and hard-codes diffusers' flex backend with it.
Uncompiled, flex applies only the (absent) mask_mod and computes every score (28 x 47,616^2 here: it does not fit),
so stock runs compiled, as diffusers' own example does (`compile_repeated_blocks(fullgraph=True)`). The comparison:
- "stock compiled": the stock transformer compiled (`--compile blocks`: diffusers' regional compile of the 32 blocks,
  as its K6 SR example does; `--compile model`: `torch.compile(model)`, as k5_nabla_forward.py does);
- "vidattn": `vidattn.apply` on a copy of the same weights, eager (the same BlockMask on the kernel's block-sparse
  path, vidattn.Kandinsky6SRAttnProcessor);
- "vidattn compiled": `vidattn.apply` on a third copy, compiled the same way.
Each side's output against stock compiled's (rel L2); one untimed call each (`warmup_ms`: a recompile shows there);
then alternating rounds of one forward each, medians and the ratios. The mask densities the model builds (one per
block, per call) and `vidattn.explain` for the first are recorded from the first eager vidattn forward. On torch 2.11
stock's compile fails as diffusers calls flex (inductor's default key tile does not divide the 64-key blocks), as for
Kandinsky 5; the probe records that and asks for 64 x 64 tiles (k5_nabla_forward._patch_flex_tiles). Under
`--compile blocks`, a vidattn side that fails fullgraph is recorded and compiled again with graph breaks allowed.

The default size is one tile as Kandinsky6SRPipeline refines it: 512 x 768 pixels (the landscape entry of the
model's `tile_sizes`), 121 frames (5 s at 24 fps, the "5s" checkpoints; Kandinsky6TI2VAPipeline's default length);
the K-VAE's 16x / 4x make that a 31 x 32 x 48 latent, 47,616 tokens, 744 blocks of 64.

    python3 dev/probes/k6sr_forward.py --out $OUT/k6sr [--height 512 --width 768 --frames 121] [--layers 8] \
        [--rounds 4] [--compile blocks|model] [--threshold 0.8]
    python3 dev/probes/k6sr_forward.py --dry-run

With random weights the NABLA mask is nearly dense: the pooled q/k block means of random projections give a nearly
flat pooled map, so the top-cdf share `nabla_threshold` = 0.8 keeps about 80% of the key blocks (density ~0.85 at
512x768x121, measured on the CPU for the first block; the sliding-tile prior alone is 0.27). A trained model's map is
peakier and its mask sparser; `--threshold` lowers the share (0.5: ~0.62, 0.2: ~0.41) to look at sparser masks.
"""
from __future__ import annotations

import argparse
import copy
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))
from k5_nabla_forward import first_line, stock_reference, time_sides, timed  # noqa: E402  (K5's harness)

# Kandinsky6SRTransformer3DModel's defaults in diffusers 0.42.1 (models/transformers/transformer_kandinsky6_sr.py),
# which describe the checkpoint its pipeline's example loads,
# kandinskylab/Kandinsky-6.0-VSR-distilled2steps-5s-Diffusers:
# out_visual_dim 640 is the pi-Flow head of the distilled checkpoints (PiflowScheduler's n_grid 10 x 64 channels, the
# class docstring says; the flow-matching Kandinsky-6.0-VSR-5s-Diffusers has 64), NABLA P 0.8 with an 11 x 7 x 7
# sliding-tile prior. The Hub's config.json itself was not readable here; a public copy of both VSR repos' transformer
# configs (another project's test fixture, original key names) gives the same numbers. Head dim sum(axes_dims) = 64,
# 1792 / 64 = 28 heads. `tile_sizes` is left out: only the pipeline reads it.
CFG = {"in_visual_dim": 64, "out_visual_dim": 640, "time_dim": 512, "patch_size": (1, 1, 1), "model_dim": 1792,
       "ff_dim": 7168, "num_visual_blocks": 32, "axes_dims": (16, 24, 24), "scale_factor": (1.0, 2.0, 2.0),
       "nabla_threshold": 0.8, "nabla_window": (11, 7, 7)}
# Kandinsky6SRVAE (K-VAE): 2 ** (5 levels - 1) spatially, 4 in time; the pipeline feeds the transformer one tile's
# latents at patch size 1.
VAE_SPATIAL, VAE_TEMPORAL = 16, 4
# nabla_block_mask's block, and the model's FRACTAL_BLOCK_SIZE: 8 x 8 tokens of one latent frame make one block.
BLOCK, FRACTAL = 64, 8
DEVICE = "cuda"  # a CPU walk-through of main with a tiny CFG patches it


def latent_shape(height: int, width: int, frames: int) -> tuple[int, int, int]:
    """The transformer's (T, H, W) token grid for one pixel tile of this size; ValueError where the model would
    refuse it (a grid side not a multiple of 8) or the VAE could not encode it."""
    if height % (VAE_SPATIAL * FRACTAL) or width % (VAE_SPATIAL * FRACTAL):
        raise ValueError(f"height and width must be multiples of {VAE_SPATIAL * FRACTAL} (the token grid in whole "
                         f"{FRACTAL}x{FRACTAL} NABLA blocks), got {height}x{width}")
    if frames < 1 or (frames - 1) % VAE_TEMPORAL:
        raise ValueError(f"frames must be 1 + k * {VAE_TEMPORAL}, got {frames}")
    return (frames - 1) // VAE_TEMPORAL + 1, height // VAE_SPATIAL, width // VAE_SPATIAL


def sta_density(shape, window) -> float:
    """The sliding-tile prior's share of (query block, key block) pairs: sliding_tile_mask is a product over the three
    axes of the block grid, so its density is the product of each axis' share of pairs within half a window."""
    t, h, w = shape[0], shape[1] // FRACTAL, shape[2] // FRACTAL
    d = 1.0
    for n, win in ((t, window[0]), (h, window[1]), (w, window[2])):
        d *= sum(abs(i - j) <= win // 2 for i in range(n) for j in range(n)) / n ** 2
    return d


def build(cfg, device, dtype):
    """The model with random weights laid out as `from_pretrained(torch_dtype=dtype)` lays out the checkpoint: its
    rule keeps a parameter float32 where a dot-separated part of its name is in `_keep_in_fp32_modules`, so the
    timestep embedding, the pooled bias and the output layer's `modulation` stay float32 while the blocks'
    `visual_modulation` loads in `dtype` (whatever the class's comment promises); buffers (the RoPE angle tables)
    stay float32 as built. nn.Linear's default init already gives non-zero gates (K5 zero-initialises its own):
    attention reaches the output without re-randomising anything."""
    import torch
    from diffusers import Kandinsky6SRTransformer3DModel

    torch.manual_seed(0)
    with torch.device(device):
        model = Kandinsky6SRTransformer3DModel(**cfg).eval()
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())
    with torch.no_grad():
        for name, p in model.named_parameters():
            if not keep & set(name.split(".")):
                p.data = p.data.to(dtype)
    return model


def inputs(shape, cfg, device, dtype):
    """One tile as Kandinsky6SRPipeline calls the transformer: (B, T, H, W, 2C + 1) = the noised latent, the anchor
    latent and the anchor mask (zeros: the released checkpoints are anchor-free), and a (B,) timestep."""
    import torch
    g = torch.Generator(device="cpu").manual_seed(0)
    lat = torch.randn(1, *shape, cfg["in_visual_dim"], generator=g)
    x = torch.cat([lat, torch.zeros_like(lat), torch.zeros_like(lat[..., :1])], dim=-1)
    return dict(hidden_states=x.to(device=device, dtype=dtype), timestep=torch.full((1,), 500.0, device=device),
                return_dict=False)


def _compile(model, how, fullgraph=True):
    import torch
    if how == "model":
        return torch.compile(model)
    model.compile_repeated_blocks(fullgraph=fullgraph)  # in place: each Kandinsky6SRTransformerBlock
    return model


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--height", type=int, default=512, help="pixel tile (the trained tile size (512, 768))")
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--frames", type=int, default=121, help="pixel frames (121: the 5 s checkpoints at 24 fps)")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--layers", type=int, default=CFG["num_visual_blocks"], help="blocks (fewer: faster compile)")
    ap.add_argument("--compile", choices=("blocks", "model"), default="blocks",
                    help="blocks: compile_repeated_blocks(fullgraph=True), diffusers' K6 SR example; model: "
                         "torch.compile(model)")
    ap.add_argument("--threshold", type=float, default=CFG["nabla_threshold"],
                    help="nabla_threshold (the checkpoint's 0.8; lower: sparser masks)")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    try:
        shape = latent_shape(args.height, args.width, args.frames)
    except ValueError as exc:
        ap.error(str(exc))
    cfg = dict(CFG, num_visual_blocks=args.layers, nabla_threshold=args.threshold)
    tokens = shape[0] * shape[1] * shape[2]
    plan = {"cfg": cfg, "size": [args.height, args.width, args.frames], "latent": list(shape),
            "visual_tokens": tokens, "blocks_64": tokens // BLOCK, "heads": cfg["model_dim"] // sum(cfg["axes_dims"]),
            "head_dim": sum(cfg["axes_dims"]), "sta_density": sta_density(shape, cfg["nabla_window"]),
            "compile": args.compile}
    if args.dry_run:
        print(json.dumps(plan))
        return 0
    import torch
    import diffusers
    import vidattn
    from diffusers.models.transformers import transformer_kandinsky6_sr as k6

    # Three copies made before anything is compiled: regional compile works in place, and the eager vidattn side must
    # stay eager. Both vidattn copies are routed before stock compiles: vidattn.apply registers its backend in
    # diffusers' registry, whose length stock's compiled code guards on, so routing them later recompiles stock.
    model = build(cfg, DEVICE, torch.bfloat16)
    model_v, model_vc = copy.deepcopy(model), copy.deepcopy(model)
    handle = vidattn.apply(model_v)
    vidattn.apply(model_vc)
    kw = inputs(shape, cfg, DEVICE, torch.bfloat16)
    res = dict(plan, gpu=torch.cuda.get_device_name(), torch=torch.__version__, diffusers=diffusers.__version__,
               command=" ".join(sys.argv))

    def fwd(m):
        with torch.no_grad():
            return m(**kw)[0]

    # (diffusers' flex backend is K5's call: the same refusal on torch 2.11, the same 64 x 64 tiles)
    stock_c, ref = stock_reference(res, lambda: _compile(model, args.compile), fwd)

    res["handle"] = str(handle)
    # The masks this forward builds, read off the objects the processor hands the kernel; the module attribute is
    # what vidattn's processor imports per call, so the spy sees every block's mask.
    real, seen = k6.nabla_block_mask, []

    def spy(q, k, sta, *a, **kwargs):
        bm = real(q, k, sta, *a, **kwargs)
        if not seen:
            res["explain_first_call"] = vidattn.explain(q, k, k, layout="bhsd", block_mask=bm)
        kept = (bm.kv_num_blocks + bm.full_kv_num_blocks).sum()
        seen.append(kept / (bm.full_kv_num_blocks.numel() * bm.full_kv_indices.shape[-1]))
        return bm

    k6.nabla_block_mask = spy
    try:
        out_v, _ = timed(lambda: fwd(model_v))
    finally:
        k6.nabla_block_mask = real
    res["mask_density_per_block"] = [float(d) for d in seen]

    sides = {"stock compiled": lambda: fwd(stock_c), "vidattn": lambda: fwd(model_v)}
    outs = {"vidattn": out_v}
    t0 = time.perf_counter()
    try:
        vid_c = _compile(model_vc, args.compile)
        outs["vidattn compiled"], _ = timed(lambda: fwd(vid_c))
    except Exception as exc:
        res["vidattn_compiled_first_try"] = f"failed: {first_line(exc)}"
        print(f"vidattn compiled: {res['vidattn_compiled_first_try']}", flush=True)
        if args.compile == "blocks":  # a graph break fails fullgraph: say so, and measure it with the break
            try:
                vid_c = _compile(model_vc, args.compile, fullgraph=False)
                outs["vidattn compiled"], _ = timed(lambda: fwd(vid_c))
                res["vidattn_compiled_fullgraph"] = False
            except Exception as exc2:
                res["vidattn_compiled_second_try"] = f"failed: {first_line(exc2)}"
    if "vidattn compiled" in outs:
        res["vidattn_compile_s"] = time.perf_counter() - t0
        sides["vidattn compiled"] = lambda: fwd(vid_c)
    for name, o in outs.items():
        d = o.float() - ref.float()
        res[f"rel_l2_{name}_vs_stock"] = float(d.norm() / ref.float().norm())
    res["finite"] = {name: bool(torch.isfinite(o).all()) for name, o in dict(outs, stock=ref).items()}
    del outs, out_v, ref

    # (the warm-up call: call_p82's stock round 0, 11.5 s against 0.42, was most likely the registry guard above)
    time_sides(res, sides, args.rounds)
    res["peak_mem_gib"] = torch.cuda.max_memory_allocated() / 2 ** 30
    dens = res["mask_density_per_block"]
    res["mask_density_mean"] = sum(dens) / len(dens) if dens else None
    print(json.dumps({k: res[k] for k in ("visual_tokens", "median_ms", "speedup_vidattn", "mask_density_mean",
                                          "sta_density", "explain_first_call", "stock_compile_s")
                      + tuple(k for k in res if k.startswith("rel_l2_") or k == "speedup_vidattn_compiled")
                      if k in res}, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "k6sr_forward.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
