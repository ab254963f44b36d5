"""The D=256 O-in-V build's variant whose epilogue leaves its TMA stores' reads of the V stage unwaited until the next
tile's S_0 (tile_config.cuh kOReadLate, flash_fwd.cuh flush_o; capi.cu VIDATTN_HD_NARROW=6) on the CPU: where the read
wait and o_done now stand in the consumer's order (before the q_empty that gates the next tile's loads, before the S_0
turn passes, before the redo pass), a model of the ring over random block counts that checks every V fill and every
O write against what last occupied its stage, the routing (one added kernel, D=256 bf16 only, off by default; the
tail launch reuses the O-in-V split kernel), the Python setter and the envelope A/B's side. The kernel itself:
tests/test_d256_o_read_late_gpu.py."""
from __future__ import annotations

import importlib.util
import random
import re
from pathlib import Path

import pytest

import test_d256_q_halves  # its fake library (tests/ is on sys.path, as for test_8bit_gpu)
from vidattn import _ext

ROOT = Path(__file__).resolve().parent.parent
FWD = (ROOT / "csrc/sm90/flash_fwd.cuh").read_text()
CAPI = (ROOT / "csrc/capi.cu").read_text()
CFG = (ROOT / "csrc/sm90/tile_config.cuh").read_text()


def _code(text: str) -> str:
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def _consumer() -> str:
    return _code(FWD[FWD.index("__device__ __forceinline__ void consumer("):FWD.index("__global__ void")])


def test_flag_rides_in_kbn_above_the_other_variants():
    o_in_v = int(re.search(r"constexpr int kOInVBuild = 1 << (\d+);", CFG).group(1))
    others = [int(re.search(rf"constexpr int {n} = 1 << (\d+);", CFG).group(1)) for n in ("kORegsBuild", "kQHalvesBuild")]
    late = int(re.search(r"constexpr int kOReadLateBuild = 1 << (\d+);", CFG).group(1))
    assert late > max(others) > o_in_v and late < 31
    kbn = 80 + (1 << o_in_v) + (1 << late)
    assert kbn % (1 << o_in_v) == 80 and kbn >= 1 << o_in_v and all(kbn & (1 << b) == 0 for b in others)
    assert "static constexpr bool kOReadLate = (kBN & kOReadLateBuild) != 0;" in CFG
    # the rest of the traits are the O-in-V build's: no deferred store, no deferred normalisation
    assert "static constexpr bool kDeferOStore = VIDATTN_DEFER_O_STORE != 0 && !kOInQ && !kOInV;" in CFG


def test_read_wait_and_o_done_move_from_the_epilogue_to_the_flush():
    con = _consumer()
    epi = con[con.index("} else if constexpr (T::kOInV) {"):con.index("if constexpr (T::kOInQ) {", con.index(
        "} else if constexpr (T::kOInV) {"))]
    # the epilogue: the stage wait and the stores as before; the read wait and o_done only without the variant
    assert "ptx::mbarrier_wait(&s.v_empty[ostage]" in epi and "finish_tile<" in epi
    assert re.search(r"if constexpr \(kReadLate\) \{\s*o_unread = true;.*?\} else if \(lane == 0\) \{\s*"
                     r"ptx::bulk_wait_group_read<0>\(\);\s*arrive_pair<T::kPairs>\(&s.o_done\[cwg\]\);", epi, re.S)
    flush = con[con.index("auto flush_o = [&]()"):con.index("if constexpr (kDefer) {", con.index("auto flush_o"))]
    # lane 0 (the thread that committed the stores' bulk groups) waits for their reads, then gives o_done
    assert re.search(r"if constexpr \(kReadLate\) \{\s*if \(o_unread\) \{\s*if \(ptx::lane_id\(\) == 0\) \{\s*"
                     r"ptx::bulk_wait_group_read<0>\(\);\s*arrive_pair<T::kPairs>\(&s.o_done\[cwg\]\);\s*\}\s*"
                     r"o_unread = false;", flush)
    assert "constexpr bool kReadLate = T::kOReadLate && !kSplit;" in con
    # no mbarrier wait inside S_0's issue-to-wait window (one there had ptxas serialise every wgmma: C7518)
    assert "mbarrier_wait" not in flush


