"""Run metadata for every benchmark JSON: what ran, where, when, from which commit and command line."""
from __future__ import annotations

import datetime
import os
import platform
import subprocess
import sys
from pathlib import Path


def git_commit(repo: Path | None = None) -> str:
    """The VIDATTN_GIT_COMMIT environment variable when set (whoever launches a run on a copied tree knows what it
    is: the lent GPU machine's copy carried a .git of an older base commit, so its `git rev-parse` named the wrong
    commit, 2026-11-30); else the checkout's commit (with '-dirty' when the work tree has changes), else
    'unknown'."""
    if os.environ.get("VIDATTN_GIT_COMMIT", "").strip():
        return os.environ["VIDATTN_GIT_COMMIT"].strip()
    cwd = str(repo or Path(__file__).resolve().parent.parent)
    try:
        sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True,
                             timeout=10, check=True).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=cwd,
                               capture_output=True, text=True, timeout=10).stdout.strip()
        return sha + ("-dirty" if dirty else "")
    except (OSError, subprocess.SubprocessError):
        return "unknown"


def short_commit(commit: str) -> str:
    """The 7-character form of git_commit()'s answer for file names, keeping '-dirty' and 'unknown'."""
    if commit == "unknown":
        return commit
    return commit[:7] + ("-dirty" if commit.endswith("-dirty") else "")


def run_metadata(argv: list[str] | None = None) -> dict:
    """GPU name, torch/CUDA/cuDNN versions, date (UTC), git commit and the command line."""
    import torch

    meta = {
        "date_utc": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git_commit(),
        "command": " ".join([Path(sys.executable).name] + list(sys.argv if argv is None else argv)),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cudnn": torch.backends.cudnn.version() if torch.backends.cudnn.is_available() else None,
        "gpu": None,
        "sm_count": None,
        "gpu_uuid": None,
    }
    if torch.cuda.is_available():
        props = torch.cuda.get_device_properties(torch.cuda.current_device())
        meta["gpu"] = props.name
        meta["sm_count"] = props.multi_processor_count
        # Which physical card: a lent machine may differ from call to call, and cuDNN's own speed on the long shapes
        # moved between calls (Wan 1.3B 561-564 TFLOPS, then 547-548; dev/NOTES.md, thirteenth session). With the
        # card recorded, runs can be grouped by it.
        uuid = getattr(props, "uuid", None)
        meta["gpu_uuid"] = str(uuid) if uuid is not None else None
    if os.environ.get("VIDATTN_LIBRARY"):  # a prebuilt kernel library, e.g. an A/B variant's -D flags
        meta["kernel_library"] = os.path.basename(os.environ["VIDATTN_LIBRARY"])
        meta["kernel_build_flags"] = os.environ.get("VIDATTN_LIBRARY_FLAGS", "")
    try:
        import diffusers
        meta["diffusers"] = diffusers.__version__
    except ImportError:
        meta["diffusers"] = None
    return meta
