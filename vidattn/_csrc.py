"""Which files under csrc/ make up the shipped kernel: the one place both the wheel build (setup.py, which loads
this file by path, without torch) and the library cache key (vidattn/_ext.py) read it, so the wheel always holds
exactly the sources the build hashes and compiles.

csrc/ also holds the kernel developer's material next to the shipped kernel in some checkouts (lineage steps,
experiment patches, the code generator); none of it is compiled into the library, so none of it ships.
"""
from __future__ import annotations

from pathlib import Path

SUFFIXES = (".cu", ".cuh", ".h")
# Folders of csrc/ that are not part of the library build.
EXCLUDED_DIRS = ("lineage", "experiments", "tools")
ENTRY = "capi.cu"  # the library's main translation unit; it #includes everything else but the next
# Every translation unit the library is compiled from, in one nvcc call: capi_sparse.cu holds the block-sparse builds
# (it says why they stay out of capi.cu's module).
ENTRIES = ("capi.cu", "capi_sparse.cu")


def kernel_sources(root: Path) -> list[Path]:
    """The kernel's source files under `root` (a csrc/ folder), sorted, as absolute paths."""
    root = Path(root)
    return sorted(p for p in root.rglob("*")
                  if p.is_file() and p.suffix in SUFFIXES
                  and not any(part in EXCLUDED_DIRS for part in p.relative_to(root).parts[:-1]))
