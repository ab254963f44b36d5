"""`vidattn.apply(pipe_or_model)` / `vidattn.restore(pipe_or_model)`: swap diffusers attention processors.

Each attention module's processor is chosen by the class name of the processor it has now, through
`PROCESSORS` (stock class name -> vidattn class). A new model family registers its processor there with
`register_processor`; modules whose processor is not in the registry stay untouched and are listed as skipped.
"""
from dataclasses import dataclass, field
from typing import Optional

import torch

from .wan import WanAttnProcessor

PROCESSORS: dict = {
    "WanAttnProcessor": WanAttnProcessor,  # Wan 2.1 / 2.2 (also what WanAttnProcessor2_0 constructs)
}
# Attributes diffusers sets on processor instances (attention backend, context parallelism): carried over.
_CARRIED_ATTRS = ("_attention_backend", "_parallel_config")
_HANDLE_ATTR = "_vidattn_handle"


def register_processor(stock_class_name: str, vidattn_class: type) -> None:
    """Map a diffusers processor class name to the vidattn processor class that replaces it."""
    PROCESSORS[stock_class_name] = vidattn_class


def _is_vidattn(processor) -> bool:
    return type(processor) in set(PROCESSORS.values())


def _attention_modules(model: torch.nn.Module):
    for name, module in model.named_modules():
        if hasattr(module, "processor") and (hasattr(module, "set_processor") or hasattr(module, "get_processor")):
            yield name, module
        elif callable(getattr(module, "processor", None)) and not isinstance(module.processor, torch.nn.Module):
            yield name, module  # holds a processor but has no set_processor (diffusers' MochiAttention)


def _set(module, processor) -> None:
    if hasattr(module, "set_processor"):
        module.set_processor(processor)
    else:
        module.processor = processor


def _models(obj) -> list[tuple[str, torch.nn.Module]]:
    """(name, model) pairs: ("", the model itself), or every nn.Module component of a pipeline with attention."""
    if isinstance(obj, torch.nn.Module):
        return [("", obj)]
    components = getattr(obj, "components", None)
    if isinstance(components, dict):
        return [(name, comp) for name, comp in components.items()
                if isinstance(comp, torch.nn.Module) and next(_attention_modules(comp), None) is not None]
    raise TypeError(f"vidattn.apply expects a diffusers pipeline or a torch.nn.Module, got {type(obj).__name__}")


@dataclass
class ApplyHandle:
    """What `vidattn.apply` changed: `replaced` module paths, `skipped` (path, reason) pairs; `restore()`
    puts the original processor objects back."""

    target: str
    replaced: list = field(default_factory=list)
    components: dict = field(default_factory=dict)  # component name ("" for a bare model) -> its class name
    skipped: list = field(default_factory=list)
    _originals: list = field(default_factory=list, repr=False)  # (module, original processor)

    def restore(self) -> int:
        """Put the original processors back; returns how many modules were restored."""
        n = 0
        for module, original in self._originals:
            _set(module, original)
            n += 1
        self._originals.clear()
        return n

    def __str__(self) -> str:
        lines = [f"vidattn.apply({self.target}): {len(self.replaced)} attention modules use vidattn, "
                 f"{len(self.skipped)} skipped"]
        for comp, cls in self.components.items():
            paths = [p for p in self.replaced if not comp or p.startswith(comp + ".")]
            span = f": {paths[0]} ... {paths[-1]}" if paths else ""
            lines.append(f"  {comp + ' ' if comp else ''}({cls}): {len(paths)} replaced{span}")
        for path, reason in self.skipped:
            lines.append(f"  skipped {path}: {reason}")
        lines.append("  (vidattn.explain(q, k, v) tells whether a call runs the kernel or falls back to SDPA)")
        return "\n".join(lines)


def apply(pipe_or_model) -> ApplyHandle:
    """Give every supported attention module of a diffusers pipeline (all its transformers, e.g. `transformer`
    and `transformer_2` of Wan 2.2 A14B) or of a single model a vidattn processor.

    Returns an `ApplyHandle` (print it for a summary). Raises `ValueError` when no attention module has a
    processor vidattn knows. Applying twice is harmless; `vidattn.restore(pipe_or_model)` undoes it.
    """
    models = _models(pipe_or_model)
    handle = ApplyHandle(target=type(pipe_or_model).__name__)
    seen: dict = {}
    for comp_name, model in models:
        handle.components[comp_name] = type(model).__name__
        for name, module in _attention_modules(model):
            path = f"{comp_name}.{name}" if comp_name else name
            stock = module.processor
            stock_name = type(stock).__name__
            seen.setdefault(type(model).__name__, set()).add(stock_name)
            if _is_vidattn(stock):
                handle.skipped.append((path, f"already uses vidattn.{stock_name}"))
                continue
            cls = PROCESSORS.get(stock_name)
            if cls is None:
                handle.skipped.append((path, f"no vidattn processor for {stock_name}"))
                continue
            new = cls()
            for attr in _CARRIED_ATTRS:
                if attr in vars(stock):
                    setattr(new, attr, getattr(stock, attr))
            new._vidattn_original = stock
            _set(module, new)
            handle._originals.append((module, stock))
            handle.replaced.append(path)
    if not handle.replaced and not any(r.startswith("already") for _, r in handle.skipped):
        found = "; ".join(f"{m} uses {', '.join(sorted(p))}" for m, p in seen.items()) or "no attention modules"
        raise ValueError(f"vidattn has no processor for {type(pipe_or_model).__name__} ({found}); "
                         f"supported: {', '.join(sorted(PROCESSORS))} (the families in README's table)")
    previous: Optional[ApplyHandle] = getattr(pipe_or_model, _HANDLE_ATTR, None)
    if previous is not None and previous is not handle:
        handle._originals = previous._originals + handle._originals  # the newest handle restores everything
        previous._originals.clear()
    try:
        object.__setattr__(pipe_or_model, _HANDLE_ATTR, handle)
    except (AttributeError, TypeError):
        pass
    return handle


def restore(pipe_or_model) -> int:
    """Undo `vidattn.apply`: every module whose processor is a vidattn one gets back the exact processor object
    it had before (for processors set by hand with `set_attn_processor`, the module's default diffusers
    processor). Returns how many modules changed."""
    n = 0
    for comp_name, model in _models(pipe_or_model):
        for _, module in _attention_modules(model):
            proc = module.processor
            if not _is_vidattn(proc):
                continue
            original = getattr(proc, "_vidattn_original", None)
            if original is None:
                default_cls = getattr(module, "_default_processor_cls", None)
                if default_cls is None:
                    continue
                original = default_cls()
            _set(module, original)
            n += 1
    handle = getattr(pipe_or_model, _HANDLE_ATTR, None)
    if handle is not None:
        handle._originals.clear()
    return n
