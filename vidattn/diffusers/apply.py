"""`vidattn.apply(pipe_or_model)` / `vidattn.restore(pipe_or_model)`: route diffusers attention to vidattn.

Each attention module is routed by the exact class of the processor it holds now: the stock class's module and
qualified name (`"diffusers.models.transformers.transformer_wan.WanAttnProcessor"`), never its bare name, since
diffusers 0.42 defines three different classes named `WanAttnProcessor` (Wan, ChronoEdit and Wan-Animate; the
latter two are verified copies of Wan's and are listed as such below). A stock class maps to one of two routes:

- "kernel": a vidattn processor replaces the stock one. It mirrors the stock `__call__` and changes only the
  attention call; it batches masks the kernel can express (key padding -> `kv_lens`, Mochi's per-sample loop,
  HunyuanVideo 1.5's outer-product mask, SkyReels-V2's block-causal rows), carries `precision`, and sends what
  the kernel cannot take to diffusers' own path with the reason. Processors that call `F.sdpa` directly, or
  hard-code `flex`, can only be reached this way.
- "backend": the stock processor stays and its `_attention_backend` is set to the registered "vidattn" diffusers
  backend (vidattn/diffusers/backend.py). Used where the stock processor attends through
  `dispatch_attention_fn(..., backend=self._attention_backend)` and needs nothing model-specific: no code to keep
  in step with diffusers, and the backend converts key-padding masks itself. Calls run at the context precision.

A route may be scoped to the model classes that hold the module (`models=`): diffusers' generic `AttnProcessor2_0`
is routed inside `LatteTransformer3DModel` only, and stays stock, with the reason, in any other model (an image
UNet in the same pipeline, say). Attention that is no processor at all (SANA-WM's parameter-free softmax modules,
which call `F.sdpa` in their own `forward`) is routed by the module's exact class ("module" routes,
`register_module`): the instance's class becomes a vidattn subclass that overrides `forward` only, and `restore`
sets it back.

A module whose processor is on no route stays stock and is listed with the reason; so is a module whose stock
processor already uses a backend the user chose (unless its route takes that backend over: Kandinsky 5's route takes
`flex`, which its NABLA configs need and whose BlockMask the vidattn backend runs), and one whose processor is known
and deliberately left stock (`register_stock`: linear attention).

The handle holds weak references to the modules it changed, so replacing `pipe.transformer` lets the old model
be freed; `restore` skips modules that are gone.
"""
from __future__ import annotations

import sys
import weakref
from dataclasses import dataclass, field
from typing import Optional

import torch

from .sdpa_common import VidattnModule, VidattnProcessor
from .wan import WanAttnProcessor

KERNEL, BACKEND, STOCK = "kernel", "backend", "stock"
_MODULE = "module"  # a kernel route by module class swap (the handle lists it as "kernel")


@dataclass(frozen=True)
class Route:
    kind: str                 # KERNEL, BACKEND, or STOCK (known, deliberately left stock: `note` says why)
    processor: Optional[object]  # the vidattn processor class (KERNEL); for a module route, its `forward`
    note: str = ""            # what runs where, shown by print(handle)
    takes: tuple = ()         # BACKEND: backends a user may have set on the stock processor that the route takes
                              # over (besides diffusers' default "native"); restore sets them back


