"""The routed D=256 build (O-in-V, read-late) with a tile's last, partial key block narrowed by as little as one 16-key
step (tile_config.cuh kNarrowAll, FwdTraits::kNarrowMax; capi.cu VIDATTN_HD_NARROW=7) on the CPU: the flag in kBN and
the traits it sets, the narrow width's bound taken from the traits everywhere the kernel narrows (so every other
build keeps VIDATTN_NARROW_MIN_SAVED's bound), a model of block_steps at the envelope's lengths, the routing (one
added kernel, bf16 D=256 only, off by default; the tail launch on the O-in-V split kernel), the Python setter and the
envelope A/B's side. The kernel itself: tests/test_d256_narrow_all_gpu.py."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

import test_d256_o_read_late  # its fake library (tests/ is on sys.path, as for test_8bit_gpu)
from vidattn import _ext

ROOT = Path(__file__).resolve().parent.parent
FWD = (ROOT / "csrc/sm90/flash_fwd.cuh").read_text()
CAPI = (ROOT / "csrc/capi.cu").read_text()
CFG = (ROOT / "csrc/sm90/tile_config.cuh").read_text()


def _bit(name: str) -> int:
    return int(re.search(rf"constexpr int {name} = 1 << (\d+);", CFG).group(1))


def test_flag_rides_in_kbn_above_the_other_variants():
    o_in_v, late, narrow = _bit("kOInVBuild"), _bit("kOReadLateBuild"), _bit("kNarrowAllBuild")
    others = [_bit(n) for n in ("kORegsBuild", "kQHalvesBuild", "kOReadLateBuild")]
    assert narrow > max(others) > o_in_v and narrow < 31
    kbn = 80 + (1 << o_in_v) + (1 << late) + (1 << narrow)
    assert kbn % (1 << o_in_v) == 80 and kbn >= 1 << o_in_v  # kBlockN 80, an O-in-V build
    assert "static constexpr bool kNarrowAll = (kBN & kNarrowAllBuild) != 0;" in CFG
    assert "static_assert(!kNarrowAll || (kBN & kOInVBuild) != 0," in CFG
    assert ("static constexpr int kNarrowMax = kBlockN / 16 - (kNarrowAll ? 1 : VIDATTN_NARROW_MIN_SAVED);"
            in CFG)


def test_every_narrowing_site_takes_the_bound_from_the_traits():
    """block_steps (the width) and with_partial_steps in issue_qk_block and issue_pv_block (the copies that exist)
    must agree, or a block would run a width with no copy: all three read FwdTraits::kNarrowMax."""
    assert "kNarrowMax<" not in FWD  # the old per-width template, which knew no build flags
    assert FWD.count("block_steps<kN, T::kNarrowMax>(kv0, kv_len)") == 2
    assert len(re.findall(r"block_steps<", FWD)) == 2
    assert re.search(r"template <int kN, int kMax>\s*__device__ __forceinline__ int block_steps\(", FWD)
    assert "return steps <= kMax ? steps : kN / 16;" in FWD
    for fn in ("issue_qk_block", "issue_pv_block"):
        body = FWD[FWD.index(f"__device__ __forceinline__ void {fn}("):]
        body = body[:body.index("\n}\n")]
        assert "with_partial_steps<FwdTraits<kHeadDim, kWGs, kBN>::kNarrowMax>(steps," in body, fn


def _block_steps(n: int, kv0: int, kv_len: int, kmax: int) -> int:
    """flash_fwd.cuh block_steps."""
    if kv0 + n <= kv_len:
        return n // 16
    steps = (kv_len - kv0 + 15) // 16
    return steps if steps <= kmax else n // 16


def _narrow_max(n: int, narrow_all: bool, min_saved: int = 3) -> int:
    return n // 16 - (1 if narrow_all else min_saved)


@pytest.mark.parametrize("keys,steps,narrowed_today", [(1024, 4, False), (8192, 2, True), (32768, 3, False)])
def test_model_at_the_envelope_lengths(keys, steps, narrowed_today):
    """The envelope's D=256 lengths on 80-key blocks: 1K ends every tile in 4 of 5 steps, 32K in 3, both run full
    width today (kNarrowMax 2) and narrow under setting 7 (4); 8K ends in 2, narrowed either way."""
    kv0 = keys // 80 * 80
    assert -(-(keys - kv0) // 16) == steps
    today = _block_steps(80, kv0, keys, _narrow_max(80, False))
    variant = _block_steps(80, kv0, keys, _narrow_max(80, True))
    assert variant == steps and (today == steps) == narrowed_today and (today == 5) != narrowed_today
    # every other build keeps its bound (D=128 N=176: 8, N=128: 5; D=192 N=112: 4; D=64 N=128: 5)
    assert [_narrow_max(n, False) for n in (176, 128, 112, 80)] == [8, 5, 4, 2]


def test_model_never_narrows_a_full_block_and_covers_every_partial_count():
    for kv_len in range(1, 2000):
        kv0 = (kv_len - 1) // 80 * 80  # the last block
        s = _block_steps(80, kv0, kv_len, _narrow_max(80, True))
        assert s == -(-(kv_len - kv0) // 16) and 1 <= s <= 5
        for start in range(0, kv0, 80):  # the full blocks before it
            assert _block_steps(80, start, kv_len, _narrow_max(80, True)) == 5


def test_variant_is_one_added_d256_kernel_off_by_default():
    launches = re.findall(r"launch<(\d+), 2, kD256N \+ kOInVBuild \+ kOReadLateBuild \+ kNarrowAllBuild, (\w+)>", CAPI)
    assert launches == [("256", "false")]
    assert CAPI.count("kNarrowAllBuild") == 2  # that launch and the split kernel's strip
    assert re.search(r"if \(!fp16 && g_hd_narrow == 7\) \{\s*if \(a->head_dim <= 192\)\s*"
                     r"return fail\(\"VIDATTN_HD_NARROW=7.*?\s*using namespace vidattn::sm90;\s*"
                     r"return launch<256, 2, kD256N \+ kOInVBuild", CAPI)
    # the routed (setting 0) D=256 launch is still the read-late build without the flag
    assert re.search(r"if \(VIDATTN_D256_O_READ_LATE && g_hd_narrow == 0\)\s*return launch<256, 2, kD256N \+ "
                     r"vidattn::sm90::kOInVBuild \+ vidattn::sm90::kOReadLateBuild, false>", CAPI)
    assert "if (narrow < 0 || narrow > 8) return 1;" in CAPI
    # the tail launch strips the flag: the O-in-V split kernel, no second one
    assert ("flash_fwd_kernel<kHeadDim, kWGs, kBN & ~kORegsBuild & ~kQHalvesBuild & ~kOReadLateBuild & "
            "~kNarrowAllBuild & ~kPairBuild, kFp16, true>" in " ".join(CAPI.split()))
    # its O path is setting 6's (the flag changes only the partial blocks)
    assert "g_last_o_path = T::kOReadLate ? 4 : T::kORegs ? 3 : T::kOInV ? 2 : T::kOInQ ? 1 : 0;" in CAPI
    # refused at D=192, fp16 wide: the setting's branch sits beside 4-6's, inside the bf16 O-in-V block
    block = CAPI[CAPI.index("#if VIDATTN_PINGPONG  // the O-in-V builds"):]
    block = block[:block.index("#endif")]
    assert block.index("g_hd_narrow == 6") < block.index("g_hd_narrow == 7") < block.index("pick_hd_o_in_v(")


class FakeLib(test_d256_o_read_late.FakeLib):  # its setter (0..top, else refused), with 7's O path
    def vidattn_sm90_last_o_path(self):
        return {4: 3, 6: 4, 7: 4}.get(self.narrow, 0)


def test_setter_accepts_7_and_an_older_library_refuses_it():
    lib = FakeLib(7)
    with _ext.hd_narrow(7, lib):
        assert lib.narrow == 7 and _ext.last_o_path(lib) == 4 and _ext.last_q_box_rows(lib) == 128
    assert lib.narrow == 0 and _ext.last_o_path(lib) == 0
    with pytest.raises(ValueError, match="7 \\(6 with every partial block narrowed"):
        _ext.set_hd_narrow(7, FakeLib(6))
    with pytest.raises(ValueError):
        _ext.set_hd_narrow(8, FakeLib(7))


def test_envelope_ab_has_the_side_judged_against_the_routed_build():
    spec = importlib.util.spec_from_file_location("envelope_ab", ROOT / "dev/probes/envelope_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    assert ab.VARIANTS[7] == ("ovn", "every partial block narrowed", 4, 128) and ab.SETTING_OF_SIDE["ovn"] == 7
    assert ab.reference_side(7) == "ovl" and ab.reference_side(6) == "ov" and ab.reference_side(4) == "ov"
    args = ab.parse_args(["--part", "ov", "--shapes", "D256 1K", "D256 8K", "D256 32K", "--with-variant",
                          "--variant-setting", "7", "--rounds", "16"])
    assert args.variant_setting == 7 and ab.plan(args)["ov"]["shapes"] == ["D256 1K", "D256 8K", "D256 32K"]
