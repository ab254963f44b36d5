"""Measurement helpers for the end-to-end scripts: forward timing hooks, profiler attention share, fidelity."""
from __future__ import annotations

import math
import re
import statistics
import time

import torch

# Kernel names (CUDA) and op names (CPU) that are attention. Matched case-insensitively against profiler rows.
#   vidattn            our kernel (and the `vidattn::attention` custom op on CPU)
#   flash / fmha       FlashAttention (torch's flash_fwd_kernel), CUTLASS mem-efficient (fmha_cutlassF_*), FA3
#   sdpa / attention   cuDNN's generated SDPA kernels (cudnn_generated_fort_native_sdpa_sm90_*), aten SDPA ops
#   mha                cuDNN/xformers multi-head-attention kernels
#   _attn_kernel, quant_query/key/value, TransposePadPermute
#                      SageAttention2's kernel (qk_int8_sv_f8_attn_kernel) and its quantizing pre-passes, counted as
#                      vidattn's pre-pass is (its kernels are in the vidattn namespace)
# Not attention: backward kernels, runtime API rows, and vidattn's fused RoPE (vidattn::rope::rope_kernel), which
# the processors run before attention as diffusers runs its RoPE ops.
ATTENTION_PATTERN = re.compile(r"vidattn|flash|fmha|sdpa|scaled_dot_product|attention|\bmha|_mha|mha_|_attn_kernel|"
                               r"quant_(query|key|value)|TransposePadPermute", re.I)
NOT_ATTENTION = re.compile(r"backward|bwd|cudaLaunch|cudaMemcpy|cudaStream|cudaEvent|cuLaunch|rope", re.I)


def is_attention_name(name: str) -> bool:
    return bool(ATTENTION_PATTERN.search(name)) and not NOT_ATTENTION.search(name)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def queue_ahead(device: torch.device, seconds: float) -> None:
    """Queue a sleep kernel of about `seconds` on the current CUDA stream (nothing on the CPU), so that work launched
    next waits behind it: what the CPU then spends launching is its own time, never a wait for the GPU."""
    if device.type == "cuda":
        torch.cuda._sleep(int(seconds * torch.cuda.clock_rate(device) * 1e6))


class ForwardTimer:
    """Times every forward of a module with pre/post forward hooks: CUDA events on GPU, perf_counter on CPU.

    `mark_step()` (call it from the pipeline's step-end callback) groups the forwards into denoising steps.
    Read `forward_ms()` / `step_ms()` after `close()` (which synchronises).
    """

    def __init__(self, module: torch.nn.Module, device: torch.device):
        self.device = torch.device(device)
        self.cuda = self.device.type == "cuda"
        self._pairs: list[list] = []   # [start, end] per forward
        self._step_marks: list[int] = []  # number of forwards completed at each step end
        self._handles = [module.register_forward_pre_hook(self._pre), module.register_forward_hook(self._post)]

    def _now(self):
        if self.cuda:
            ev = torch.cuda.Event(enable_timing=True)
            ev.record()
            return ev
        return time.perf_counter()

    def _pre(self, module, args):
        self._pairs.append([self._now(), None])

    def _post(self, module, args, output):
        self._pairs[-1][1] = self._now()

    def mark_step(self) -> None:
        self._step_marks.append(len(self._pairs))

    def close(self) -> None:
        for h in self._handles:
            h.remove()
        self._handles = []
        sync(self.device)

    def forward_ms(self) -> list[float]:
        out = []
        for a, b in self._pairs:
            if b is None:
                continue
            out.append(a.elapsed_time(b) if self.cuda else (b - a) * 1e3)
        return out

    def step_ms(self) -> list[float]:
        """Transformer time per denoising step (the sum of that step's forwards: 2 under CFG)."""
        fwd = self.forward_ms()
        steps, prev = [], 0
        for mark in self._step_marks:
            steps.append(sum(fwd[prev:mark]))
            prev = mark
        return steps

    def forwards_per_step(self) -> list[int]:
        counts, prev = [], 0
        for mark in self._step_marks:
            counts.append(mark - prev)
            prev = mark
        return counts