_T = "diffusers.models.transformers."
# Stock processor ("module.QualName") -> Route. Family modules add theirs with register_processor / register_backend.
ROUTES: dict = {
    _T + "transformer_wan.WanAttnProcessor": Route(KERNEL, WanAttnProcessor, "Wan processor"),
    # "Copied from" Wan's WanAttnProcessor; a diff of 0.42.1's sources shows only comments differ.
    _T + "transformer_chronoedit.WanAttnProcessor": Route(KERNEL, WanAttnProcessor,
                                                          "ChronoEdit's verified copy of Wan's processor"),
    _T + "transformer_wan_animate.WanAttnProcessor": Route(KERNEL, WanAttnProcessor,
                                                           "Wan-Animate's verified copy of Wan's processor"),
}
# (model class "module.QualName", stock processor "module.QualName") -> Route: routes that hold only inside the
# named model classes; they win over ROUTES. Generic processors (AttnProcessor2_0) are routed this way.
SCOPED_ROUTES: dict = {}
# Stock attention module class ("module.QualName") -> Route(KERNEL, the `forward` its vidattn subclass gets, note),
# or Route(STOCK, None, why) for attention modules left stock on purpose.
MODULE_ROUTES: dict = {}
# Kept for callers of the earlier API: stock key -> vidattn class, for the kernel routes.
PROCESSORS: dict = {}
# Attributes diffusers sets on processor instances (attention backend, context parallelism): carried over.
_CARRIED_ATTRS = ("_attention_backend", "_parallel_config")
_ABSENT = object()
# The newest handle of each pipeline or model apply was given, kept outside the object so that the object pickles and
# a deep copy does not carry a handle pointing at the original's modules (a copy is restored by walking its modules).
_HANDLES: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()
# Where a backend route keeps the stock processor's own backend setting: () if it had none, (value,) if it had one.
# On the processor, so that it survives a second apply (of the pipeline after its transformer), a deep copy and
# pickling, and restore() finds it by walking the modules.
_PREVIOUS_BACKEND_ATTR = "_vidattn_previous_backend"


def stock_key(processor_or_class) -> str:
    """"module.QualName" of a processor (or processor class): what the routes are keyed on."""
    cls = processor_or_class if isinstance(processor_or_class, type) else type(processor_or_class)
    return f"{cls.__module__}.{cls.__qualname__}"


def _key_of(stock) -> str:
    if isinstance(stock, type):
        return stock_key(stock)
    if isinstance(stock, str) and "." in stock:
        return stock
    raise ValueError(f"register a stock processor by its class or as 'module.QualName', not {stock!r}: a bare "
                     f"class name is ambiguous (diffusers has three classes named WanAttnProcessor)")


def _add(stock, route: Route, models) -> str:
    key = _key_of(stock)
    if models is None:
        ROUTES[key] = route
    else:
        if isinstance(models, (str, type)):
            models = (models,)
        for model in models:
            SCOPED_ROUTES[(_key_of(model), key)] = route
    return key


def register_processor(stock, vidattn_class: type, note: str = "", models=None) -> None:
    """Route modules whose processor is `stock` (a class, or "module.QualName") to `vidattn_class`; with `models`
    (model classes or "module.QualName"s), only inside those model classes."""
    key = _add(stock, Route(KERNEL, vidattn_class, note), models)
    PROCESSORS[key] = vidattn_class


def register_backend_route(stock, note: str = "", models=None, takes=()) -> None:
    """Route modules whose processor is `stock` to the registered "vidattn" diffusers backend (with `models`, only
    inside those model classes). `takes`: backend names a user may have set on the processor that the vidattn
    backend runs as well (every call they take: e.g. "flex" where the only calls it gets that the kernel cannot read
    go back to flex); a processor on any other backend than "native" is left as it is."""
    _add(stock, Route(BACKEND, None, note, tuple(takes)), models)


def register_stock(stock, why: str, models=None) -> None:
    """Leave modules whose processor is `stock` as they are, and say `why` in the handle (attention the kernel
    cannot compute: linear attention, block-sparse masks hard-coded on flex)."""
    _add(stock, Route(STOCK, None, why), models)


def register_module(stock_module, forward, note: str = "") -> None:
    """Route attention modules of the exact class `stock_module` (a class or "module.QualName"; no processor: the
    module's own `forward` attends) to `forward`, a function with the stock `forward`'s signature. apply swaps the
    instance's class for a subclass of the stock class (and of `VidattnModule`) that overrides `forward` only,
    made on first use (so registering needs no diffusers with that class) and bound in `forward`'s module under
    its name (so a swapped model still pickles)."""
    MODULE_ROUTES[_key_of(stock_module)] = Route(KERNEL, forward, note)


