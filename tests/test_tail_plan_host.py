"""csrc/tail_plan.h, compiled with the host compiler (no GPU, no CUDA): the tail launch's split search that capi.cu's
plan_tail and capi_8bit.cuh's q8_plan_tail share, against dev/stress/budget.py's model of it over a grid of last
rounds, at both paths' constants; the balanced tail's chunk and the pieces the kernel and the merge derive from it;
env_default, the reader of every run-time switch's environment variable; and grouped_kv_heads, the key/value head
count both forward entries and the 8-bit workspace size take from the arguments."""
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
#include <cstring>
#include "tail_plan.h"
int main(int argc, char** argv) {
  if (argc > 1 && std::strcmp(argv[1], "balanced") == 0) {
    // per line "r nb sms min_blocks": the chunk u, then (u > 0) every item's piece "tile first end absent" and every
    // tail tile's pieces as the merge lists them, "count item..."
    long long r, nb, sms, mb;
    while (std::scanf("%lld %lld %lld %lld", &r, &nb, &sms, &mb) == 4) {
      const long long u = vidattn::balanced_tail_chunk(r, nb, sms, mb);
      std::printf("%lld", u);
      if (u > 0) {
        for (int item = 0; item < 2 * sms; ++item) {
          const vidattn::BalancedPiece x = vidattn::balanced_piece(item, (int)u, (int)nb, (int)sms, (int)r);
          std::printf(" %d %d %d %d", x.tile, x.first, x.end, x.absent ? 1 : 0);
        }
        for (int t = 0; t < r; ++t) {
          const long long n = vidattn::balanced_tail_pieces(t, nb, u);
          std::printf(" %lld", n);
          for (int s = 0; s < n; ++s)
            std::printf(" %lld", (long long)vidattn::balanced_piece_item(t, s, (int)u, (int)nb, (int)sms));
        }
      }
      std::printf("\n");
    }
    return 0;
  }
  if (argc > 1 && std::strcmp(argv[1], "kvheads") == 0) {  // per line "heads kv_heads": grouped_kv_heads
    long long h, kv;
    while (std::scanf("%lld %lld", &h, &kv) == 2) std::printf("%lld\n", (long long)vidattn::grouped_kv_heads(h, kv));
    return 0;
  }
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


def test_balanced_tail_pieces_cover_every_tile_once(driver):
    """The balanced tail (VIDATTN_TAIL_ROUNDS=3): the chunk is budget.balanced_tail_chunk's; where there is one, the
    pieces the kernel's CTAs run (balanced_piece: item k x SMs + g is CTA g's k-th) cover each tail tile's blocks
    exactly once, no CTA runs more than the chunk, only a CTA's last item is absent, and the merge's list of a tile's
    pieces (balanced_tail_pieces, balanced_piece_item) is exactly the items holding that tile, in key order."""
    cases = [(r, nb, sms, budget.EXACT_TAIL_MIN_BLOCKS) for sms in (132, 114, 78)
             for r in (1, 8, 40, 66, 67, 68, 84, 92, 100, sms - 1) if r < sms
             for nb in (1, 3, 12, 25, 47, 103, 127, 410, 2000)]
    out = subprocess.run([str(driver), "balanced"], input="\n".join(" ".join(map(str, c)) for c in cases),
                         capture_output=True, text=True, check=True, timeout=60).stdout.splitlines()
    assert len(out) == len(cases)
    planned = 0
    for (r, nb, sms, mb), line in zip(cases, out):
        v = [int(x) for x in line.split()]
        u = v[0]
        assert u == budget.balanced_tail_chunk(r, nb, sms, mb), (r, nb, sms)
        if u == 0:
            continue
        planned += 1
        assert u <= nb and u * sms >= r * nb, (r, nb, sms, u)
        pieces = [tuple(v[1 + 4 * i:5 + 4 * i]) for i in range(2 * sms)]
        covered = [[0] * nb for _ in range(r)]
        for item, (tile, first, end, absent) in enumerate(pieces):
            k, g = divmod(item, sms)
            assert 0 <= tile < r, (r, nb, sms, item)
            if absent:
                assert k == 1 or pieces[item + sms][3] == 1, f"only a CTA's last item is absent: {(r, nb, sms, item)}"
                continue
            assert 0 <= first < end <= nb, (r, nb, sms, item)
            for b in range(first, end):
                covered[tile][b] += 1
        assert all(c == 1 for row in covered for c in row), (r, nb, sms)
        for g in range(sms):
            run = sum(e - f for t, f, e, a in (pieces[g], pieces[g + sms]) if not a)
            assert run <= u, (r, nb, sms, g)
        at = 1 + 8 * sms
        for t in range(r):
            n, items = v[at], v[at + 1:at + 1 + v[at]]
            at += 1 + n
            assert n == budget.balanced_tail_pieces(t, nb, u)
            want = sorted((pieces[i][1], i) for i in range(2 * sms) if not pieces[i][3] and pieces[i][0] == t)
            assert items == [i for _, i in want], (r, nb, sms, t)
        assert at == len(v)
    assert planned >= 10  # the grid holds plans (and refusals: the small nb, the one-round shapes' small r)
    # the shapes the notes name: D=256 at 32K (68 tiles of 410 blocks) plans, at 8K (100 of 103) not (call P48's loss)
    assert budget.balanced_tail_chunk(68, 410, 132, 3) == 212 and budget.balanced_tail_chunk(100, 103, 132, 3) == 0


def test_grouped_kv_heads(driver):
    """kv_heads 0 is as many as heads; a divisor of heads is itself (multi-query: 1); a negative count or one that does
    not divide heads is refused (0), which both forward entries turn into their kv_heads error."""
    cases = [(32, 0, 32), (32, 8, 8), (32, 1, 1), (32, 32, 32), (6, 4, 0), (32, 5, 0), (8, -1, 0), (8, 16, 0),
             (1, 0, 1), (1, 1, 1)]
    out = subprocess.run([str(driver), "kvheads"], input="\n".join(f"{h} {kv}" for h, kv, _ in cases),
                         capture_output=True, text=True, check=True, timeout=60).stdout.split()
    assert [int(x) for x in out] == [w for _, _, w in cases]


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
