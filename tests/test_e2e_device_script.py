"""dev/device_8bit_e2e.sh and what it asks of scripts/e2e_report.py, on the CPU.

- The Wan 14B mode's budget on a fake clock, with the forward times the H200 measured at 1280x720x81 (75600 tokens):
  SageAttention2, timed last, still fits after SDPA and both vidattn paths at the budget the integrator passes, and
  is the path left out when the budget is short.
- The report's run line (commit, versions, command), SageAttention2's build in the JSON, the kernel library loaded
  before the first timed path (CUDA only).
- Both modes of the shell script end to end on the tiny configs (VIDATTN_E2E_TINY=1), marked dev (~30 s on two
  idle cores): every output names the commit and the command.
"""
import json
import os
import subprocess
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

pytest.importorskip("diffusers")
import fidelity_8bit as fid  # noqa: E402
from _support import cpu_one_thread, load_script  # noqa: E402,F401 - an autouse fixture

pytestmark = [pytest.mark.filterwarnings("ignore::vidattn.VidattnFallbackWarning"),
              pytest.mark.filterwarnings("ignore::UserWarning")]

e2e = load_script(ROOT / "scripts" / "e2e_report.py", "_e2e_device_script_report")

# Median forward of Wan 2.1 14B at 1280x720x81 on the H200 per path, seconds (bench/results/h200_2026-12-02_pm,
# call E: bash dev/device_8bit_e2e.sh 14b 180). The census forward, a first call, is taken 15% slower.
H200_14B_720P_S = {"sdpa": 12.481, "vidattn": 10.990, "vidattn_8bit": 9.416, "sage2": 10.088}
FIRST_CALL = 1.15
START_S = 20.0  # interpreter start, imports and the model's build before the first forward (call E: built in 6.1 s)
SHELL_SETUP_S = 12.0  # the shell's wheel install, anchor unpack and nvidia-smi before the interpreter starts


def shell_budget_to_python(budget_s: int) -> int:
    """The --budget-s dev/device_8bit_e2e.sh hands e2e_report.py in the 14b mode: what is left, less 2 s."""
    return int(budget_s - SHELL_SETUP_S) - 2


def fake_sage(q, k, v, scale=None):
    return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                          scale=scale).transpose(1, 2)


class Clock:
    def __init__(self):
        self.t = 0.0

    def __call__(self):
        return self.t


def _run_14b_on_fake_clock(monkeypatch, tmp_path, budget_s: int):
    """e2e_report.py with the 14b mode's arguments on the tiny Wan 14B config, every forward advancing a fake
    clock by the H200's time for its path."""
    clock = Clock()
    monkeypatch.setattr(e2e.time, "perf_counter", clock)
    monkeypatch.setattr(fid, "sage2_impl", lambda: (fake_sage, None))
    current, seen = {}, set()
    orig_run = e2e.AttnSwitch.run

    def run(self, path, fn):
        current["path"] = path
        return orig_run(self, path, fn)
    monkeypatch.setattr(e2e.AttnSwitch, "run", run)

    from pipelines import registry as reg
    orig_build = reg.build

    def build(*a, **kw):
        clock.t += START_S
        built = orig_build(*a, **kw)
        fwd = built.forward

        def timed_forward():
            path = current.get("path", "sdpa")
            clock.t += H200_14B_720P_S[path] * (1.0 if path in seen else FIRST_CALL)
            seen.add(path)
            return fwd()
        built.forward = timed_forward
        return built
    monkeypatch.setattr(reg, "build", build)
    out = tmp_path / f"b{budget_s}"
    e2e.main(["--family", "wan14b", "--forward-only", "--tiny", "--precision", "both", "--warmup", "1", "--iters", "2",
              "--no-profile", "--budget-s", str(budget_s), "--out-dir", str(out)], started=0.0)
    return json.loads((out / "report.json").read_text()), (out / "report.md").read_text()


def test_14b_mode_times_sage2_after_the_three_paths_within_its_budget(monkeypatch, tmp_path):
    budget = shell_budget_to_python(180)  # bash dev/device_8bit_e2e.sh 14b 180
    data, md = _run_14b_on_fake_clock(monkeypatch, tmp_path, budget)
    assert data["paths"] == ["sdpa", "vidattn", "vidattn_8bit", "sage2"] and data["status"] == "ok"
    assert "paths_run" not in data and data["budget"]["skipped"] == []  # every path ran
    assert all(data["results"][p]["iters"] >= 1 for p in data["paths"])
    assert data["results"]["sage2"]["iters"] == 2  # SageAttention2 with the two timed forwards asked for
    assert data["budget"]["elapsed_s"] + e2e.RunBudget.TAIL_S <= budget
    assert set(data["speedup_by_path"]) == {"vidattn", "vidattn_8bit", "sage2"}
    assert data["sage2"]["in_run"] and "build" in data["sage2"]  # which SageAttention2 ran is in the JSON
    assert "| SageAttention2 |" in md


def test_14b_mode_leaves_sage2_out_first_when_short(monkeypatch, tmp_path):
    data, md = _run_14b_on_fake_clock(monkeypatch, tmp_path, 110)
    assert data["paths_run"] == ["sdpa", "vidattn", "vidattn_8bit"] and data["status"] == "ok"
    assert [s["what"] for s in data["budget"]["skipped"]] == ["sage2"]
    assert "sage2 left out" in md and data["budget"]["elapsed_s"] <= 110