def register_stock_module(stock_module, why: str) -> None:
    """List attention modules of the exact class `stock_module` in the handle as stock, with `why` (attention that
    is no processor and that the kernel cannot compute: GDN linear attention)."""
    MODULE_ROUTES[_key_of(stock_module)] = Route(STOCK, None, why)


_MODULE_CLASSES: dict = {}  # stock module class -> its vidattn subclass


def _module_class(stock_cls: type, forward) -> type:
    cls = _MODULE_CLASSES.get(stock_cls)
    if cls is None or cls.forward is not forward:
        name = "Vidattn" + stock_cls.__name__.lstrip("_")
        cls = type(name, (VidattnModule, stock_cls), {"forward": forward, "_vidattn_stock_class": stock_cls,
                                                       "__module__": forward.__module__, "__qualname__": name,
                                                       "__doc__": f"vidattn's {stock_cls.__name__} (forward only)"})
        setattr(sys.modules[forward.__module__], name, cls)
        _MODULE_CLASSES[stock_cls] = cls
    return cls


def _route_for(model_key: str, key: str) -> Optional[Route]:
    return SCOPED_ROUTES.get((model_key, key)) or ROUTES.get(key)


def _scoped_models(key: str) -> list:
    return sorted({m.rsplit(".", 1)[1] for m, k in SCOPED_ROUTES if k == key})


for _k, _r in list(ROUTES.items()):
    PROCESSORS[_k] = _r.processor


def backend_member():
    """(the "vidattn" AttentionBackendName member, None), or (None, why it is unavailable)."""
    try:
        from .backend import register_backend
    except ImportError as exc:
        return None, f"the vidattn diffusers backend is not available ({exc})"
    try:
        return register_backend(), None
    except (RuntimeError, ValueError, TypeError) as exc:
        return None, f"the vidattn diffusers backend cannot be registered ({exc})"


def _is_vidattn(processor) -> bool:
    return isinstance(processor, VidattnProcessor) or type(processor) in set(PROCESSORS.values())


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


def _backend_name(value) -> str:
    return str(getattr(value, "value", value))


def _restore_backend(stock, vidattn_backend) -> bool:
    """Give a stock processor apply pointed at the vidattn backend its own setting back; False when it is not on the
    vidattn backend now (restored already, or changed since by someone else) or was not routed by apply."""
    saved = vars(stock).get(_PREVIOUS_BACKEND_ATTR)
    if saved is None:
        return False
    if _backend_name(getattr(stock, "_attention_backend", None)) != _backend_name(vidattn_backend):
        return False
    if saved:
        stock._attention_backend = saved[0]
    else:
        vars(stock).pop("_attention_backend", None)
    del vars(stock)[_PREVIOUS_BACKEND_ATTR]
    return True


@dataclass
class _Change:
    """One module apply changed: a weak reference to it, what it had, and what apply put there."""
    module: weakref.ref
    kind: str                     # KERNEL, BACKEND or MODULE
    stock: object                 # the stock processor (KERNEL: the one replaced; BACKEND: the one re-pointed);
                                  # MODULE: the module's stock class
    installed: object = None      # KERNEL: the vidattn processor set on the module; MODULE: the vidattn class
    backend: object = None


