"""CPU checks of the device-side tooling: the benchmark's shape table, device_run.sh, and the GPU suite's skip."""
from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from _support import load_script

REPO = Path(__file__).resolve().parent.parent
BENCH = REPO / "scripts" / "bench_kernel.py"
DEVICE_RUN = REPO / "dev" / "probes" / "device_run.sh"

# The kernel table of /work/shared/ANCHORS.md: name, B, H, Sq, Skv, D.
ANCHOR_SHAPES = [
    ("seed 4K", 8, 16, 4096, 4096, 128),
    ("seed 8K", 4, 16, 8192, 8192, 128),
    ("seed 16K", 2, 16, 16384, 16384, 128),
    ("FA-bench 1K", 16, 16, 1024, 1024, 128),
    ("FA-bench 1K D64", 16, 32, 1024, 1024, 64),
    ("FA-bench 8K D64", 2, 32, 8192, 8192, 64),
    ("Wan2.1-1.3B self", 1, 12, 32760, 32760, 128),
    ("Wan2.1 cross 32760x512", 1, 12, 32760, 512, 128),
    ("Wan2.1-14B self", 1, 40, 32760, 32760, 128),
    ("HunyuanVideo 720p", 1, 24, 119056, 119056, 128),
    ("CogVideoX-5B", 1, 48, 17776, 17776, 64),
    ("LTX-Video", 1, 32, 24576, 24576, 64),
]


def _bench_module():
    return load_script(BENCH, register=True)


def _run(args, **kw):
    return subprocess.run(args, cwd=REPO, capture_output=True, text=True, timeout=120, **kw)


def test_dry_run_lists_all_shapes_with_flops():
    proc = _run([sys.executable, str(BENCH), "--dry-run"])
    assert proc.returncode == 0, proc.stderr
    rows = [line for line in proc.stdout.splitlines() if line.startswith("| ") and not line.startswith("| shape")]
    assert len(rows) == len(ANCHOR_SHAPES) == 12, proc.stdout
    for row, (name, b, h, sq, skv, d) in zip(rows, ANCHOR_SHAPES):
        cells = [c.strip() for c in row.strip("|").split("|")]
        assert cells[0] == name
        assert (int(cells[1]), int(cells[2]), cells[3], int(cells[4])) == (b, h, f"{sq} × {skv}", d)
        assert float(cells[5]) == pytest.approx(4 * b * h * sq * skv * d / 1e9, abs=0.06), name
    assert "12 shapes" in proc.stdout


def test_shape_table_matches_anchors():
    mod = _bench_module()
    assert [(s.name, s.b, s.h, s.sq, s.skv, s.d) for s in mod.SHAPES] == ANCHOR_SHAPES
    for s in mod.SHAPES:
        assert s.flops == 4 * s.b * s.h * s.sq * s.skv * s.d
    # HunyuanVideo is the big one: 174 TFLOP per call, q/k/v about 731 MB each in bf16.
    hv = next(s for s in mod.SHAPES if s.name.startswith("Hunyuan"))
    assert hv.flops == pytest.approx(1.7417e14, rel=1e-3)


def test_shape_filter_and_backends():
    mod = _bench_module()
    assert [s.name for s in mod.select_shapes(["wan"])] == [
        "Wan2.1-1.3B self", "Wan2.1 cross 32760x512", "Wan2.1-14B self"]
    args = mod.parse_args(["--shapes", "seed 4K,LTX", "--backends", "vidattn,cudnn"])
    assert [s.name for s in mod.select_shapes(args.shapes)] == ["seed 4K", "LTX-Video"]
    assert args.backends == ["vidattn", "cudnn"]
    with pytest.raises(SystemExit):
        mod.parse_args(["--backends", "vidattn,nope"])
    proc = _run([sys.executable, str(BENCH), "--dry-run", "--shapes", "no-such-shape"])
    assert proc.returncode == 2


def test_out_path_resolution(tmp_path):
    mod = _bench_module()
    p = mod.resolve_out(str(tmp_path) + "/")
    assert p.parent == tmp_path and re.fullmatch(r"kernel_\d{4}-\d\d-\d\d_[\w-]+\.json", p.name)
    assert mod.resolve_out(str(tmp_path)).parent == tmp_path  # existing directory
    assert mod.resolve_out(str(tmp_path / "x.json")) == tmp_path / "x.json"
    assert mod.resolve_out(None).parent == REPO / "bench" / "results"


def test_results_table_renders_errors_and_ratios():
    mod = _bench_module()
    ok = {"name": "seed 4K", "b": 8, "h": 16, "sq": 4096, "skv": 4096, "d": 128,
          "tflops": {"vidattn": 650.0, "sdpa": 600.0, "cudnn": 610.0, "flash": 340.0}, "errors": {},
          "vidattn_over_cudnn": 650 / 610, "vidattn_over_sdpa": 650 / 600, "vidattn_kernel": True,
          "check_rel_l2_vs_sdpa": 3e-3, "check_passed": True}
    bad = {"name": "HunyuanVideo 720p", "b": 1, "h": 24, "sq": 119056, "skv": 119056, "d": 128,
           "tflops": {"sdpa": 560.0}, "errors": {"vidattn": "OutOfMemoryError: ...", "flash": "x"},
           "vidattn_kernel": False, "check_rel_l2_vs_sdpa": None, "check_passed": None}
    table = mod.results_table([ok, bad], list(mod.BACKENDS)).splitlines()
    assert len(table) == 4
    assert "| 650 | 600 | 610 | 340 | 1.066 | 1.083 | yes | 3.0e-03 |" in table[2]
    assert "| err | 560 | - | err | - | - | NO | - |" in table[3]


