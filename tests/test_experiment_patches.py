"""Every patch in dev/experiments is listed in its README with the commit it applies to: the kernel source moves
on under the experiments that did not land, and a patch without its base commit cannot be rebuilt."""
from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
EXPERIMENTS = ROOT / "dev" / "experiments"


def test_every_patch_is_listed_with_its_base_commit():
    text = (EXPERIMENTS / "README.md").read_text()
    head = text.split("\n\n")[1] if text.count("\n\n") else text  # the paragraph naming the base commits
    patches = sorted(p.name for p in EXPERIMENTS.glob("*.patch"))
    assert patches, "no experiment patches found"
    for name in patches:
        m = re.search(re.escape(f"`{name}`") + r"[^`]*(?:`[^`]*\.patch`[^`]*)*?to `([0-9a-f]{7,40})`", head)
        assert m, f"dev/experiments/README.md does not say which commit {name} applies to"
