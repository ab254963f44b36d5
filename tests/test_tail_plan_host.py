"""csrc/tail_plan.h, compiled with the host compiler (no GPU, no CUDA): the tail launch's split search that capi.cu's
plan_tail and capi_8bit.cuh's q8_plan_tail share, against dev/stress/budget.py's model of it over a grid of last
rounds, at both paths' constants; and env_default, the reader of every run-time switch's environment variable."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from dev.stress import budget  # noqa: E402

CXX = shutil.which("g++") or shutil.which("c++")
pytestmark = pytest.mark.skipif(CXX is None, reason="no host C++ compiler")

DRIVER = r"""
#include <cstdio>
#include "tail_plan.h"
int main(int argc, char** argv) {
  if (argc > 1) {  // env_default of the variable VIDATTN_TEST_SWITCH, build default 7, range [lo, hi] = argv[1..2]
    std::printf("%d\n", vidattn::env_default("VIDATTN_TEST_SWITCH", 7, std::atoi(argv[1]), std::atoi(argv[2])));
    return 0;
  }
  long long r, nb, sms, min_blocks, max_splits, items;
  while (std::scanf("%lld %lld %lld %lld %lld %lld", &r, &nb, &sms, &min_blocks, &max_splits, &items) == 6)
    std::printf("%lld\n", static_cast<long long>(vidattn::cheapest_tail_split(r, nb, sms, min_blocks, max_splits,
                                                                              items)));
  return 0;
}
"""


@pytest.fixture(scope="module")
def driver(tmp_path_factory):
    d = tmp_path_factory.mktemp("tail_plan")
    (d / "driver.cpp").write_text(DRIVER)
    exe = d / "driver"
    subprocess.run([CXX, "-std=c++17", "-O1", "-I", str(REPO / "csrc"), str(d / "driver.cpp"), "-o", str(exe)],
                   check=True, capture_output=True, text=True, timeout=120)
    return exe


def test_split_search_matches_the_model(driver):
    """Every (r, nb, SMs) of the grid, at the exact plan's constants (3 blocks a range, 32 splits, 2 ranges an SM) and
    the 8-bit plan's (4, 32, 2): the compiled search picks what budget.cheapest_tail_split picks."""
    consts = [(budget.EXACT_TAIL_MIN_BLOCKS, budget.EXACT_TAIL_MAX_SPLITS, budget.TAIL_ITEMS_PER_SM),
              (budget.Q8_TAIL_MIN_BLOCKS, budget.Q8_TAIL_MAX_SPLITS, budget.Q8_TAIL_MAX_ITEMS_PER_SM)]
    cases = [(r, nb, sms, *c) for sms in (132, 114, 78) for r in (1, 2, 4, 8, 36, 52, 66, 67, 68, 84, 100, sms - 1)
             if r < sms for nb in (1, 3, 8, 12, 33, 47, 63, 127, 156, 187, 256, 512, 2000) for c in consts]
    out = subprocess.run([str(driver)], input="\n".join(" ".join(map(str, c)) for c in cases), capture_output=True,
                         text=True, check=True, timeout=60).stdout.split()
    assert len(out) == len(cases)
    got = [int(x) for x in out]
    want = [budget.cheapest_tail_split(*c) for c in cases]
    assert got == want, [(c, g, w) for c, g, w in zip(cases, got, want) if g != w][:5]
    assert any(s >= 2 for s in got) and any(s == 1 for s in got)  # the grid has plans and refusals
    # the shapes the notes name: D=256 32K (68 tiles of 512 blocks) 3 ranges; Wan 1.3B at 8 bits (72 of 256) 3
    assert budget.cheapest_tail_split(68, 512, 132, 3, 32, 2) == 3
    assert budget.cheapest_tail_split(72, 256, 132, 4, 32, 2) == 3


@pytest.mark.parametrize("value,lo,hi,want", [(None, 0, 2, 7), ("", 0, 2, 7), ("1", 0, 2, 1), ("2", 0, 2, 2),
                                              ("3", 0, 2, 7), ("-1", 0, 2, 7), ("0", 1, 2, 7), ("x", 1, 2, 7)])
def test_env_default(driver, value, lo, hi, want):
    """The variable's value inside [lo, hi], else the build default (unset, empty, out of range, not a number)."""
    env = {k: v for k, v in os.environ.items() if k != "VIDATTN_TEST_SWITCH"}
    if value is not None:
        env["VIDATTN_TEST_SWITCH"] = value
    out = subprocess.run([str(driver), str(lo), str(hi)], env=env, capture_output=True, text=True, check=True,
                         timeout=30).stdout
    assert int(out) == want
