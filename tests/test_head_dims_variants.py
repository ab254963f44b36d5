"""The head-dim A/B variants on the CPU: the shared-memory and register arithmetic of the two extra builds
(csrc/sm90/tile_config.cuh, VIDATTN_BLOCK_N_D96_3WG and VIDATTN_BLOCK_N_D192_SHORT) recomputed here, the C switches'
declarations and routing guards, and the Python setters (values, errors, the environment variables read at load)
against a stand-in library. The kernels themselves: tests/test_head_dims_variants_gpu.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from vidattn import _ext

ROOT = Path(__file__).resolve().parent.parent
SMEM_BUDGET = 227 * 1024


def _macro(name: str) -> int:
    text = (ROOT / "csrc/sm90/tile_config.cuh").read_text()
    return int(re.search(rf"#define {name} (\d+)", text).group(1))


def layout(d: int, wgs: int, n: int) -> dict:
    """FwdTraits' shared-memory plan (tile_config.cuh) for a build with the separate O scratch."""
    pad = -(-d // 64) * 64
    q = 64 * wgs * pad * 2
    stage = 2 * n * pad * 2
    free = SMEM_BUDGET - 2048 - wgs * 4 * 16 * 64 * 2
    q_buffers = 2 if (free - 2 * q) // stage >= 2 else 1
    return {"q_buffers": q_buffers, "stages": min(4, (free - q_buffers * q) // stage)}


def test_d96_three_warpgroups_fits_two_q_buffers_and_160_registers():
    n = _macro("VIDATTN_BLOCK_N_D96_3WG")
    assert n % 16 == 0
    assert layout(96, 3, n) == {"q_buffers": 2, "stages": 2}
    # S + P + O per consumer thread, at most what D=64's three-warpgroup build holds in its 160 (64 + 32 + 32 at
    # N=128); ptxas spills at N=112 (132)
    assert n // 2 + n // 4 + 96 // 2 <= 128 < (n + 16) // 2 + (n + 16) // 4 + 96 // 2


def test_d192_short_build_has_two_q_buffers_and_differs_from_the_others():
    n = _macro("VIDATTN_BLOCK_N_D192_SHORT")
    assert n % 16 == 0 and n not in (_macro("VIDATTN_BLOCK_N_D192"), _macro("VIDATTN_BLOCK_N_D192_NARROW"))
    assert layout(192, 2, n) == {"q_buffers": 2, "stages": 2}
    assert layout(192, 2, n + 16)["q_buffers"] == 1  # the widest block that keeps the second Q buffer
    assert n // 2 + n // 4 + 192 // 2 <= 196


def test_three_warpgroups_allowed_only_where_registers_allow():
    text = (ROOT / "csrc/sm90/tile_config.cuh").read_text()
    assert "kWGs == 3 && kHeadDim <= 96" in text


def test_c_switches_are_declared_and_bf16_only():
    header = (ROOT / "csrc/capi.h").read_text()
    src = (ROOT / "csrc/capi.cu").read_text()
    for fn in ("vidattn_sm90_set_d96_warpgroups", "vidattn_sm90_set_d192_block_n"):
        assert f"int {fn}(int" in header and f'extern "C" int {fn}(int' in src
    # the variants are instantiated for bf16 only: each launch is guarded by !fp16 and names kFp16 = false
    assert re.search(r"g_d96_warpgroups == 3 && !fp16\)\s*return launch<96, 3, VIDATTN_BLOCK_N_D96_3WG, false>", src)
    assert re.search(r"g_d192_block_n == kD192Short && !fp16 && a->head_dim <= 192\) return launch<192, 2, "
                     r"kD192Short, false>", src)


class FakeLib:
    """The two C switches as csrc/capi.cu defines them: 0 on an accepted value, 1 otherwise."""

    def __init__(self):
        self.wgs, self.n = 0, 0

    def vidattn_sm90_set_d96_warpgroups(self, v):
        if v not in (0, 2, 3):
            return 1
        self.wgs = v
        return 0

    def vidattn_sm90_set_d192_block_n(self, v):
        if v not in (0, 112, 64):
            return 1
        self.n = v
        return 0


def test_setters_pass_values_and_raise_on_refusal():
    lib = FakeLib()
    _ext.set_d96_warpgroups(3, lib)
    _ext.set_d192_block_n(64, lib)
    assert (lib.wgs, lib.n) == (3, 64)
    with pytest.raises(ValueError, match="D=96 warpgroups"):
        _ext.set_d96_warpgroups(4, lib)
    with pytest.raises(ValueError, match="D=192 block width"):
        _ext.set_d192_block_n(96, lib)
    assert (lib.wgs, lib.n) == (3, 64)


def test_context_managers_restore_the_load_time_setting(monkeypatch):
    lib = FakeLib()
    monkeypatch.delenv("VIDATTN_D96_WARPGROUPS", raising=False)
    monkeypatch.setenv("VIDATTN_D192_BLOCK_N", "112")
    with _ext.d96_warpgroups(3, lib), _ext.d192_block_n(64, lib):
        assert (lib.wgs, lib.n) == (3, 64)
    assert (lib.wgs, lib.n) == (0, 112)


def test_library_without_the_switches_says_it_predates_them():
    with pytest.raises(RuntimeError, match="predates the head-dim A/B variants"):
        _ext.set_d96_warpgroups(3, object())


def test_switches_are_read_from_the_environment_at_load():
    table = {env: setter for _, env, setter in _ext._FORCED_BUILDS}
    assert table["VIDATTN_D96_WARPGROUPS"] is _ext.set_d96_warpgroups
    assert table["VIDATTN_D192_BLOCK_N"] is _ext.set_d192_block_n


def _ab():
    import importlib.util
    spec = importlib.util.spec_from_file_location("hd_variants_ab", ROOT / "dev/probes/hd_variants_ab.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_ab_times_each_variant_only_where_it_runs():
    ab = _ab()
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 72)] == ["today", "d96_3wg", "pad128"]
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 192)] == ["today", "d192_n64", "narrow"]
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 256)] == ["today", "narrow"]
    # every shape the brief's bars miss is in the default run
    names = {s[0] for s in ab.SHAPES}
    assert {"D192 1K", "D192 8K", "D256 1K", "D256 32K", "Allegro D96", "D72 8K"} <= names


def test_ab_table_picks_the_best_vidattn_side_and_its_ratios():
    ab = _ab()
    row = {"shape": "D192 1K", "tflops": {"today": 600.0, "d192_n64": 660.0, "narrow": 630.0, "cudnn": 550.0,
                                          "fa3": 600.0}}
    line = ab.table([row]).splitlines()[1].split(" | ")
    assert line[8:] == ["d192_n64", "1.100", "1.100", "1.200", "1.000", "1.091"]
    line = ab.table([{"shape": "x", "tflops": {"today": 500.0, "cudnn": 450.0}}]).splitlines()[1].split(" | ")
    assert line[6] == "-" and line[8:11] == ["today", "1.000", "-"]


def test_ab_refuses_without_a_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        _ab().main(["--rounds", "1"])