@dataclass
class ApplyHandle:
    """What `vidattn.apply` did. `modules`: (path, status, processor class, why) for every attention module,
    status "kernel" (a vidattn processor), "backend" (the stock processor on the vidattn backend) or "stock";
    `replaced` / `backend` / `skipped` list them by status. `restore()` undoes it. Print it for a summary."""

    target: str
    replaced: list = field(default_factory=list)
    backend: list = field(default_factory=list)
    components: dict = field(default_factory=dict)  # component name ("" for a bare model) -> its class name
    skipped: list = field(default_factory=list)     # (path, reason)
    modules: list = field(default_factory=list)     # (path, status, stock processor class name, why)
    _changes: list = field(default_factory=list, repr=False)

    @property
    def _originals(self) -> list:  # earlier API: [(module, original)] for the live replaced modules
        return [(c.module(), c.stock) for c in self._changes if c.kind == KERNEL and c.module() is not None]

    def restore(self) -> int:
        """Undo what this handle did; returns how many modules changed back. A module that was freed (its model
        replaced and collected) is skipped, as is one whose processor was changed since by someone else."""
        n = 0
        for c in self._changes:
            module = c.module()
            if module is None:
                continue
            if c.kind == KERNEL:
                if module.processor is c.installed:
                    _set(module, c.stock)
                    n += 1
            elif c.kind == _MODULE:
                if type(module) is c.installed:
                    module.__class__ = c.stock
                    n += 1
            elif _restore_backend(c.stock, c.backend):
                n += 1
        self._changes.clear()
        return n

    def counts(self) -> dict:
        out = {KERNEL: 0, BACKEND: 0, STOCK: 0}
        for _, status, _, _ in self.modules:
            out[status] += 1
        return out

    def __str__(self) -> str:
        c = self.counts()
        lines = [f"vidattn.apply({self.target}): {c[KERNEL] + c[BACKEND]} attention modules use vidattn "
                 f"({c[KERNEL]} kernel processors, {c[BACKEND]} on the vidattn backend), {c[STOCK]} stock"]
        for comp, cls in self.components.items():
            lines.append(f"  {comp + ' ' if comp else ''}({cls}):")
            groups: dict = {}
            for path, status, proc, why in self.modules:
                if comp and not path.startswith(comp + "."):
                    continue
                groups.setdefault((status, proc, why), []).append(path)
            if not groups:
                lines.append("    no attention modules")
            for (status, proc, why), paths in groups.items():
                span = paths[0] if len(paths) == 1 else f"{paths[0]} ... {paths[-1]}"
                lines.append(f"    {status:7} {len(paths):3d} x {proc}: {why} [{span}]")
        lines.append("  (kernel/backend: the call runs the kernel inside its envelope, SDPA outside it; "
                     "vidattn.explain(q, k, v) says which)")
        return "\n".join(lines)


def _why_not(stock, route: Optional[Route], backend_reason: Optional[str], vidattn_backend,
             model_name: str = "") -> Optional[str]:
    """Why a module stays stock (None: it can be routed)."""
    if route is None:
        key = stock_key(stock)
        scoped = _scoped_models(key)
        if scoped:
            return (f"no vidattn route for {key} in {model_name or 'this model'} (the generic processor is routed "
                    f"only inside {', '.join(scoped)})")
        return f"no vidattn route for {key}"
    if route.kind == STOCK:
        return route.note
    if route.kind == BACKEND:
        if backend_reason is not None:
            return backend_reason
        current = getattr(stock, "_attention_backend", None)
        if current is not None and _backend_name(current) not in ("native", _backend_name(vidattn_backend),
                                                                   *route.takes):
            return f"the processor uses the {_backend_name(current)!r} backend chosen for it; left as is"
    return None


