"""Attention precision: the default for a region of code (`use_precision`), and per-model controls (`PrecisionPolicy`).

`vidattn.attention(..., precision=None)` takes None as "the current default", which is "exact" unless changed by
`with vidattn.use_precision("8bit"):`. Values: "exact" (the bf16/fp16 kernel, the default) and "8bit" (INT8 Q K^T,
e4m3 P V: vidattn.quant8).

The default is one process-wide value, not a context variable: torch.compile (Dynamo) cannot trace
`ContextVar.get` (torch 2.x raises Unsupported under fullgraph), while a module-level list is read at trace time and
guarded, so a compiled model recompiles when the default changes. The default is read off that list (the newest
open block's value) rather than kept in a second global: Dynamo before torch 2.7 does not see a write to another
module's global later in the same trace, so a block opened inside a compiled function would not take effect. Threads
that need different precisions at once pass `precision=` per call (the processors' `precision` attribute does).
"""
from __future__ import annotations

import contextlib
import inspect
import re
import threading
from typing import Iterable, Optional

PRECISIONS = ("exact", "8bit")
_active: list = []  # the open use_precision blocks, oldest first: a one-element list [precision] each; the newest
# one's value is the default
_active_lock = threading.Lock()


def check_precision(precision) -> str:
    """precision itself when valid; ValueError otherwise (None is not a value here: see resolve_precision)."""
    if not isinstance(precision, str) or precision not in PRECISIONS:
        raise ValueError(f"vidattn: precision must be one of {PRECISIONS} (or None for the current default), "
                         f"got {precision!r}")
    return precision


def resolve_precision(precision: Optional[str]) -> str:
    """The precision a call runs at: its own, or the current default when None."""
    return current_precision() if precision is None else check_precision(precision)


def current_precision() -> str:
    return _active[-1][0] if _active else "exact"


def use_precision(precision: str):
    """Within the block, attention calls that pass no precision run at `precision` ("exact" or "8bit").

        with vidattn.use_precision("8bit"):
            video = pipe(prompt).frames

    A bad value raises ValueError here, not at `with`. Blocks may be open in several threads at once (the setting is
    process-wide: the newest open block's value holds); when every block has closed, in whatever order, the default
    is "exact" again. A block inside a function torch.compile traces works too (fullgraph included).
    """
    return _PrecisionBlock(check_precision(precision))


def _close(entry: list) -> None:
    for i in range(len(_active) - 1, -1, -1):
        if _active[i] is entry:
            _active.pop(i)  # not `del`: Dynamo before torch 2.7 cannot trace a list's __delitem__
            break


class _PrecisionBlock:
    """The context manager use_precision returns. A class, not a @contextlib.contextmanager generator: Dynamo
    before torch 2.7 cannot trace a generator's context manager under fullgraph, but traces this one's __enter__
    and __exit__ (tested on 2.5, 2.6 and 2.13)."""

    __slots__ = ("precision", "_entries")

    def __init__(self, precision: str):
        self.precision = precision
        self._entries = []  # one per open `with` of this object (it may be entered again, even inside itself)

    def __enter__(self) -> None:
        entry = [self.precision]  # its identity marks this block in _active
        self._entries.append(entry)
        with _guard():
            _active.append(entry)

    def __exit__(self, *exc) -> bool:
        entry = self._entries.pop()
        with _guard():
            _close(entry)
        return False


def _guard():
    """_active_lock, or no lock while Dynamo traces (it replays the mutations; it cannot enter a lock)."""
    import torch

    return contextlib.nullcontext() if torch.compiler.is_compiling() else _active_lock


# ----------------------------------------------------------------------------------------------------------
# per-model controls
# ----------------------------------------------------------------------------------------------------------

_BLOCK_INDEX = re.compile(r"(?:^|\.)(\d+)(?:\.|$)")


def _block_index(module_name: str) -> Optional[int]:
    """The first integer component of a module path ("blocks.7.attn1" -> 7): the transformer block it belongs to."""
    m = _BLOCK_INDEX.search(module_name)
    return int(m.group(1)) if m else None


