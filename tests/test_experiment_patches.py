"""The experiment patches that csrc/experiments/README.md says apply to the current csrc/ still do: the kernel
source moves under them (one drifted twice in a session), and scripts/kernel_ab.sh builds them on the device."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
CURRENT = ["exp2_fma_emulation.patch", "tail_split.patch"]


@pytest.mark.skipif(shutil.which("git") is None, reason="git not installed")
@pytest.mark.parametrize("patch", CURRENT)
def test_patch_applies_to_current_source(patch, tmp_path):
    shutil.copytree(ROOT / "csrc", tmp_path / "csrc")
    r = subprocess.run(["git", "apply", "--check", str(ROOT / "csrc" / "experiments" / patch)], cwd=tmp_path,
                       capture_output=True, text=True)
    assert r.returncode == 0, f"{patch} no longer applies to csrc/: {r.stderr.strip()}"


def test_readme_names_the_current_patches():
    text = (ROOT / "csrc" / "experiments" / "README.md").read_text()
    assert all(f"`{p}`" in text for p in CURRENT)