class Stopwatch:
    """Wall time of a block, synchronising the device on both ends."""

    def __init__(self, device):
        self.device = torch.device(device)
        self.ms = float("nan")

    def __enter__(self):
        sync(self.device)
        self._t = time.perf_counter()
        return self

    def __exit__(self, *exc):
        sync(self.device)
        self.ms = (time.perf_counter() - self._t) * 1e3
        return False


def timed_call(fn, device: torch.device) -> tuple[float, object]:
    """(ms, result) of one fn(): between two CUDA events on the GPU (read once the second has completed), by
    time.perf_counter on the CPU."""
    if device.type == "cuda":
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        out = fn()
        b.record()
        b.synchronize()
        return a.elapsed_time(b), out
    t0 = time.perf_counter()
    out = fn()
    return (time.perf_counter() - t0) * 1e3, out


def spread(values: list[float]) -> dict:
    """median, p10, p90, min, max, mean, n of a list of latencies (ms)."""
    vals = sorted(v for v in values if v == v)
    if not vals:
        return {"n": 0, "median": None, "p10": None, "p90": None, "min": None, "max": None, "mean": None}

    def pct(p):
        if len(vals) == 1:
            return vals[0]
        x = p * (len(vals) - 1)
        lo = math.floor(x)
        hi = min(lo + 1, len(vals) - 1)
        return vals[lo] + (vals[hi] - vals[lo]) * (x - lo)

    return {"n": len(vals), "median": statistics.median(vals), "p10": pct(0.10), "p90": pct(0.90),
            "min": vals[0], "max": vals[-1], "mean": statistics.fmean(vals)}


def _dev_us(ev) -> float:
    for attr in ("device_time_total", "cuda_time_total"):
        val = getattr(ev, attr, None)
        if val is not None:
            return float(val)
    return 0.0


def _is_device_event(ev) -> bool:
    dt = getattr(ev, "device_type", None)
    return dt is not None and dt != torch.autograd.DeviceType.CPU


def device_kernels(events) -> list:
    """The device events that are kernels (or copies): not the GPU-side mirrors of `record_function` ranges, which
    the profiler also puts on the device timeline (vidattn.attention opens one named `vidattn::attention` while
    profiling: counted as a kernel, it doubled the attention time of the thirteenth session's call-7 report)."""
    cpu_names = {ev.name for ev in events if not _is_device_event(ev)}
    return [ev for ev in events if _is_device_event(ev) and not getattr(ev, "is_user_annotation", False)
            and ev.name not in cpu_names]


def _outermost_attention_ops(events) -> list:
    """CPU-side ops whose name is attention and that are not nested inside another attention op."""
    out = []
    for ev in events:
        if _is_device_event(ev) or not is_attention_name(ev.name):
            continue
        parent, nested = getattr(ev, "cpu_parent", None), False
        while parent is not None:
            if is_attention_name(parent.name):
                nested = True
                break
            parent = getattr(parent, "cpu_parent", None)
        if not nested:
            out.append(ev)
    return out


TOP_KERNELS = 15  # device kernels that attention_share lists, longest first


def top_kernels(kernels, n: int = TOP_KERNELS) -> list[dict]:
    """The `n` kernel names with the most device time among `kernels` (device_kernels' events): where a forward's
    time goes besides attention. Names are cut at 160 characters; calls counts the launches."""
    every: dict[str, list] = {}
    for ev in kernels:
        tot = every.setdefault(ev.name, [0.0, 0])
        tot[0] += _dev_us(ev)
        tot[1] += 1
    ranked = sorted(every.items(), key=lambda kv: -kv[1][0])[:n]
    return [{"name": k[:160], "ms": us / 1e3, "calls": c} for k, (us, c) in ranked]


