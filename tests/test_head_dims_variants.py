"""The head-dim builds' routing on the CPU: the shared-memory and register arithmetic of the three-warpgroup D=96
build (csrc/sm90/tile_config.cuh, VIDATTN_BLOCK_N_D96_3WG) recomputed here, the launcher's picks (capi.cu,
pick_d96_three_wgs and pick_hd_narrow) mirrored in Python from the source's constants, the C switches' declarations
and guards, the Python setters against a stand-in library, and dev/probes/hd_variants_ab.py's timing helpers with a
stand-in clock. The kernels themselves: tests/test_head_dims_variants_gpu.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from _support import load_script

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


def test_three_warpgroups_allowed_only_where_registers_allow():
    text = (ROOT / "csrc/sm90/tile_config.cuh").read_text()
    assert "kWGs == 3 && kHeadDim <= 96" in text


def _capi_macro(name: str) -> float:
    text = (ROOT / "csrc/capi.cu").read_text()
    return float(re.search(rf"#define {name} ([0-9.]+)", text).group(1))


def pick_d96_three_wgs(seqlen_q: int, batch_heads: int, sms: int) -> bool:
    """capi.cu's pick_d96_three_wgs: rounds of 192-row tiles / gain against rounds of 128-row tiles."""
    gain = _capi_macro("VIDATTN_D96_THREE_WG_GAIN")
    t3 = -(-(-(-seqlen_q // 192) * batch_heads) // sms) * 192 / gain
    t2 = -(-(-(-seqlen_q // 128) * batch_heads) // sms) * 128
    return t3 <= t2


def pick_hd_narrow(head_dim: int, seqlen_kv: int) -> bool:
    """capi.cu's pick_hd_narrow at the default setting (0: by key count)."""
    name = "VIDATTN_D192_NARROW_KV_MAX" if head_dim <= 192 else "VIDATTN_D256_NARROW_KV_MAX"
    return seqlen_kv <= _capi_macro(name)


def test_d96_three_warpgroups_route_where_the_ab_gained():
    # (seqlen, batch x heads) of the A/B's rows on 132 SMs: three warpgroups gained at Allegro (+16%), D=72 / 96 / 80
    # 8K (+11, +2.5, +1.6%) and lost 2% at D=96 1K (one call per event pair: dev/NOTES.md)
    assert pick_d96_three_wgs(79200, 24, 132)
    assert pick_d96_three_wgs(8192, 2 * 28, 132) and pick_d96_three_wgs(8192, 2 * 21, 132)
    assert pick_d96_three_wgs(8192, 2 * 25, 132)
    assert not pick_d96_three_wgs(1024, 16 * 21, 132)
    # one tile per CTA or less: 192-row tiles are mostly padding at 129..192 rows and one round either way
    assert not pick_d96_three_wgs(130, 4, 132)


def test_narrow_routing_follows_the_back_to_back_ab():
    # D=192 narrow up to 2048 keys (it led at 1K in both A/Bs, the 8K row disagreed between them), D=256 wide everywhere
    assert all(pick_hd_narrow(d, n) for d in (160, 192) for n in (1, 1024, 2048))
    assert not any(pick_hd_narrow(d, n) for d in (160, 192) for n in (2049, 8192, 32768))
    assert not any(pick_hd_narrow(256, n) for n in (1, 1024, 8192, 32768))


def test_c_switches_are_declared_and_bf16_only():
    header = (ROOT / "csrc/capi.h").read_text()
    src = (ROOT / "csrc/capi.cu").read_text()
    for fn in ("vidattn_sm90_set_d96_warpgroups", "vidattn_sm90_set_hd_narrow"):
        assert f"int {fn}(int" in header and f'extern "C" int {fn}(int' in src
    # the three-warpgroup build is instantiated for bf16 only: its launch is guarded by !fp16 and names kFp16 = false
    assert re.search(r"g_d96_build != 128 && !fp16 &&\s*\(g_d96_warpgroups == 3 \|\|\s*\(g_d96_warpgroups == 0 && "
                     r"pick_d96_three_wgs\(a->seqlen_q, a->batch \* a->heads, sms\)\)\)\)\s*"
                     r"return launch<96, 3, VIDATTN_BLOCK_N_D96_3WG, false>", src)
    assert re.search(r"if \(!fp16 && kD192Narrow != kD192N && kD256Narrow != kD256N && "
                     r"pick_hd_narrow\(a->head_dim, a->seqlen_kv\)\)", src)
    # the D=192 N=64 build lost at every length and is gone (build time)
    assert "D192_SHORT" not in src + (ROOT / "csrc/sm90/tile_config.cuh").read_text()
    assert "set_d192_block_n" not in header


class FakeLib:
    """The two C switches as csrc/capi.cu defines them: 0 on an accepted value, 1 otherwise."""

    def __init__(self):
        self.wgs, self.narrow = 0, 0

    def vidattn_sm90_set_d96_warpgroups(self, v):
        if v not in (0, 2, 3):
            return 1
        self.wgs = v
        return 0

    def vidattn_sm90_set_hd_narrow(self, v):
        if v not in (0, 1, 2):
            return 1
        self.narrow = v
        return 0


def test_setters_pass_values_and_raise_on_refusal():
    lib = FakeLib()
    _ext.set_d96_warpgroups(3, lib)
    _ext.set_hd_narrow(2, lib)
    assert (lib.wgs, lib.narrow) == (3, 2)
    with pytest.raises(ValueError, match="D=96 warpgroups"):
        _ext.set_d96_warpgroups(4, lib)
    with pytest.raises(ValueError, match="VIDATTN_HD_NARROW"):
        _ext.set_hd_narrow(3, lib)
    assert (lib.wgs, lib.narrow) == (3, 2)


def test_context_managers_restore_the_load_time_setting(monkeypatch):
    lib = FakeLib()
    monkeypatch.delenv("VIDATTN_D96_WARPGROUPS", raising=False)
    monkeypatch.setenv("VIDATTN_HD_NARROW", "2")
    with _ext.d96_warpgroups(3, lib), _ext.hd_narrow(1, lib):
        assert (lib.wgs, lib.narrow) == (3, 1)
    assert (lib.wgs, lib.narrow) == (0, 2)


def test_library_without_the_switches_says_it_predates_them():
    with pytest.raises(RuntimeError, match="predates the three-warpgroup D=96 build"):
        _ext.set_d96_warpgroups(3, object())


def test_switches_are_read_from_the_environment_at_load():
    table = {env: setter for _, env, setter in _ext._FORCED_BUILDS}
    assert table["VIDATTN_D96_WARPGROUPS"] is _ext.set_d96_warpgroups
    assert table["VIDATTN_HD_NARROW"] is _ext.set_hd_narrow
    assert "VIDATTN_D192_BLOCK_N" not in table


def _ab():
    return load_script(ROOT / "dev/probes/hd_variants_ab.py")


def test_ab_times_each_variant_only_where_it_runs():
    ab = _ab()
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 72)] == ["d96_2wg", "d96_3wg", "pad128"]
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 192)] == ["wide", "narrow"]
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 256)] == ["wide", "narrow"]
    # every shape the bars miss is in the default run
    names = {s[0] for s in ab.SHAPES}
    assert {"D192 1K", "D192 8K", "D192 32K", "D256 1K", "D256 32K", "Allegro D96", "D72 8K", "D96 1K",
            "D96 8K"} <= names


