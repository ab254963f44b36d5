#!/usr/bin/env python3
"""One transformer forward per routed family outside pipelines/families.py, SDPA against vidattn, on the GPU.

    python3 scripts/zoo_forward.py                      # representative sizes, 4 layers each (H200)
    python3 scripts/zoo_forward.py --layers 2 --only helios cosmos
    python3 scripts/zoo_forward.py --smoke              # CPU plumbing check: 1 layer, 2 heads, tiny sizes

Each family: its diffusers class at the published head layout (the class defaults, which describe the released
checkpoint) with `--layers` transformer blocks instead of all of them (the per-block work is the same, so the speedup
of the attention-bound part carries over; the printout says how many of how many blocks ran), random weights, and
inputs of the pipeline's default video size. Per family: SDPA ms, vidattn ms (CUDA-event median), speedup, the
kernel / fallback census of the vidattn forward, output rel-L2 against SDPA. Writes a JSON list to --out.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402


def _rn(g, *shape):
    return torch.randn(*shape, generator=g)


def _helios(g, s):
    # HeliosPipeline default 384x640, 33 frames: 9 latent frames at 48x80; history: 2 short, 2 mid, 16 long frames
    f, h, w = s(9, 48, 80)
    cfg = {}
    inputs = dict(hidden_states=_rn(g, 1, 16, f, h, w), timestep=torch.tensor([500]),
                  encoder_hidden_states=_rn(g, 1, s.text(226), 4096) * 0.25, indices_hidden_states=torch.ones(1, f),
                  indices_latents_history_short=torch.ones(1, 2), indices_latents_history_mid=torch.ones(1, 2),
                  indices_latents_history_long=torch.ones(1, 16),
                  latents_history_short=_rn(g, 1, 16, 2, h, w), latents_history_mid=_rn(g, 1, 16, 2, h, w),
                  latents_history_long=_rn(g, 1, 16, 16, h, w))
    return "HeliosTransformer3DModel", cfg, inputs, "HeliosPipeline 384x640x33 (+ history latents)"


def _anyflow(g, s):
    f, h, w = s(21, 60, 104)  # 480x832, 81 frames
    inputs = dict(hidden_states=_rn(g, 1, f, 16, h, w), timestep=torch.full((1, f), 500.0),
                  r_timestep=torch.full((1, f), 250.0), encoder_hidden_states=_rn(g, 1, s.text(226), 4096) * 0.25)
    return "AnyFlowTransformer3DModel", {}, inputs, "AnyFlowPipeline 480x832x81"


def _wan_vace(g, s):
    f, h, w = s(21, 60, 104)
    inputs = dict(hidden_states=_rn(g, 1, 16, f, h, w), timestep=torch.tensor([500]),
                  encoder_hidden_states=_rn(g, 1, s.text(512), 4096) * 0.25,
                  control_hidden_states=_rn(g, 1, 96, f, h, w))
    return "WanVACETransformer3DModel", {"vace_layers": [0]}, inputs, "WanVACEPipeline 480x832x81"


def _chronoedit(g, s):
    f, h, w = s(21, 60, 104)
    inputs = dict(hidden_states=_rn(g, 1, 16, f, h, w), timestep=torch.tensor([500]),
                  encoder_hidden_states=_rn(g, 1, s.text(512), 4096) * 0.25)
    return "ChronoEditTransformer3DModel", {}, inputs, "480x832x81 (ChronoEdit-14B layout, no image keys)"


def _cosmos(g, s):
    # Cosmos 1.0 text2world default 704x1280x121: 16 latent frames (8x) at 88x160. The padding-mask channel is
    # left out (it needs torchvision; one input channel, no attention work).
    f, h, w = s(16, 88, 160)
    inputs = dict(hidden_states=_rn(g, 1, 16, f, h, w), timestep=torch.tensor([500.0]),
                  encoder_hidden_states=_rn(g, 1, s.text(512), 1024) * 0.25, fps=24)
    return "CosmosTransformer3DModel", {"concat_padding_mask": False}, inputs, "Cosmos text2world 704x1280x121"


def _motif(g, s):
    f, h, w = s(31, 92, 160)  # MotifVideoPipeline default 736x1280x121
    n = s.text(512)
    mask = torch.zeros(2, n, dtype=torch.bool)
    mask[0, :1] = True
    mask[1, :64] = True  # CFG batch: empty negative prompt, a 64-token prompt
    inputs = dict(hidden_states=_rn(g, 2, 33, f, h, w), timestep=torch.tensor([500, 500]),
                  encoder_hidden_states=_rn(g, 2, n, 4096) * 0.25, encoder_attention_mask=mask)
    return "MotifVideoTransformer3DModel", {"num_single_layers": None}, inputs, "MotifVideoPipeline 736x1280x121, CFG 2"


FAMILIES = {"helios": _helios, "anyflow": _anyflow, "wan_vace": _wan_vace, "chronoedit": _chronoedit,
            "cosmos": _cosmos, "motif_video": _motif}
# The blocks config key per class, to cut the model to --layers.
_LAYER_KEYS = {"MotifVideoTransformer3DModel": ("num_layers", "num_single_layers")}
# --smoke: CPU-sized overrides of the same classes (2 heads x 64).
_SMOKE = {"num_attention_heads": 2, "attention_head_dim": 64}
_SMOKE_ROPE = {"MotifVideoTransformer3DModel": {"rope_axes_dim": (16, 24, 24)},
               "HeliosTransformer3DModel": {"rope_dim": (16, 24, 24)}}


class _Size:
    def __init__(self, smoke: bool):
        self.smoke = smoke

    def __call__(self, f, h, w):
        return (2, 4, 4) if self.smoke else (f, h, w)

    def text(self, n):
        return 8 if self.smoke else n


def build(name: str, layers: int, smoke: bool, device, dtype, seed: int = 0):
    import diffusers

    g = torch.Generator().manual_seed(seed + 1)
    cls_name, cfg, inputs, what = FAMILIES[name](g, _Size(smoke))
    cls = getattr(diffusers, cls_name)
    import inspect

    defaults = {k: p.default for k, p in inspect.signature(cls.__init__).parameters.items() if k != "self"}
    keys = _LAYER_KEYS.get(cls_name, ("num_layers",))
    total = sum(int(defaults[k]) for k in keys)
    cfg = {k: v for k, v in cfg.items() if v is not None}
    per = max(1, layers // len(keys))
    cfg.update({k: per for k in keys})
    if smoke:
        cfg.update(_SMOKE)
        cfg.update(_SMOKE_ROPE.get(cls_name, {}))
        if "text_dim" in defaults:
            cfg["text_dim"] = inputs["encoder_hidden_states"].shape[-1]
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(device):
            model = cls(**cfg)
    from pipelines.families import _cast

    model = _cast(model, dtype).eval().requires_grad_(False)  # keeps the class's fp32 modules, as from_pretrained

    def move(x):
        if isinstance(x, torch.Tensor):
            return x.to(device, dtype) if x.is_floating_point() and x.dim() >= 2 else x.to(device)
        return x

    return model, {k: move(v) for k, v in inputs.items()}, what, (per * len(keys), total)


def _first(out):
    out = out[0]
    return out[0] if isinstance(out, (list, tuple)) else out


def time_forward(model, inputs, device, iters: int, warmup: int) -> tuple[float, torch.Tensor]:
    with torch.no_grad():
        for _ in range(warmup):
            out = _first(model(**inputs, return_dict=False))
        times = []
        for _ in range(iters):
            if device.type == "cuda":
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                out = _first(model(**inputs, return_dict=False))
                b.record()
                torch.cuda.synchronize()
                times.append(a.elapsed_time(b))
            else:
                t = time.perf_counter()
                out = _first(model(**inputs, return_dict=False))
                times.append((time.perf_counter() - t) * 1e3)
    return sorted(times)[len(times) // 2], out


def run_one(name, args, device, dtype) -> dict:
    import vidattn
    from pipelines.census import AttentionCensus
    from pipelines.measure import rel_l2

    model, inputs, what, (ran, total) = build(name, args.layers, args.smoke, device, dtype)
    tokens = None
    row = {"family": name, "class": type(model).__name__, "size": what, "blocks": f"{ran} of {total}"}
    sdpa_ms, ref = time_forward(model, inputs, device, args.iters, args.warmup)
    handle = vidattn.apply(model)
    row["apply"] = handle.counts()
    with AttentionCensus() as census, torch.no_grad():
        _first(model(**inputs, return_dict=False))
    c = census.summary()
    va_ms, out = time_forward(model, inputs, device, args.iters, args.warmup)
    vidattn.restore(model)
    row.update(sdpa_ms=sdpa_ms, vidattn_ms=va_ms, kernel_calls=c["kernel"], fallback_calls=c["fallback"],
               fallback_reasons=c["fallback_reasons"], rel_l2=rel_l2(out.float(), ref.float()), tokens=tokens,
               speedup=None if c["kernel"] == 0 else sdpa_ms / va_ms)
    del model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return row


def main(argv=None) -> list:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", nargs="*", default=None, metavar="FAMILY", help=f"default: {' '.join(FAMILIES)}")
    p.add_argument("--layers", type=int, default=4, help="transformer blocks per model (default 4)")
    p.add_argument("--iters", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--smoke", action="store_true", help="CPU plumbing check at tiny sizes")
    p.add_argument("--out", default=None, help="JSON output path")
    args = p.parse_args(argv)
    names = args.only or list(FAMILIES)
    unknown = [n for n in names if n not in FAMILIES]
    if unknown:
        raise SystemExit(f"error: unknown family {', '.join(unknown)} (choose from {', '.join(FAMILIES)})")
    if not args.smoke and not torch.cuda.is_available():
        raise SystemExit("error: representative sizes need a CUDA GPU; --smoke checks the plumbing on the CPU")
    device = torch.device("cpu" if args.smoke else "cuda")
    dtype = torch.float32 if args.smoke else torch.bfloat16
    import warnings

    import vidattn
    warnings.filterwarnings("ignore", category=vidattn.VidattnFallbackWarning)
    rows = []
    print("| family | size | blocks | SDPA ms | vidattn ms | speedup | kernel / fallback calls | rel-L2 |")
    print("|---|---|---|---|---|---|---|---|")
    for name in names:
        try:
            r = run_one(name, args, device, dtype)
        except Exception as exc:  # noqa: BLE001 - one family's failure must not lose the others
            r = {"family": name, "error": f"{type(exc).__name__}: {exc}"}
            print(f"| {name} | error: {r['error'][:150]} |")
        else:
            sp = "— (no kernel call)" if r["speedup"] is None else f"{r['speedup']:.3f}x"
            print(f"| {name} | {r['size']} | {r['blocks']} | {r['sdpa_ms']:.1f} | {r['vidattn_ms']:.1f} | {sp} | "
                  f"{r['kernel_calls']} / {r['fallback_calls']} | {r['rel_l2']:.2e} |", flush=True)
        rows.append(r)
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps(rows, indent=2) + "\n")
    return rows


if __name__ == "__main__":
    main()