def attention_share(fn, device: torch.device) -> dict:
    """Profile one call of `fn` and return the attention share of its time.

    CUDA, two attributions: (a) by kernel name: device time of kernels whose name looks like attention over
    the device time of all kernels; (b) by op: device time launched under the outermost attention ops
    (`vidattn::attention`, `aten::scaled_dot_product_attention`, ...) over the same total. (a) is reported as
    `attention_share` unless it found nothing, then (b). CPU: CPU time of the outermost attention ops over the
    profiled wall time. Matched names are listed so the attribution can be checked.
    """
    from torch.profiler import ProfilerActivity, profile

    device = torch.device(device)
    acts = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    sync(device)
    with profile(activities=acts) as prof:
        t0 = time.perf_counter()
        fn()
        sync(device)
        wall_ms = (time.perf_counter() - t0) * 1e3
    events = list(prof.events())
    ops = _outermost_attention_ops(events)
    res = {"profiled_on": device.type, "wall_ms": wall_ms}
    if device.type == "cuda":
        total, kernels, dev = 0.0, {}, device_kernels(events)
        for ev in dev:
            t = _dev_us(ev)
            total += t
            if is_attention_name(ev.name):
                kernels[ev.name] = kernels.get(ev.name, 0.0) + t
        op_times: dict[str, float] = {}
        for ev in ops:
            op_times[ev.name] = op_times.get(ev.name, 0.0) + _dev_us(ev)
        by_kernel, by_op = sum(kernels.values()), sum(op_times.values())
        use_kernel = by_kernel > 0 or by_op <= 0
        attn = by_kernel if use_kernel else by_op
        res.update(total_ms=total / 1e3, attention_ms=attn / 1e3,
                   attention_share=(attn / total) if total > 0 else None,
                   attention_share_by_kernel_name=(by_kernel / total) if total > 0 else None,
                   attention_share_by_op=(by_op / total) if total > 0 else None,
                   basis=("attention kernels' device time / all kernels' device time" if use_kernel else
                          "device time under attention ops / all kernels' device time (no kernel name matched)"),
                   matched_kernels=[{"name": k, "ms": v / 1e3} for k, v in
                                    sorted(kernels.items(), key=lambda kv: -kv[1])],
                   matched_ops=[{"name": k, "ms": v / 1e3} for k, v in
                                sorted(op_times.items(), key=lambda kv: -kv[1])],
                   vidattn_kernel_seen=any("vidattn" in k.lower() for k in kernels),
                   top_kernels=top_kernels(dev))
    else:
        op_times = {}
        for ev in ops:
            op_times[ev.name] = op_times.get(ev.name, 0.0) + ev.cpu_time_total
        attn = sum(op_times.values())
        res.update(total_ms=wall_ms, attention_ms=attn / 1e3,
                   attention_share=min(1.0, attn / 1e3 / wall_ms) if wall_ms > 0 else None,
                   basis="CPU time of outermost attention ops / profiled wall time",
                   matched_kernels=[],
                   matched_ops=[{"name": k, "ms": v / 1e3} for k, v in
                                sorted(op_times.items(), key=lambda kv: -kv[1])],
                   vidattn_kernel_seen=False)
    return res


