"""Which device kernels one Wan forward spends its time in, per attention path: the list to read before deciding what
outside attention is worth fusing.

One forward is profiled (torch.profiler, after warm-up) under each path; device kernels are grouped by a short name
(the kernel name up to its first '<' or '(', so template instances of one kernel pool) and printed largest first with
their ms per forward, share of the forward's kernel time and count, then a table of the paths side by side for the top
groups. Paths: sdpa (diffusers' own processors), sdpa_proc (vidattn's processors around torch SDPA), exact, 8bit
(scripts/fidelity_8bit.attention_path).

    python3 dev/probes/forward_kernels.py --preset 1.3b --paths sdpa,sdpa_proc,8bit --out $OUT/fk.json
    python3 dev/probes/forward_kernels.py --preset tiny --height 64 --width 64 --frames 5   # CPU: the op table
"""
from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

PATHS = ("sdpa", "sdpa_proc", "exact", "8bit")


def short_name(name: str) -> str:
    """A kernel's group: its name up to the first template or argument list, namespaces kept."""
    name = name.strip()
    if name.startswith("void "):
        name = name[5:]
    cut = min([i for i in (name.find("<"), name.find("(")) if i > 0] or [len(name)])
    return re.sub(r"\s+", " ", name[:cut])[:110]


def group(kernels) -> dict:
    """{short name: {"ms": total ms, "count": n}} from (name, device µs) pairs."""
    out: dict = {}
    for name, us in kernels:
        g = out.setdefault(short_name(name), {"ms": 0.0, "count": 0})
        g["ms"] += us / 1e3
        g["count"] += 1
    return out


def op_groups(averages, cuda: bool) -> dict:
    """{op name: {"ms", "count"}} from the profiler's key_averages: the device time an op's own kernels took (not its
    children's), so aten::mul's elementwise kernels count under aten::mul and a linear's GEMM under its addmm/mm."""
    out = {}
    for a in averages:
        if not a.key.startswith("aten::"):  # the kernels and runtime events are in the averages too
            continue
        us = (getattr(a, "self_device_time_total", None) or getattr(a, "self_cuda_time_total", 0)) if cuda \
            else a.self_cpu_time_total
        if us and us > 0:
            out[a.key] = {"ms": us / 1e3, "count": a.count}
    return out


def table(by_path: dict, top: int) -> str:
    """The top groups (by their largest ms over the paths) with each path's ms per forward."""
    paths = list(by_path)
    names = sorted({n for g in by_path.values() for n in g},
                   key=lambda n: -max(by_path[p].get(n, {"ms": 0})["ms"] for p in paths))[:top]
    lines = ["| kernel group | " + " | ".join(f"{p} ms" for p in paths) + " |",
             "|---|" + "---|" * len(paths)]
    for n in names:
        lines.append(f"| {n} | " + " | ".join(f"{by_path[p].get(n, {'ms': 0})['ms']:.1f}" for p in paths) + " |")
    lines.append("| all kernels | " + " | ".join(f"{sum(g['ms'] for g in by_path[p].values()):.1f}" for p in paths)
                 + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", default="1.3b")
    ap.add_argument("--height", type=int, default=480)
    ap.add_argument("--width", type=int, default=832)
    ap.add_argument("--frames", type=int, default=81)
    ap.add_argument("--paths", default="sdpa,sdpa_proc,8bit")
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--top", type=int, default=18)
    ap.add_argument("--out", default=None, help="JSON with every group per path")
    args = ap.parse_args(argv)
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS]
    if bad or not paths:
        ap.error(f"--paths: unknown {bad or 'empty list'}; choose from {', '.join(PATHS)}")

    import torch
    from torch.profiler import ProfilerActivity, profile

    from fidelity_8bit import attention_path
    from pipelines import build_pipeline, initial_latents, prompt_pair, transformer_inputs
    from pipelines.measure import device_kernels, sync

    cuda = torch.cuda.is_available()
    dev = torch.device("cuda" if cuda else "cpu")
    dtype = torch.bfloat16 if cuda else torch.float32
    pipe = build_pipeline(args.preset, device=dev, dtype=dtype)
    latents = initial_latents(pipe, args.height, args.width, args.frames, 0, dev)
    embeds, _ = prompt_pair(pipe, "a fox in the snow")
    inputs = transformer_inputs(latents, embeds, dtype)

    def forward():
        with torch.no_grad():
            return pipe.transformer(**inputs)[0]

    by_path, by_op = {}, {}
    for path in paths:
        with attention_path("sdpa" if path == "sdpa" else path, pipe):
            for _ in range(args.warmup):
                forward()
            sync(dev)
            acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
            with profile(activities=acts) as prof:
                forward()
                sync(dev)
        events = list(prof.events())
        if cuda:
            pairs = [(e.name, e.device_time_total) for e in device_kernels(events)]
        else:  # no device timeline: the top-level ops' own CPU time stands in, so the table still shows the shape
            pairs = [(e.name, e.self_cpu_time_total) for e in events if getattr(e, "cpu_parent", None) is None]
        by_path[path] = group(pairs)
        by_op[path] = op_groups(prof.key_averages(), cuda)
        total = sum(g["ms"] for g in by_path[path].values())
        print(f"## {path}: {total:.1f} ms of {'kernel' if cuda else 'top-level CPU op'} time in one forward")
    print(table(by_path, args.top))
    print("\nBy the aten op that launched them (self device time):")
    print(table(by_op, args.top))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(json.dumps({"preset": args.preset, "size": [args.height, args.width, args.frames],
                                              "device": torch.cuda.get_device_name() if cuda else "cpu",
                                              "by_path": by_path, "by_op": by_op}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