def test_device_run_sh_syntax():
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not available")
    proc = _run([bash, "-n", str(DEVICE_RUN)])
    assert proc.returncode == 0, proc.stderr


def test_device_run_sh_rejects_unknown_stage(tmp_path):
    bash = shutil.which("bash")
    if bash is None:
        pytest.skip("bash not available")
    proc = _run([bash, str(DEVICE_RUN), "no-such-stage"], env={"OUT": str(tmp_path), "PATH": "/usr/bin:/bin"})
    assert proc.returncode == 2
    assert "unknown stage" in proc.stderr
    assert not any(tmp_path.iterdir())  # refused before doing anything


def test_sanitizer_cases_compiles():
    src = (REPO / "tests" / "sanitizer_cases.py").read_text()
    compile(src, "sanitizer_cases.py", "exec")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the skip path, which only happens without CUDA")
def test_gpu_suite_skips_cleanly_without_cuda():
    proc = _run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rs",
                 "tests/test_kernel_gpu.py"])
    assert proc.returncode in (0, 5), proc.stdout + proc.stderr  # 5: nothing collected (module skipped)
    assert "1 skipped" in proc.stdout and "error" not in proc.stdout.lower(), proc.stdout


def test_bench_round_order_defaults_to_the_balanced_design():
    """bench_kernel.py times four rounds by default in the Williams order (bench/round_order.py), takes
    --order rotated for the earlier scheme, and refuses other orders."""
    mod = _bench_module()
    args = mod.parse_args([])
    assert (args.order, args.rounds) == ("williams", 4)
    assert mod.parse_args(["--order", "rotated", "--rounds", "8"]).order == "rotated"
    with pytest.raises(SystemExit):
        mod.parse_args(["--order", "random"])


def test_bench_times_and_records_the_same_backends():
    """The backends a run times and the ones its config's round orders name are one list: without vidattn (its
    import failed) the SDPA backends still run, and the orders leave vidattn out too."""
    bench = _bench_module()
    assert bench.timed_backends(["vidattn", "sdpa", "cudnn", "flash"], object()) == ["vidattn", "sdpa", "cudnn",
                                                                                      "flash"]
    assert bench.timed_backends(["vidattn", "sdpa", "cudnn", "flash"], None) == ["sdpa", "cudnn", "flash"]
    assert bench.timed_backends(["cudnn"], None) == ["cudnn"]


def test_device_env_installs_the_first_wheel_folder_only(tmp_path):
    """dev/device_env.sh's install_wheels (sourced by the device scripts): pip is handed the wheels of the first
    folder that has any, /tmp/site goes first on PYTHONPATH, and with no wheels nothing runs and nothing changes."""
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text('#!/bin/sh\necho "$@" >> "$CALLS"\n')
    (fake / "python3").chmod(0o755)
    (tmp_path / "empty").mkdir()
    for folder in ("b", "c"):
        (tmp_path / folder).mkdir()
        (tmp_path / folder / f"{folder}-1.0-py3-none-any.whl").write_text("")
    env = {"PATH": f"{fake}:/usr/bin:/bin", "CALLS": str(tmp_path / "calls"), "PYTHONPATH": "/keep"}
    script = f'source {REPO / "dev/device_env.sh"}; install_wheels "$@"; echo "$PYTHONPATH"'

    def install(*folders):
        return subprocess.run(["bash", "-c", script, "-", *folders], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=30, check=True).stdout.strip()

    assert install("missing", "empty") == "/keep" and not (tmp_path / "calls").exists()
    assert install("missing", "b", "c") == "/tmp/site:/keep"
    calls = (tmp_path / "calls").read_text().splitlines()
    assert len(calls) == 1 and calls[0].endswith("--target /tmp/site b/b-1.0-py3-none-any.whl"), calls
    for name in ("device_8bit_e2e.sh", "device_final.sh"):
        text = (REPO / "dev" / name).read_text()
        assert "source dev/device_env.sh" in text and "pip install" not in text, name
        subprocess.run(["bash", "-n", str(REPO / "dev" / name)], check=True)


@pytest.mark.parametrize("argv,msg", [(["--rounds", "0"], "--rounds must be >= 1"),
                                      (["--backends", ","], "names no backend")])
def test_bench_kernel_refuses_a_run_that_measures_nothing(argv, msg, capsys):
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_kernel_args", REPO / "scripts" / "bench_kernel.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    with pytest.raises(SystemExit):
        mod.parse_args(argv + ["--dry-run"])
    assert msg in capsys.readouterr().err
