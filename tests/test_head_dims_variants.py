"""The head-dim builds' routing on the CPU: the shared-memory and register arithmetic of the three-warpgroup D=96
build (csrc/sm90/tile_config.cuh, VIDATTN_BLOCK_N_D96_3WG) recomputed here, the launcher's picks (capi.cu,
pick_d96_three_wgs and pick_hd_narrow) mirrored in Python from the source's constants, the C switches' declarations
and guards, the Python setters against a stand-in library, and dev/probes/hd_variants_ab.py's timing helpers with a
stand-in clock. The kernels themselves: tests/test_head_dims_variants_gpu.py."""
from __future__ import annotations

import re
import subprocess
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
    value = re.search(rf"#define {name} (\(1 << \d+\)|[0-9.]+)", text).group(1)
    shift = re.fullmatch(r"\(1 << (\d+)\)", value)
    return float(1 << int(shift.group(1))) if shift else float(value)


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


def pick_hd_o_in_v(head_dim: int, seqlen_kv: int) -> bool:
    """capi.cu's pick_hd_o_in_v at the default setting, for the calls pick_hd_narrow leaves."""
    name = "VIDATTN_D192_O_IN_V_KV_MAX" if head_dim <= 192 else "VIDATTN_D256_O_IN_V_KV_MAX"
    return not pick_hd_narrow(head_dim, seqlen_kv) and seqlen_kv <= _capi_macro(name)


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
    # O-in-V where call C's sign test put it: D=256 at every length, D=192 past the narrow range up to 16384 keys
    assert all(pick_hd_o_in_v(d, n) for d in (200, 256) for n in (1, 1024, 8192, 32768))
    assert all(pick_hd_o_in_v(d, n) for d in (160, 192) for n in (2049, 8192, 16384))
    assert not any(pick_hd_o_in_v(d, n) for d in (160, 192) for n in (1, 1024, 2048, 16385, 32768))


OV_AB = ROOT / "bench/results/h200_2026-12-02_late/call_c/envelope/ov.json"


def test_o_in_v_routing_is_the_committed_ab_s_decision():
    """The shipped NARROW/O_IN_V constants are a fixed point of the envelope stage's rule (envelope_rules.ov_routing,
    fixed before the run) applied to the committed A/B: re-deciding from the shipped values moves nothing."""
    import json

    env = load_script(ROOT / "dev/probes/envelope_ab.py", importable=True)
    dec = env.ov_decision(json.loads(OV_AB.read_text()), (ROOT / "csrc/capi.cu").read_text())
    assert dec["changed"] == {} and dec["unroutable"] == [], dec
    assert dec["constants"]["VIDATTN_D256_O_IN_V_KV_MAX"] == 1 << 30


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
        if v not in (0, 1, 2, 3, 4):
            return 1
        self.narrow = v
        return 0

    def vidattn_sm90_last_o_path(self):
        return 2


def test_setters_pass_values_and_raise_on_refusal():
    lib = FakeLib()
    _ext.set_d96_warpgroups(3, lib)
    _ext.set_hd_narrow(2, lib)
    assert (lib.wgs, lib.narrow) == (3, 2)
    with pytest.raises(ValueError, match="D=96 warpgroups"):
        _ext.set_d96_warpgroups(4, lib)
    with pytest.raises(ValueError, match="VIDATTN_HD_NARROW"):
        _ext.set_hd_narrow(5, lib)
    assert (lib.wgs, lib.narrow) == (3, 2)
    _ext.set_hd_narrow(3, lib)  # the O-in-V builds
    assert lib.narrow == 3 and _ext.last_o_path(lib) == 2


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
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 192)] == ["wide", "narrow", "ov"]
    assert [x for x in ab.VIDATTN_SIDES if ab.applies(x, 256)] == ["wide", "narrow", "ov"]
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
    # wide and ov share their widths: where the epilogue staged O tells them apart
    assert ab.default_side(256, 80, 1) == "wide" and ab.default_side(256, 80, 2) == "ov"
    assert ab.default_side(256, 80, 4) == "ov"  # the read-late build a routed D=256 O-in-V call runs
    assert ab.default_side(192, 112, 2) == "ov" and ab.default_side(192, 96, 0) == "narrow"
    assert ab.default_side(192, 96, 2) is None


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
    assert line[ab.HEAD.index("default"):] == ["wide", "1.000", "1.091", "narrow", "1.100", "-", "-"]
    line = ab.table([{"shape": "x", "default": None, "tflops": {"wide": 500.0, "cudnn": 450.0}}]
                    ).splitlines()[1].split(" | ")
    assert line[ab.HEAD.index("fa3")] == "-" and line[ab.HEAD.index("default"):ab.HEAD.index("best/def") + 1] == [
        "-", "-", "-", "wide", "-"]
    row["paired"] = {"narrow": [1.08, 1.12, 1.1], "ov": [0.99, 1.02]}
    line = ab.table([row]).splitlines()[1].split(" | ")
    assert len(line) == len(ab.HEAD)
    assert line[ab.HEAD.index("narrow/wide rounds"):] == ["1.080..1.120", "0.990..1.020"]


