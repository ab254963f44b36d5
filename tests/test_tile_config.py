"""csrc/sm90/tile_config.cuh's shared-memory plan, on the CPU: the header has no CUDA in it, so a host compiler
evaluates FwdTraits for every build the launcher has and this test checks what each build is meant to get (Q
buffers, K/V stages, O scratch boxes) and that it fits in the 227 KB a block may opt into. Skipped without g++."""
from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
BUILDS = [(128, 2, 176), (128, 2, 128), (64, 3, 128), (64, 2, 128),  # (head dim, consumer warpgroups, kBlockN)
          (192, 2, 112), (256, 2, 80), (192, 2, 96), (256, 2, 64)]

PROGRAM = """
#include <cstdio>
#include "sm90/tile_config.cuh"
using namespace vidattn::sm90;
template <int D, int W, int N> void show() {
  using T = FwdTraits<D, W, N>;
  std::printf("%d %d %d %d %d %d %d %d %d %d %d %d\\n", D, W, N, T::kQBuffers, T::kStages, T::kOScratchSlots,
              T::kQBytes, T::kStageBytes, T::kOScratchBytes, int(T::kQInRegs), int(T::kOInQ), int(T::kDeferOStore));
}
int main() { SHOW_CALLS }
"""


def plans(tmp_path: Path, defines: tuple[str, ...] = ()) -> dict:
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "plan.cpp"
    src.write_text(PROGRAM.replace("SHOW_CALLS", " ".join(f"show<{d}, {w}, {n}>();" for d, w, n in BUILDS)))
    exe = tmp_path / "plan"
    subprocess.run([cxx, "-std=c++17", *defines, "-I", str(REPO / "csrc"), str(src), "-o", str(exe)], check=True)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        d, w, n, q, st, slots, qb, sb, ob, qregs, o_in_q, defer = map(int, line.split())
        # kOInQ: O's boxes are in Q's buffer, no scratch of their own
        rows[(d, w, n)] = {"q": q, "stages": st, "slots": slots,
                           "bytes": q * qb + st * sb + (0 if o_in_q else slots * ob),
                           "q_in_regs": bool(qregs), "o_in_q": bool(o_in_q), "defer": bool(defer)}
    return rows


def test_each_build_gets_its_buffers_and_fits(tmp_path):
    p = plans(tmp_path)
    # N=176 at D=128: two K/V stages leave room for neither a second Q buffer nor a second O box.
    assert (p[(128, 2, 176)]["q"], p[(128, 2, 176)]["stages"], p[(128, 2, 176)]["slots"]) == (1, 2, 1)
    # The short-key build exists for its second Q buffer and second O box, beside two K/V stages.
    assert (p[(128, 2, 128)]["q"], p[(128, 2, 128)]["stages"], p[(128, 2, 128)]["slots"]) == (2, 2, 2)
    for build in [(64, 3, 128), (64, 2, 128)]:
        assert p[build]["slots"] == 1 and p[build]["stages"] >= 2, build  # D=64 has one O chunk
    for build, row in p.items():
        # 2 KB stay free for the barriers and redo marks (SharedStorage), 1 KB for the launcher's alignment pad.
        assert row["bytes"] <= 227 * 1024 - 2048, (build, row)


def test_wide_head_dim_builds_store_o_through_q(tmp_path):
    p = plans(tmp_path)
    # N=112 at D=192 and N=80 at D=256 fit two stages only without the separate O scratch: one Q buffer, a box per
    # 64-column chunk (in the warp's own Q rows), and no O store deferred under the next tile's S_0 (it needs the
    # next Q, in the same buffer).
    for build, chunks in (((192, 2, 112), 3), ((256, 2, 80), 4)):
        assert (p[build]["o_in_q"], p[build]["q"], p[build]["stages"], p[build]["slots"], p[build]["defer"]) == (
            True, 1, 2, chunks, False), build
    # The narrow builds keep the separate scratch and the deferred store, as before.
    for build in ((192, 2, 96), (256, 2, 64)):
        assert (p[build]["o_in_q"], p[build]["stages"], p[build]["defer"]) == (False, 2, True), build
    for build in ((128, 2, 176), (128, 2, 128), (64, 3, 128), (64, 2, 128)):
        assert not p[build]["o_in_q"], build


def test_o_in_q_off_leaves_the_wide_widths_without_two_stages(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src = tmp_path / "wide.cpp"
    src.write_text('#include "sm90/tile_config.cuh"\nint main() { return vidattn::sm90::FwdTraits<256, 2, 80>::kStages; }\n')
    r = subprocess.run([cxx, "-std=c++17", "-DVIDATTN_O_IN_Q=0", "-I", str(REPO / "csrc"), str(src), "-o",
                        str(tmp_path / "wide")], capture_output=True, text=True)
    assert r.returncode != 0 and "fewer than 2 K/V stages" in r.stderr


def test_o_scratch_slots_max_takes_only_the_second_box(tmp_path):
    p = plans(tmp_path, ("-DVIDATTN_O_SCRATCH_SLOTS_MAX=1",))
    assert (p[(128, 2, 128)]["q"], p[(128, 2, 128)]["stages"], p[(128, 2, 128)]["slots"]) == (2, 2, 1)


def test_q_in_registers_only_where_the_registers_are(tmp_path):
    p = plans(tmp_path)
    # The N=128 D=128 build holds Q in registers; N=176 has no 32 registers to spare, D=64 never takes it.
    assert {b: r["q_in_regs"] for b, r in p.items()} == {(128, 2, 176): False, (128, 2, 128): True,
                                                        (64, 3, 128): False, (64, 2, 128): False,
                                                        (192, 2, 112): False, (256, 2, 80): False,
                                                        (192, 2, 96): False, (256, 2, 64): False}
    off = plans(tmp_path, ("-DVIDATTN_Q_IN_REGS_MAX_N=0",))
    assert not any(r["q_in_regs"] for r in off.values())
    # Q in registers leaves the shared-memory plan alone (Q still lands there first).
    assert {b: r["bytes"] for b, r in off.items()} == {b: r["bytes"] for b, r in p.items()}