def _timestep_position(module) -> Optional[int]:
    """Where `timestep` stands among the positional arguments of `module.forward`; None when it has no such
    parameter (or no readable signature)."""
    try:
        params = list(inspect.signature(module.forward).parameters.values())
    except (TypeError, ValueError):
        return None
    for i, prm in enumerate(params):
        if prm.name == "timestep":
            return i if prm.kind in (prm.POSITIONAL_ONLY, prm.POSITIONAL_OR_KEYWORD) else None
    return None


def _timestep_key(args, kwargs, position: Optional[int]) -> Optional[tuple]:
    """The denoising timestep a transformer forward was called with (its `timestep` keyword, or the argument in its
    place), as (max, sum) over all its elements: per-token or per-frame timesteps (Wan 2.2 TI2V's image frames held at
    0, diffusion forcing's frames at different times) change together from one step to the next, but not their first
    element alone. None when there is none."""
    t = kwargs.get("timestep")
    if t is None and position is not None and position < len(args):
        t = args[position]
    if t is None:
        return None
    try:
        import torch

        if isinstance(t, torch.Tensor):
            if not t.numel():
                return None
            flat = t.detach().reshape(-1).double()
            return tuple(torch.stack([flat.max(), flat.sum()]).tolist())  # one device sync a forward, as before
        return (float(t), float(t))
    except (TypeError, ValueError, RuntimeError):
        return None


class PrecisionPolicy:
    """Which attention calls of one model run at which precision: `default` everywhere, except the blocks in
    `exact_blocks` and the first `exact_first_steps` denoising steps, which run "exact".

        policy = vidattn.PrecisionPolicy("8bit", exact_blocks=(0, 29), exact_first_steps=2)
        handle = policy.install(pipe)                  # after vidattn.apply(pipe)
        video = pipe(prompt).frames
        handle.remove()

    It sets the `precision` attribute of the model's vidattn processors (vidattn.apply installs them) before every
    forward of the transformer. Attention modules that vidattn.apply routed through the "vidattn" diffusers backend
    (their stock processor stays; the backend reads the context precision) run each forward inside
    `use_precision(...)` with their block's precision instead, opened and closed by hooks on the module. A
    denoising step is a change of the forward's `timestep`: classifier-free guidance that calls the transformer twice
    per step counts once, and a timestep larger than the last one (denoising counts down) starts a new generation at
    step 0. Forwards without a `timestep` count one step each.

    The defaults are neutral (no exceptions): which blocks or steps a model needs exact has to be measured per
    model (scripts/fidelity_8bit.py --sweep; docs/precision.md), and no such measurement backs a per-family
    default yet.
    """

    def __init__(self, default: str = "8bit", exact_blocks: Iterable[int] = (), exact_first_steps: int = 0):
        self.default = check_precision(default)
        if isinstance(exact_blocks, (str, bytes)) or not hasattr(exact_blocks, "__iter__"):
            raise TypeError(f"PrecisionPolicy: exact_blocks must be an iterable of block indices (e.g. (0, 29)), "
                            f"got {type(exact_blocks).__name__}")
        blocks = tuple(exact_blocks)
        for b in blocks:
            if isinstance(b, bool) or not isinstance(b, int) or b < 0:
                raise ValueError(f"PrecisionPolicy: exact_blocks must be non-negative ints, got {b!r}")
        self.exact_blocks = frozenset(blocks)
        if isinstance(exact_first_steps, bool) or not isinstance(exact_first_steps, int) or exact_first_steps < 0:
            raise ValueError(f"PrecisionPolicy: exact_first_steps must be an int >= 0, got {exact_first_steps!r}")
        self.exact_first_steps = exact_first_steps

    def precision_for(self, block: Optional[int], step: int) -> str:
        """The precision of an attention call in block `block` (None: outside the numbered blocks) at step `step`."""
        if step < self.exact_first_steps or (block is not None and block in self.exact_blocks):
            return "exact"
        return self.default

    def install(self, pipe_or_transformer) -> "PolicyHandle":
        """Install on a transformer, or on a pipeline: then every transformer of it (Wan 2.2 A14B's `transformer`
        and `transformer_2`) shares one step count, so the second one, which starts mid-generation, continues it."""
        models, targets = [], []
        for model in _policy_models(pipe_or_transformer):
            found = []
            for name, module in model.named_modules():
                proc = getattr(module, "processor", None)
                if hasattr(proc, "precision"):
                    found.append((_block_index(name), proc))
                elif _on_vidattn_backend(proc):
                    found.append((_block_index(name), _ModulePrecision(module)))
            if found:
                models.append(model)
                targets += found
        if not targets:
            raise RuntimeError("PrecisionPolicy.install: no vidattn attention on this model (run vidattn.apply(pipe) "
                               "first: it installs vidattn's processors or routes the stock ones through the vidattn "
                               "diffusers backend)")
        return PolicyHandle(self, models, targets)

    def __repr__(self) -> str:
        return (f"PrecisionPolicy(default={self.default!r}, exact_blocks={tuple(sorted(self.exact_blocks))}, "
                f"exact_first_steps={self.exact_first_steps})")


