"""CPU checks of the lineage (docs/guide/lineage/NN_*.cu): headers, numbering, the driver's --dry-run and --build-only.

The build test compiles every step with nvcc (skipped without nvcc): about 1-2 min cold on 2 cores, seconds once
`.build/lineage/` holds the cached libraries.
"""
from __future__ import annotations

import re
import os
import subprocess
import sys
from pathlib import Path

import pytest

from _support import load_script

REPO = Path(__file__).resolve().parent.parent
LINEAGE = REPO / "docs" / "guide" / "lineage"
BENCH = REPO / "scripts" / "bench_lineage.py"


def _bench():
    return load_script(BENCH, register=True)


def _step_files() -> list[Path]:
    return sorted(p for p in LINEAGE.glob("*.cu") if re.match(r"^\d\d_", p.name))


def test_every_cu_file_is_a_numbered_step():
    stray = [p.name for p in LINEAGE.glob("*.cu") if not re.match(r"^\d\d_[A-Za-z0-9_]+\.cu$", p.name)]
    assert not stray, f"lineage .cu files must be named NN_<change>.cu: {stray}"
    assert (LINEAGE / "lineage.h").is_file()


def test_numbering_is_contiguous_from_01():
    nums = [int(p.name[:2]) for p in _step_files()]
    assert nums, "no lineage steps found"
    assert nums == list(range(1, len(nums) + 1)), f"steps must be numbered 01..N without gaps or repeats: {nums}"


@pytest.mark.parametrize("path", _step_files(), ids=lambda p: p.stem)
def test_step_opens_with_its_lineage_line(path: Path):
    first = path.read_text().splitlines()[0]
    n = int(path.name[:2])
    if n == 1:
        assert first.startswith("// Step 01: "), first
        assert "naive" in first.lower(), first
    else:
        assert first.startswith(f"// Step {n:02d}: step {n - 1:02d} + "), \
            f"{path.name} must open with '// Step {n:02d}: step {n - 1:02d} + <change>, because <reason>.'"
    header = _bench().opening_comment(path.read_text())
    if n > 1:
        assert ", because" in header, f"{path.name}: the opening sentence should say why ('..., because ...')"


@pytest.mark.parametrize("path", _step_files(), ids=lambda p: p.stem)
def test_step_is_standalone(path: Path):
    text = path.read_text()
    includes = re.findall(r'#include\s+[<"]([^>"]+)[>"]', text)
    local = [i for i in includes if i != "lineage.h" and ("/" in i or i.endswith((".cuh", ".hpp")))]
    assert not local, f"{path.name} includes {local}: steps include only CUDA/C++ headers and lineage.h"
    assert "lineage.h" in includes
    assert 'extern "C" int lineage_fwd(' in text and 'extern "C" const char* lineage_error(' in text
    for banned in ("cutlass", "cute/", "triton", "cudnn"):
        assert not any(banned in i.lower() for i in includes), f"{path.name} includes {banned}"


def test_abi_mirror_matches_header():
    """bench_lineage's ctypes struct has LineageArgs' fields in lineage.h's order."""
    header = (LINEAGE / "lineage.h").read_text()
    body = header[header.index("typedef struct LineageArgs"):header.index("} LineageArgs;")]
    body = re.sub(r"//[^\n]*", "", body)
    names = re.findall(r"\b(q|k|v|o|batch|heads|seqlen|head_dim|scale)\b\s*[;,]", body)
    assert names == [f[0] for f in _bench().LineageArgs._fields_]


def test_change_column_parsing():
    b = _bench()
    header = ("Step 04: step 03 + cp.async double-buffered K/V tiles, because in step 03 every warp stalls. "
              "More text.")
    assert b.change_of(header) == "cp.async double-buffered K/V tiles"
    assert b.change_of("Step 01: naive attention, one thread per row, because a baseline comes first.") == \
        "naive attention, one thread per row"


def test_dry_run_lists_every_step():
    proc = subprocess.run([sys.executable, str(BENCH), "--dry-run"], cwd=REPO, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if re.match(r"^\| \d\d \|", line)]
    assert [r.split("|")[1].strip() for r in rows] == [p.name[:2] for p in _step_files()]
    assert f"{len(_step_files())} steps" in proc.stdout


def test_dry_run_step_filter():
    proc = subprocess.run([sys.executable, str(BENCH), "--dry-run", "--steps", "01_,03_"], cwd=REPO,
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if re.match(r"^\| \d\d \|", line)]
    assert [r.split("|")[1].strip() for r in rows] == ["01", "03"]


