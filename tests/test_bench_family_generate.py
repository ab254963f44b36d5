"""scripts/bench_family_generate.py on the CPU: the tiny sweep writes its JSON and table (both paths SDPA here), the
sizes and the budget guard, the families it leaves out with the reason."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("diffusers")
pytestmark = [pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

spec = importlib.util.spec_from_file_location("_bench_gen", ROOT / "scripts" / "bench_family_generate.py")
bg = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bg)


@pytest.fixture(autouse=True)
def cpu_one_thread(monkeypatch):
    n = torch.get_num_threads()
    torch.set_num_threads(1)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    yield
    torch.set_num_threads(n)


def test_tiny_sweep_json_and_table(tmp_path, monkeypatch):
    monkeypatch.setenv("VIDATTN_COMMIT", "abc123def456")
    recs = bg.main(["--tiny", "--device", "cpu", "--only", "ltx", "--out-dir", str(tmp_path), "--no-progress"])
    (r,) = recs
    assert r["status"] == "ok", r.get("error")
    assert r["sdpa"]["total_s"] > 0 and r["vidattn"]["total_s"] > 0
    assert r["sdpa"]["forwards"] == r["vidattn"]["forwards"] > 0 and r["steps"] == 2
    assert r["frames_rel_l2"] < 1e-5 and r["sdpa"]["finite"]  # both SDPA on the CPU
    assert r["vidattn"]["apply"] and r["sdpa"]["apply"] is None
    data = json.loads((tmp_path / "generate_bench.json").read_text())
    assert data["metadata"]["git_commit"] == "abc123def456"
    assert "bench_family_generate.py" in data["metadata"]["command"]
    md = (tmp_path / "generate_bench.md").read_text()
    assert "| ltx |" in md and "abc123def456"[:12] in md


def test_sizes_budget_and_refusals(tmp_path, monkeypatch):
    s = bg.bench_size("hunyuan_video", False)
    assert (s.height, s.width, s.frames) == (720, 1280, 17)
    assert bg.bench_size("helios", False).frames == 33  # its chunk: default kept
    est = bg.estimate_s("ltx")
    assert est and est > 0
    monkeypatch.setattr(bg, "estimate_s", lambda name, steps=2: 1e6)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(bg, "bench_family", lambda *a, **k: pytest.fail("ran past the budget"))
    monkeypatch.setattr(bg, "metadata", lambda argv: {})
    import vidattn._ext as ext

    monkeypatch.setattr(ext, "load", lambda: None)
    recs = bg.main(["--only", "ltx", "--device", "cuda", "--budget-s", "100", "--out-dir", str(tmp_path),
                    "--no-progress"])
    assert recs[0]["status"] == "skipped" and "--budget-s left" in recs[0]["reason"]
    for argv, msg in ((["--only", "wan", "--out-dir", "X"], "Wan path"),
                      (["--only", "cosmos3", "--out-dir", "X"], "cosmos3:"),
                      (["--tiny", "--steps", "0", "--out-dir", "X"], "--steps must be >= 1")):
        with pytest.raises(SystemExit, match=msg):
            bg.main(argv)