def test_flush_stands_before_every_release_that_later_loads_wait_behind():
    """o_done of tile L - 1 must be complete before q_empty of tile L: the producer waits q_empty(L) before any load
    of tile L + 1, so it never sees o_done two phases behind (its wait is by parity), and the stage the other
    warpgroup's O occupies is read before anything of tile L + 1 goes there."""
    main = _code(FWD[FWD.index("// Prologue: S_0 alone"):FWD.index("// Steady state")])
    after = main[main.index("issue_qk_block<"):main.index("tl.stamp(kTlS0Done);")]
    # kOReadLate: flushed before the turn passes; other builds after it (their SASS unchanged)
    assert re.search(r"if constexpr \(T::kOReadLate\) flush\(\);\s*sched_pass<kPingpong, T::kConsumerWGs>\(cwg\);\s*"
                     r"if constexpr \(!T::kOReadLate\) flush\(\);", after)
    assert main.index("flush();") < main.index("if (n_blocks == 1) ptx::mbarrier_arrive(&s.q_empty[qb]);")
    con = _consumer()
    empty = con[con.index("if (n_blocks == 0) {"):con.index("} else {", con.index("if (n_blocks == 0) {"))]
    assert empty.index("flush_o();") < empty.index("ptx::mbarrier_arrive(&s.q_empty[qbar]);")
    # the first pass's last o_done before the redo's loads; the last stores read before shared memory goes away
    tail = con[con.index("consume(tile, local, BoolTag<kFixedRef>{});"):]
    assert tail.index("flush_o();") < tail.index("RedoBarrier::kId")
    assert tail.rindex("flush_o();") < tail.rindex("ptx::bulk_wait_group<0>();")
    # the producer still waits for o_done before V_0 / V_1 (the variant is neither kORegs nor a split build)
    assert "if constexpr (T::kOInV && !T::kORegs && !kSplit) {" in FWD
    # (CTA pairs count only the tiles with keys: tests/test_d256_pairs.py)
    assert "o_before = local - (kCausal && decltype(redo)::value ? 1 : 0);" in FWD
    assert "if (j < 2 && o_before > 0) ptx::mbarrier_wait(&s.o_done[j], (o_before - 1) & 1);" in FWD


def test_causal_redo_counts_the_o_storing_tiles_before_it():
    """The causal O-in-V build (D=256, N=80): o_done completes once per tile that stored an O, and the producer's
    end-of-list fill takes a local number without one, so a redone tile's wait must count local - 1 tiles (with
    local it waited for a phase only the next tile's O completes: test_many_rounds_and_redo[256-*] hung, call P18).
    The expression in flash_fwd.cuh, over a CTA's first pass, its end-of-list fill and its redo pass, waits for the
    completion of exactly the previous O-storing tile each time."""
    first_pass = "produce(tile, l, BoolTag<kCausalEarlyKvCoords>{}, BoolTag<false>{});"
    redo = "[&](int tile, int l) { produce(tile, l, BoolTag<false>{}, BoolTag<true>{}); });"
    assert first_pass in FWD
    causal_redo = FWD[FWD.index("redo_causal_tiles<T::kRedoWords>(p, s.redo_bits, n_local, s.redo_walk,"):]
    assert causal_redo.index(redo) < causal_redo.index("return;")
    for n_first, n_redo in [(1, 1), (3, 2), (7, 5), (2, 0)]:
        stored = 0  # o_done completions so far (each tile that stored an O gives one, in tile order)
        locals_ = [(l, False) for l in range(n_first)] + [(n_first + 1 + i, True) for i in range(n_redo)]
        for local, is_redo in locals_:
            o_before = local - (1 if is_redo else 0)
            if o_before > 0:
                # the wait is by parity: it must name the phase the previous tile's O completes (completion number
                # `stored`, phase stored - 1), and that completion must have been the last one given
                assert (o_before - 1) & 1 == (stored - 1) & 1 and o_before == stored, (n_first, n_redo, local)
            stored += 1


def _ring_model(blocks: list[int]) -> None:
    """The two V stages over a CTA's tiles, with the expressions of flash_fwd.cuh: the producer fills V_j of tile L
    into stage (start + j) % 2, waiting o_done[j] of tile L - 1 for j < 2; warpgroup w writes tile L's O, at its end,
    into `cwg == 0 ? start : start ^ 1` (start: the next tile's first stage), and gives o_done under tile L + 1's S_0
    (or in its flush without keys). Checks, for each write, what the stage held since: a V fill is ordered by the
    stage's v_empty (both warpgroups' reads), an O by o_done (the fill waits for it), by the writer's own read wait,
    or, for the other warpgroup's O, by the S_0 turn it passed after its read wait, which the writer's drain waited
    for (so the tile must have keys: a tile without any takes no turn)."""
    start = 0
    held = {0: ("v", None), 1: ("v", None)}  # what each stage holds last: a V fill, or ("o", warpgroup, tile)
    for L, n in enumerate(blocks):
        # prologue of tile L (if it has keys, under S_0; else the flush of the keyless path): o_done of tile L - 1
        unread = {w: None for w in (0, 1)}
        if L > 0:
            for st, h in held.items():
                if h[0] == "o" and h[2] == L - 1:
                    unread[h[1]] = st  # given now, before this tile's q_empty and its S_0 turn
        # the producer's fills of tile L, in order, each after o_done of its j where j < 2
        for j in range(n):
            st = (start + j) % 2
            h = held[st]
            if h[0] == "o":
                assert j < 2 and h[1] == j, f"tile {L}: V_{j} into stage {st} over warpgroup {h[1]}'s O unwaited"
            held[st] = ("v", L)
        # ring advance, then each warpgroup's epilogue of tile L
        start = (start + n) % 2
        ost = {w: (start if w == 0 else start ^ 1) for w in (0, 1)}
        assert ost[0] != ost[1]
        for w in (0, 1):
            h = held[ost[w]]
            if h[0] == "o" and h[1] != w:
                assert n >= 1, f"tile {L}: warpgroup {w} over warpgroup {h[1]}'s O with no turn between"
            held[ost[w]] = ("o", w, L)


