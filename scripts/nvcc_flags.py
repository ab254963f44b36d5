#!/usr/bin/env python3
"""Prints the nvcc flags vidattn/_ext.py builds the kernel library with, one per line, read from its source (no
torch import), so every script that compiles csrc/ outside _ext (ci_kernel_check.sh, kernel_ab.sh) builds the
same way and cannot drift from the real build."""
import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "vidattn" / "_ext.py"


def nvcc_flags() -> list[str]:
    for node in ast.walk(ast.parse(SRC.read_text())):
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", "") == "NVCC_FLAGS":
            return list(ast.literal_eval(node.value))
    raise SystemExit(f"no NVCC_FLAGS assignment in {SRC}")


if __name__ == "__main__":
    print("\n".join(nvcc_flags()))
