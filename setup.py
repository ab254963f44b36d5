"""Packaging hook: ships the kernel's CUDA sources inside the wheel as vidattn/csrc/.

The kernel is compiled on first use, not at install time (docs/install.md says why), so a wheel needs its sources:
`build_py` copies the files vidattn/_csrc.py names from csrc/ into the package. Everything else about the package is
in pyproject.toml.
"""
import importlib.util
import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent


def _kernel_sources():
    # Loaded by path: importing the vidattn package would import torch, which an isolated build has not got.
    spec = importlib.util.spec_from_file_location("_vidattn_csrc", ROOT / "vidattn" / "_csrc.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod.kernel_sources(ROOT / "csrc")


class BuildPyWithKernelSources(build_py):
    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):  # an editable install reads csrc/ in the checkout itself
            return
        dest = Path(self.build_lib) / "vidattn" / "csrc"
        sources = _kernel_sources()
        if not sources:
            raise SystemExit(f"vidattn: no kernel sources under {ROOT / 'csrc'}; cannot build a wheel that runs the "
                             "kernel")
        for src in sources:
            out = dest / src.relative_to(ROOT / "csrc")
            out.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, out)


setup(cmdclass={"build_py": BuildPyWithKernelSources})
