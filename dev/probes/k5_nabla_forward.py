"""One Kandinsky 5 transformer forward with NABLA block-sparse attention, stock against vidattn, random weights.

Kandinsky 5's NABLA configs (attention_type="nabla") build a flex BlockMask in every self-attention call (nablaT_v2:
64-token blocks, the sliding-tile prior plus the blocks holding the top `P` of a pooled attention map) and need the
flex backend. Uncompiled, torch's flex_attention applies only the mask_mod (none here), so it computes every score:
stock runs these models compiled. The comparison is therefore:
- "stock compiled": the stock transformer under torch.compile (flex's Triton kernel for the BlockMask);
- "vidattn": `vidattn.apply` on the same weights, eager (the BlockMask on the kernel's block-sparse path);
- "vidattn compiled": the same under torch.compile.
Each side's output against stock compiled's; then alternating rounds of one forward each, medians and the ratio.

    python3 dev/probes/k5_nabla_forward.py --out $OUT/k5 [--height 512 --width 768 --frames 121] [--rounds 4]
    python3 dev/probes/k5_nabla_forward.py --dry-run
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT))

# Kandinsky-5.0-T2V-Lite's transformer (pipelines/registry.py) with the NABLA attention of its 10 s checkpoints
# (attention_type "nabla", P 0.9, windows 11 / 3 / 3, STA added, "topcdf").
CFG = {"in_visual_dim": 16, "out_visual_dim": 16, "in_text_dim": 3584, "in_text_dim2": 768, "time_dim": 512,
       "model_dim": 1792, "ff_dim": 7168, "num_text_blocks": 2, "num_visual_blocks": 32, "axes_dims": (16, 24, 24),
       "visual_cond": True, "attention_type": "nabla", "attention_causal": False, "attention_local": False,
       "attention_glob": False, "attention_window": 3, "attention_P": 0.9, "attention_wT": 11, "attention_wW": 3,
       "attention_wH": 3, "attention_add_sta": True, "attention_method": "topcdf"}


def inputs(args, device):
    import torch
    g = torch.Generator(device="cpu").manual_seed(0)
    t = (args.frames - 1) // 4 + 1
    h, w = args.height // 8, args.width // 8
    c = CFG["in_visual_dim"]
    lat = torch.randn(1, t, h, w, c, generator=g)
    lat = torch.cat([lat, torch.zeros_like(lat), torch.zeros_like(lat[..., :1])], dim=-1)
    text = 256
    kw = dict(hidden_states=lat, encoder_hidden_states=0.25 * torch.randn(1, text, CFG["in_text_dim"], generator=g),
              timestep=torch.full((1,), 500.0), pooled_projections=0.25 * torch.randn(1, CFG["in_text_dim2"], generator=g),
              visual_rope_pos=(torch.arange(t), torch.arange(h // 2), torch.arange(w // 2)),
              text_rope_pos=torch.arange(text))
    kw = {k: (v.to(device=device, dtype=torch.bfloat16) if isinstance(v, torch.Tensor) and v.is_floating_point()
              and k != "timestep" else v.to(device) if isinstance(v, torch.Tensor) else
              tuple(x.to(device) for x in v) if isinstance(v, tuple) else v) for k, v in kw.items()}
    from diffusers.pipelines.kandinsky5.pipeline_kandinsky import Kandinsky5T2VPipeline
    sta = Kandinsky5T2VPipeline.fast_sta_nabla(t, h // 2 // 8, w // 2 // 8, CFG["attention_wT"], CFG["attention_wH"],
                                               CFG["attention_wW"], device=device)
    kw["sparse_params"] = {"sta_mask": sta.unsqueeze_(0).unsqueeze_(0), "attention_type": "nabla", "to_fractal": True,
                           "P": CFG["attention_P"], "wT": CFG["attention_wT"], "wW": CFG["attention_wW"],
                           "wH": CFG["attention_wH"], "add_sta": True, "visual_shape": (t, h // 2, w // 2),
                           "method": "topcdf"}
    return kw, t * (h // 2) * (w // 2)


def _patch_flex_tiles():
    """The one-line workaround a user needs on torch 2.11: diffusers' flex backend asks inductor for BLOCK_M = 64 only
    (attention_dispatch._native_flex_attention), and inductor's default BLOCK_N (128 here) does not divide NABLA's
    64-key blocks; ask for 64 x 64 tiles."""
    import torch.nn.attention.flex_attention as fa
    from diffusers.models import attention_dispatch as ad
    orig = fa.flex_attention

    def flex(*a, kernel_options=None, **kw):
        opts = dict(kernel_options or {})
        opts.setdefault("BLOCK_M", 64)
        opts.setdefault("BLOCK_N", 64)
        return orig(*a, kernel_options=opts, **kw)
    ad.flex_attention.flex_attention = flex


def timed(fn):
    """fn()'s result and its wall time in ms, the GPU drained before and after."""
    import torch
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    out = fn()
    torch.cuda.synchronize()
    return out, (time.perf_counter() - t0) * 1e3


def first_line(exc) -> str:
    return f"{type(exc).__name__}: {(str(exc).splitlines() or [''])[0][:300]}"


