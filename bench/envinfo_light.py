"""vidattn/envinfo.py loaded by its path, without the vidattn package (whose __init__ imports torch): the one
git_commit rule for scripts that must stay fast and torch-free (bench_kernel --dry-run, bench_lineage
--build-only)."""
from __future__ import annotations

import importlib.util
from pathlib import Path

_PATH = Path(__file__).resolve().parent.parent / "vidattn" / "envinfo.py"
_spec = importlib.util.spec_from_file_location("vidattn_envinfo_light", _PATH)
envinfo = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(envinfo)
git_commit = envinfo.git_commit
short_commit = envinfo.short_commit
