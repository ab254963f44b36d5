#!/usr/bin/env python3
"""Fidelity of the 8-bit attention path inside a model, each figure beside SageAttention2's from the same run.

    python scripts/fidelity_8bit.py                          # Wan 1.3B, 480x832x81, 4 steps (GPU)
    python scripts/fidelity_8bit.py --family wan --tiny      # CPU smoke run (what the tests do)
    python scripts/fidelity_8bit.py --family cogvideox       # another family (registry name)
    python scripts/fidelity_8bit.py --budget-s 150 --out-dir DIR

Attention paths (the same model object, same inputs, same seed):
  sdpa    diffusers' own processors (the reference of (b) and (c));
  exact   vidattn.apply, the exact bf16 kernel;
  8bit    vidattn.apply under `vidattn.use_precision("8bit")` (INT8 Q K^T, e4m3 P V);
  sage2   vidattn.apply with every plain attention call the processors hand `vidattn.attention` sent to
          SageAttention2 instead (scripts/anchor_impls.py; left out, with the reason, when it is not installed);
  sdpa_proc  vidattn.apply with those calls sent to torch's scaled_dot_product_attention: vidattn's processors
          around SDPA, which tells what the processors alone change (e.g. the fused RoPE) from what the kernel does.

Three measurements:
  (a) per-layer error: Q/K/V captured from the model's attention calls (chosen blocks, self and cross, the first
      transformer call of every denoising step) during the exact run; for each call the relative L2 and max error
      of 8bit, sage2 and exact against an fp64 reference, on a subset of query rows (every key is kept: the
      softmax of a row and the K smoothing depend on all keys, a row on no other row);
  (b) one-step model output: the transformer's inputs at every step of the SDPA trajectory replayed once under
      each path; relative L2 and cosine against the SDPA output (no trajectory drift);
  (c) the decoded video of the few-step generation against SDPA's: PSNR and SSIM (gaussian window, in torch).
And a sweep of `vidattn.PrecisionPolicy` variants on the 8-bit path (first N steps exact, first and last blocks
exact) with the video metrics of (c), in the budget left; `suggested_policy` names the one with the fewest exact
calls whose video is at or above SageAttention2's PSNR and SSIM in the same run, the plain 8-bit path ("none", no
exceptions) included as a candidate (no suggestion without Sage2).

By default the weights are random (nothing is downloaded): the videos mean nothing, and the errors are those of
random-weight activations, which lack the outliers and sharp attention of trained models. The numbers compare paths
on the same inputs; they are not a quality claim for a trained model. For Wan, `--model DIR` loads a local diffusers
folder's trained transformer and VAE (e.g. a snapshot of Wan-AI/Wan2.1-T2V-1.3B-Diffusers); the text encoder is not
loaded, so the prompt's embeddings stay seeded, as in scripts/e2e_report.py --model:

    python scripts/fidelity_8bit.py --family wan --model /models/Wan2.1-T2V-1.3B-Diffusers

Writes fidelity.json and fidelity.md to --out-dir (default bench/results/fidelity_8bit_<family>_<date>/); the
Markdown table is printed last.
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import math
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from generate_video import positive_float, positive_int  # noqa: E402

PATHS = ("sdpa", "exact", "8bit", "sage2", "sdpa_proc")
SCHEMA = "fidelity_8bit/1"


def log(msg: str) -> None:
    print(f"[fidelity] {msg}", flush=True)


# ------------------------------------------------------------------------------------------------ metrics
def rel_l2(a: torch.Tensor, b: torch.Tensor) -> float:
    """||a - b|| / ||b|| in fp64."""
    a, b = a.detach().double(), b.detach().double()
    den = torch.linalg.vector_norm(b).item()
    num = torch.linalg.vector_norm(a - b).item()
    return num / den if den > 0 else (0.0 if num == 0 else float("inf"))


def cosine(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.detach().double().flatten(), b.detach().double().flatten()
    den = (torch.linalg.vector_norm(a) * torch.linalg.vector_norm(b)).item()
    return (a @ b).item() / den if den > 0 else float("nan")


def _as_video(x) -> torch.Tensor:
    """(F, H, W, C) frames, uint8 or float in [0, 1], as a float64 tensor on 0..255 (the uint8 values an mp4
    stores: float frames are rounded as the writer rounds them)."""
    t = torch.as_tensor(x)
    if t.dtype == torch.uint8:
        return t.double()
    return (t.double().clamp(0, 1) * 255.0 + 0.5).floor()


def psnr(test, ref, data_range: float = 255.0) -> float:
    """PSNR in dB over the whole clip (one mean squared error); inf for identical inputs."""
    t, r = _as_video(test), _as_video(ref)
    if t.shape != r.shape:
        raise ValueError(f"video shapes differ: {tuple(t.shape)} vs {tuple(r.shape)}")
    mse = torch.mean((t - r) ** 2).item()
    return float("inf") if mse == 0 else 10.0 * math.log10(data_range ** 2 / mse)


def _gaussian_window(size: int, sigma: float, dtype, device) -> torch.Tensor:
    x = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2
    g = torch.exp(-(x ** 2) / (2 * sigma ** 2))
    return g / g.sum()


def ssim(test, ref, data_range: float = 255.0, win: int = 11, sigma: float = 1.5, k1: float = 0.01,
         k2: float = 0.03) -> float:
    """Mean SSIM (Wang et al. 2004) of frames (F, H, W, C) or one image (H, W[, C]): an 11-tap gaussian window of
    sigma 1.5, population (co)variances, the mean over the valid (unpadded) window positions of every frame and
    channel. The window shrinks (odd, >= 3) for frames smaller than it."""
    t, r = _as_video(test), _as_video(ref)
    if t.shape != r.shape:
        raise ValueError(f"video shapes differ: {tuple(t.shape)} vs {tuple(r.shape)}")
    if t.dim() == 2:
        t, r = t[None, :, :, None], r[None, :, :, None]
    elif t.dim() == 3:
        t, r = t[None], r[None]
    h, w = t.shape[1], t.shape[2]
    win = min(win, h, w)
    win -= (win + 1) % 2
    if win < 3:
        raise ValueError(f"SSIM needs frames of at least 3x3 pixels, got {h}x{w}")
    # (F*C, 1, H, W)
    x = t.permute(0, 3, 1, 2).reshape(-1, 1, h, w)
    y = r.permute(0, 3, 1, 2).reshape(-1, 1, h, w)
    g = _gaussian_window(win, sigma, x.dtype, x.device)
    gh, gw = g.view(1, 1, win, 1), g.view(1, 1, 1, win)

    def blur(z):
        return F.conv2d(F.conv2d(z, gh), gw)

    mx, my = blur(x), blur(y)
    vx = blur(x * x) - mx * mx
    vy = blur(y * y) - my * my
    cxy = blur(x * y) - mx * my
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    s = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx * mx + my * my + c1) * (vx + vy + c2))
    return float(s.mean())


def video_metrics(test, ref, device=None) -> dict:
    t, r = torch.as_tensor(test), torch.as_tensor(ref)
    if device is not None:
        t, r = t.to(device), r.to(device)
    p = psnr(t, r)
    return {"psnr_db": p, "ssim": 1.0 if p == float("inf") else ssim(t, r),
            "max_abs_diff_u8": int((_as_video(t) - _as_video(r)).abs().max().item())}


# ----------------------------------------------------------------------------------------- attention paths
def sage2_impl():
    """(sage2 callable, None) from scripts/anchor_impls.py, or (None, why it is unavailable)."""
    try:
        import anchor_impls
    except Exception as exc:  # noqa: BLE001 - an optional anchor never takes the run down
        return None, f"scripts/anchor_impls.py not importable ({type(exc).__name__}: {exc})"
    try:
        why = anchor_impls.available().get("sage2", "anchor_impls.available() does not list sage2")
    except Exception as exc:  # noqa: BLE001
        return None, f"anchor_impls.available() failed ({type(exc).__name__}: {exc})"
    if why is not None:
        return None, f"SageAttention2 unavailable: {why}"
    return anchor_impls.sage2, None


def sdpa_bshd(q, k, v, scale=None):
    """torch's scaled_dot_product_attention on (B, S, H, D) tensors, its own backend choice (what diffusers' native
    dispatch calls): the attention of the sdpa_proc path."""
    extra = {} if scale is None else {"scale": scale}
    if k.shape[2] != q.shape[2]:  # grouped-query K/V, read in place as the model's own SDPA call does
        extra["enable_gqa"] = True
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), **extra)
    return out.transpose(1, 2)


class OpOverride:
    """While active, `vidattn.ops.attention` (what every vidattn processor and the vidattn diffusers backend call)
    is `fn(original, q, k, v, **kw)`. Stacks with pipelines.census (both patch the same attribute and put back
    what they found)."""

    def __init__(self, fn):
        self.fn = fn
        self._saved = None

    def __enter__(self):
        from vidattn import ops

        self._saved = ops.attention
        original = self._saved

        def attention(q, k, v, **kw):
            return self.fn(original, q, k, v, **kw)

        ops.attention = attention
        return self

    def __exit__(self, *exc):
        from vidattn import ops

        ops.attention = self._saved
        return False


def _to_bshd(t, layout):
    return t if layout == "bshd" else t.transpose(1, 2)


def per_element_keys(impl, q, k, v, kv_lens, **kw):
    """`impl(q, k, v, **kw)` on (B, S, H, D) tensors for an implementation without key padding: with `kv_lens`, once
    per batch element on its first kv_lens[b] keys (the same attention: padded keys carry no weight), the outputs
    stacked; the lengths are read on the host (a sync)."""
    if kv_lens is None:
        return impl(q, k, v, **kw)
    return torch.cat([impl(q[i:i + 1], k[i:i + 1, :n], v[i:i + 1, :n], **kw)
                      for i, n in enumerate(int(x) for x in kv_lens.tolist())])


class ImplRoute:
    """An OpOverride body that sends the calls an outside BSHD implementation (SageAttention2: `impl(q, k, v,
    scale=)` on bf16/fp16 tensors, no mask, head dim up to `max_head_dim`) can take to it, and every other call to
    the exact vidattn op, counting both with the reasons. A key-padded call (`kv_lens`) reaches it one batch element
    at a time on that element's unpadded keys (the same attention: padded keys carry no weight), counted apart as
    `split_kv_lens`; the split reads kv_lens on the host (a sync), which a timing of this route includes. fp32 calls
    (a model run in fp32: the CPU tests) reach it cast to bf16, the output cast back, and are counted apart. A call
    the implementation raises on runs the exact op too, counted with the error as its reason (a route that ran
    nothing shows as 0 impl_calls, never as a silent timing of the exact kernel). Grouped-query K/V (fewer heads than
    Q) reach it as they are (`takes_grouped`, the default: SageAttention2 and torch's SDPA read them in place); an
    implementation without that runs them exact, counted as "grouped K/V heads"."""

    def __init__(self, impl, name: str = "sage2", max_head_dim: int = 128, takes_fp32: bool = False,
                 takes_grouped: bool = True):
        self.impl, self.name, self.max_head_dim = impl, name, max_head_dim
        self.takes_fp32 = takes_fp32  # True: fp32 calls reach impl as they are (SDPA), not cast to bf16
        self.takes_grouped = takes_grouped
        self.calls = 0
        self.cast_fp32 = 0
        self.split = 0
        self.other: dict[str, int] = {}

    def reason(self, q, k, v, kw) -> str | None:
        layout = kw.get("layout", "bshd")
        d = q.shape[-1]
        if kw.get("return_lse"):
            return "return_lse"
        if kw.get("causal") not in (None, False, 0):
            return "causal mask"
        if d > self.max_head_dim:
            return f"head dim {d} > {self.max_head_dim}"
        if q.dtype not in (torch.bfloat16, torch.float16, torch.float32) or k.dtype != q.dtype or v.dtype != q.dtype:
            return f"dtype {q.dtype}"
        kh = k.shape[2 if layout == "bshd" else 1]
        if kh != q.shape[2 if layout == "bshd" else 1] and not self.takes_grouped:
            return "grouped K/V heads"
        return None

    def __call__(self, original, q, k, v, **kw):
        why = self.reason(q, k, v, kw)
        if why is not None:
            self.other[why] = self.other.get(why, 0) + 1
            return original(q, k, v, **{**kw, "precision": "exact"})
        layout = kw.get("layout", "bshd")
        extra = {} if kw.get("scale") is None else {"scale": float(kw["scale"])}
        qkv = [_to_bshd(t, layout) for t in (q, k, v)]
        if q.dtype == torch.float32 and not self.takes_fp32:
            qkv = [t.to(torch.bfloat16) for t in qkv]
        lens = kw.get("kv_lens")
        try:
            out = per_element_keys(self.impl, *qkv, lens, **extra)
        except Exception as exc:  # noqa: BLE001 - counted and run exact, see the class docstring
            why = f"{self.name} raised {type(exc).__name__}: {str(exc)[:160]}"
            self.other[why] = self.other.get(why, 0) + 1
            return original(q, k, v, **{**kw, "precision": "exact"})
        self.calls += 1
        self.split += lens is not None
        self.cast_fp32 += q.dtype == torch.float32 and not self.takes_fp32
        return _to_bshd(out, layout).to(q.dtype)

    def summary(self) -> dict:
        return {"impl_calls": self.calls, "exact_calls": sum(self.other.values()), "exact_reasons": dict(self.other),
                "fp32_cast_to_bf16": self.cast_fp32, "split_kv_lens": self.split}


@contextlib.contextmanager
def attention_path(path: str, target, sage=None, policy=None, extra_override=None):
    """Run the block with `target` (a pipeline or a model) on one attention path (module docstring). `policy`: a
    vidattn.PrecisionPolicy installed on the transformer for the block (8bit path). `extra_override`: an
    OpOverride body wrapped around the path's own calls (the Q/K/V capture). Yields a dict that holds, after the
    block, what the path did ("route": the ImplRoute summary for sage2)."""
    import vidattn

    info: dict = {}
    if path == "sdpa":
        if extra_override is not None:
            raise ValueError("the sdpa path has no vidattn calls to override")
        yield info
        return
    if path not in ("exact", "8bit", "sage2", "sdpa_proc"):
        raise ValueError(f"unknown attention path {path!r} (choose from {', '.join(PATHS)})")
    if path == "sage2" and sage is None:
        raise ValueError("the sage2 path needs the SageAttention2 callable (sage2_impl())")
    vidattn.apply(target)
    try:
        route = None
        # Every context entered is left again if a later one fails to enter (policy.install raising, say): the
        # stack is open from the first.
        with contextlib.ExitStack() as stack:
            if path == "sage2":
                route = ImplRoute(sage)
                stack.enter_context(OpOverride(route))
            elif path == "sdpa_proc":
                route = ImplRoute(lambda *a, **kw: sdpa_bshd(*a, **kw), name="sdpa", max_head_dim=1 << 30,
                                  takes_fp32=True)
                stack.enter_context(OpOverride(route))
            if extra_override is not None:
                stack.enter_context(OpOverride(extra_override))
            stack.enter_context(vidattn.use_precision("8bit" if path == "8bit" else "exact"))
            if policy is not None:
                handle = policy.install(_transformer(target))
                stack.callback(handle.remove)
            yield info
        if route is not None:
            info["route"] = route.summary()
    finally:
        vidattn.restore(target)


def _transformer(target):
    return getattr(target, "transformer", target)


# ----------------------------------------------------------------------------------------------- capture
class StepTracker:
    """Forward pre-hook on a transformer: the denoising step of each call (a new `timestep` value starts a step;
    a call without one is a step of its own) and whether the call is the first of its step (CFG calls twice)."""

    def __init__(self, transformer, record_inputs: bool = False, clone_to=None):
        from vidattn.precision import _timestep_key, _timestep_position

        position = _timestep_position(transformer)
        self._tv = lambda args, kwargs: _timestep_key(args, kwargs, position)  # as PrecisionPolicy counts steps
        self.step, self.first_in_step, self._last = -1, True, None
        self.timesteps: list = []
        self.inputs: list = []     # (args, kwargs) of the first call of every step, when record_inputs
        self.record_inputs, self.clone_to = record_inputs, clone_to
        self.calls = 0
        self._hook = transformer.register_forward_pre_hook(self._pre, with_kwargs=True)

    def _pre(self, module, args, kwargs):
        t = self._tv(args, kwargs)
        self.calls += 1
        if t is None or self._last is None or t != self._last:
            self.step += 1
            self.first_in_step = True
            self.timesteps.append(None if t is None else t[0])  # the step's timestep: its maximum
            if self.record_inputs:
                self.inputs.append((_clone(args, self.clone_to), _clone(kwargs, self.clone_to)))
        else:
            self.first_in_step = False
        self._last = t

    def remove(self):
        self._hook.remove()


def _clone(x, device=None):
    if isinstance(x, torch.Tensor):
        return x.detach().clone() if device is None else x.detach().to(device, copy=True)
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(v, device) for v in x)
    if isinstance(x, dict):
        return {k: _clone(v, device) for k, v in x.items()}
    return x


def query_rows(n: int, keep: int) -> torch.Tensor:
    """Indices of `keep` query rows of `n`: four evenly spaced contiguous runs (neighbouring rows share scale groups
    in the 8-bit kernels, so runs keep that structure), or all rows when keep >= n."""
    if keep <= 0 or keep >= n:
        return torch.arange(n)
    runs = min(4, keep)
    sizes = [keep // runs + (1 if i < keep % runs else 0) for i in range(runs)]
    starts = [round(i * (n - sizes[i]) / max(runs - 1, 1)) for i in range(runs)]
    idx = torch.unique(torch.cat([torch.arange(s, s + z) for s, z in zip(starts, sizes)]))
    return idx if len(idx) == keep else torch.arange(keep) * n // keep  # runs overlapped: evenly spaced rows


class QKVCapture:
    """An OpOverride body (exact run) that keeps the Q/K/V of chosen attention modules at the first transformer call
    of every step: all keys and heads, `rows` query rows, and the call's `kv_lens` (key-padded joint attention:
    HunyuanVideo, Mochi); causal calls are not kept. Which module a call comes from: a forward pre-hook on every
    module with a `processor` (its name, e.g. "blocks.7.attn1")."""

    def __init__(self, transformer, tracker: StepTracker, blocks, rows: int = 2048, max_calls: int = 64):
        from vidattn.precision import _block_index

        self.tracker, self.blocks, self.rows, self.max_calls = tracker, set(blocks), rows, max_calls
        self.current: str | None = None
        self.records: list[dict] = []
        self._hooks = []
        for name, m in transformer.named_modules():
            if getattr(m, "processor", None) is not None:
                self._hooks.append(m.register_forward_pre_hook(self._enter(name)))
                self._hooks.append(m.register_forward_hook(self._leave))
        self._block = _block_index

    def _enter(self, name):
        def hook(module, args):
            self.current = name
        return hook

    def _leave(self, module, args, out):
        self.current = None

    def __call__(self, original, q, k, v, **kw):
        name = self.current
        if (name is not None and self.tracker.first_in_step and len(self.records) < self.max_calls
                and self._block(name) in self.blocks and not kw.get("causal")):
            layout = kw.get("layout", "bshd")
            qb, kb, vb = _to_bshd(q, layout), _to_bshd(k, layout), _to_bshd(v, layout)
            idx = query_rows(qb.shape[1], self.rows).to(qb.device)
            if not any(r["module"] == name and r["step"] == self.tracker.step for r in self.records):
                self.records.append({"module": name, "block": self._block(name), "step": self.tracker.step,
                                     "timestep": self.tracker.timesteps[-1], "scale": kw.get("scale"),
                                     "q": qb.index_select(1, idx).clone(), "k": kb.clone(), "v": vb.clone(),
                                     "seq_q": qb.shape[1], "kv_lens": None if kw.get("kv_lens") is None
                                     else kw["kv_lens"].clone()})
        return original(q, k, v, **kw)

    def remove(self):
        for h in self._hooks:
            h.remove()


def reference_fp64(q, k, v, scale=None, chunk_rows: int = 1024, kv_lens=None) -> torch.Tensor:
    """softmax(q k^T scale) v in fp64, (B, S, H, D) in and out, per head and in row chunks (bounded memory). K/V
    may have fewer heads than Q when that divides it (grouped-query: query head h reads K/V head h // group);
    `kv_lens` (B,) keeps the first kv_lens[b] keys of batch element b (vidattn's key padding)."""
    b, sq, h, d = q.shape
    group = h // k.shape[2]
    scale = 1.0 / math.sqrt(d) if scale is None else float(scale)
    lens = [k.shape[1]] * b if kv_lens is None else [int(x) for x in kv_lens.tolist()]
    out = torch.empty(b, sq, h, v.shape[-1], dtype=torch.float64, device=q.device)
    for bi in range(b):
        for hi in range(h):
            kk = k[bi, :lens[bi], hi // group].double()
            vv = v[bi, :lens[bi], hi // group].double()
            for r0 in range(0, sq, chunk_rows):
                qq = q[bi, r0:r0 + chunk_rows, hi].double()
                p = torch.softmax((qq @ kk.T) * scale, dim=-1)
                out[bi, r0:r0 + chunk_rows, hi] = p @ vv
    return out


def per_layer_errors(records: list[dict], impls: dict) -> list[dict]:
    """For every captured call, each implementation's relative L2 and max |error| against fp64. `impls`: name ->
    fn(q, k, v, scale, kv_lens) on BSHD tensors (kv_lens None or the call's (B,) key lengths); the row adds
    `explain_8bit` (what the 8-bit op runs for this call) and, for a key-padded call, its key lengths."""
    import vidattn

    rows = []
    for r in records:
        q, k, v, sc, lens = r["q"], r["k"], r["v"], r["scale"], r.get("kv_lens")
        row = {"module": r["module"], "block": r["block"], "step": r["step"], "timestep": r["timestep"],
               "q_rows": q.shape[1], "seq_q": r["seq_q"], "seq_kv": k.shape[1], "heads": q.shape[2],
               "kv_heads": k.shape[2], "head_dim": q.shape[3]}
        if lens is not None:
            row["kv_lens"] = [int(x) for x in lens.tolist()]
        try:
            ref = reference_fp64(q, k, v, sc, kv_lens=lens)
        except Exception as exc:  # noqa: BLE001 - a call the reference cannot take is a row, not a crash
            row["error"] = f"reference: {type(exc).__name__}: {str(exc)[:300]}"
            rows.append(row)
            continue
        row["ref_max_abs"] = ref.abs().max().item()
        try:
            row["explain_8bit"] = vidattn.explain(q, k, v, scale=sc, kv_lens=lens, precision="8bit")
        except Exception as exc:  # noqa: BLE001
            row["explain_8bit"] = f"explain failed: {type(exc).__name__}: {exc}"
        for name, fn in impls.items():
            try:
                out = fn(q, k, v, sc, lens).double()
                row[name] = {"rel_l2": rel_l2(out, ref), "max_abs_err": (out - ref).abs().max().item()}
            except Exception as exc:  # noqa: BLE001 - one failing implementation is a row entry, not a crash
                row[name] = {"error": f"{type(exc).__name__}: {str(exc)[:300]}"}
        rows.append(row)
    return rows


def summarize_layers(rows: list[dict], names) -> dict:
    """Per implementation: median and max relative L2 and the max of the max errors over the captured calls,
    and split by self/cross (seq_kv equal to or unlike seq_q); how many were key-padded, and for "8bit" how many
    the 8-bit kernel ran (the others ran exact, as `explain_8bit` says)."""
    out = {}
    for n in names:
        ok = [r for r in rows if isinstance(r.get(n), dict) and "rel_l2" in r[n]]
        if not ok:
            continue
        entry = {}
        for kind, sel in (("all", ok), ("self", [r for r in ok if r["seq_kv"] == r["seq_q"]]),
                          ("cross", [r for r in ok if r["seq_kv"] != r["seq_q"]])):
            if sel:
                vals = sorted(r[n]["rel_l2"] for r in sel)
                entry[kind] = {"calls": len(sel), "rel_l2_median": vals[len(vals) // 2], "rel_l2_max": vals[-1],
                               "max_abs_err": max(r[n]["max_abs_err"] for r in sel),
                               "key_padded_calls": sum(r.get("kv_lens") is not None for r in sel)}
                if n == "8bit":  # explain_8bit None: the 8-bit kernel ran; else the reason it ran exact
                    entry[kind]["kernel_8bit_calls"] = sum("explain_8bit" in r and r["explain_8bit"] is None
                                                           for r in sel)
        out[n] = entry
    return out


# ------------------------------------------------------------------------------------------------- budget
class Budget:
    """Seconds left of `--budget-s` (None: unlimited); `fits(estimate)` says whether a stage of that estimated
    length still fits, `skip(what, est)` records what was left out."""

    def __init__(self, seconds: float | None, clock=time.perf_counter):
        self.seconds, self.clock, self.t0 = seconds, clock, clock()
        self.skipped: list[dict] = []

    def elapsed(self) -> float:
        return self.clock() - self.t0

    def left(self) -> float:
        return float("inf") if self.seconds is None else self.seconds - self.elapsed()

    def fits(self, estimate_s: float) -> bool:
        return estimate_s <= self.left()

    def skip(self, what: str, estimate_s: float) -> None:
        self.skipped.append({"what": what, "estimate_s": estimate_s, "left_s": self.left()})
        log(f"budget: {what} left out (estimated {estimate_s:.1f} s, {max(self.left(), 0):.1f} s left)")


# ------------------------------------------------------------------------------------------------- policies
def parse_policy(text: str, n_blocks: int):
    """A sweep entry: "none", "steps=N" (first N steps exact), "blocks=first,last" / "blocks=0,1,-1" (those blocks
    exact; negative from the end), or both joined by "+". Returns (label, PrecisionPolicy)."""
    import vidattn

    steps, blocks = 0, set()
    if text.strip() != "none":
        for part in text.split("+"):
            key, _, val = part.strip().partition("=")
            if key == "steps":
                steps = int(val)
            elif key == "blocks":
                for b in val.split(","):
                    b = b.strip()
                    i = 0 if b == "first" else n_blocks - 1 if b == "last" else int(b)
                    blocks.add(i + n_blocks if i < 0 else i)
            else:
                raise ValueError(f"policy {text!r}: expected none, steps=N, blocks=LIST or both joined by '+'")
    if any(b < 0 or b >= n_blocks for b in blocks):
        raise ValueError(f"policy {text!r}: blocks out of range for a model of {n_blocks} blocks")
    return text, vidattn.PrecisionPolicy("8bit", exact_blocks=sorted(blocks), exact_first_steps=steps)


def attention_blind(one_step: list[dict], device) -> str | None:
    """A note when the model's output does not depend on its attention: on a GPU every one-step output of the
    exact kernel equal to SDPA's to the bit, though the kernels round differently (Kandinsky 5 built from its
    constructor: diffusers zeroes its modulation layers, so every attention output is gated by 0). Then (b) and (c)
    measure nothing and (a) is all there is. None otherwise, and on a CPU, where the vidattn paths run SDPA."""
    if device.type != "cuda" or not one_step:
        return None
    vals = [r["exact"]["rel_l2"] for r in one_step if isinstance(r.get("exact"), dict)]
    if not vals or any(v != 0.0 for v in vals):
        return None
    return ("the exact kernel's one-step outputs equal SDPA's to the bit at every step: this model's output does not "
            "depend on its attention (zero-initialised gates in a random-weight build?), so the one-step and video "
            "figures measure nothing here; the per-layer errors (a) stand")


def n_blocks_of(transformer) -> int:
    from vidattn.precision import _block_index

    idx = [_block_index(n) for n, m in transformer.named_modules() if getattr(m, "processor", None) is not None]
    idx = [i for i in idx if i is not None]
    return max(idx) + 1 if idx else 0


def suggest_policy(sweep: list[dict], sage_video: dict | None, plain_video: dict | None = None) -> dict:
    """The candidate with the fewest exact calls whose video PSNR and SSIM are at or above Sage2's in this run;
    ties go to fewer exact calls. The candidates are the sweep entries and, given `plain_video` (the 8-bit path's
    own video, no exceptions), "none" at an exact share of 0: a policy is only worth its exact calls when the plain
    8-bit path falls short. None, with the reason, without Sage2's figures or when no candidate reaches them."""
    if not sage_video or sage_video.get("psnr_db") is None:
        return {"policy": None, "reason": "no SageAttention2 video in this run to compare against"}
    cands = list(sweep)
    if plain_video and plain_video.get("psnr_db") is not None:
        cands.append({"policy": "none", "exact_share": 0.0, "video": plain_video})
    ok = [s for s in cands if s.get("video") and s["video"].get("psnr_db") is not None
          and s["video"]["psnr_db"] >= sage_video["psnr_db"] and s["video"]["ssim"] >= sage_video["ssim"]]
    if not ok:
        return {"policy": None, "reason": "neither the 8-bit path nor a swept policy reached SageAttention2's "
                                          "PSNR and SSIM"}
    best = min(ok, key=lambda s: (s["exact_share"], s["policy"]))
    return {"policy": best["policy"], "reason": "fewest exact calls at or above SageAttention2's PSNR and SSIM "
                                                "in this run", "exact_share": best["exact_share"]}


# ------------------------------------------------------------------------------------------------ subjects
class WanSubject:
    """Wan 2.1 (pipelines/wan.py): the pipeline, its prompt embeddings and noise, generation = denoise + decode."""

    def __init__(self, args, device, dtype):
        from pipelines import build_pipeline, flow_shift_for, initial_latents, prompt_pair

        preset = {"wan": "1.3b", "wan14b": "14b"}[args.family] if not args.tiny else "tiny"
        self.preset = preset if args.model is None else "model"
        self.pipe = build_pipeline(preset, model_dir=args.model, device=device, dtype=dtype, seed=args.seed,
                                   flow_shift=flow_shift_for(args.height, args.width))
        self.transformer = self.pipe.transformer
        self.args, self.device = args, device
        self.embeds = prompt_pair(self.pipe, args.prompt)
        self.latents = initial_latents(self.pipe, args.height, args.width, args.frames, args.seed, device)

    def generate(self):
        from pipelines import decode_latents, denoise

        a = self.args
        final = denoise(self.pipe, prompt_embeds=self.embeds[0], negative_prompt_embeds=self.embeds[1],
                        latents=self.latents.clone(), height=a.height, width=a.width, frames=a.frames,
                        steps=a.steps, guidance=a.guidance, progress=False)
        frames = decode_latents(self.pipe, final)[0]
        return torch.as_tensor((frames.clip(0, 1) * 255 + 0.5).astype("uint8")), final.float()


class FamilySubject:
    """Any family pipelines/generate.py builds: the pipeline and one `__call__`'s keywords."""

    def __init__(self, args, device, dtype):
        from pipelines.generate import build_family_pipeline, family_call

        self.preset = "tiny" if args.tiny else "default"
        self.pipe = build_family_pipeline(args.family, self.preset, device=device, dtype=dtype, seed=args.seed)
        self.transformer = self.pipe.transformer
        self.device, self.seed = device, args.seed
        from pipelines.families import Size
        size = None if args.height is None else Size(args.height, args.width, args.frames)
        self.call = family_call(args.family, self.pipe, args.prompt, "", preset=self.preset, device=device,
                                dtype=dtype, size=size, steps=args.steps, seed=args.seed)

    def generate(self):
        from pipelines.generate import generate_family

        g = torch.Generator(device="cpu").manual_seed(self.seed)
        out = generate_family(self.pipe, dict(self.call), fps=16.0, generator=g)
        return _as_video(out.frames).to(torch.uint8), None


class ForwardSubject:
    """A family with no offline pipeline: its registry forward (one call per 'step' at the given timesteps)."""

    def __init__(self, args, device, dtype):
        from pipelines import registry

        self.preset = "tiny" if args.tiny else "default"
        self.built = registry.build(args.family, self.preset, device=device, dtype=dtype, seed=args.seed)
        self.transformer = self.pipe = self.built.model
        self.steps = args.steps

    def generate(self):
        base = self.built.inputs
        outs = []
        for i in range(self.steps):
            kw = dict(base)
            t = kw.get("timestep")
            if isinstance(t, torch.Tensor) and t.is_floating_point():
                kw["timestep"] = t * (1.0 - i / max(self.steps, 1))  # a new timestep per step (StepTracker)
            with torch.no_grad():
                outs.append(_first_output(self.transformer(**kw)).float())
        return None, outs[-1]


def _first_output(out) -> torch.Tensor:
    """The prediction of a transformer call: the first tensor of a tuple or list (some families nest per-sample
    lists), or a return_dict output's `sample`."""
    if isinstance(out, torch.Tensor):
        return out
    if isinstance(out, (tuple, list)):
        return _first_output(out[0])
    return out.sample


def make_subject(args, device, dtype):
    if args.family in ("wan", "wan14b"):
        return WanSubject(args, device, dtype)
    from pipelines.generate import generating

    if args.family in generating():
        return FamilySubject(args, device, dtype)
    return ForwardSubject(args, device, dtype)


# ----------------------------------------------------------------------------------------------------- main
def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--family", default="wan", help="registry family (default wan: Wan2.1 1.3B)")
    p.add_argument("--tiny", action="store_true", help="the family's tiny config (CPU tests); with --model, the "
                   "tiny size only")
    p.add_argument("--model", default=None, metavar="DIR", help="--family wan / wan14b: a local diffusers Wan folder "
                   "whose trained transformer and VAE replace the random weights (text embeddings stay seeded)")
    p.add_argument("--height", type=positive_int, default=None)
    p.add_argument("--width", type=positive_int, default=None)
    p.add_argument("--frames", type=positive_int, default=None)
    p.add_argument("--steps", type=positive_int, default=4, help="denoising steps (default 4)")
    p.add_argument("--guidance", type=float, default=5.0, help="CFG scale for Wan (default 5.0)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--prompt", default="A red fox trots through fresh snow in a quiet birch forest at dawn.")
    p.add_argument("--device", default=None, help="default: cuda if available, else cpu")
    p.add_argument("--paths", default="exact,8bit,sage2", help="paths compared against sdpa (default all)")
    p.add_argument("--capture-blocks", default="first,mid,last",
                   help="blocks whose attention calls (a) captures: indices, first, mid, last (default)")
    p.add_argument("--capture-rows", type=positive_int, default=2048, help="query rows kept per captured call (default 2048)")
    p.add_argument("--sweep", default="steps=1,steps=2,blocks=first+last",
                   help="PrecisionPolicy variants of the 8-bit path, comma separated: none, steps=N, "
                        "blocks=first+last (first and last blocks), blocks=0+1, joined with '&' for both "
                        "(default: steps=1,steps=2,blocks=first+last); '' for none")
    p.add_argument("--budget-s", type=positive_float, default=None, help="seconds for the whole run; later stages (the "
                   "sweep first) are left out, and listed, when their estimate does not fit")
    p.add_argument("--out-dir", default=None)
    return p


def _sweep_spec(item: str) -> str:
    """The --sweep syntax (',' between entries, '+' inside blocks=, '&' between parts) to parse_policy's."""
    parts = []
    for part in item.split("&"):
        key, _, val = part.partition("=")
        parts.append(f"{key}={val.replace('+', ',')}" if key == "blocks" else part)
    return "+".join(parts)


def capture_block_indices(spec: str, n_blocks: int) -> list[int]:
    out = []
    for s in spec.split(","):
        s = s.strip()
        if not s:
            continue
        i = {"first": 0, "mid": n_blocks // 2, "last": n_blocks - 1}.get(s)
        if i is None:
            try:
                i = int(s)
            except ValueError:
                raise ValueError(f"--capture-blocks: {s!r} is not a block index, first, mid or last") from None
        out.append(i + n_blocks if i < 0 else i)
    return sorted(set(i for i in out if 0 <= i < n_blocks))


def _impls(sage):
    import vidattn

    impls = {
        "exact": lambda q, k, v, sc, lens: vidattn.attention(q, k, v, scale=sc, kv_lens=lens, precision="exact"),
        "8bit": lambda q, k, v, sc, lens: vidattn.attention(q, k, v, scale=sc, kv_lens=lens, precision="8bit"),
    }
    if sage is not None:
        def sage_fn(q, k, v, sc, lens):  # key-padded: per batch element on its unpadded keys, as ImplRoute runs it
            return per_element_keys(sage, q, k, v, lens, **({} if sc is None else {"scale": float(sc)}))
        impls["sage2"] = sage_fn
    return impls


def run(args) -> dict:
    from pipelines.measure import jsonable, sync
    from vidattn.envinfo import run_metadata

    if os.environ.get("VIDATTN_COMMIT") and not os.environ.get("VIDATTN_GIT_COMMIT"):
        os.environ["VIDATTN_GIT_COMMIT"] = os.environ["VIDATTN_COMMIT"]
    budget = Budget(args.budget_s)
    from pipelines.registry import pick_device

    device = pick_device(args.device, args.tiny, "full-size models")  # the runners' check, as the other scripts
    try:  # the syntax now, before minutes of generation
        capture_block_indices(args.capture_blocks, 1 << 30)
    except ValueError as exc:
        raise SystemExit(f"error: {exc}") from None
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    _fill_size(args)
    for item in (s.strip() for s in args.sweep.split(",")):
        if item:
            try:  # the syntax now, before minutes of generation; the block range once the model is built
                parse_policy(_sweep_spec(item), 1 << 30)
            except ValueError as exc:
                raise SystemExit(f"error: --sweep {item!r}: {exc}") from None
    paths = [p.strip() for p in args.paths.split(",") if p.strip()]
    bad = [p for p in paths if p not in PATHS or p == "sdpa"]
    if bad:
        raise SystemExit(f"error: --paths takes {', '.join(PATHS[1:])}, got {', '.join(bad)}")
    sage, sage_reason = sage2_impl() if "sage2" in paths else (None, "not requested")
    if "sage2" in paths and sage is None:
        log(f"sage2 left out: {sage_reason}")
        paths.remove("sage2")
    report = {"schema": SCHEMA, "metadata": run_metadata(), "family": args.family, "tiny": args.tiny,
              "device": str(device), "dtype": str(dtype).replace("torch.", ""), "height": args.height,
              "width": args.width, "frames": args.frames, "steps": args.steps, "seed": args.seed,
              "paths": ["sdpa"] + paths, "sage2": {"available": sage is not None, "reason": sage_reason},
              "weights": f"random (seed {args.seed})" if args.model is None else f"trained, from {args.model}",
              "note": "random weights: errors of random-weight activations (no trained outliers or sharp attention);"
                      " the paths are compared on the same inputs, not the quality of a trained model"
                      if args.model is None else
                      "trained transformer and VAE; the prompt's text embeddings are seeded (no text encoder), so the"
                      " cross-attention inputs are not a real prompt's"}
    if device.type == "cpu":
        report["note"] += "; CPU run: the kernels cannot run, the vidattn paths run SDPA"
    log(f"building {args.family}{' (tiny)' if args.tiny else ''} on {device} ...")
    t0 = time.perf_counter()
    subj = make_subject(args, device, dtype)
    report["build_s"] = time.perf_counter() - t0
    report["preset"] = subj.preset
    tr = subj.transformer
    nb = n_blocks_of(tr)
    report["blocks"] = nb
    videos, finals, gen_s = {}, {}, {}

    def generate(path, policy=None, extra=None, record_inputs=False):
        tracker = StepTracker(tr, record_inputs=record_inputs)
        capture = None
        if extra == "capture":
            capture = QKVCapture(tr, tracker, capture_block_indices(args.capture_blocks, nb), args.capture_rows)
        t = time.perf_counter()
        try:
            with attention_path(path, subj.pipe, sage=sage, policy=policy, extra_override=capture) as info:
                video, final = subj.generate()
            sync(device)
        finally:
            tracker.remove()
            if capture is not None:
                capture.remove()
        return video, final, time.perf_counter() - t, tracker, capture, info

    # reference and the paths: (c), with (b)'s inputs recorded on SDPA's trajectory and (a)'s Q/K/V on exact's
    log(f"[sdpa] generating ({args.steps} steps) ...")
    videos["sdpa"], finals["sdpa"], gen_s["sdpa"], ref_tracker, _, _ = generate("sdpa", record_inputs=True)
    log(f"[sdpa] {gen_s['sdpa']:.1f} s; {ref_tracker.calls} transformer calls in {ref_tracker.step + 1} steps")
    est = gen_s["sdpa"]
    routes, records, failures = {}, [], {}
    for path in paths:
        if not budget.fits(est * 1.2):
            budget.skip(f"{path} generation", est * 1.2)
            continue
        try:
            video, final, s, _, capture, info = generate(path, extra="capture" if path == "exact" else None)
        except Exception as exc:  # noqa: BLE001 - one failing path (e.g. out of memory) is recorded, the rest run
            failures[path] = f"{type(exc).__name__}: {str(exc)[:1000]}"
            log(f"[{path}] FAILED: {failures[path][:300]}")
            if device.type == "cuda":
                torch.cuda.empty_cache()
            continue
        videos[path], finals[path], gen_s[path] = video, final, s
        if info.get("route"):
            routes[path] = info["route"]
        if capture is not None:
            records = capture.records
        log(f"[{path}] {s:.1f} s")
    report["generation_s"] = gen_s
    report["routes"] = routes
    report["failures"] = failures

    # (c) decoded video against SDPA
    fid_video = {}
    for path in paths:
        if path not in finals:
            continue
        row = {"latent_rel_l2": rel_l2(finals[path], finals["sdpa"]) if finals[path] is not None else None}
        if videos.get(path) is not None:
            row.update(video_metrics(videos[path], videos["sdpa"], device))
        fid_video[path] = row
    report["video"] = fid_video if videos.get("sdpa") is not None else \
        {p: {"latent_rel_l2": r["latent_rel_l2"]} for p, r in fid_video.items()}
    if videos.get("sdpa") is None:
        report["video_note"] = f"{args.family} has no offline pipeline: no decoded video; final outputs compared"

    # (b) one-step model output, every step's SDPA input replayed under each path
    one_step = []
    replay_est = est / max(ref_tracker.calls, 1) * (len(paths) + 1)
    for i, (a_, kw) in enumerate(ref_tracker.inputs):
        if not budget.fits(replay_est):
            budget.skip(f"one-step replays from step {i}", replay_est * (len(ref_tracker.inputs) - i))
            break
        outs = {}
        for path in ["sdpa"] + paths:
            if path not in gen_s:
                continue
            with attention_path(path, subj.pipe, sage=sage), torch.no_grad():
                o = tr(*a_, **kw)
            outs[path] = _first_output(o).float()
        row = {"step": i, "timestep": ref_tracker.timesteps[i]}
        for path in paths:
            if path in outs:
                row[path] = {"rel_l2": rel_l2(outs[path], outs["sdpa"]), "cosine": cosine(outs[path], outs["sdpa"])}
        one_step.append(row)
    report["one_step"] = one_step
    blind = attention_blind(one_step, device)
    if blind:
        report["attention_blind"] = blind
        log(f"NOTE: {blind}")

    # (a) per-layer error against fp64
    t = time.perf_counter()
    impls = {k: v for k, v in _impls(sage).items() if k in paths}
    layer_rows = per_layer_errors(records, impls) if records else []
    report["per_layer"] = {"calls": layer_rows, "summary": summarize_layers(layer_rows, impls),
                           "capture": {"blocks": capture_block_indices(args.capture_blocks, nb),
                                       "query_rows": args.capture_rows,
                                       "when": "first transformer call of every step, exact run"}}
    report["per_layer_s"] = time.perf_counter() - t
    del records

    # sweep: PrecisionPolicy variants of the 8-bit path
    sweep = []
    items = [s.strip() for s in args.sweep.split(",") if s.strip()]
    if items and "8bit" not in gen_s:
        report["sweep_note"] = "not run: the 8-bit path did not run (" + \
            (failures.get("8bit") or ("left out for the budget" if "8bit" in paths else "not in --paths")) + ")"
        items = []
    for item in items:
        label, policy = parse_policy(_sweep_spec(item), nb)
        if not budget.fits(est * 1.2):
            budget.skip(f"sweep {item}", est * 1.2)
            continue
        try:
            video, final, s, tracker, _, _ = generate("8bit", policy=policy)
        except RuntimeError as exc:  # e.g. a model with no vidattn attention for a policy to set
            sweep.append({"policy": item, "error": str(exc)[:500]})
            log(f"[8bit {item}] not run: {exc}")
            break
        steps_done = tracker.step + 1
        exact_steps = min(policy.exact_first_steps, steps_done)
        share = 1 - (1 - exact_steps / max(steps_done, 1)) * (1 - len(policy.exact_blocks) / max(nb, 1))
        row = {"policy": item, "exact_first_steps": policy.exact_first_steps,
               "exact_blocks": sorted(policy.exact_blocks), "exact_share": share, "generation_s": s,
               "latent_rel_l2": rel_l2(final, finals["sdpa"]) if final is not None else None}
        if video is not None:
            row["video"] = video_metrics(video, videos["sdpa"], device)
        sweep.append(row)
        log(f"[8bit {item}] {s:.1f} s")
    report["sweep"] = sweep
    report["suggested_policy"] = suggest_policy(sweep, fid_video.get("sage2"), fid_video.get("8bit")) if not blind \
        else {"policy": None, "reason": "the model's output does not depend on its attention (see attention_blind)"}
    report["budget"] = {"budget_s": args.budget_s, "elapsed_s": budget.elapsed(), "skipped": budget.skipped}

    out_dir = Path(args.out_dir) if args.out_dir else ROOT / "bench" / "results" / \
        f"fidelity_8bit_{args.family}{'-tiny' if args.tiny else ''}_{datetime.date.today():%Y%m%d}"
    out_dir.mkdir(parents=True, exist_ok=True)
    (out_dir / "fidelity.json").write_text(json.dumps(jsonable(report), indent=2) + "\n")
    md = markdown(report)
    (out_dir / "fidelity.md").write_text(md)
    report["out_dir"] = str(out_dir)
    log(f"wrote fidelity.json, fidelity.md to {out_dir} in {budget.elapsed():.1f} s")
    print(md, flush=True)
    return report


def _fill_size(args) -> None:
    if args.height is None or args.width is None or args.frames is None:
        _fill_missing_size(args)
    if args.family in ("wan", "wan14b"):  # the size the pipeline takes as is (a 10-frame request ran 9 frames)
        from pipelines import PipelineError, validate_size

        try:
            validate_size(args.height, args.width, args.frames)
        except PipelineError as exc:
            raise SystemExit(f"error: {exc}") from None


def _fill_missing_size(args) -> None:
    if args.family in ("wan", "wan14b"):
        base = (64, 96, 9) if args.tiny else ((720, 1280, 81) if args.family == "wan14b" else (480, 832, 81))
    else:
        from pipelines import registry
        try:
            from pipelines.generate import default_size, generating
            s = default_size(args.family, "tiny" if args.tiny else "default") if args.family in generating() \
                else registry.size_for(args.family, "tiny" if args.tiny else "default")
        except Exception as exc:  # noqa: BLE001
            raise SystemExit(f"error: --family {args.family}: {exc}") from None
        base = (s.height, s.width, s.frames)
    args.height = args.height or base[0]
    args.width = args.width or base[1]
    args.frames = args.frames or base[2]


def _route_note(route) -> str:
    """What the sage2 path's columns (b) and (c) rest on: how many of the model's attention calls SageAttention2 ran,
    and why the rest ran the exact kernel (so a row that is the exact kernel's in all but name says so)."""
    if not route:
        return ""
    done, exact = route.get("impl_calls", 0), route.get("exact_calls", 0)
    if exact == 0:
        return f"; in the model it ran all {done} attention calls of its path"
    why = ", ".join(f"{r} {n}" for r, n in sorted(route.get("exact_reasons", {}).items()))
    note = (f"; in the model it ran {done} of the {done + exact} attention calls of its path, the exact kernel the "
            f"rest ({why})")
    if done == 0:
        note += ": its (b) and (c) columns are the exact kernel's"
    return note


def _f(x, nd=3, e=False):
    if x is None:
        return "n/a"
    if isinstance(x, str):
        return x
    if x != x or x in (float("inf"), float("-inf")):
        return str(x)
    return f"{x:.{nd}e}" if e else f"{x:.{nd}f}"


def markdown(report: dict) -> str:
    m = report["metadata"]
    paths = [p for p in report["paths"] if p != "sdpa"]
    lines = [f"# 8-bit fidelity: {report['family']} ({report['preset']}), {report['height']}x{report['width']}x"
             f"{report['frames']}, {report['steps']} steps", "",
             f"- {m.get('gpu') or report['device']}; torch {m.get('torch')}, CUDA {m.get('cuda')}, diffusers "
             f"{m.get('diffusers')}; commit `{m.get('git_commit')}`, {m.get('date_utc')}",
             f"- command: `{m.get('command')}`",
             f"- weights: {report['weights']}. {report['note']}",
             f"- SageAttention2: {'in this run' if report['sage2']['available'] else report['sage2']['reason']}"
             + _route_note(report.get("routes", {}).get("sage2")), ""]
    summ = report["per_layer"]["summary"]
    lines += ["| against | path | (a) per-layer rel L2 vs fp64, median / max (self) | (a) cross | "
              "(b) one-step rel L2 (worst step) | (b) cosine (worst) | (c) video PSNR (dB) | (c) SSIM |",
              "|---|---|---|---|---|---|---|---|"]
    for p in paths:
        s = summ.get(p, {})
        se, cr = s.get("self", {}), s.get("cross", {})
        steps = [r[p] for r in report["one_step"] if p in r]
        v = report["video"].get(p, {})
        lines.append(f"| sdpa / fp64 | {p} | {_f(se.get('rel_l2_median'), 2, True)} / "
                     f"{_f(se.get('rel_l2_max'), 2, True)} | {_f(cr.get('rel_l2_median'), 2, True)} | "
                     f"{_f(max((x['rel_l2'] for x in steps), default=None), 2, True)} | "
                     f"{_f(min((x['cosine'] for x in steps), default=None), 5)} | {_f(v.get('psnr_db'), 2)} | "
                     f"{_f(v.get('ssim'), 4)} |")
    if report.get("attention_blind"):
        lines.append(f"- **(b) and (c) measure nothing here**: {report['attention_blind']}.")
    q8 = summ.get("8bit", {})
    for kind in ("self", "cross"):
        e = q8.get(kind)
        if e and "kernel_8bit_calls" in e:
            why = sorted({str(r["explain_8bit"])[:100] for r in report["per_layer"]["calls"]
                          if r.get("explain_8bit") is not None and (r["seq_kv"] == r["seq_q"]) == (kind == "self")})
            lines.append(f"- (a) {kind}-attention: the 8-bit kernel ran {e['kernel_8bit_calls']} of the {e['calls']} "
                         f"captured calls ({e['key_padded_calls']} key-padded)" + (f"; the others ran exact: "
                                                                                  f"{'; '.join(why)}" if why else ""))
    if report["sweep"]:
        lines += ["", "| 8-bit policy | exact share | video PSNR (dB) | SSIM | final latents rel L2 |",
                  "|---|---|---|---|---|"]
        plain = report["video"].get("8bit") or {}
        if plain.get("psnr_db") is not None:  # the no-exceptions candidate the suggestion also weighs
            lines.append(f"| none (the 8bit row above) | 0.000 | {_f(plain['psnr_db'], 2)} | "
                         f"{_f(plain.get('ssim'), 4)} | {_f(plain.get('latent_rel_l2'), 2, True)} |")
        for s in report["sweep"]:
            if "error" in s:
                lines.append(f"| {s['policy']} | not run: {s['error'][:120]} | | | |")
                continue
            v = s.get("video") or {}
            lines.append(f"| {s['policy']} | {_f(s['exact_share'], 3)} | {_f(v.get('psnr_db'), 2)} | "
                         f"{_f(v.get('ssim'), 4)} | {_f(s['latent_rel_l2'], 2, True)} |")
        sp = report["suggested_policy"]
        label = {None: "no suggestion", "none": "none, all 8-bit (PrecisionPolicy() with no exceptions)"}.get(
            sp["policy"], sp["policy"])
        lines += ["", f"Suggested policy: {label} ({sp['reason']})."]
    for p, err in report.get("failures", {}).items():
        lines += ["", f"**{p} FAILED**: {err[:300]}"]
    if report["budget"]["skipped"]:
        lines += ["", "Left out for the budget: " + "; ".join(s["what"] for s in report["budget"]["skipped"]) + "."]
    return "\n".join(lines) + "\n"


def main(argv=None) -> dict:
    args = build_parser().parse_args(argv)
    if args.steps < 1:
        raise SystemExit("error: --steps must be >= 1")
    if args.model is not None:
        if args.family not in ("wan", "wan14b"):
            raise SystemExit(f"error: --model loads Wan folders only (--family wan or wan14b), not {args.family}")
        from pipelines.wan import PipelineError, check_model_dir
        try:
            check_model_dir(args.model)
        except PipelineError as exc:
            raise SystemExit(f"error: {exc}") from None
    return run(args)


if __name__ == "__main__":
    main()
