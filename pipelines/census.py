"""Which attention calls of a forward ran the vidattn kernel, which fell back to SDPA (and why), which stayed stock.

    with AttentionCensus() as census:
        model(**inputs)
    census.summary()   # {"calls", "kernel", "fallback", "stock": counts, "fallback_reasons": {...}, "shapes": [...]}

While active it wraps three things (and puts them back on exit):
  - `vidattn.ops.attention`, what every vidattn processor calls: each call is asked `vidattn.explain` with the
    same tensors and arguments; None means the kernel ran it ("kernel"), a reason means the op ran SDPA
    ("fallback", with that reason), except an 8-bit call that the exact kernel runs instead ("kernel", the reason
    kept: which kernel and why);
  - `vidattn.ops.warn_fallback`, which a processor calls right before sending a call it cannot give the op
    (a mask that is not a key prefix, context parallelism) to diffusers' dispatch or SDPA: the SDPA call that
    follows is counted as "fallback" with that reason;
  - `torch.nn.functional.scaled_dot_product_attention`: any other call (outside `vidattn.attention`) is a module
    vidattn left stock ("stock"; e.g. HunyuanVideo's token refiner), or, under plain diffusers processors, every
    attention call of the model.
The wrappers add a Python call per attention call and nothing on the device; use it on an untimed forward.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F


def _shape(t) -> list[int]:
    return list(t.shape) if isinstance(t, torch.Tensor) else []


class AttentionCensus:
    def __init__(self):
        self.records: list[dict] = []
        self._depth = 0          # > 0 while inside vidattn.attention (its own SDPA fallback is not a new call)
        self._pending: str | None = None  # reason from a processor-level warn_fallback, awaiting its SDPA call
        self._saved = None

    # -- wrappers
    def _attention(self, q, k, v, **kw):
        from vidattn import ops

        layout = kw.get("layout", "bshd")
        args = {n: a for n, a in kw.items() if n != "return_lse"}
        kind = "kernel"
        try:
            reason = ops.explain(q, k, v, **args)
            if reason is not None:
                kind = "fallback"
                # An 8-bit call the 8-bit kernel does not take runs the exact kernel when that one takes it (explain's
                # reason then ends "the exact kernel runs instead"): the kernel ran, the reason says which one.
                from vidattn.precision import resolve_precision
                if resolve_precision(kw.get("precision")) == "8bit" and \
                        ops.explain(q, k, v, **{**args, "precision": "exact"}) is None:
                    kind = "kernel"
        except Exception as exc:  # noqa: BLE001 - a census must never take a run down
            kind, reason = "fallback", f"explain() failed: {type(exc).__name__}: {exc}"
        lens = kw.get("kv_lens")
        self.records.append({"kind": kind, "reason": reason,
                             "via": "vidattn.attention", "layout": layout, "q": _shape(q), "k": _shape(k),
                             "dtype": str(q.dtype).replace("torch.", ""),
                             "kv_lens": lens is not None})
        self._pending = None
        self._depth += 1
        try:
            return self._saved["attention"](q, k, v, **kw)
        finally:
            self._depth -= 1

    def _warn(self, reason, *args, **kw):
        if self._depth == 0:
            self._pending = str(reason)
        return self._saved["warn_fallback"](reason, *args, **kw)

    def _sdpa(self, query, key, value, *args, **kw):
        if self._depth == 0:
            if self._pending is not None:
                kind, reason, self._pending = "fallback", self._pending, None
            else:
                kind, reason = "stock", None
            self.records.append({"kind": kind, "reason": reason, "via": "F.scaled_dot_product_attention",
                                 "layout": "bhsd", "q": _shape(query), "k": _shape(key),
                                 "dtype": str(query.dtype).replace("torch.", ""),
                                 "kv_lens": False, "mask": kw.get("attn_mask") is not None or
                                 (len(args) > 0 and args[0] is not None)})
        return self._saved["sdpa"](query, key, value, *args, **kw)

    # -- context
    def __enter__(self):
        from vidattn import ops

        self._saved = {"attention": ops.attention, "warn_fallback": ops.warn_fallback,
                       "sdpa": F.scaled_dot_product_attention}
        ops.attention = self._attention
        ops.warn_fallback = self._warn
        F.scaled_dot_product_attention = self._sdpa
        return self

    def __exit__(self, *exc):
        from vidattn import ops

        ops.attention = self._saved["attention"]
        ops.warn_fallback = self._saved["warn_fallback"]
        F.scaled_dot_product_attention = self._saved["sdpa"]
        return False

    # -- result
    def summary(self) -> dict:
        counts = {"kernel": 0, "fallback": 0, "stock": 0}
        reasons: dict[str, int] = {}
        groups: dict[tuple, dict] = {}
        for r in self.records:
            counts[r["kind"]] += 1
            if r["kind"] == "fallback":
                reasons[r["reason"]] = reasons.get(r["reason"], 0) + 1
            fields = ("kind", "reason", "via", "layout", "q", "k", "dtype", "kv_lens")
            key = tuple(tuple(r[f]) if isinstance(r[f], list) else r[f] for f in fields)
            g = groups.setdefault(key, {**{f: r[f] for f in fields}, "count": 0})
            g["count"] += 1
        return {"calls": len(self.records), **counts, "fallback_reasons": reasons, "shapes": list(groups.values())}
