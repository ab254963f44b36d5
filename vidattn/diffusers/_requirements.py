"""What the diffusers integration needs of the environment, checked once when vidattn.diffusers is imported.

diffusers is optional: without it the processors still import (they are plain torch) and the backend is not
registered (backend.py warns). A diffusers that is there but unusable is an ImportError that names the fix, raised
before the first processor runs, rather than a failure deep inside diffusers or on the first SDPA fallback:
- older than 0.42: its dispatch_attention_fn lacks keywords the processors pass on their fallback path, so every
  fallback would raise;
- failing to import: diffusers 0.42 calls torch.accelerator (torch 2.6) at import, so on torch 2.5 it raises
  AttributeError from inside diffusers.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import re
from typing import Callable, Optional

MIN_DIFFUSERS = (0, 42)
MIN_TORCH_FOR_DIFFUSERS = (2, 6)


def _release(version: str) -> Optional[tuple]:
    """(major, minor) of a version string ("0.42.1", "0.43.0.dev0", "2.6.0+cu124"); None when it does not start so."""
    m = re.match(r"\s*v?(\d+)\.(\d+)", version)
    return (int(m.group(1)), int(m.group(2))) if m else None


def installed_diffusers() -> Optional[str]:
    """The installed diffusers' version from its metadata (without importing it), or None when not installed."""
    try:
        return importlib.metadata.version("diffusers")
    except importlib.metadata.PackageNotFoundError:
        return None


def check_diffusers(version: Optional[str] = None, torch_version: Optional[str] = None,
                    importer: Callable[[str], object] = importlib.import_module) -> None:
    """None if the installed diffusers can serve the integration (or there is none); ImportError naming the fix
    otherwise. The arguments stand in for the environment in tests."""
    if version is None:
        version = installed_diffusers()
    if version is None:
        return
    release = _release(version)
    need = ".".join(map(str, MIN_DIFFUSERS))
    if release is not None and release < MIN_DIFFUSERS:
        raise ImportError(f"vidattn's diffusers integration needs diffusers >= {need}; this environment has "
                          f"diffusers {version}. Upgrade it: pip install -U 'diffusers>={need}' (which needs "
                          f"Python >= 3.11 and torch >= 2.6)")
    try:
        importer("diffusers")
    except Exception as e:  # anything diffusers' own import raises
        if torch_version is None:
            import torch

            torch_version = torch.__version__
        hint = ""
        torch_release = _release(torch_version)
        if torch_release is not None and torch_release < MIN_TORCH_FOR_DIFFUSERS:
            hint = (f" diffusers {need} and newer need torch >= {'.'.join(map(str, MIN_TORCH_FOR_DIFFUSERS))}; "
                    f"this is torch {torch_version}: upgrade torch, or use vidattn.attention without the integration.")
        raise ImportError(f"vidattn's diffusers integration could not import diffusers {version} "
                          f"({type(e).__name__}: {e}).{hint}") from e