def apply(pipe_or_model) -> ApplyHandle:
    """Route every attention module vidattn covers, in a diffusers pipeline (all its transformers, e.g.
    `transformer` and `transformer_2` of Wan 2.2 A14B, and LTX-2's text connectors) or a single model, to vidattn:
    a vidattn processor, or the registered "vidattn" diffusers backend (module docstring).

    Returns an `ApplyHandle` (print it: per module kernel / backend / stock, and why). Raises `ValueError`, naming
    what was found and what is covered, when no module can be routed. Applying twice is harmless;
    `vidattn.restore(pipe_or_model)` undoes it.
    """
    models = _models(pipe_or_model)
    handle = ApplyHandle(target=type(pipe_or_model).__name__)
    found: dict = {}
    vidattn_backend, backend_reason = None, None
    if any(r.kind == BACKEND for r in list(ROUTES.values()) + list(SCOPED_ROUTES.values())):
        vidattn_backend, backend_reason = backend_member()
    for comp_name, model in models:
        handle.components[comp_name] = type(model).__name__
        model_key = stock_key(getattr(model, "_orig_mod", model))  # torch.compile's wrapper: the model inside
        _apply_module_routes(model, comp_name, handle, found)
        for name, module in _attention_modules(model):
            path = f"{comp_name}.{name}" if comp_name else name
            stock = module.processor
            proc_name = type(stock).__name__
            found.setdefault(type(model).__name__, set()).add(stock_key(stock))
            if _is_vidattn(stock):
                why = f"already uses vidattn.{proc_name}"
                handle.modules.append((path, KERNEL, proc_name, why))
                handle.skipped.append((path, why))
                continue
            route = _route_for(model_key, stock_key(stock))
            why_not = _why_not(stock, route, backend_reason, vidattn_backend, type(model).__name__)
            if why_not is not None:
                handle.modules.append((path, STOCK, proc_name, why_not))
                handle.skipped.append((path, f"no vidattn processor for {proc_name}" if route is None else why_not))
                continue
            if route.kind == KERNEL:
                new = route.processor()
                for attr in _CARRIED_ATTRS:
                    if attr in vars(stock):
                        setattr(new, attr, getattr(stock, attr))
                new._vidattn_original = stock
                _set(module, new)
                handle._changes.append(_Change(weakref.ref(module), KERNEL, stock, installed=new))
                handle.replaced.append(path)
                handle.modules.append((path, KERNEL, proc_name, f"vidattn.{route.processor.__name__}"
                                       + (f" ({route.note})" if route.note else "")))
            else:
                previous = vars(stock).get("_attention_backend", _ABSENT)
                if _PREVIOUS_BACKEND_ATTR not in vars(stock):  # a second apply keeps the stock setting of the first
                    setattr(stock, _PREVIOUS_BACKEND_ATTR, () if previous is _ABSENT else (previous,))
                saved = vars(stock)[_PREVIOUS_BACKEND_ATTR]
                stock._attention_backend = vidattn_backend
                handle._changes.append(_Change(weakref.ref(module), BACKEND, stock,
                                               backend=vidattn_backend))
                handle.backend.append(path)
                taken = (_backend_name(saved[0]) if saved and saved[0] is not None else "native")
                handle.modules.append((path, BACKEND, proc_name, "stock processor on the vidattn backend"
                                       + (f" in place of its {taken!r} backend (restore sets it back)"
                                          if taken in route.takes else "")
                                       + (f" ({route.note})" if route.note else "")))
    if not handle.replaced and not handle.backend and not any(s == KERNEL for _, s, _, _ in handle.modules):
        raise ValueError(_uncovered_message(pipe_or_model, found, handle))
    previous_handle = _handle_of(pipe_or_model)
    if previous_handle is not None and previous_handle is not handle:
        handle._changes = previous_handle._changes + handle._changes  # the newest handle restores everything
        previous_handle._changes = []
    try:
        _HANDLES[pipe_or_model] = handle
    except TypeError:  # an object that takes no weak reference or has no hash: restore() walks its modules instead
        pass
    return handle


def _handle_of(pipe_or_model) -> Optional[ApplyHandle]:
    try:
        return _HANDLES.get(pipe_or_model)
    except TypeError:  # no weak reference or no hash: apply kept no handle for it
        return None


