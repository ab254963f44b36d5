#!/usr/bin/env python3
"""Anchor benchmark: vidattn (exact and 8-bit) against FlashAttention-3 (bf16 and FP8), SageAttention2 and cuDNN,
in one process on one card, so that the ratios are same-run ratios.

Columns (scripts/anchor_impls.py for the anchors; each is skipped with its reason when it cannot run a shape):
  cudnn         F.scaled_dot_product_attention on (B,H,S,D) views of the BSHD tensors inside
                sdpa_kernel(CUDNN_ATTENTION) (enable_gqa for grouped K/V, is_causal for causal shapes)
  fa3           FlashAttention-3, bf16
  fa3_fp8       FlashAttention-3 on e4m3 inputs cast beforehand (kernel only), one scale per (batch, kv head)
  sage2         SageAttention2 sm90 (INT8 QK smoothed, FP8 PV), its quantization included
  vidattn       vidattn.attention(q, k, v, layout="bshd"), skipped with vidattn.explain's reason when it would
                fall back to SDPA
  vidattn_8bit  vidattn.attention(..., precision="8bit"), its quantization included; the explain() reason is
                recorded when that call runs the exact kernel instead

Inputs: random normal bf16 (B, S, H, D). Times: median of triton.testing.do_bench (or a CUDA-event loop;
bench/timing.py's Timer, as in scripts/bench_kernel.py) per round, the implementations interleaved round by round
(forward, then reversed order), each one's time the median of its rounds. TFLOPS = 4·B·H·Sq·Skv·D / t, halved for
causal shapes (square, so FA3's bottom-right mask and vidattn's top-left mask agree). Every output is first checked
against cuDNN's (relative L2).

Accuracy (unless --no-accuracy): relative L2 against an fp64 reference on 1×8×4096 at D=64 and D=128 for plain
inputs, a key offset (one 8·N(0,1) vector added to every key) and sharpened scores (softmax scale 4/sqrt(D)), for
every implementation, FA3 FP8 with its cast included.

    python scripts/bench_anchors.py --group fp8 --out $OUT/anchors.json
    python scripts/bench_anchors.py --group all --budget-s 240 --out $OUT/anchors.json
    python scripts/bench_anchors.py --group all --dry-run          # list shapes and FLOPs (no GPU)
    python scripts/bench_anchors.py --group headdims,gqa --shapes "D256 1K" "GQA 32q/8kv 32K" --rounds 12
"""
from __future__ import annotations

import argparse
import contextlib
import datetime
import itertools
import json
import math
import os
import statistics
import sys
import time
import traceback
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))
_HERE = Path(__file__).resolve().parent
if str(_HERE) not in sys.path:
    sys.path.insert(0, str(_HERE))
import anchor_impls  # noqa: E402
from bench.timing import Timer, l2_bytes  # noqa: E402

IMPLS = ("cudnn", "fa3", "fa3_fp8", "sage2", "vidattn", "vidattn_8bit")
IMPL_TITLES = {"cudnn": "cuDNN", "fa3": "FA3 bf16", "fa3_fp8": "FA3 FP8 (kernel)", "sage2": "Sage2",
               "vidattn": "vidattn", "vidattn_8bit": "vidattn 8-bit"}
# The same-run ratios the issues' targets are stated in: (numerator, denominator), both TFLOPS.
RATIOS = (("vidattn", "fa3"), ("vidattn", "cudnn"), ("fa3", "cudnn"), ("vidattn_8bit", "fa3_fp8"),
          ("vidattn_8bit", "sage2"), ("vidattn_8bit", "vidattn"), ("fa3_fp8", "fa3"), ("sage2", "fa3"))
# Output check against cuDNN before timing: exact kernels, then the 8-bit ones.
CHECK_EXACT = 2e-2
CHECK_8BIT = 1.2e-1
EIGHT_BIT = ("fa3_fp8", "sage2", "vidattn_8bit")
MAX_ROTATING_SETS = 8
ACCURACY_CASES = ("plain", "key offset", "sharpened")
ACCURACY_SHAPE = (1, 8, 4096)  # B, H, S
ACCURACY_DIMS = (64, 128)