def test_ab_paired_ratios_compare_sides_within_each_round():
    ab = _ab()
    # two spans a round; wide takes 10 ms in every round, ov 9.5 then 10.5 then 10: faster, slower, even
    samples = {"wide": [10.0, 10.0, 10.0, 10.0, 10.0, 10.0], "ov": [9.4, 9.6, 10.4, 10.6, 10.0, 10.0]}
    assert ab.paired_ratios(samples, 2, "ov") == pytest.approx([10 / 9.5, 10 / 10.5, 1.0])
    assert ab.paired_ratios(samples, 2, "narrow") == []


def test_ab_skips_named_sides(monkeypatch):
    ab = _ab()
    src = (ROOT / "dev/probes/hd_variants_ab.py").read_text()
    assert "if applies(x, d) and x not in args.skip" in src
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as refused:  # argparse refuses a side that does not exist (exit status 2)
        ab.main(["--skip", "nosuch"])
    assert refused.value.code == 2
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):  # a real side parses, then the GPU check stops it
        ab.main(["--skip", "ov", "narrow"])


def test_ab_takes_a_refused_launch_back_so_that_it_fails_one_side(monkeypatch):
    """A side whose launch the library refuses (the O-in-V builds' first device run) fails alone: without this the
    sides timed after it would run SDPA (the library off for the process) under their own names."""
    ab = _ab()
    monkeypatch.setattr(_ext, "_launch_error", "kernel launch failed (cudaFuncSetAttribute: invalid argument)")
    assert ab.take_launch_error().startswith("kernel launch failed")
    assert _ext._launch_error is None and ab.take_launch_error() is None
    src = (ROOT / "dev/probes/hd_variants_ab.py").read_text()
    warm_up = src[src.index("for x in backends:  # warm-up"):src.index("n_calls[x] = row[\"calls\"][x]")]
    assert "refused = take_launch_error()" in warm_up and "raise RuntimeError(refused)" in warm_up
    assert 'row["errors"]["rounds"] = refused' in src


def test_ab_matmul_option_is_off_unless_asked():
    ab = _ab()
    src = (ROOT / "dev/probes/hd_variants_ab.py").read_text()
    assert '"--matmul", type=float, default=0.0' in src and "if args.matmul > 0:" in src
    assert callable(ab.matmul_tflops)


def test_ab_refuses_without_a_gpu(monkeypatch):
    import torch
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        _ab().main(["--rounds", "1"])


