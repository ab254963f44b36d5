"""The wheel holds the kernel's CUDA sources and the installed package finds them: what `pip install .`,
`pip install git+...` and a built wheel rely on to run the kernel (it is built from them on first use). Built from
a copy of the checkout, as pip builds a git URL; installed into a temporary folder and imported from outside the
source tree. The GPU half (the wheel on the device runs the kernel) is the integrator's command in docs/install.md."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from vidattn import _csrc, _ext
from _fake_toolchain import toolchain  # noqa: F401 - a fixture

REPO = Path(__file__).resolve().parent.parent
PACKAGING = ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE")


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    pytest.importorskip("setuptools", minversion="77")  # pyproject's build floor (the SPDX license, PEP 639)
    src = tmp_path_factory.mktemp("checkout")
    for name in PACKAGING:
        shutil.copy(REPO / name, src / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    shutil.copytree(REPO / "vidattn", src / "vidattn", ignore=ignore)
    shutil.copytree(REPO / "csrc", src / "csrc", ignore=ignore)  # with whatever else csrc/ holds: it must not ship
    out = tmp_path_factory.mktemp("wheelhouse")
    subprocess.run([sys.executable, "-m", "pip", "wheel", str(src), "--no-deps", "--no-build-isolation", "-q",
                    "-w", str(out)], check=True, capture_output=True, text=True, timeout=600)
    (whl,) = out.glob("vidattn-*.whl")
    return whl


def test_wheel_holds_exactly_the_kernel_sources(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    shipped = {n[len("vidattn/csrc/"):] for n in names if n.startswith("vidattn/csrc/")}
    expected = {p.relative_to(REPO / "csrc").as_posix() for p in _csrc.kernel_sources(REPO / "csrc")}
    assert "capi.cu" in shipped and "capi.h" in shipped and any(n.startswith("sm90/") for n in shipped)
    assert shipped == expected
    assert not any("lineage" in n or "experiments" in n or n.endswith(".patch") for n in names)


def test_wheel_declares_its_license_as_spdx_and_ships_the_text(wheel):
    # PEP 639: the expression and the file, not the deprecated table form setuptools stops building after 2027-02-18
    z = zipfile.ZipFile(wheel)
    (meta,) = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
    lines = z.read(meta).decode().splitlines()
    assert "License-Expression: Apache-2.0" in lines and "License-File: LICENSE" in lines
    assert not any(line.startswith("License: ") for line in lines)
    (lic,) = [n for n in z.namelist() if n.endswith(".dist-info/licenses/LICENSE")]
    assert z.read(lic).decode().lstrip().startswith("Apache License")


def test_installed_wheel_finds_its_sources_outside_the_checkout(wheel, tmp_path, toolchain):
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--no-deps", "--no-index", "-q", "--target", str(target),
                    str(wheel)], check=True, capture_output=True, text=True, timeout=300)
    env = dict(os.environ, PYTHONPATH=str(target), CUDA_HOME=str(toolchain.cuda_home),
               VIDATTN_CACHE_DIR=str(tmp_path / "cache"))
    code = ("import vidattn, vidattn._ext as e; print(vidattn.__file__); print(e.CSRC); "
            "print(e.library_name(e.find_nvcc())); print(e.build())")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    pkg, csrc, name, built = run.stdout.split()
    assert Path(pkg).is_relative_to(target) and Path(csrc) == target / "vidattn" / "csrc"
    # The same sources as the checkout: the same library name (hash of sources, flags and nvcc).
    assert name == _ext.library_name(str(toolchain.nvcc))
    assert Path(built).read_bytes() == toolchain.stub.read_bytes()  # built through the installed package


def test_import_and_calls_work_without_a_gpu_and_never_build(tmp_path):
    """No GPU and no nvcc on PATH or CUDA_HOME: import, explain and calls work, the reason is said once, nothing
    raises, and nvcc is never looked for (the device is checked first)."""
    env = {k: v for k, v in os.environ.items() if k not in ("CUDA_HOME", "CUDA_PATH", "VIDATTN_LIBRARY")}
    env.update(PATH="/usr/bin:/bin", CUDA_VISIBLE_DEVICES="", PYTHONPATH=str(REPO),
               VIDATTN_CACHE_DIR=str(tmp_path / "cache"), CUDA_HOME=str(tmp_path / "no-cuda"))
    code = ("import warnings, torch, vidattn; warnings.simplefilter('always'); "
            "q = torch.randn(1, 8, 2, 64, dtype=torch.bfloat16); "
            "print(vidattn.explain(q, q, q)); vidattn.attention(q, q, q); vidattn.attention(q, q, q); "
            "print(vidattn.kernel_available())")
    run = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    reason, available = run.stdout.strip().splitlines()
    assert "no CUDA GPU" in reason and available == "False"
    assert run.stderr.count("VidattnFallbackWarning") == 1, run.stderr
    assert not (tmp_path / "cache").exists()  # no build was attempted