@dataclass(frozen=True)
class BenchShape:
    name: str
    b: int
    h: int
    sq: int
    skv: int
    d: int
    h_kv: int | None = None
    causal: bool = False
    group: str = ""

    @property
    def kv_heads(self) -> int:
        return self.h_kv or self.h

    @property
    def flops(self) -> int:
        f = 4 * self.b * self.h * self.sq * self.skv * self.d
        return f // 2 if self.causal else f

    def bytes_bf16(self) -> int:
        """q, k, v and out, bf16, each once."""
        return 2 * self.b * self.d * (2 * self.h * self.sq + 2 * self.kv_heads * self.skv)


def _headdim_shapes() -> list[BenchShape]:
    # FlashAttention's benchmark sizing: 16K tokens per batch (B = 16384 / S) and H = 2048 // D heads, so every
    # head dim fills the card at every length.
    out = []
    for d in (96, 192, 256):
        for s in (1024, 8192, 32768):
            out.append(BenchShape(f"D{d} {s // 1024}K", max(1, 16384 // s), 2048 // d, s, s, d, group="headdims"))
    out.append(BenchShape("Allegro D96", 1, 24, 79200, 79200, 96, group="headdims"))
    for d in (112, 72, 80):  # no build of their own in FA3 or vidattn: padded up to the next one
        out.append(BenchShape(f"D{d} 8K (padded)", 2, 2048 // d, 8192, 8192, d, group="headdims"))
    return out


GROUPS: dict[str, list[BenchShape]] = {
    # The shapes of the 8-bit mode's target table.
    "fp8": [
        BenchShape("seed 8K", 4, 16, 8192, 8192, 128, group="fp8"),
        BenchShape("Wan 1.3B self", 1, 12, 32760, 32760, 128, group="fp8"),
        BenchShape("Wan cross 32760x512", 1, 12, 32760, 512, 128, group="fp8"),
        BenchShape("CogVideoX-5B", 1, 48, 17776, 17776, 64, group="fp8"),
        BenchShape("LTX", 1, 32, 24576, 24576, 64, group="fp8"),
    ],
    "headdims": _headdim_shapes(),
    "gqa": [
        BenchShape("GQA 32q/8kv 32K", 1, 32, 32768, 32768, 128, h_kv=8, group="gqa"),
        # the equal-head kernel on the same query heads: the per-query-head speed GQA must match
        BenchShape("MHA 32 heads 32K", 1, 32, 32768, 32768, 128, group="gqa"),
    ],
    "causal": [
        BenchShape("causal 8K D128", 2, 16, 8192, 8192, 128, causal=True, group="causal"),
        BenchShape("causal 32K D128", 1, 16, 32768, 32768, 128, causal=True, group="causal"),
        BenchShape("causal 8K D64", 2, 32, 8192, 8192, 64, causal=True, group="causal"),
        BenchShape("causal 32K D64", 1, 32, 32768, 32768, 64, causal=True, group="causal"),
        # the one-Q-buffer causal builds (D=192 N=96, D=256 N=64), 2048 // D heads as in the head-dim group
        BenchShape("causal 8K D192", 2, 10, 8192, 8192, 192, causal=True, group="causal"),
        BenchShape("causal 32K D192", 1, 10, 32768, 32768, 192, causal=True, group="causal"),
        BenchShape("causal 8K D256", 2, 8, 8192, 8192, 256, causal=True, group="causal"),
        BenchShape("causal 32K D256", 1, 8, 32768, 32768, 256, causal=True, group="causal"),
    ],
}


def select_groups(names: list[str]) -> list[BenchShape]:
    """The shapes of the named groups in GROUPS' order ('all' is every group), each shape once."""
    want = list(GROUPS) if "all" in names else names
    bad = [g for g in want if g not in GROUPS]
    if bad:
        raise ValueError(f"unknown group(s) {bad}; choose from {list(GROUPS) + ['all']}")
    return [s for g in GROUPS if g in want for s in GROUPS[g]]


def tflops(flops: int, ms: float | None) -> float | None:
    if ms is None or not ms > 0:
        return None
    return flops / (ms * 1e-3) / 1e12


class Budget:
    """Wall-clock budget of a run: it stops before starting work it expects to overrun, so a run cut short still
    writes every result it finished. `clock` is injectable for tests."""

    def __init__(self, seconds: float | None, clock: Callable[[], float] = time.monotonic):
        self.seconds = seconds
        self.clock = clock
        self.start = clock()
        self.stopped: str | None = None

    def elapsed(self) -> float:
        return self.clock() - self.start

    def left(self) -> float:
        return math.inf if self.seconds is None else self.seconds - self.elapsed()

    def allows(self, estimate_s: float, what: str) -> bool:
        """Whether `what`, expected to take estimate_s, fits in what is left; records the first refusal."""
        if self.seconds is None:
            return True
        if estimate_s <= self.left():
            return True
        if self.stopped is None:
            self.stopped = (f"budget: {what} expected to take {estimate_s:.0f} s with {max(self.left(), 0):.0f} s "
                            f"of {self.seconds:.0f} s left")
        return False


# ------------------------------------------------------------------------------------------------ implementations

class Skip(Exception):
    """An implementation that cannot run a shape: the message says why (recorded, not an error)."""


@dataclass
class Impl:
    """prepare(shape, sets) returns the zero-argument function to time (each call takes the next input set) or
    raises Skip; check_tol bounds its output's relative L2 to the reference."""
    name: str
    prepare: Callable
    check_tol: float
    note: str = ""


def _rotating(sets, call):
    counter = itertools.count()
    n = len(sets)

    def fn():
        return call(*sets[next(counter) % n])
    return fn


def _cudnn_prepare(shape: BenchShape, sets):
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kw = {}
    if shape.kv_heads != shape.h:
        kw["enable_gqa"] = True
    if shape.causal:
        kw["is_causal"] = True
    views = [(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)) for q, k, v in sets]

    def call(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q, k, v, **kw).transpose(1, 2)
    return _rotating(views, call)


def _anchor_prepare(name: str):
    def prepare(shape: BenchShape, sets):
        reason = anchor_impls.available()[name] or anchor_impls.supports(name, shape.d, shape.h, shape.kv_heads)
        if reason:
            raise Skip(reason)
        if name == "fa3_fp8":
            pre = [anchor_impls.prequantize(q, k, v) for q, k, v in sets]
            counter = itertools.count()

            def fn():
                return anchor_impls.fa3_fp8(None, None, None, causal=shape.causal,
                                            prequantized=pre[next(counter) % len(pre)])
            return fn
        f = anchor_impls.IMPLS[name]
        return _rotating(sets, lambda q, k, v: f(q, k, v, causal=shape.causal))
    return prepare


def _vidattn_prepare(vidattn_mod, err: str | None, eight_bit: bool):
    def prepare(shape: BenchShape, sets):
        if vidattn_mod is None:
            raise Skip(err or "vidattn not importable")
        q, k, v = sets[0]
        kw = {"layout": "bshd"}
        if shape.causal:
            kw["causal"] = "top_left"
        reason = vidattn_mod.explain(q, k, v, **kw)
        if reason:
            raise Skip(f"vidattn.explain: {reason}")
        note = None
        if eight_bit:
            try:
                note = vidattn_mod.explain(q, k, v, precision="8bit", **kw)
            except Exception as exc:  # noqa: BLE001 - this build has no 8-bit mode
                raise Skip(f"precision='8bit' unavailable: {type(exc).__name__}: {exc}") from exc
            kw["precision"] = "8bit"
        fn = _rotating(sets, lambda q, k, v: vidattn_mod.attention(q, k, v, **kw))
        fn.note = note  # type: ignore[attr-defined]
        return fn
    return prepare


def default_impls(names, vidattn_mod, vidattn_err) -> list[Impl]:
    table = {
        "cudnn": Impl("cudnn", _cudnn_prepare, CHECK_EXACT, "SDPA, cuDNN backend"),
        "fa3": Impl("fa3", _anchor_prepare("fa3"), CHECK_EXACT, "FlashAttention-3 bf16"),
        "fa3_fp8": Impl("fa3_fp8", _anchor_prepare("fa3_fp8"), CHECK_8BIT,
                        "FlashAttention-3 e4m3, inputs cast beforehand (kernel only), per-(batch, kv head) scales"),
        "sage2": Impl("sage2", _anchor_prepare("sage2"), CHECK_8BIT,
                      "SageAttention2 sm90 INT8 QK + FP8 PV, quantization included"),
        "vidattn": Impl("vidattn", _vidattn_prepare(vidattn_mod, vidattn_err, False), CHECK_EXACT,
                        "vidattn.attention, exact"),
        "vidattn_8bit": Impl("vidattn_8bit", _vidattn_prepare(vidattn_mod, vidattn_err, True), CHECK_8BIT,
                             "vidattn.attention(precision='8bit'), quantization included"),
    }
    return [table[n] for n in names]


# ------------------------------------------------------------------------------------------------ measuring

def _err(exc: BaseException) -> str:
    msg = f"{type(exc).__name__}: {exc}"
    return msg if len(msg) < 600 else msg[:600] + " ..."


def rel_l2(out, ref, chunk: int = 4096) -> float:
    """‖out − ref‖ / ‖ref‖ in fp64 over (B, S, H, D) tensors, chunked over S; inf when out is not finite."""
    num = den = 0.0
    for i in range(0, out.shape[1], chunk):
        a = out[:, i:i + chunk].double()
        b = ref[:, i:i + chunk].double()
        num += float((a - b).pow(2).sum())
        den += float(b.pow(2).sum())
    if not math.isfinite(num):
        return math.inf
    return math.sqrt(num) / max(math.sqrt(den), 1e-300)


def n_rotating_sets(shape: BenchShape, l2: int) -> int:
    """Input sets rotated between calls so that a shape whose inputs fit twice in L2 is not timed cache-hot."""
    return max(1, min(MAX_ROTATING_SETS, math.ceil(2 * l2 / shape.bytes_bf16())))


def make_inputs(shape: BenchShape, n_sets: int, gen, device: str):
    import torch
    sets = []
    for _ in range(n_sets):
        q = torch.randn(shape.b, shape.sq, shape.h, shape.d, dtype=torch.bfloat16, device=device, generator=gen)
        k = torch.randn(shape.b, shape.skv, shape.kv_heads, shape.d, dtype=torch.bfloat16, device=device,
                        generator=gen)
        v = torch.randn(shape.b, shape.skv, shape.kv_heads, shape.d, dtype=torch.bfloat16, device=device,
                        generator=gen)
        sets.append((q, k, v))
    return sets


def bench_shape(shape: BenchShape, impls: list[Impl], timer, budget: Budget, rounds: int, gen, device: str,
                l2: int, sync: Callable[[], None]) -> dict:
    """Check then time every implementation on one shape; the record of what ran, what was skipped and why."""
    rec = {**asdict(shape), "h_kv": shape.kv_heads, "flops": shape.flops, "impls": {}, "ratios": {}}
    sets = make_inputs(shape, n_rotating_sets(shape, l2), gen, device)
    rec["input_sets"] = len(sets)
    fns: dict[str, Callable] = {}
    ref = None
    for impl in impls:
        r = rec["impls"][impl.name] = {}
        try:
            fn = impl.prepare(shape, sets)
        except Skip as s:
            r["skipped"] = str(s)
            continue
        except Exception as exc:  # noqa: BLE001 - one implementation's failure is its own result
            r["error"] = _err(exc)
            continue
        if getattr(fn, "note", None):
            r["note"] = fn.note
        try:
            out = fn()
            sync()
            # the first implementation that ran (cuDNN by default) is the reference; its own check is finiteness
            if ref is None:
                ref = out
                r["check_ref"] = True
            err = rel_l2(out, ref)
            r["check_rel_l2"] = err
            r["check_passed"] = bool(err < impl.check_tol)
            del out
        except Exception as exc:  # noqa: BLE001
            r["error"] = _err(exc)
            traceback.print_exc()
            continue
        fns[impl.name] = fn
    names = list(fns)
    per_round: dict[str, list[float]] = {n: [] for n in names}
    for rnd in range(rounds):
        order = names if rnd % 2 == 0 else names[::-1]
        for n in order:
            done = per_round[n]
            # a first measurement of this implementation is estimated from the slowest one so far on this shape
            est = statistics.median(done) if done else max(
                (x for v in per_round.values() for x in v), default=0.0)
            if not budget.allows(est / 1e3 * 40 + 0.5, f"{shape.name} / {n}"):
                break
            try:
                done.append(timer(fns[n]))
            except Exception as exc:  # noqa: BLE001
                rec["impls"][n]["error"] = _err(exc)
                fns.pop(n, None)
        if budget.stopped:
            break
    for n in names:
        r = rec["impls"][n]
        if per_round.get(n):
            ms = statistics.median(per_round[n])
            r.update(ms=ms, ms_rounds=per_round[n], tflops=tflops(shape.flops, ms))
        elif "error" not in r:
            r["skipped"] = budget.stopped or "not timed"
    for a, b in RATIOS:
        ta, tb = rec["impls"].get(a, {}).get("tflops"), rec["impls"].get(b, {}).get("tflops")
        if ta and tb:
            rec["ratios"][f"{a}/{b}"] = ta / tb
    return rec


# ------------------------------------------------------------------------------------------------ accuracy

def accuracy_inputs(case: str, d: int, gen, device: str):
    """(q, k, v, scale) for one fidelity case at 1×8×4096, bf16 BSHD."""
    import torch
    b, h, s = ACCURACY_SHAPE
    q, k, v = (torch.randn(b, s, h, d, dtype=torch.bfloat16, device=device, generator=gen) for _ in range(3))
    scale = 1.0 / math.sqrt(d)
    if case == "key offset":  # one large vector shared by every key: K smoothing removes it, a per-head scale does not
        off = 8.0 * torch.randn(d, dtype=torch.float32, device=device, generator=gen)
        k = (k.float() + off).to(torch.bfloat16)
    elif case == "sharpened":
        scale = 4.0 / math.sqrt(d)
    elif case != "plain":
        raise ValueError(case)
    return q, k, v, scale


def reference_fp64(q, k, v, scale: float):
    """Attention in fp64, (B, S, H, D) in and out; K/V heads repeated for grouped inputs."""
    qd, kd, vd = (x.double().transpose(1, 2) for x in (q, k, v))
    if kd.shape[1] != qd.shape[1]:
        g = qd.shape[1] // kd.shape[1]
        kd, vd = kd.repeat_interleave(g, dim=1), vd.repeat_interleave(g, dim=1)
    p = (qd @ kd.transpose(-1, -2) * scale).softmax(dim=-1)
    return (p @ vd).transpose(1, 2)


def accuracy_calls(vidattn_mod) -> dict[str, Callable]:
    """name -> f(q, k, v, scale) for the fidelity table (FA3 FP8 with its cast: what a user of it would run)."""
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel

    def cudnn(q, k, v, scale):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  scale=scale).transpose(1, 2)
    calls = {"cudnn": cudnn,
             "fa3": lambda q, k, v, s: anchor_impls.fa3(q, k, v, scale=s),
             "fa3_fp8": lambda q, k, v, s: anchor_impls.fa3_fp8(q, k, v, scale=s),
             "sage2": lambda q, k, v, s: anchor_impls.sage2(q, k, v, scale=s)}
    if vidattn_mod is not None:
        calls["vidattn"] = lambda q, k, v, s: vidattn_mod.attention(q, k, v, layout="bshd", scale=s)
        calls["vidattn_8bit"] = lambda q, k, v, s: vidattn_mod.attention(q, k, v, layout="bshd", scale=s,
                                                                         precision="8bit")
    return calls


def run_accuracy(calls: dict[str, Callable], names: list[str], gen, device: str, budget: Budget,
                 unavailable: dict[str, str | None], sync: Callable[[], None]) -> list[dict]:
    rows = []
    for d in ACCURACY_DIMS:
        for case in ACCURACY_CASES:
            if not budget.allows(5.0, f"accuracy D{d} {case}"):
                return rows
            q, k, v, scale = accuracy_inputs(case, d, gen, device)
            ref = reference_fp64(q, k, v, scale)
            row = {"d": d, "case": case, "shape": list(ACCURACY_SHAPE), "scale": scale, "rel_l2": {}, "skipped": {}}
            for n in names:
                why = unavailable.get(n)
                if why is None and n in ("fa3", "fa3_fp8", "sage2"):
                    why = anchor_impls.supports(n, d, q.shape[2], k.shape[2])
                if n not in calls:
                    why = why or "not importable"
                if why:
                    row["skipped"][n] = why
                    continue
                try:
                    out = calls[n](q, k, v, scale)
                    sync()
                    row["rel_l2"][n] = rel_l2(out, ref)
                except Exception as exc:  # noqa: BLE001
                    row["skipped"][n] = _err(exc)
            rows.append(row)
            del ref
    return rows


# ------------------------------------------------------------------------------------------------ output

def _cell(x, fmt="{:.0f}") -> str:
    return fmt.format(x) if isinstance(x, (int, float)) and math.isfinite(x) else "-"


def results_table(results: list[dict], names: list[str]) -> str:
    ratio_keys = [f"{a}/{b}" for a, b in RATIOS if a in names and b in names][:5]
    head = ["shape", "B×H(kv)×Sq×Skv×D"] + [IMPL_TITLES.get(n, n) for n in names] + ratio_keys
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in results:
        hk = f"{r['h']}" + (f"/{r['h_kv']}" if r["h_kv"] != r["h"] else "")
        dims = f"{r['b']}×{hk}×{r['sq']}×{r['skv']}×{r['d']}" + (" causal" if r["causal"] else "")
        cells = []
        for n in names:
            i = r["impls"].get(n, {})
            c = _cell(i.get("tflops"))
            if i.get("check_passed") is False:
                c += "!"
            if i.get("note"):
                c += "†"
            cells.append(c)
        cells += [_cell(r["ratios"].get(k), "{:.2f}") for k in ratio_keys]
        lines.append("| " + " | ".join([r["name"], dims] + cells) + " |")
    return "\n".join(lines)


def accuracy_table(rows: list[dict], names: list[str]) -> str:
    head = ["case", "D"] + [IMPL_TITLES.get(n, n) for n in names]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        lines.append("| " + " | ".join([r["case"], str(r["d"])] + [_cell(r["rel_l2"].get(n), "{:.2e}")
                                                                   for n in names]) + " |")
    return "\n".join(lines)


def write_json(path: Path, doc: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str))
    tmp.replace(path)


def commit() -> str:
    if os.environ.get("VIDATTN_COMMIT", "").strip():
        return os.environ["VIDATTN_COMMIT"].strip()
    from bench.envinfo_light import git_commit
    return git_commit(REPO)


def metadata(argv: list[str]) -> dict:
    import torch
    meta = {"date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
            "commit": commit(), "command": " ".join([Path(sys.executable).name, "scripts/bench_anchors.py"] + argv),
            "torch": torch.__version__, "cuda": torch.version.cuda,
            "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
            "gpu": torch.cuda.get_device_name() if torch.cuda.is_available() else None,
            "anchors": anchor_impls.versions(), "anchors_available": anchor_impls.available()}
    try:
        import triton
        meta["triton"] = triton.__version__
    except Exception:  # noqa: BLE001
        meta["triton"] = None
    return meta


def parse_args(argv=None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--group", default="fp8",
                    help=f"comma-separated shape groups: {', '.join(GROUPS)} or all (default fp8)")
    ap.add_argument("--impls", default=",".join(IMPLS), help=f"comma-separated subset of {','.join(IMPLS)}")
    ap.add_argument("--rounds", type=int, default=2, help="timing rounds per shape (order reversed every other one)")
    ap.add_argument("--quick", action="store_true", help="do_bench warmup 10 ms, rep 40 ms")
    ap.add_argument("--budget-s", type=float, default=None,
                    help="stop starting new work past this many seconds; what finished is written")
    ap.add_argument("--no-accuracy", action="store_true", help="skip the fp64 fidelity table")
    ap.add_argument("--accuracy-only", action="store_true", help="only the fidelity table")
    ap.add_argument("--out", default=None, help="JSON path (default bench/results/anchors_<date>.json)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dry-run", action="store_true", help="list shapes and FLOPs; no GPU")
    ap.add_argument("--shapes", nargs="+", default=None, metavar="NAME",
                    help="keep only these shapes of the groups, by exact name ('D256 1K' 'GQA 32q/8kv 32K')")
    args = ap.parse_args(argv)
    args.groups = [g.strip() for g in args.group.split(",") if g.strip()]
    args.impls = [n.strip() for n in args.impls.split(",") if n.strip()]
    bad = [n for n in args.impls if n not in IMPLS]
    if bad:
        ap.error(f"unknown impl(s) {bad}; choose from {list(IMPLS)}")
    try:
        shapes = select_groups(args.groups)
    except ValueError as exc:
        ap.error(str(exc))
    if args.shapes is not None:
        known = [s.name for s in shapes]
        unknown = [n for n in args.shapes if n not in known]
        if unknown:
            ap.error(f"unknown shape(s) {unknown} in group(s) {args.group}; choose from {known}")
        shapes = [s for s in shapes if s.name in args.shapes]
    args.shapes = shapes
    return args


def dry_run_table(shapes: list[BenchShape]) -> str:
    lines = ["| group | shape | B | H | H kv | Sq × Skv | D | causal | GFLOP |",
             "|---|---|---|---|---|---|---|---|---|"]
    for s in shapes:
        lines.append(f"| {s.group} | {s.name} | {s.b} | {s.h} | {s.kv_heads} | {s.sq} × {s.skv} | {s.d} | "
                     f"{'yes' if s.causal else 'no'} | {s.flops / 1e9:.1f} |")
    return "\n".join(lines)


def run(args, *, impls: list[Impl] | None = None, timer=None, l2: int | None = None, device: str = "cuda",
        accuracy: dict[str, Callable] | None = None, meta: dict | None = None,
        clock: Callable[[], float] = time.monotonic) -> dict:
    """The whole run; the GPU pieces (impls, timer, accuracy calls, metadata) are injectable so that a CPU test
    drives the same loop with fakes. Returns the JSON document (also written to args.out after every shape)."""
    import torch
    budget = Budget(args.budget_s, clock)
    vidattn_mod, vidattn_err = None, None
    if impls is None or accuracy is None:
        try:
            import vidattn as vidattn_mod
        except Exception as exc:  # noqa: BLE001 - the anchors are still measured
            vidattn_err = "import vidattn failed: " + _err(exc)
    if impls is None:
        impls = default_impls(args.impls, vidattn_mod, vidattn_err)
    if timer is None:
        timer, l2 = Timer(args.quick), l2_bytes()
    names = [i.name for i in impls]
    sync = torch.cuda.synchronize if device == "cuda" else (lambda: None)
    out_path = Path(args.out) if args.out else REPO / "bench" / "results" / (
        f"anchors_{datetime.date.today().isoformat()}.json")
    doc = {"meta": meta if meta is not None else metadata(sys.argv[1:]),
           "config": {"groups": args.groups, "impls": {i.name: i.note for i in impls}, "rounds": args.rounds,
                      "timing": getattr(timer, "method", type(timer).__name__),
                      "flops": "4*B*H*Sq*Skv*D, halved for causal", "dtype": "bfloat16", "layout": "BSHD",
                      "budget_s": args.budget_s, "seed": args.seed, "vidattn_error": vidattn_err,
                      "check_tol": {i.name: i.check_tol for i in impls}},
           "accuracy": [], "results": [], "stopped_early": None}
    gen = torch.Generator(device=device).manual_seed(args.seed)
    with torch.inference_mode():
        if not args.no_accuracy:
            calls = accuracy if accuracy is not None else accuracy_calls(vidattn_mod)
            unavailable = {}
            if accuracy is None:
                unavailable.update(anchor_impls.available())
                for n in ("vidattn", "vidattn_8bit"):
                    unavailable[n] = vidattn_err
            doc["accuracy"] = run_accuracy(calls, [n for n in names if n in calls], gen, device, budget,
                                           unavailable, sync)
            write_json(out_path, doc)
        if not args.accuracy_only:
            for s in args.shapes:
                if not budget.allows(1.0, f"shape {s.name}"):
                    break
                t0 = clock()
                try:
                    rec = bench_shape(s, impls, timer, budget, args.rounds, gen, device, l2 or 0, sync)
                except Exception as exc:  # noqa: BLE001 - never lose the other shapes
                    rec = {**asdict(s), "h_kv": s.kv_heads, "flops": s.flops, "impls": {}, "ratios": {},
                           "error": _err(exc)}
                    if device == "cuda":
                        torch.cuda.empty_cache()
                rec["wall_s"] = clock() - t0
                doc["results"].append(rec)
                doc["stopped_early"] = budget.stopped
                write_json(out_path, doc)
                msg = ", ".join(f"{n} {_cell(i.get('tflops'))}" for n, i in rec["impls"].items())
                print(f"[anchors] {s.name}: {msg} TFLOPS", file=sys.stderr, flush=True)
                if budget.stopped:
                    break
    doc["stopped_early"] = budget.stopped
    doc["elapsed_s"] = budget.elapsed()
    write_json(out_path, doc)
    doc["out_path"] = str(out_path)
    return doc


def main(argv=None) -> int:
    args = parse_args(argv)
    if args.dry_run:
        print(dry_run_table(args.shapes))
        print(f"\n{len(args.shapes)} shapes; impls: {', '.join(args.impls)}")
        return 0
    import torch
    if not torch.cuda.is_available():
        print("CUDA is not available (use --dry-run to list shapes)", file=sys.stderr)
        return 2
    doc = run(args)
    names = list(doc["config"]["impls"])
    m = doc["meta"]
    print(f"\nGPU {m.get('gpu')}, torch {m.get('torch')}, cuDNN {m.get('cudnn')}, commit {m.get('commit')}; "
          f"{doc['config']['timing']}; TFLOPS (! = output check failed, † = see note in JSON)")
    print(f"anchors: {json.dumps(m.get('anchors_available'))}")
    if doc["accuracy"]:
        print("\nRelative L2 vs fp64 (1×8×4096):")
        print(accuracy_table(doc["accuracy"], names))
    print()
    print(results_table(doc["results"], names))
    if doc["stopped_early"]:
        print(f"\nSTOPPED EARLY: {doc['stopped_early']}")
    print(f"\nJSON: {doc['out_path']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