def test_ring_model_over_block_counts():
    rng = random.Random(26)
    cases = [[1] * 9, [2] * 9, [3] * 9, [13] * 9, [0, 1, 0, 3, 0, 0, 2, 1, 1]]
    cases += [[rng.choice((0, 1, 1, 2, 3, 4, 5, 12, 13)) for _ in range(rng.randint(1, 12))] for _ in range(400)]
    for blocks in cases:
        _ring_model(blocks)


def test_ring_model_catches_a_swapped_stage():
    """The model's checks can fail: with the warpgroups' stages swapped (warpgroup 0 into the last block's stage)
    the next tile's V_0 lands over warpgroup 1's O, which V_0's wait (o_done[0]) does not cover."""

    def broken(blocks):
        start, held = 0, {0: ("v",), 1: ("v",)}
        for L, n in enumerate(blocks):
            for j in range(n):
                st = (start + j) % 2
                if held[st][0] == "o":
                    assert j < 2 and held[st][1] == j
                held[st] = ("v",)
            start = (start + n) % 2
            for w in (0, 1):
                held[start ^ 1 if w == 0 else start] = ("o", w, L)

    with pytest.raises(AssertionError):
        broken([3, 3])


def test_variant_is_one_added_d256_kernel_and_the_routed_o_in_v_build():
    """One kernel, launched by setting 6 and, since call B of the seventh sitting, by a routed (setting 0) D=256
    O-in-V call; setting 3 keeps the plain O-in-V build."""
    launches = re.findall(r"launch<(\d+), 2, kD256N \+ vidattn::sm90::kOInVBuild \+ vidattn::sm90::kOReadLateBuild, "
                          r"(\w+)>", CAPI)
    assert launches == [("256", "false")] * 2
    assert "#define VIDATTN_D256_O_READ_LATE 1" in CAPI
    assert re.search(r"if \(VIDATTN_D256_O_READ_LATE && g_hd_narrow == 0\)\s*return launch<256, 2, kD256N \+ "
                     r"vidattn::sm90::kOInVBuild \+ vidattn::sm90::kOReadLateBuild, false>", CAPI)
    assert "return launch<256, 2, kD256N + vidattn::sm90::kOInVBuild, false>(*a, s, sms);" in CAPI
    assert re.search(r"if \(!fp16 && g_hd_narrow == 6\) \{\s*if \(a->head_dim <= 192\)\s*return fail\(", CAPI)
    assert "int g_hd_narrow = 0;" in CAPI and "if (narrow < 0 || narrow > 8) return 1;" in CAPI
    assert ("kBN & ~kORegsBuild & ~kQHalvesBuild & ~kOReadLateBuild & ~kNarrowAllBuild & ~kPairBuild, kFp16, true>"
            in " ".join(CAPI.split()))  # the tail launch's split kernel: the O-in-V one
    assert "g_last_o_path = T::kOReadLate ? 4 : T::kORegs ? 3 : T::kOInV ? 2 : T::kOInQ ? 1 : 0;" in CAPI
    # the kernel subset (timeline) build keeps it: every D=256 kBN carrying kOInVBuild
    assert "constexpr bool kD256OInV = kHeadDim == 256 && (kBN & vidattn::sm90::kOInVBuild) != 0;" in CAPI


class FakeLib(test_d256_q_halves.FakeLib):  # its setter (0..top, else refused), with the O path reported
    def vidattn_sm90_last_o_path(self):
        return {4: 3, 6: 4}.get(self.narrow, 0)


def test_setter_accepts_6_and_an_older_library_refuses_it():
    lib = FakeLib(6)
    with _ext.hd_narrow(6, lib):
        assert lib.narrow == 6 and _ext.last_o_path(lib) == 4 and _ext.last_q_box_rows(lib) == 128
    assert lib.narrow == 0 and _ext.last_o_path(lib) == 0
    with pytest.raises(ValueError, match="6 \\(D=256 O read wait late"):
        _ext.set_hd_narrow(6, FakeLib(5))


def test_envelope_ab_has_the_side():
    spec = importlib.util.spec_from_file_location("envelope_ab", ROOT / "dev/probes/envelope_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    assert ab.VARIANTS[6] == ("ovl", "O read wait late", 4, 128) and ab.SETTING_OF_SIDE["ovl"] == 6
    assert ab.variant_ran(6, 4, 128) is None
    assert "O path 2" in ab.variant_ran(6, 2, 128)  # what the O-in-V build would report