def test_build_only_compiles_every_step_without_spills():
    if _bench().find_nvcc() is None:
        pytest.skip("nvcc not found")
    proc = subprocess.run([sys.executable, str(BENCH), "--build-only"], cwd=REPO, capture_output=True, text=True,
                          timeout=900)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-4000:]
    rows = [line for line in proc.stdout.splitlines() if re.match(r"^\| \d\d_", line)]
    assert len(rows) == len(_step_files()), proc.stdout
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[1] in ("built", "cached"), row
        assert cells[4] == "0", f"ptxas spills: {row}"


def _fake_triton(monkeypatch, do_bench):
    """triton.testing as bench_lineage's timer imports it; do_bench None: triton does not import."""
    import types
    if do_bench is None:
        monkeypatch.setitem(sys.modules, "triton", None)
        monkeypatch.setitem(sys.modules, "triton.testing", None)
        return
    triton = types.ModuleType("triton")
    triton.testing = types.ModuleType("triton.testing")
    triton.testing.do_bench = do_bench
    monkeypatch.setitem(sys.modules, "triton", triton)
    monkeypatch.setitem(sys.modules, "triton.testing", triton.testing)


def test_timer_routes_slow_steps_to_an_event_loop(monkeypatch):
    """bench_lineage's timer: do_bench (new and old triton API) with bench/timing.py's windows for a fast step; a
    step above SLOW_STEP_MS, or any step without triton, timed by a CUDA-event loop sized to the step's time cap."""
    seen = []

    def new_api(fn, warmup, rep, return_mode):
        seen.append((warmup, rep, return_mode))
        return 0.5

    def old_api(fn, warmup, rep, quantiles=None):
        seen.append((warmup, rep, quantiles))
        return [0.75]

    mod = _bench()
    for quick, api, ms, windows in ((True, new_api, 0.5, (10, 40, "median")), (False, old_api, 0.75, (25, 100, [0.5]))):
        _fake_triton(monkeypatch, api)
        timer = mod.Timer(quick)
        ns = []
        est = {"ms": 2.0}
        monkeypatch.setattr(timer, "events_median", lambda fn, n: ns.append(n) or est["ms"])
        assert timer(lambda: None) == (ms, "triton.testing.do_bench median")
        assert seen.pop() == windows and ns == [1]
        est["ms"] = 400.0  # slow: at most 10 calls, within the cap (1 s quick, 3 s in full)
        assert timer(lambda: None) == (400.0, f"CUDA-event median of {2 if quick else 7}")
        est["ms"] = 60.0
        assert timer(lambda: None)[1] == "CUDA-event median of 10"
        assert not seen
    _fake_triton(monkeypatch, None)
    timer = mod.Timer(True)
    assert timer.method == "CUDA-event loop median (triton unavailable)"
    monkeypatch.setattr(timer, "events_median", lambda fn, n: 2.0)
    assert timer(lambda: None) == (2.0, "CUDA-event median of 50")  # no do_bench: up to 50 calls, even fast ones
    monkeypatch.setattr(timer, "events_median", lambda fn, n: 1e-6)
    assert timer(lambda: None) == (1e-6, "CUDA-event median of 50")


def test_check_bound_is_read_from_the_step():
    """An exact step is checked against 2e-2; a step that states a bound in its opening comment (the 8-bit step 16:
    "// lineage-check: rel-L2 < 6e-2") against that one, and the driver passes it on to the checks."""
    bench = _bench()
    bounds = {s.num: s.check_rel_l2_bound for s in bench.discover()}
    assert bounds[15] == bench.CHECK_REL_L2 == 2e-2
    assert bounds[16] == 6e-2
    assert bench.CHECK_BOUND_RE.search("// lineage-check: rel-L2 < 1.5e-1\n").group(1) == "1.5e-1"
    assert bench.CHECK_BOUND_RE.search("int x; // lineage-check: rel-L2 < 0.1") is None  # a line of its own only


def test_timing_without_a_gpu_stops_before_compiling():
    """Without CUDA there is nothing to time: the script says so at once (exit 2), before minutes of nvcc."""
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    proc = subprocess.run([sys.executable, str(BENCH), "--steps", "01_", "--out", os.devnull], cwd=REPO,
                          capture_output=True, text=True, timeout=120, env=env)
    assert proc.returncode == 2 and "CUDA is not available" in proc.stderr and "[build]" not in proc.stderr
