"""scripts/e2e_report.py --family NAME: the SDPA column runs the registry's stated baseline (Entry.baseline) where
the family has one (Wan-Animate-2: stock's eager flex pass cannot run at 720p), the stock processors elsewhere."""
import json
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("diffusers")
from pipelines import registry  # noqa: E402

from _support import load_script  # noqa: E402

pytestmark = [pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]


e2e = load_script(ROOT / "scripts" / "e2e_report.py", "_pe_e2e_report")


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


# ------------------------------------------------------------------------------------------ --budget-s
class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def test_run_budget_plan():
    c = Clock()
    b = e2e.RunBudget(120, clock=c)
    assert b.left() == 120 - b.TAIL_S
    # 12 s forwards: SDPA's census forward at 30 s, three paths after it at two forwards each
    c.t = 30
    left = 120 - b.TAIL_S - 30
    n = int((left - 6 * 12 * b.MARGIN) // (12 * b.MARGIN))
    assert n == 0 and b.plan(12, 1, 2, reserve_forwards=6) == (0, 1)  # one timed forward even when short
    c.t = 0
    assert b.plan(1, 1, 5, reserve_forwards=6) == (1, 5)  # everything fits: as asked
    assert b.plan(10, 3, 5, reserve_forwards=0) == (3, 5)
    assert b.plan(10, 3, 5, reserve_forwards=4) == (1, 5)  # timed forwards first, warm-ups from what is left
    assert b.plan(10, 3, 5, reserve_forwards=8) == (0, 2)
    unlimited = e2e.RunBudget(None)
    assert not unlimited.active and unlimited.plan(1e9, 2, 10, reserve_forwards=99) == (2, 10)


def test_budget_cuts_iterations_then_paths(tmp_path, monkeypatch):
    """Every forward takes 10 s on a fake clock: a 55 s budget runs SDPA and vidattn with one timed forward each,
    then leaves vidattn_8bit out; the report says so and compares what ran."""
    clock = Clock()
    monkeypatch.setattr(e2e.time, "perf_counter", clock)

    from pipelines import registry as reg
    orig_build = reg.build

    def build(*a, **kw):
        built = orig_build(*a, **kw)
        fwd = built.forward

        def slow():
            clock.t += 10.0
            return fwd()
        built.forward = slow
        return built
    monkeypatch.setattr(reg, "build", build)
    rep = e2e.main(["--family", "skyreels_v2", "--tiny", "--iters", "3", "--warmup", "2", "--no-profile",
                    "--precision", "both", "--sage2", "off", "--budget-s", "55", "--out-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "report.json").read_text())
    assert rep["status"] == "ok" and saved["paths"] == ["sdpa", "vidattn", "vidattn_8bit"]
    assert saved["paths_run"] == ["sdpa", "vidattn"] and set(saved["results"]) == {"sdpa", "vidattn"}
    for p in ("sdpa", "vidattn"):
        assert saved["results"][p]["iters"] >= 1 and len(saved["results"][p]["forward_ms"]) == \
            saved["results"][p]["iters"]
    assert saved["results"]["sdpa"]["iters"] + saved["results"]["sdpa"]["warmup"] < 5  # cut from 2 + 3
    assert [s["what"] for s in saved["budget"]["skipped"]] == ["vidattn_8bit"]
    assert "sdpa" in saved["budget"]["reduced"]
    md = (tmp_path / "report.md").read_text()
    assert "For --budget-s 55" in md and "vidattn_8bit left out" in md
    assert saved["budget"]["elapsed_s"] <= 55


def test_budget_only_for_family_forward_runs():
    with pytest.raises(SystemExit, match="budget-s"):
        e2e.main(["--tiny", "--forward-only", "--budget-s", "10"])


def test_interleaved_rounds_alternate_and_pair_every_path():
    """--interleave: one forward per path a round, the order reversed every other round; every pair's per-round
    ratios (a's time over b's) with their median and the rounds b was faster in; a budget too short for the next
    round stops early."""
    order, times = [], {"sdpa": [10.0, 10.0, 10.0, 10.0], "vidattn": [8.0, 8.0, 8.0, 8.0],
                        "vidattn_8bit": [7.0, 9.0, 7.0, 7.0]}

    def fwd(path):
        order.append(path)
        return times[path][sum(p == path for p in order) - 1]

    results = {p: {"forward_stats_ms": {"median": 1000.0}} for p in times}
    r = e2e.interleaved_rounds(list(times), 4, fwd, e2e.RunBudget(None), results)
    assert order[:6] == ["sdpa", "vidattn", "vidattn_8bit", "vidattn_8bit", "vidattn", "sdpa"]
    assert r["rounds"] == 4 and r["forward_ms"]["vidattn_8bit"] == [7.0, 9.0, 7.0, 7.0]
    pair = r["pairs"]["vidattn/vidattn_8bit"]
    assert pair["per_round"] == [8 / 7, 8 / 9, 8 / 7, 8 / 7] and pair["faster_rounds"] == 3
    assert r["pairs"]["sdpa/vidattn"]["median"] == 1.25 and set(r["pairs"]) == {
        "sdpa/vidattn", "sdpa/vidattn_8bit", "vidattn/vidattn_8bit"}
    c = Clock()
    short = e2e.RunBudget(5 + e2e.RunBudget.TAIL_S, clock=c)  # 3 s a round (x MARGIN): one round fits, not two
    c.t = 0
    order.clear()

    def fwd_clocked(path):
        c.t += 1.0
        return fwd(path)

    r = e2e.interleaved_rounds(list(times), 4, fwd_clocked, short, results)
    assert r["rounds"] == 1 and r["asked"] == 4 and len(order) == 3
    md = "\n".join(e2e.interleaved_lines({"interleaved": r}))
    assert "1 of 4 rounds asked" in md and "vidattn / vidattn 8-bit" in md


def test_interleave_is_refused_outside_family_forward_runs():
    with pytest.raises(SystemExit, match="--family NAME --forward-only"):
        e2e.main(["--family", "cogvideox", "--tiny", "--interleave", "2"])
    with pytest.raises(SystemExit, match="must be >= 0"):
        e2e.main(["--family", "cogvideox", "--tiny", "--forward-only", "--interleave", "-1"])