def _on_vidattn_backend(proc) -> bool:
    """Whether a (stock) processor attends through the "vidattn" diffusers backend (vidattn.apply's "backend" route, or
    set_attention_backend("vidattn")): its `_attention_backend` names it, as a string or diffusers' enum member."""
    backend = getattr(proc, "_attention_backend", None)
    return backend is not None and str(getattr(backend, "value", backend)) == "vidattn"


class _ModulePrecision:
    """A backend-routed attention module under a policy: `precision` (set per step like a processor's) is the
    precision its forward runs at, inside a use_precision block that a forward pre-hook opens and a forward hook closes,
    even when the forward raises (`always_call`). None: no block, the context's precision."""

    def __init__(self, module):
        self.precision: Optional[str] = None
        self._open: list = []
        self._hooks = [module.register_forward_pre_hook(self._enter),
                       module.register_forward_hook(self._exit, always_call=True)]

    def _enter(self, module, args) -> None:
        block = None if self.precision is None else _PrecisionBlock(self.precision)
        if block is not None:
            block.__enter__()
        self._open.append(block)

    def _exit(self, module, args, output) -> None:
        block = self._open.pop() if self._open else None
        if block is not None:
            block.__exit__(None, None, None)

    def remove(self) -> None:
        for hook in self._hooks:
            hook.remove()


def _policy_models(pipe_or_transformer) -> list:
    """The models a policy hooks: the module itself, or a pipeline's components that are modules (those without
    vidattn processors add no targets)."""
    if hasattr(pipe_or_transformer, "named_modules"):
        return [pipe_or_transformer]
    comps = getattr(pipe_or_transformer, "components", None)
    models = [c for c in (comps.values() if isinstance(comps, dict) else ()) if hasattr(c, "named_modules")]
    if not models:
        raise TypeError(f"PrecisionPolicy.install expects a transformer (torch.nn.Module) or a diffusers pipeline, "
                        f"got {type(pipe_or_transformer).__name__}")
    return models


class PolicyHandle:
    """What PrecisionPolicy.install returns: `step` (the current denoising step), `reset()` and `remove()`."""

    def __init__(self, policy: PrecisionPolicy, models, targets):
        self.policy = policy
        self.targets = targets
        self.step = -1
        self._last_t: Optional[tuple] = None
        self._saved = [(proc, proc.precision) for _, proc in targets]
        self._hooks = [m.register_forward_pre_hook(self._hook_for(_timestep_position(m)), with_kwargs=True)
                       for m in models]

    def _hook_for(self, position: Optional[int]):
        def pre_forward(module, args, kwargs):
            self._count(_timestep_key(args, kwargs, position))
        return pre_forward

    def _count(self, t: Optional[tuple]) -> None:
        """A step is a change of the timestep (the guidance's second call at the same timestep is the same step); one
        whose maximum is larger than the last one's starts a new generation (denoising counts down)."""
        if t is None or self._last_t is None or t != self._last_t:
            if t is not None and self._last_t is not None and t[0] > self._last_t[0]:
                self.step = -1  # a new generation
            self.step += 1
        self._last_t = t
        self.apply_step(self.step)

    def apply_step(self, step: int) -> None:
        """Set every processor's precision for denoising step `step`."""
        for block, proc in self.targets:
            proc.precision = self.policy.precision_for(block, step)

    def reset(self) -> None:
        """Start counting steps from 0 again at the next forward."""
        self.step, self._last_t = -1, None

    def remove(self) -> None:
        """Remove the hooks and give every processor back the precision it had."""
        for hook in self._hooks:
            hook.remove()
        for proc, prec in self._saved:
            proc.precision = prec
            if isinstance(proc, _ModulePrecision):
                proc.remove()
