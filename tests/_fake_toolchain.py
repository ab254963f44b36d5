"""A fake nvcc and a stub kernel library, so the build cache, its locks and every load/launch failure can be tested
on a CPU in seconds: the fake nvcc sleeps, counts its runs and writes the stub (a real shared object with the C ABI,
compiled by the system C compiler) where nvcc would write the kernel library."""
from __future__ import annotations

import os
import shutil
import subprocess
import textwrap
from pathlib import Path

import pytest

STUB_C = textwrap.dedent("""
    #include <stdint.h>
    #include <stdlib.h>
    static int g_block_n = 0;
    int vidattn_sm90_fwd(const void* args, void* stream) { (void)args; (void)stream; return 1; }
    const char* vidattn_sm90_last_error(void) {
      const char* e = getenv("STUB_LAUNCH_ERROR");
      return e ? e : "stub library: launch refused";
    }
    uint64_t vidattn_sm90_workspace_bytes(void) { return 0; }
    int vidattn_sm90_set_d128_block_n(int n) {
      if (n != 0 && n != 128 && n != 176) return 1;
      g_block_n = n;
      return 0;
    }
    int vidattn_sm90_last_block_n(void) { return g_block_n; }
""")

# Writes half a file first, so a build killed while it sleeps leaves a partial temporary file behind, as a real
# nvcc killed mid-link would.
FAKE_NVCC = textwrap.dedent("""\
    #!/usr/bin/env bash
    if [ "$1" = "--version" ]; then echo "Cuda compilation tools, release 99.0, fake"; exit 0; fi
    out=""
    while [ $# -gt 0 ]; do
      if [ "$1" = "-o" ]; then out="$2"; shift; fi
      shift
    done
    echo "$$" >> "{count}"
    printf 'partial' > "$out"
    sleep "${{FAKE_NVCC_SLEEP:-0}}"
    if [ -n "$FAKE_NVCC_FAIL" ]; then echo "fake nvcc: error" >&2; exit 2; fi
    cp "{stub}" "$out"
    echo "ptxas info    : Compiling entry function 'fake'"
""")


class Toolchain:
    def __init__(self, root: Path):
        self.root = root
        self.stub = root / "libstub.so"
        self.count_file = root / "nvcc_runs.txt"
        self.cuda_home = root / "cuda"
        self.nvcc = self.cuda_home / "bin" / "nvcc"

    def runs(self) -> int:
        return len(self.count_file.read_text().split()) if self.count_file.exists() else 0


@pytest.fixture
def toolchain(tmp_path_factory) -> Toolchain:
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler for the stub library")
    tc = Toolchain(tmp_path_factory.mktemp("toolchain"))
    src = tc.root / "stub.c"
    src.write_text(STUB_C)
    subprocess.run([cc, "-shared", "-fPIC", "-o", str(tc.stub), str(src)], check=True)
    tc.nvcc.parent.mkdir(parents=True)
    tc.nvcc.write_text(FAKE_NVCC.format(count=tc.count_file, stub=tc.stub))
    tc.nvcc.chmod(0o755)
    return tc
