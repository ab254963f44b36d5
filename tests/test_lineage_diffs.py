"""dev/tools/lineage_diffs.py: docs/guide/diffs/NN.diff exist, are non-empty and current for every lineage step whose
predecessor exists; the generator itself on small synthetic steps. CPU only."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from _support import load_script

REPO = Path(__file__).resolve().parent.parent
SCRIPT = REPO / "dev" / "tools" / "lineage_diffs.py"
DIFFS = REPO / "docs" / "guide" / "diffs"


def _mod():
    return load_script(SCRIPT, register=True)


_STEPS = _mod().step_files()


@pytest.mark.parametrize("n", sorted(n for n in _STEPS if n > 1), ids=lambda n: f"{n:02d}")
def test_diff_exists_and_is_not_empty(n):
    if n - 1 not in _STEPS:
        pytest.skip(f"step {n - 1:02d} (the predecessor) is not written yet")
    path = DIFFS / f"{n:02d}.diff"
    assert path.is_file(), f"{path} missing: run python3 dev/tools/lineage_diffs.py"
    text = path.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) > 3, f"{path.name} is empty"
    assert lines[0] == f"--- a/docs/guide/lineage/{_STEPS[n - 1].name}", lines[0]
    assert lines[1] == f"+++ b/docs/guide/lineage/{_STEPS[n].name}", lines[1]
    assert lines[2].startswith("@@ "), lines[2]
    # Every step changes its opening line ("// Step NN: step NN-1 + ..."), so the diff always shows it.
    assert any(l.startswith(f"+// Step {n:02d}: ") for l in lines), f"{path.name}: no new opening line"


def test_diffs_are_current():
    proc = subprocess.run([sys.executable, str(SCRIPT), "--check"], cwd=REPO, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, "docs/guide/diffs is stale: run python3 dev/tools/lineage_diffs.py\n" + proc.stdout


def test_generator_on_synthetic_steps(tmp_path):
    mod = _mod()
    lineage, out = tmp_path / "lineage", tmp_path / "diffs"
    lineage.mkdir()
    (lineage / "01_a.cu").write_text("// Step 01: a\nint x = 1;\n")
    (lineage / "02_b.cu").write_text("// Step 02: step 01 + b\nint x = 2;\n")
    (lineage / "04_d.cu").write_text("// Step 04: step 03 + d\nint x = 4;")  # no predecessor, no final newline
    (lineage / "05_e.cu").write_text("// Step 05: step 04 + e\nint x = 5;\n")
    (lineage / "notes.cu").write_text("not a step\n")
    out.mkdir()
    (out / "03.diff").write_text("left over\n")  # a step pair that no longer exists
    argv = ["--lineage", str(lineage), "--out", str(out)]
    assert mod.main(argv + ["--check"]) == 1
    assert mod.main(argv) == 0
    assert sorted(p.name for p in out.iterdir()) == ["02.diff", "05.diff"]
    d2 = (out / "02.diff").read_text()
    assert "-int x = 1;" in d2.splitlines() and "+int x = 2;" in d2.splitlines()
    d5 = (out / "05.diff").read_text()
    assert "-int x = 4;\n\\ No newline at end of file\n" in d5 and "+int x = 5;" in d5.splitlines()
    assert mod.main(argv + ["--check"]) == 0
    # A changed step makes its successor's diff stale.
    (lineage / "04_d.cu").write_text("// Step 04: step 03 + d\nint x = 40;\n")
    assert mod.main(argv + ["--check"]) == 1