def _apply_module_routes(model, comp_name: str, handle: ApplyHandle, found: dict) -> None:
    """Module routes: swap the class of every module whose exact class has one (module docstring)."""
    for name, module in model.named_modules():
        path = f"{comp_name}.{name}" if comp_name else name
        if isinstance(module, VidattnModule):
            stock_name = module._vidattn_stock_class.__name__
            why = f"already uses vidattn.{type(module).__name__}"
            handle.modules.append((path, KERNEL, stock_name, why))
            handle.skipped.append((path, why))
            found.setdefault(type(model).__name__, set()).add(stock_key(module._vidattn_stock_class))
            continue
        route = MODULE_ROUTES.get(stock_key(module))
        if route is None:
            continue
        stock_cls = type(module)
        found.setdefault(type(model).__name__, set()).add(stock_key(stock_cls))
        if route.kind == STOCK:
            handle.modules.append((path, STOCK, stock_cls.__name__, route.note))
            handle.skipped.append((path, route.note))
            continue
        cls = _module_class(stock_cls, route.processor)
        module.__class__ = cls
        handle._changes.append(_Change(weakref.ref(module), _MODULE, stock_cls, installed=cls))
        handle.replaced.append(path)
        handle.modules.append((path, KERNEL, stock_cls.__name__, f"vidattn.{cls.__name__}"
                               + (f" ({route.note})" if route.note else "")))


def _uncovered_message(obj, found: dict, handle: ApplyHandle) -> str:
    what = "; ".join(f"{m} uses {', '.join(sorted(p))}" for m, p in found.items()) or "no attention modules"
    reasons = sorted({why for _, s, _, why in handle.modules
                      if s == STOCK and (not why.startswith("no vidattn") or "routed only inside" in why)})
    covered = sorted({k.rsplit(".", 1)[1] for k, r in ROUTES.items() if r.kind != STOCK}
                     | {k.rsplit(".", 1)[1] for k, r in MODULE_ROUTES.items() if r.kind != STOCK}
                     | {f"{k.rsplit('.', 1)[1]} (in {m.rsplit('.', 1)[1]})" for (m, k), r in SCOPED_ROUTES.items()
                        if r.kind != STOCK})
    lead = ("vidattn.apply routed no attention module of" if reasons else "vidattn has no processor for")
    msg = f"{lead} {type(obj).__name__} ({what})"
    if reasons:
        msg += "; " + "; ".join(reasons)
    return (msg + f"; supported: {', '.join(covered)} (docs/support.md lists every diffusers video model). A model "
            f"whose processors call diffusers' dispatch_attention_fn can run on the backend instead: "
            f"model.set_attention_backend(\"vidattn\") after `import vidattn.diffusers` (docs/backend.md)")


def restore(pipe_or_model) -> int:
    """Undo `vidattn.apply`: modules apply changed get their exact stock processor object back (or their stock
    processor its own backend setting). A vidattn processor set by hand (`set_attn_processor(vidattn.X())`, e.g.
    on HunyuanVideo, whose `Attention` modules have no default processor class) is replaced by a new instance of
    the stock diffusers processor it mirrors: the module's `_default_processor_cls` where it has one, else the
    class the vidattn processor names. Returns how many modules changed."""
    n = 0
    handle = _handle_of(pipe_or_model)
    if handle is not None:
        n += handle.restore()
        try:
            del _HANDLES[pipe_or_model]
        except (KeyError, TypeError):
            pass
    vidattn_backend = None
    for _, model in _models(pipe_or_model):
        for module in model.modules():
            if isinstance(module, VidattnModule):  # a module class swapped by hand
                module.__class__ = module._vidattn_stock_class
                n += 1
        for _, module in _attention_modules(model):
            proc = module.processor
            if _PREVIOUS_BACKEND_ATTR in vars(proc):  # a backend route no handle restored (a copy of a model)
                if vidattn_backend is None:
                    vidattn_backend = backend_member()[0]
                n += int(_restore_backend(proc, vidattn_backend))
                continue
            if not _is_vidattn(proc):
                continue
            original = vars(proc).get("_vidattn_original")
            if original is None:
                default_cls = getattr(module, "_default_processor_cls", None)
                if default_cls is not None:
                    original = default_cls()
                else:
                    original = getattr(proc, "_vidattn_original", None)
            if original is None:
                continue
            _set(module, original)
            n += 1
    return n
