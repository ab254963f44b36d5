"""dev/tools/fill_guide_results.py writes the lineage JSON's numbers, and only those, into the marked blocks."""
import json
import shutil
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "dev" / "tools"))
import fill_guide_results as fgr  # noqa: E402

RESULTS = sorted((ROOT / "bench" / "results").glob("lineage_*.json"))


@pytest.mark.skipif(not RESULTS, reason="no lineage JSON committed yet")
def test_fill_writes_the_json_numbers(tmp_path):
    shutil.copytree(ROOT / "docs", tmp_path / "docs")
    (tmp_path / "bench" / "results").mkdir(parents=True)
    src = shutil.copy(RESULTS[-1], tmp_path / "bench" / "results" / RESULTS[-1].name)
    data = json.loads(Path(src).read_text())
    fgr.fill(Path(src), root=tmp_path)
    readme = (tmp_path / "docs" / "results.md").read_text()
    for step in data["steps"]:
        if step["ok"]:
            assert f"| {step['tflops']:.1f} |" in readme, step["name"]
            page = (tmp_path / "docs" / "guide" / f"{step['name']}.md").read_text()
            assert f"**{step['tflops']:.1f} TFLOPS**" in fgr._block(page, "step-result")
    assert f"{data['references']['cudnn']['tflops']:.1f}" in fgr._block(readme, "lineage")


def test_summary_ratios_follow_from_tflops():
    data = {"references": {"cudnn": {"ok": True, "tflops": 200.0}, "production": {"ok": True, "tflops": 400.0}},
            "steps": [{"num": 1, "name": "01_a", "change": "a", "status": "ok", "ok": True, "tflops": 100.0},
                      {"num": 2, "name": "02_b", "change": "b", "status": "wrong result", "ok": False, "tflops": None},
                      {"num": 3, "name": "03_c", "change": "c", "status": "ok", "ok": True, "tflops": 300.0}]}
    rows = fgr.summarize(data)
    assert rows[0]["pct_cudnn"] == 50.0 and rows[0]["pct_final"] == 25.0 and rows[0]["gain"] is None
    assert rows[1]["tflops"] is None and rows[1]["pct_cudnn"] is None
    assert rows[2]["gain"] == 3.0  # against the last step that ran


def test_missing_markers_are_an_error():
    with pytest.raises(ValueError):
        fgr._replace_block("no markers here", "lineage", "x")
