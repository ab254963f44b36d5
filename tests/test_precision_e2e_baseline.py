"""scripts/e2e_report.py --family NAME: the SDPA column runs the registry's stated baseline (Entry.baseline) where
the family has one (Wan-Animate-2: stock's eager flex pass cannot run at 720p), the stock processors elsewhere."""
import importlib.util
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("diffusers")
from pipelines import registry  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


def _load(name):
    spec = importlib.util.spec_from_file_location(f"_pe_{name}", ROOT / "scripts" / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


e2e = _load("e2e_report")


def _spy_processors(monkeypatch):
    """Record the processor classes of the model's attention modules during every forward of `path`."""
    seen = {}
    orig = e2e.AttnSwitch.run

    def run(self, path, fn):
        def wrapped():
            seen.setdefault(path, set()).update(
                type(m.processor).__name__ for m in self.pipe.modules() if getattr(m, "processor", None) is not None)
            return fn()
        return orig(self, path, wrapped)
    monkeypatch.setattr(e2e.AttnSwitch, "run", run)
    return seen


def test_wan_animate2_sdpa_path_is_the_registry_baseline(tmp_path, monkeypatch):
    assert registry.entry("wan_animate2").baseline is not None
    seen = _spy_processors(monkeypatch)
    rep = e2e.main(["--family", "wan_animate2", "--tiny", "--iters", "1", "--warmup", "0", "--no-profile",
                    "--out-dir", str(tmp_path)])
    assert rep["status"] == "ok"
    assert "WanAnimate2SdpaBaseline" in seen["sdpa"] and "WanAnimate2AttnProcessor" not in seen["sdpa"]
    saved = json.loads((tmp_path / "report.json").read_text())
    assert saved["sdpa_path"] == registry.entry("wan_animate2").baseline_note
    assert "the sdpa path: stock runs this pass" in (tmp_path / "report.md").read_text()
    assert saved["fidelity"]["output_rel_l2"] < 1e-4  # the baseline computes what stock computes (both SDPA here)
    # the vidattn path ran after the sdpa one: the baseline was taken out again
    assert "WanAnimate2SdpaBaseline" not in seen["vidattn"]


def test_family_without_baseline_keeps_stock_processors(tmp_path, monkeypatch):
    assert registry.entry("skyreels_v2").baseline is None
    seen = _spy_processors(monkeypatch)
    rep = e2e.main(["--family", "skyreels_v2", "--tiny", "--iters", "1", "--warmup", "0", "--no-profile",
                    "--out-dir", str(tmp_path)])
    assert rep["status"] == "ok" and "sdpa_path" not in json.loads((tmp_path / "report.json").read_text())
    assert "SkyReelsV2AttnProcessor" in seen["sdpa"] and not any("Baseline" in n for n in seen["sdpa"])


def test_switch_restores_after_a_failing_baseline_run():
    calls = []

    class Model:
        pass

    def baseline(model):
        calls.append("install")
        return lambda: calls.append("restore")

    sw = e2e.AttnSwitch(Model(), baseline=baseline)
    with pytest.raises(RuntimeError):
        sw.run("sdpa", lambda: (_ for _ in ()).throw(RuntimeError("out of memory")))
    assert calls == ["install", "restore"]
    assert sw.run("sdpa", lambda: 7) == 7 and calls[-2:] == ["install", "restore"]