def test_run_line_names_commit_versions_and_command(capsys, monkeypatch):
    monkeypatch.setenv("VIDATTN_GIT_COMMIT", "0123abc")
    from vidattn.envinfo import run_metadata

    e2e.log_run(run_metadata(["scripts/e2e_report.py", "--family", "wan14b"]))
    line = capsys.readouterr().out.strip()
    assert line.startswith("[e2e] run: commit 0123abc; torch ") and "\n" not in line
    import diffusers

    assert f"torch {torch.__version__}" in line and f"diffusers {diffusers.__version__}" in line
    assert line.endswith(" scripts/e2e_report.py --family wan14b")


def test_kernel_library_is_loaded_before_the_timed_paths_on_cuda_only(monkeypatch):
    from vidattn import _ext

    calls = []
    monkeypatch.setattr(_ext, "load", lambda: calls.append("load") or None)
    monkeypatch.setattr(_ext, "build_error", lambda: "kernel library unavailable: no nvcc")
    assert e2e.ready_kernel(torch.device("cpu"), ("sdpa", "vidattn")) is None and calls == []
    cuda = types.SimpleNamespace(type="cuda")
    assert e2e.ready_kernel(cuda, ("sdpa",)) is None and calls == []  # nothing of vidattn's in the run
    info = e2e.ready_kernel(cuda, ("sdpa", "vidattn_8bit"))
    assert calls == ["load"] and info["error"] == "kernel library unavailable: no nvcc" and info["seconds"] >= 0
    monkeypatch.setattr(_ext, "load", lambda: calls.append("load") or object())
    assert e2e.ready_kernel(cuda, ("sdpa", "vidattn"))["error"] is None


def test_timed_call_on_the_cpu_times_one_call_and_returns_its_result(monkeypatch):
    clock = Clock()
    monkeypatch.setattr(e2e.time, "perf_counter", clock)

    def call():
        clock.t += 0.25
        return "out"
    assert e2e.timed_call(call, torch.device("cpu")) == (250.0, "out")


# ------------------------------------------------------------------------------------ the shell script itself
def _script(tmp_path, *args, budget_env=None):
    """Run dev/device_8bit_e2e.sh on the tiny configs from a folder that links dev/ and scripts/ (so the checkout's
    carried wheels and anchors, git-ignored, are not installed)."""
    work = tmp_path / "w"
    work.mkdir()
    for name in ("dev", "scripts"):
        (work / name).symlink_to(ROOT / name)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("VIDATTN_", "PYTHONPATH"))}
    env.update(VIDATTN_E2E_TINY="1", VIDATTN_COMMIT="c0ffee1", VIDATTN_LIBRARY="/nonexistent",
               VIDATTN_ANCHORS_DIR=str(tmp_path / "no_anchors"), OUT=str(tmp_path / "out"), OMP_NUM_THREADS="1")
    proc = subprocess.run(["bash", "dev/device_8bit_e2e.sh", *args], cwd=work, env=env, capture_output=True,
                          text=True, timeout=400)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return tmp_path / "out", proc.stdout


def _names_commit_and_command(out: Path, stdout: str, args: str):
    env = (out / "env_8bit.txt").read_text()
    assert "commit c0ffee1" in env and f"command bash dev/device_8bit_e2e.sh {args}" in env
    assert "[e2e] run: commit c0ffee1; torch " in stdout  # the summary the script prints carries the run line


@pytest.mark.dev
def test_script_14b_mode_end_to_end_tiny(tmp_path):
    out, stdout = _script(tmp_path, "14b", "90")
    _names_commit_and_command(out, stdout, "14b 90")
    assert "e2e wan14b 720p rc=0" in stdout
    data = json.loads((out / "e2e_wan14b_720p" / "report.json").read_text())
    assert data["metadata"]["git_commit"] == "c0ffee1" and "--family wan14b" in data["metadata"]["command"]
    assert data["metadata"]["torch"] == torch.__version__ and data["metadata"]["diffusers"]
    assert data["paths"] == ["sdpa", "vidattn", "vidattn_8bit"]  # no SageAttention2 on a CPU: said why
    assert "unavailable" in data["sage2"]["reason"] and data["budget"]["skipped"] == []
    assert "[e2e] run: commit c0ffee1" in (out / "e2e_wan14b_720p.log").read_text()


@pytest.mark.dev
def test_script_13b_mode_end_to_end_tiny(tmp_path):
    out, stdout = _script(tmp_path, "40")
    _names_commit_and_command(out, stdout, "40")
    assert "e2e forward rc=0" in stdout and "fidelity rc=0" in stdout and "# 8-bit fidelity: wan" in stdout
    fwd = json.loads((out / "e2e_wan1.3b_forward" / "report.json").read_text())
    assert fwd["metadata"]["git_commit"] == "c0ffee1" and "--precision both" in fwd["metadata"]["command"]
    assert fwd["paths"] == ["sdpa", "vidattn", "vidattn_8bit"]
    fidelity = json.loads((out / "fidelity_wan1.3b" / "fidelity.json").read_text())
    assert fidelity["metadata"]["git_commit"] == "c0ffee1" and "fidelity_8bit.py" in fidelity["metadata"]["command"]
