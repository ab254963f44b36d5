"""The D=256 O-in-V build's variant whose Q is released and loaded per consumer warpgroup (tile_config.cuh kQHalves,
flash_fwd.cuh load_q; capi.cu VIDATTN_HD_NARROW=5) on the CPU: the halves' boxes, evaluated from the producer's own
expressions, put every row of the tile where the whole box did, on swizzle-atom boundaries, each half on its own
warpgroup's barrier and in the rows that warpgroup's wgmma reads; the routing (one added kernel, D=256 bf16 only, off
by default; the tail launch reuses the O-in-V split kernel with Q's box back at 128 rows); the Python setter's range.
The kernel itself: tests/test_d256_q_halves_gpu.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

import test_d256_o_regs  # its fake library (tests/ is on sys.path, as for test_8bit_gpu)
from vidattn import _ext

ROOT = Path(__file__).resolve().parent.parent
FWD = (ROOT / "csrc/sm90/flash_fwd.cuh").read_text()
CAPI = (ROOT / "csrc/capi.cu").read_text()
CFG = (ROOT / "csrc/sm90/tile_config.cuh").read_text()

# D=256, two consumer warpgroups: the traits' values the expressions below are evaluated with
TRAITS = {"T::kBlockM": 128, "T::kRowsPerWG": 64, "T::kChunks": 4, "T::kConsumerWGs": 2, "kChunkCols": 64}


def _c_eval(expr: str, **env) -> int:
    for name, value in TRAITS.items():
        expr = expr.replace(name, str(value))
    expr = expr.replace("/", "//")
    return eval(expr, {}, env)  # noqa: S307 - our own source's integer arithmetic


def _load_q_branches() -> tuple[str, str]:
    body = FWD[FWD.index("auto load_q = [&]() {"):FWD.index("tl_producer_stamp(kSplit, local, kTlQIssued);")]
    halves = body[body.index("if constexpr (T::kQHalves) {"):body.index("} else {")]
    whole = body[body.index("} else {"):]
    return halves, whole


def _tma_args(branch: str) -> list[str]:
    call = re.search(r"ptx::tma_load_4d\((.*?)\);", branch, re.S).group(1)
    args, depth, cur = [], 0, ""
    for ch in call:
        if ch == "," and depth == 0:
            args.append(cur.strip())
            cur = ""
            continue
        depth += {"(": 1, ")": -1}.get(ch, 0)
        cur += ch
    return args + [cur.strip()]


def test_halves_put_every_row_where_the_whole_box_did():
    """Per chunk, the two 64-row boxes land in the elements the 128-row box filled, each from the global rows the
    whole box held there; every box starts on a 1024-byte swizzle atom (so TMA's 128B swizzle, a function of the
    address, lays the half exactly as the second half of a whole box); the two halves announce the tile's bytes."""
    halves, whole = _load_q_branches()
    h_args, w_args = _tma_args(halves), _tma_args(whole)
    # (smem element offset expression, ..., column, row, head, batch)
    h_dst = h_args[0].replace("s.q[0] + ", "")
    w_dst = w_args[0].replace("s.q[qb] + ", "")
    h_row, w_row = h_args[4].replace("tc.m_block", "m"), w_args[4].replace("tc.m_block", "m")
    m = 3
    whole_map, half_map = {}, {}
    for c in range(4):
        base = _c_eval(w_dst, c=c)
        for r in range(128):
            whole_map[base + r * 64] = _c_eval(w_row, m=m) + r
        for w in range(2):
            hbase = _c_eval(h_dst, c=c, w=w)
            assert hbase * 2 % 1024 == 0
            for r in range(64):
                assert hbase + r * 64 not in half_map
                half_map[hbase + r * 64] = _c_eval(h_row, m=m, w=w) + r
    assert half_map == whole_map
    assert "kQBytes / T::kConsumerWGs" in halves and "kQBytes);" in whole
    # warpgroup w's half: its own barrier pair, its own rows (consume: q_smem0 = q + cwg * kRowsPerWG rows)
    assert "&s.q_empty[w]" in halves and "&s.q_full[w]" in halves
    assert "ptx::smem_addr(s.q[0]) + cwg * T::kRowsPerWG * kChunkBytes;" in FWD