def test_o_in_v_builds_fit_two_stages_and_a_warpgroup_of_o_per_stage():
    """The O-in-V builds (tile_config.cuh kOInV) at the wide widths: Q's one buffer and two K/V stages within the
    227 KB (no scratch), and one warpgroup's O boxes (4 warps x one 16 x 64 box per 64-column chunk) within one V
    stage."""
    for d, macro in ((192, "VIDATTN_BLOCK_N_D192"), (256, "VIDATTN_BLOCK_N_D256")):
        n = _macro(macro)
        q, stage_v = 128 * d * 2, n * d * 2
        assert q + 2 * 2 * stage_v <= SMEM_BUDGET - 2048
        assert (SMEM_BUDGET - 2048 - q) // (2 * stage_v) == 2  # exactly two: the warpgroups' O take one each
        assert 4 * (d // 64) * 16 * 64 * 2 <= stage_v
        assert stage_v % 1024 == 0  # each warp's first box 1024-aligned for the 128B swizzle


def test_o_in_v_is_a_forced_bf16_build_of_its_own():
    src = (ROOT / "csrc/capi.cu").read_text()
    cfg = (ROOT / "csrc/sm90/tile_config.cuh").read_text()
    # (a routed D=256 call takes the read-late O-in-V build, setting 3 the plain one: tests/test_d256_o_read_late.py)
    assert re.search(r"if \(!fp16 && pick_hd_o_in_v\(a->head_dim, a->seqlen_kv\)\) \{\s*if \(a->head_dim <= 192\) return "
                     r"launch<192, 2, kD192N \+ vidattn::sm90::kOInVBuild, false>\(\*a, s, sms\);", src)
    assert "return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild, false>(*a, s, sms);" in src
    # the pick never returns narrow under setting 3, and only settings 0..3 are accepted
    # (4, the D=256 variant that stores O from registers, is an O-in-V build: tests/test_d256_o_regs.py)
    assert "if (g_hd_narrow >= 3) return false;" in src and "if (narrow < 0 || narrow > 8) return 1;" in src
    assert "if (g_hd_narrow != 0) return g_hd_narrow >= 3;" in src
    # the flag rides in kBN above any key-block width (at most 256), and the width is what the launcher reports
    flag = int(re.search(r"constexpr int kOInVBuild = 1 << (\d+);", cfg).group(1))
    assert 1 << flag > 256
    assert "kBlockN = kBN % kOInVBuild" in cfg and "g_last_block_n = T::kBlockN;" in src


def test_o_in_v_producer_waits_for_the_o_stores_before_refilling_v0_and_v1():
    src = (ROOT / "csrc/sm90/flash_fwd.cuh").read_text()
    # one phase per tile per warpgroup: the previous O-storing tile's, before V_0 (warpgroup 0's stage) and V_1 (local
    # - 1; in the causal build's redo pass local - 2, past the end-of-list fill: tests/test_d256_o_read_late.py)
    assert "if (j < 2 && o_before > 0) ptx::mbarrier_wait(&s.o_done[j], (o_before - 1) & 1);" in src
    assert "arrive_pair<T::kPairs>(&s.o_done[cwg]);" in src
    assert "const int ostage = cwg == 0 ? start : start ^ 1;" in src
    # arrivals counted per warp of one warpgroup
    # (and per warp of the peer's, in CTA pairs: tests/test_d256_pairs.py)
    assert ("ptx::mbarrier_init(&s.o_done[0], T::kPairs ? 8 : 4);" in src
            and "ptx::mbarrier_init(&s.o_done[1], T::kPairs ? 8 : 4);" in src)


# The launcher's key-block names (csrc/capi.cu, vidattn_sm90_fwd and the namespace above it), as C++ for the probe.
_CAPI_WIDTHS = """
constexpr int kD64N = default_block_n(64), kD96N = default_block_n(96), kD192N = default_block_n(192),
              kD256N = default_block_n(256), kD128Long = default_block_n(128),
              kD128Short = VIDATTN_BLOCK_N_D128_SHORT, kD192Narrow = VIDATTN_BLOCK_N_D192_NARROW,
              kD256Narrow = VIDATTN_BLOCK_N_D256_NARROW;
"""


def launched_builds() -> list[tuple[str, str, str]]:
    """(head dim, warpgroups, key-block expression) of every launch<...> in capi.cu."""
    src = (ROOT / "csrc/capi.cu").read_text()
    builds = re.findall(r"launch<(\d+),\s*(\d+),\s*([^,<>]+?),\s*(?:true|false)", src)
    return sorted(set(builds))


def test_every_build_fits_the_shared_memory_a_block_can_opt_into(tmp_path):
    """sizeof(SharedStorage) of every build the launcher instantiates, as the host compiler lays it out, plus the
    1 KB alignment slack (flash_fwd.cuh, dynamic_smem_bytes) within the 227 KB: the O-in-V builds first came out at
    266 and 290 KB (their unused O scratch), which only the GPU's refused launches showed. The kernel's static_assert
    says the same at build time; this needs nvcc and no kernel compile (a second or two)."""
    nvcc = _ext.find_nvcc()
    if nvcc is None:
        pytest.skip("nvcc not found")
    builds = launched_builds()
    assert ("192", "2", "kD192N + vidattn::sm90::kOInVBuild") in builds
    assert ("256", "2", "kD256N + vidattn::sm90::kOInVBuild") in builds
    rows = "\n".join(f'  std::printf("{d} {w} {n.replace(" ", "")} %zu\\n", dynamic_smem_bytes<{d}, {w}, {n}>());'
                     for d, w, n in builds)
    src = tmp_path / "smem.cu"
    src.write_text(f'#include <cstdio>\n#include "sm90/flash_fwd.cuh"\nusing namespace vidattn::sm90;\n'
                   f'{_CAPI_WIDTHS}\nint main() {{\n{rows}\n  std::printf("static %zu\\n", kStaticSmemBytes);\n}}\n')
    exe = tmp_path / "smem"
    subprocess.run([nvcc, "-std=c++17", "--expt-relaxed-constexpr", "-gencode=arch=compute_90a,code=sm_90a",
                    "-I", str(ROOT / "csrc"), str(src), "-o", str(exe)], check=True, capture_output=True, timeout=300)
    out = subprocess.run([str(exe)], check=True, capture_output=True, text=True, timeout=60).stdout.split("\n")
    static = int(out[-2].split()[1])
    sizes = {tuple(line.split()[:3]): int(line.split()[3]) for line in out[:-2]}
    assert len(sizes) == len(builds)
    over = {b: s for b, s in sizes.items() if s + static > SMEM_BUDGET}
    assert not over, f"over {SMEM_BUDGET} bytes of shared memory: {over}"
    # the O-in-V builds hold what their wide twins hold (Q, two stages; O in a V stage instead of Q's buffer)
    for d, n in (("192", "kD192N"), ("256", "kD256N")):
        assert sizes[d, "2", f"{n}+vidattn::sm90::kOInVBuild"] <= sizes[d, "2", n]


def test_kernel_declares_no_static_shared_memory():
    """flash_fwd.cuh's kStaticSmemBytes (the 1 KB per-block reserve that cuobjdump reports) is all the static_assert
    adds to the dynamic bytes: the kernel and what it includes declare only the extern buffer."""
    cfg = (ROOT / "csrc/sm90/flash_fwd.cuh").read_text()
    assert "constexpr size_t kStaticSmemBytes = 1024;" in cfg
    includes = re.findall(r'#include "([^"]+)"', cfg)
    for name in ["flash_fwd.cuh", *includes]:
        text = (ROOT / "csrc/sm90" / name).read_text()
        decls = [line for line in text.splitlines() if "__shared__" in line and not line.lstrip().startswith("//")]
        assert all("extern __shared__" in line for line in decls), (name, decls)