def test_ab_recognises_the_default_pick_by_key_block_width():
    ab = _ab()
    assert ab.default_side(80, 96) == "d96_3wg" and ab.default_side(96, 176) == "d96_2wg"
    assert ab.default_side(192, 112) == "wide" and ab.default_side(192, 96) == "narrow"
    assert ab.default_side(256, 80) == "wide" and ab.default_side(256, 64) == "narrow"
    assert ab.default_side(192, 64) is None  # a width no side runs is not passed off as one


def test_ab_rotating_sets_exceed_twice_the_l2():
    ab = _ab()
    l2 = 50 << 20
    for set_bytes in (1 << 20, 30 << 20, 60 << 20, 252 << 20, 1 << 32):
        n = ab.n_sets(set_bytes, l2)
        assert 2 <= n <= ab.MAX_SETS
        # the sets used between two uses of one set: more than twice the L2, unless capped
        assert (n - 1) * set_bytes > 2 * l2 or n == ab.MAX_SETS


class FakeSpan:
    """A stand-in clock: records where the lead, the events and the calls fall; each span 'lasts' 10 ms."""

    def __init__(self, log):
        self.log = log

    def lead(self):
        self.log.append("lead")

    def start(self):
        self.log.append("start")

    def stop(self):
        self.log.append("stop")
        return 10.0


def test_back_to_back_timing_puts_all_calls_in_one_span_and_rotates_the_sets():
    ab = _ab()
    log = []
    sets = ["s0", "s1", "s2"]
    per_call = ab.time_back_to_back(lambda i: log.append(sets[i % len(sets)]), 5, FakeSpan(log))
    # the busy lead before the first event, the five calls back to back between one event pair, no flush or
    # synchronisation between them, the sets in turn
    assert log == ["lead", "start", "s0", "s1", "s2", "s0", "s1", "stop"]
    assert per_call == pytest.approx(2.0)


def test_ab_calls_per_span_and_round_order():
    ab = _ab()
    assert ab.calls_for(0.25, 25.0, 2) == 100
    assert ab.calls_for(84.0, 25.0, 2) == 2  # one pass over the sets at least
    assert ab.calls_for(1e-4, 25.0, 2) == 200
    sides = ["a", "b", "c"]
    orders = [ab.rounds_order(sides, r) for r in range(3)]
    assert orders == [["a", "b", "c"], ["b", "c", "a"], ["c", "a", "b"]]
    assert {o[0] for o in orders} == set(sides)


def test_ab_table_reports_the_default_pick_and_the_best_side():
    ab = _ab()
    row = {"shape": "D192 1K", "default": "wide",
           "tflops": {"wide": 600.0, "narrow": 660.0, "cudnn": 550.0, "fa3": 600.0}}
    line = ab.table([row]).splitlines()[1].split(" | ")
    assert line[ab.HEAD.index("default"):] == ["wide", "1.000", "1.091", "narrow", "1.100"]
    line = ab.table([{"shape": "x", "default": None, "tflops": {"wide": 500.0, "cudnn": 450.0}}]
                    ).splitlines()[1].split(" | ")
    assert line[ab.HEAD.index("fa3")] == "-" and line[ab.HEAD.index("default"):] == ["-", "-", "-", "wide", "-"]


def test_ab_refuses_without_a_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        _ab().main(["--rounds", "1"])