def test_each_warpgroup_waits_for_and_releases_its_own_half():
    assert "const int qbar = T::kQHalves ? cwg : qb;" in FWD
    assert "ptx::mbarrier_wait(&s.q_full[qbar], (local / T::kQBuffers) & 1);" in FWD
    # the mainloop's q_empty arrivals (after the tile's last S) go to the barrier it is handed: qbar
    assert re.search(r"mainloop_from<kHeadDim, kWGs, kBN, kFp16, kFixed, kCausal, 0>\(\s*start, p, s, cwg, q, qbar,", FWD)
    assert "if (lane == 0) ptx::mbarrier_arrive(&s.q_empty[qbar]);" in FWD  # a tile without keys
    # 4 arrivals per half (one per warp of its warpgroup), 8 for a whole buffer
    assert "ptx::mbarrier_init(&s.q_empty[b], T::kQHalves ? 4 : 4 * T::kConsumerWGs);" in FWD
    assert "uint64_t q_full[T::kQBarriers];" in FWD and "uint64_t q_empty[T::kQBarriers];" in FWD
    assert "static constexpr int kQBarriers = kQHalves ? kConsumerWGs : kQBuffers;" in CFG
    assert "static constexpr int kQBoxRows = kQHalves ? kRowsPerWG : kBlockM;" in CFG
    # the L2 prefetch a tile ahead covers both halves (the box is kQBoxRows rows)
    assert "for (int r = 0; r < T::kBlockM; r += T::kQBoxRows)" in FWD
    assert 'static_assert(!(T::kQHalves && kCausal)' in FWD


def test_variant_is_one_added_d256_kernel_off_by_default():
    launches = re.findall(r"launch<(\d+), 2, kD256N \+ vidattn::sm90::kOInVBuild \+ vidattn::sm90::kQHalvesBuild, "
                          r"(\w+)>", CAPI)
    assert launches == [("256", "false")]
    assert re.search(r"if \(!fp16 && g_hd_narrow == 5\) \{\s*if \(a->head_dim <= 192\) return fail\(", CAPI)
    assert "int g_hd_narrow = 0;" in CAPI
    # the tail launch: the O-in-V split kernel, Q's tensor map re-encoded with the tile's rows for it
    assert ("kBN & ~kORegsBuild & ~kQHalvesBuild & ~kOReadLateBuild & ~kNarrowAllBuild & ~kPairBuild, kFp16, true>"
            in " ".join(CAPI.split()))  # the tail launch's split kernel: the O-in-V one
    tail = CAPI[CAPI.index("auto split_kernel"):CAPI.index("split_kernel<<<")]
    assert re.search(r"if constexpr \(T::kQHalves\) \{\s*if \(!make_tensor_map_4d\(&p.tm_q, .*?T::kBlockM,", tail, re.S)
    # the main launch's Q box: the traits' rows
    assert re.search(r"make_tensor_map_4d\(&p.tm_q, a.q, kFp16, a.head_dim, a.seqlen_q, a.heads, a.batch, a.q_stride,"
                     r"\s*T::kQBoxRows, &err\)", CAPI)
    assert "g_last_q_box_rows = T::kQBoxRows;" in CAPI
    assert "if (narrow < 0 || narrow > 8) return 1;" in CAPI
    o_in_v = int(re.search(r"constexpr int kOInVBuild = 1 << (\d+);", CFG).group(1))
    regs = int(re.search(r"constexpr int kORegsBuild = 1 << (\d+);", CFG).group(1))
    halves = int(re.search(r"constexpr int kQHalvesBuild = 1 << (\d+);", CFG).group(1))
    assert halves > regs > o_in_v and (80 + (1 << o_in_v) + (1 << halves)) % (1 << o_in_v) == 80
    assert "static constexpr bool kQHalves = (kBN & kQHalvesBuild) != 0;" in CFG


class FakeLib(test_d256_o_regs.FakeLib):  # its setter (0..top, else refused), with Q's box rows reported
    def vidattn_sm90_last_q_box_rows(self):
        return 64 if self.narrow == 5 else 128


def test_setter_accepts_5_and_an_older_library_refuses_it():
    lib = FakeLib(5)
    with _ext.hd_narrow(5, lib):
        assert lib.narrow == 5 and _ext.last_q_box_rows(lib) == 64
    assert lib.narrow == 0 and _ext.last_q_box_rows(lib) == 128
    with pytest.raises(ValueError, match="5 \\(D=256 Q per warpgroup"):
        _ext.set_hd_narrow(5, FakeLib(4))


def test_kernel_subset_build_keeps_the_variants_it_is_for():
    """VIDATTN_KERNEL_SUBSET (the timeline build of dev/probes/timeline_d256.sh): the D=256 O-in-V builds, whatever
    variant flags they carry (kBN & kOInVBuild), every D=192 build and D=128 N=128; off (0) in the library's own
    build."""
    assert "#define VIDATTN_KERNEL_SUBSET 0" in CAPI
    assert "constexpr bool kD256OInV = kHeadDim == 256 && (kBN & vidattn::sm90::kOInVBuild) != 0;" in CAPI
    assert ("return !VIDATTN_KERNEL_SUBSET || (!kFp16 && !kCausal && (kD256OInV || kD128Short || kHeadDim == 192));"
            in CAPI)