def stock_reference(res: dict, compile_stock, fwd):
    """The stock side compiled (`compile_stock()` returns it) and its first output, the reference: as diffusers calls
    flex; where inductor refuses that (torch 2.11: diffusers' BLOCK_M = 64 alone on 64-key mask blocks), with 64 x 64
    tiles asked for (_patch_flex_tiles). `res` records which, and the compile's seconds."""
    import torch
    t0 = time.perf_counter()
    stock_c = compile_stock()
    try:
        ref, _ = timed(lambda: fwd(stock_c))
        res["stock_as_shipped"] = "compiled"
    except Exception as exc:
        res["stock_as_shipped"] = f"failed: {first_line(exc)}"
        print(f"stock compiled, as diffusers calls flex: {res['stock_as_shipped']}", flush=True)
        _patch_flex_tiles()
        torch._dynamo.reset()
        stock_c = compile_stock()
        ref, _ = timed(lambda: fwd(stock_c))
        res["stock_patched"] = "diffusers' flex call given kernel_options BLOCK_M = BLOCK_N = 64"
    res["stock_compile_s"] = time.perf_counter() - t0
    return stock_c, ref


def alternate(sides: dict, rounds: int) -> dict:
    """Rounds of one timed call per side, the order reversed every other round: {side: [ms, ...]}."""
    ms = {k: [] for k in sides}
    for r in range(rounds):
        for k in (list(sides) if r % 2 == 0 else list(sides)[::-1]):
            ms[k].append(timed(sides[k])[1])
    return ms


def time_sides(res: dict, sides: dict, rounds: int) -> None:
    """One untimed call per side (`warmup_ms`: a recompile one side's compile forced on another shows there, not in a
    round), then `rounds` alternating rounds: `ms`, `median_ms`, each other side's `speedup_<side>` over "stock
    compiled" and the per-round ratios of "vidattn" into `res`."""
    res["warmup_ms"] = {k: timed(fn)[1] for k, fn in sides.items()}
    ms = alternate(sides, rounds)
    med = {k: statistics.median(v) for k, v in ms.items()}
    res["ms"], res["median_ms"] = ms, med
    for k in med:
        if k != "stock compiled":
            res[f"speedup_{k.replace(' ', '_')}"] = med["stock compiled"] / med[k]
    res["round_ratios_vidattn"] = [s / v for s, v in zip(ms["stock compiled"], ms["vidattn"])]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path)
    ap.add_argument("--height", type=int, default=512)
    ap.add_argument("--width", type=int, default=768)
    ap.add_argument("--frames", type=int, default=121)
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--layers", type=int, default=CFG["num_visual_blocks"], help="visual blocks (fewer: faster compile)")
    ap.add_argument("--dry-run", action="store_true")
    args = ap.parse_args(argv)
    if args.dry_run:
        print(json.dumps({"cfg": CFG, "size": [args.height, args.width, args.frames]}))
        return 0
    import torch
    import diffusers
    import vidattn
    from diffusers import Kandinsky5Transformer3DModel

    torch.manual_seed(0)
    cfg = dict(CFG, num_visual_blocks=args.layers)
    with torch.device("cuda"):
        model = Kandinsky5Transformer3DModel(**cfg).to(torch.bfloat16).eval()
    keep = set(getattr(model, "_keep_in_fp32_modules", None) or ())  # as from_pretrained(torch_dtype=bf16) leaves them
    for name, mod in model.named_modules():
        if name.split(".")[-1] in keep:
            mod.float()
    # diffusers zero-initialises the modulations (gates included): random ones, so attention reaches the output
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "modulation" in name:
                p.normal_(0, 0.02)
    model.set_attention_backend("flex")  # what a NABLA config needs (the native backend takes no BlockMask)
    kw, tokens = inputs(args, "cuda")
    res = {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "diffusers": diffusers.__version__,
           "size": [args.height, args.width, args.frames], "visual_tokens": tokens, "visual_blocks": args.layers,
           "command": " ".join(sys.argv)}

    def fwd(m):
        with torch.no_grad():
            return m(**kw, return_dict=False)[0]

    import copy
    model_v = copy.deepcopy(model)
    # Routed before stock compiles: vidattn.apply registers its backend in diffusers' registry, whose length stock's
    # compiled code guards on, so routing after it recompiled stock in its first timed round (call_p82: 11.5 s against
    # 0.42).
    handle = vidattn.apply(model_v)
    res["handle"] = str(handle)
    stock_c, ref = stock_reference(res, lambda: torch.compile(model), fwd)
    out_v, _ = timed(lambda: fwd(model_v))
    vid_c = torch.compile(model_v)
    t0 = time.perf_counter()
    out_vc, _ = timed(lambda: fwd(vid_c))
    res["vidattn_compile_s"] = time.perf_counter() - t0
    for name, o in (("vidattn", out_v), ("vidattn compiled", out_vc)):
        d = (o.float() - ref.float())
        res[f"rel_l2_{name}_vs_stock"] = float(d.norm() / ref.float().norm())
    sides = {"stock compiled": lambda: fwd(stock_c), "vidattn": lambda: fwd(model_v),
             "vidattn compiled": lambda: fwd(vid_c)}
    time_sides(res, sides, args.rounds)
    print(json.dumps({k: res[k] for k in ("visual_tokens", "median_ms", "speedup_vidattn", "speedup_vidattn_compiled",
                                          "rel_l2_vidattn_vs_stock", "rel_l2_vidattn compiled_vs_stock",
                                          "stock_compile_s")}, indent=1))
    if args.out:
        args.out.mkdir(parents=True, exist_ok=True)
        (args.out / "k5_nabla_forward.json").write_text(json.dumps(res, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
