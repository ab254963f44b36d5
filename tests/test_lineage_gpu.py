"""GPU check of every lineage step (docs/guide/lineage/NN_*.cu) through scripts/bench_lineage.py --check-only.

One driver run builds (or reuses) every step and checks it against an fp32 SDPA reference on two small shapes,
at the canonical shape against cuDNN, and that it refuses out-of-contract shapes; each step then gets its own
test result here. Needs an sm_90 GPU and nvcc.
"""
from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "scripts" / "bench_lineage.py"
STEPS = sorted(p.stem for p in (REPO / "docs" / "guide" / "lineage").glob("*.cu") if re.match(r"^\d\d_", p.name))

pytestmark = pytest.mark.gpu


def _is_sm90() -> bool:
    return torch.cuda.is_available() and torch.cuda.get_device_capability()[0] == 9


@pytest.fixture(scope="module")
def check_run(tmp_path_factory):
    if not _is_sm90():
        pytest.skip("needs an sm_90 (Hopper) GPU")
    out = tmp_path_factory.mktemp("lineage") / "lineage_check.json"
    proc = subprocess.run([sys.executable, str(BENCH), "--check-only", "--out", str(out)], cwd=REPO,
                          capture_output=True, text=True, timeout=1800)
    if not out.is_file():
        pytest.fail(f"bench_lineage.py --check-only wrote no JSON (exit {proc.returncode}):\n"
                    f"{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}")
    data = json.loads(out.read_text())
    return proc, {s["name"]: s for s in data["steps"]}


@pytest.mark.parametrize("name", STEPS)
def test_lineage_step_is_correct(check_run, name):
    _, steps = check_run
    assert name in steps, f"{name} missing from the driver's results"
    s = steps[name]
    assert s["build"].get("ok"), f"{name} failed to build: {s['build'].get('error')}"
    assert s.get("ok"), f"{name}: {s.get('status')}: {s.get('error')}"
    bound = s.get("check_rel_l2_bound", 2e-2)  # the step's stated bound (the 8-bit step's 6e-2), else 2e-2
    rels = s.get("check_rel_l2") or {}
    assert rels and all(r < bound for r in rels.values()), rels
    assert s.get("canonical_rel_l2_vs_cudnn") is not None and s["canonical_rel_l2_vs_cudnn"] < bound


def test_check_run_exit_status(check_run):
    proc, steps = check_run
    bad = [n for n, s in steps.items() if not s.get("ok")]
    assert (proc.returncode == 0) == (not bad), (proc.returncode, bad, proc.stdout[-2000:])
