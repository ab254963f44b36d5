"""Helpers for the processor tests of every family: attention-module walks,
a spy on `vidattn.attention`, a module with an unknown processor."""
import torch

import vidattn
from vidattn import ops


def attention_processors(model):
    """[(path, module, processor)] for every module that holds a processor, with or without set_processor."""
    return [(name, m, m.processor) for name, m in model.named_modules()
            if hasattr(m, "processor") and not isinstance(m.processor, torch.nn.Module)]


def assert_restored(model, before):
    """Every attention module has exactly the processor object it had in `before`."""
    after = attention_processors(model)
    assert [p for p, _, _ in after] == [p for p, _, _ in before]
    for (_, _, a), (path, _, b) in zip(after, before):
        assert a is b, path


class AttentionSpy:
    """Records every `vidattn.attention` call: shapes, layout, kv_lens, and what `vidattn.explain` says."""

    def __init__(self, monkeypatch, explain: bool = False):
        self.calls = []
        self._real = ops.attention
        self._explain = explain
        monkeypatch.setattr(ops, "attention", self)

    def __call__(self, q, k, v, **kw):
        rec = dict(q=tuple(q.shape), k=tuple(k.shape), layout=kw.get("layout", "bshd"), kv_lens=kw.get("kv_lens"))
        if self._explain:
            rec["explain"] = vidattn.explain(q, k, v, **{n: a for n, a in kw.items() if n != "return_lse"})
        rec["tensors"] = (q, k, v)
        self.calls.append(rec)
        return self._real(q, k, v, **kw)


class OtherAttnProcessor:
    def __call__(self, attn, hidden_states, *args, **kwargs):
        return hidden_states


class OtherAttention(torch.nn.Module):
    """An attention module whose processor vidattn does not know."""

    def __init__(self):
        super().__init__()
        self.processor = OtherAttnProcessor()

    def set_processor(self, processor):
        self.processor = processor


def check_unknown_module_skipped(model, n_replaced: int):
    model.extra = OtherAttention()
    original = model.extra.processor
    handle = vidattn.apply(model)
    assert len(handle.replaced) == n_replaced
    assert handle.skipped == [("extra", "no vidattn processor for OtherAttnProcessor")]
    assert "stock     1 x OtherAttnProcessor: no vidattn route for family_helpers.OtherAttnProcessor" in str(handle)
    assert model.extra.processor is original
    vidattn.restore(model)
    assert model.extra.processor is original


def envelope_reasons(calls):
    """For each recorded call, why its tensors are outside the kernel's envelope (dtype, head dim, strides,
    alignment, kv_lens), None when inside: what decides the kernel path apart from the device, so a CPU run in
    bf16 shows that a processor hands the kernel tensors it can take."""
    import math

    from vidattn import _ext

    reasons = []
    for call in calls:
        views = [t if call["layout"] == "bshd" else t.transpose(1, 2) for t in call["tensors"]]
        lens = call["kv_lens"]
        lens = None if lens is None else lens.to(device=views[0].device, dtype=torch.int32)
        reasons.append(_ext.envelope_reason(*views, lens, 1.0 / math.sqrt(views[0].shape[-1])))
    return reasons