def attention_call_times(fn, device: torch.device) -> list[dict]:
    """Run `fn` once with every attention call timed where the model makes it: `F.scaled_dot_product_attention` and
    `vidattn.ops.attention` are wrapped for the call, each call between two CUDA events on the current stream (CPU:
    perf_counter), only the outermost one where they nest (vidattn's SDPA fallback). Returns the calls grouped by
    (function, q shape, k shape): calls, total ms and ms per call. What this times is the attention call as the model
    runs it, between its GEMMs, against bench_kernel.py's calls back to back; an SDPA call's copies of its inputs,
    if it makes any, are in it. (The profiler's kernel-to-op links are not used: on the H200 they credited the
    self-attention ops with 1.0-1.8x the attention kernels' time, differently per run and path.)"""
    import torch.nn.functional as F

    from vidattn import ops as vops

    cuda = torch.device(device).type == "cuda"
    records, depth = [], [0]

    def wrap(name, orig):
        def timed(*args, **kwargs):
            if depth[0]:
                return orig(*args, **kwargs)
            q = args[0] if args else kwargs.get("query", kwargs.get("q"))
            k = args[1] if len(args) > 1 else kwargs.get("key", kwargs.get("k"))
            depth[0] += 1
            try:
                if cuda:
                    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                    start.record()
                    out = orig(*args, **kwargs)
                    end.record()
                else:
                    t0 = time.perf_counter()
                    out = orig(*args, **kwargs)
                    start, end = t0, time.perf_counter()
            finally:
                depth[0] -= 1
            records.append((name, list(q.shape), list(k.shape), start, end))
            return out
        return timed

    from . import cached

    targets = [(F, "scaled_dot_product_attention", "F.scaled_dot_product_attention"),
               (vops, "attention", "vidattn.attention"),
               (cached, "sdpa_lse", "SDPA with LSE (cached.sdpa_lse)")]
    saved = [getattr(mod, attr) for mod, attr, _ in targets]
    try:
        for (mod, attr, name), orig in zip(targets, saved):
            setattr(mod, attr, wrap(name, orig))
        fn()
        sync(torch.device(device))
    finally:
        for (mod, attr, _), orig in zip(targets, saved):
            setattr(mod, attr, orig)
    groups: dict[tuple, dict] = {}
    for name, qs, ks, start, end in records:
        ms = start.elapsed_time(end) if cuda else (end - start) * 1e3
        g = groups.setdefault((name, repr(qs), repr(ks)), {"fn": name, "q_shape": qs, "k_shape": ks, "calls": 0,
                                                           "ms": 0.0})
        g["calls"] += 1
        g["ms"] += ms
    out = sorted(groups.values(), key=lambda g: -g["ms"])
    for g in out:
        g["ms_per_call"] = g["ms"] / g["calls"]
    return out


def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in fp64."""
    a = a.detach().double().cpu()
    b = b.detach().double().cpu()
    den = torch.linalg.vector_norm(b).item()
    num = torch.linalg.vector_norm(a - b).item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def video_fidelity(test, ref, ssim_frames: int | None = None) -> dict:
    """PSNR (dB) over the whole clip and mean per-frame SSIM of `test` against `ref`, frames (F, H, W, 3) in [0, 1].

    Computed with scikit-image on uint8-quantised frames (what the mp4 stores), data range 255. SSIM is costly on
    a CPU (~0.5 s per 480x832 frame): `ssim_frames` limits it to that many evenly spaced frames (threads in parallel).
    """
    import os
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    def u8(x):
        x = np.asarray(x)
        return x if x.dtype == np.uint8 else (np.clip(x, 0.0, 1.0) * 255.0 + 0.5).astype(np.uint8)

    t, r = u8(test), u8(ref)
    if t.shape != r.shape:
        raise ValueError(f"video shapes differ: {t.shape} vs {r.shape}")
    n = t.shape[0]
    idx = list(range(n)) if not ssim_frames or ssim_frames >= n else \
        sorted({round(i * (n - 1) / max(ssim_frames - 1, 1)) for i in range(ssim_frames)})
    if np.array_equal(t, r):
        psnr, ssim = float("inf"), 1.0
    else:
        psnr = float(peak_signal_noise_ratio(r, t, data_range=255))
        win = min(7, t.shape[1], t.shape[2])
        win -= (win + 1) % 2  # odd

        def one(i):
            return structural_similarity(r[i], t[i], data_range=255, channel_axis=-1, win_size=win)

        with ThreadPoolExecutor(max_workers=min(len(idx), os.cpu_count() or 1, 16)) as pool:
            ssim = float(np.mean(list(pool.map(one, idx))))
    max_abs = int(np.abs(t.astype(np.int16) - r.astype(np.int16)).max())
    return {"psnr_db": psnr, "ssim": ssim, "ssim_frames": idx, "max_abs_diff_u8": max_abs,
            "identical": bool(max_abs == 0)}


def jsonable(obj):
    """Replace non-finite floats with strings ("inf", "-inf", "nan") so the JSON is strict."""
    if isinstance(obj, float) and not math.isfinite(obj):
        return "nan" if obj != obj else ("inf" if obj > 0 else "-inf")
    if isinstance(obj, dict):
        return {str(k): jsonable(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [jsonable(v) for v in obj]
    return obj
