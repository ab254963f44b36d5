"""What the in-process forward A/Bs (dev/settings_e2e.py, dev/norm_rope_e2e.py) share: one registry family's model
built with random weights at a video size, and SDPA's forwards on it for the speedups beside each setting."""
from __future__ import annotations

import time


def build_model(family: str, height: int, width: int, frames: int):
    """(built, info, device): pipelines' registry model on the GPU in bf16, seed 0; prints what it built."""
    import torch
    from pipelines import registry

    dev = torch.device("cuda")
    size = registry.Size(height, width, frames)
    t0 = time.perf_counter()
    built = registry.build(family, "default", device=dev, dtype=torch.bfloat16, seed=0, size=size)
    info = built.info()
    print(f"built {family} in {time.perf_counter() - t0:.1f} s: {info['tokens']} tokens, "
          f"{info['heads']} heads x {info['head_dim']}, {info['layers']}", flush=True)
    return built, info, dev


def sdpa_forwards(built, dev, n: int) -> list:
    """`n` timed forwards on diffusers' own processors after one untimed (none for n = 0), in ms."""
    from pipelines.measure import timed_call

    times = []
    if n:
        timed_call(built.forward, dev)  # untimed
        for _ in range(n):
            ms, out = timed_call(built.forward, dev)
            del out
            times.append(ms)
        print(f"sdpa: {', '.join(f'{t:.1f}' for t in times)} ms", flush=True)
    return times
