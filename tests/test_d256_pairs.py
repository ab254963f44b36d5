"""The routed D=256 build (O-in-V, read-late) run by CTA pairs that share each K/V block (tile_config.cuh kPairs;
capi.cu VIDATTN_HD_NARROW=8) on the CPU: the flag and its traits, the shared storage it adds (none in any other build),
each CTA's half of a block multicast into both, every stage release and o_done counted on both CTAs' barriers, the
fences (none in the loop), the redo marks' union and the exit handshake, the launch (clusters of two, the fallback to
the routed build, the tail plan's rounds of the pair grid), a model of the tile pairing over many shapes, the Python
getter and setter and the envelope A/B's side. The kernel itself: tests/test_d256_pairs_gpu.py."""
from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from _support import load_script
import test_d256_narrow_all  # its fake library (tests/ is on sys.path, as for test_8bit_gpu)
from vidattn import _ext

ROOT = Path(__file__).resolve().parent.parent
FWD = (ROOT / "csrc/sm90/flash_fwd.cuh").read_text()
CAPI = (ROOT / "csrc/capi.cu").read_text()
CFG = (ROOT / "csrc/sm90/tile_config.cuh").read_text()
PTX = (ROOT / "csrc/sm90/ptx.cuh").read_text()
HDR = (ROOT / "csrc/capi.h").read_text()


def _bit(name: str) -> int:
    return int(re.search(rf"constexpr int {name} = 1 << (\d+);", CFG).group(1))


def _body(src: str, signature: str) -> str:
    body = src[src.index(signature):]
    return body[:body.index("\n}\n")]


def test_flag_rides_in_kbn_above_the_other_variants():
    pair = _bit("kPairBuild")
    others = [_bit(n) for n in ("kOInVBuild", "kORegsBuild", "kQHalvesBuild", "kOReadLateBuild", "kNarrowAllBuild")]
    assert pair > max(others) and pair < 31
    kbn = 80 + (1 << _bit("kOInVBuild")) + (1 << _bit("kOReadLateBuild")) + (1 << pair)
    assert kbn % (1 << _bit("kOInVBuild")) == 80
    assert "static constexpr bool kPairs = (kBN & kPairBuild) != 0;" in CFG
    assert "static_assert(!kPairs || (kOInV && kOReadLate && !kORegs && !kQHalves && !kNarrowAll)," in CFG
    assert 'static_assert(!kPairs || (!kKvRotate && kChunks % 2 == 0), "CTA pairs: one key order' in CFG
    assert 'static_assert(!(T::kPairs && (kCausal || kSplit)), "CTA pairs: the non-causal main launch only");' in FWD


def test_shared_storage_adds_nothing_to_the_other_builds():
    """Two barriers and the peer's marks at the end of the storage, one word each elsewhere: the D=256 builds sit at
    the 227 KB limit (230400 bytes with the alignment pad), with 604 bytes of the last 1024-byte block unused, so the
    pair build's 272 bytes fit and the others' 12 do not move a size (measured with nvcc; sizes are multiples of the
    storage's 1024-byte alignment)."""
    tail = FWD[FWD.index("  int32_t redo_walk[3];"):FWD.index("\n};", FWD.index("  int32_t redo_walk[3];"))]
    assert "uint64_t pair_bar[T::kPairs ? 2 : 1];" in tail
    assert "uint32_t peer_bits[T::kPairs ? T::kRedoWords : 1];" in tail
    used = 229796  # offsetof(redo_walk) + 12 in the routed D=256 build (nvcc, this sitting)
    pair_end = (used + 7) // 8 * 8 + 2 * 8 + 64 * 4
    assert pair_end <= 230400 and (used + 7) // 8 * 8 + 8 + 4 <= 230400


def test_each_cta_loads_half_of_a_block_into_both():
    body = _body(FWD, "__device__ __forceinline__ void load_kv_block(")
    assert "constexpr int kHalf = T::kChunks / 2;" in body
    assert "const int c0 = static_cast<int>(ptx::cluster_ctarank()) * kHalf;" in body
    assert "ptx::tma_load_4d_multicast(stage + c * T::kBlockN * kChunkCols, map, full, c * kChunkCols, row, head, " \
           "batch, 0x3);" in body
    # the other builds' loads, as before: every chunk, this CTA only
    assert "ptx::tma_load_4d(stage + c * T::kBlockN * kChunkCols, map, full, c * kChunkCols, row, head, batch);" in body
    # the producer's non-causal K and V loads all go through it (the dense and the block-sparse builds' each); each full
    # barrier still expects the whole block
    assert FWD.count("load_kv_block<T>(s.k[stage], &p.tm_k, &s.k_full[stage],") == 2
    assert FWD.count("load_kv_block<T>(s.v[stage], &p.tm_v, &s.v_full[stage],") == 2
    assert FWD.count("ptx::mbarrier_arrive_expect_tx(&s.k_full[stage], kKVBytes);") == 2
    assert "multicast::cluster" in _body(PTX, "__device__ __forceinline__ void tma_load_4d_multicast(")


def test_every_release_the_peer_waits_on_reaches_both_ctas():
    """The K and V stages' empty barriers (the peer's producer writes half of the next fill) and o_done (the peer's
    producer refills the V stage O was stored from): all six arrival sites go through arrive_pair, and the barriers
    count both CTAs' consumer warps."""
    assert len(re.findall(r"arrive_pair<T::kPairs>\(&s\.(k_empty|v_empty|o_done)\[", FWD)) == 6
    assert not re.search(r"ptx::mbarrier_arrive\(&s\.(k_empty|v_empty|o_done)\[", FWD)
    body = _body(FWD, "__device__ __forceinline__ void arrive_pair(")
    assert "ptx::mbarrier_arrive(bar);" in body
    assert "if constexpr (kPairs) ptx::mbarrier_arrive_remote(bar, ptx::cluster_ctarank() ^ 1u);" in body
    assert "ptx::mbarrier_init(&s.k_empty[st], (T::kPairs ? 8 : 4) * T::kConsumerWGs);" in FWD
    assert "ptx::mbarrier_init(&s.v_empty[st], (T::kPairs ? 8 : 4) * T::kConsumerWGs);" in FWD
    assert "ptx::mbarrier_init(&s.o_done[0], T::kPairs ? 8 : 4);" in FWD


def test_no_cluster_fence_in_the_loop():
    """A stage release at cluster scope (.release.cluster) compiled to MEMBAR.ALL.GPU ahead of each arrival; the loop's
    releases use the default semantics (release at CTA scope), the marks' exchange and the exit the cluster's."""
    hot = _body(PTX, "__device__ __forceinline__ void mbarrier_arrive_remote(")
    assert "mbarrier.arrive.shared::cluster.b64 _, [%0];" in hot and "release.cluster" not in hot
    cold = _body(PTX, "__device__ __forceinline__ void mbarrier_arrive_remote_cluster(")
    assert "mbarrier.arrive.release.cluster.shared::cluster.b64" in cold
    assert FWD.count("mbarrier_arrive_remote_cluster(") == 2
    assert "try_wait.parity.acquire.cluster" in _body(PTX, "__device__ __forceinline__ void mbarrier_wait_cluster(")


def test_the_pair_redoes_the_union_of_its_marks_and_waits_for_the_peer_before_exit():
    cons = FWD[FWD.index("__device__ __forceinline__ void consumer("):FWD.index("// kSplit: the tail launch's build")]
    ex = cons[cons.index("if constexpr (T::kPairs) {"):]
    ex = ex[:ex.index("if (cwg == 0 && tid == 0) ptx::mbarrier_arrive(&s.redo_ready);")]
    for step in ("ptx::st_cluster_u32(&s.peer_bits[i], peer, s.redo_bits[i]);",
                 "ptx::mbarrier_arrive_remote_cluster(&s.pair_bar[0], peer);",
                 "ptx::mbarrier_wait_cluster(&s.pair_bar[0], 0);", "s.redo_bits[i] |= s.peer_bits[i];",
                 "ptx::named_barrier_sync(static_cast<uint32_t>(RedoBarrier::kId), 128 * T::kConsumerWGs);"):
        assert step in ex, step
    assert ex.index("st_cluster_u32") < ex.index("arrive_remote_cluster") < ex.index("mbarrier_wait_cluster") \
        < ex.index("|= s.peer_bits")
    end = cons[cons.rindex("if constexpr (T::kPairs) {"):]
    assert "ptx::mbarrier_arrive_remote_cluster(&s.pair_bar[1], ptx::cluster_ctarank() ^ 1u);" in end
    assert "ptx::mbarrier_wait_cluster(&s.pair_bar[1], 0);" in end
    # both CTAs' barrier inits before either's TMA or arrivals reach the other (every thread, converged)
    kern = FWD[FWD.index("flash_fwd_kernel(const __grid_constant__ FwdParams p) {"):]
    assert re.search(r"if constexpr \(T::kPairs\)\s*ptx::cluster_sync\(\);\s*else\s*__syncthreads\(\);", kern)
    assert "ptx::mbarrier_init(&s.pair_bar[1], 4 * T::kConsumerWGs);" in kern


def test_launch_in_clusters_of_two_with_a_fallback():
    lb = CAPI[CAPI.index("int launch_built(const VidattnFwdArgs& a"):
              CAPI.index("// DIAGNOSTIC ONLY, never a default: VIDATTN_KERNEL_SUBSET")]
    assert "grid = pair_launch_ctas<T>(kernel, sms, T::kThreads, smem);" in lb  # cached per build and device
    assert ("if (grid < 2 || m_blocks % 2 != 0 || tiles > redo_launch_tiles<T>(grid))\n"
            "      return launch_built<kHeadDim, kWGs, kBN & ~kPairBuild, kFp16, kCausal>(a, stream, sms);") in lb
    # the main launch's rounds are of the pair grid, so its tile count stays even; the tail launch takes every SM
    assert "const int64_t per_launch = redo_launch_tiles<T>(grid);" in lb
    # (redo_launch_tiles: a CTA marks at most 32 * kRedoWords of its tiles for a redo)
    assert re.search(r"constexpr int64_t redo_launch_tiles\(int ctas\) \{\s*return static_cast<int64_t>\(ctas\) \* 32 \* "
                     r"T::kRedoWords;", CFG)
    assert "plan_tail<kHeadDim, kWGs, kBN>(a, tiles, sms, grid)" in lb
    assert "const int64_t r = tiles % grid;" in CAPI
    assert "TailPlan plan_tail(const VidattnFwdArgs& a, int64_t tiles, int sms, int grid)" in CAPI
    # a refused cluster launch clears the runtime's error and runs the routed build
    refused = lb[lb.index("if (cudaLaunchKernelEx(&l.cfg, kernel, p) != cudaSuccess) {"):]
    refused = refused[:refused.index("g_last_cluster_ctas = 2;")]
    assert "cudaGetLastError();" in refused
    assert "return launch_built<kHeadDim, kWGs, kBN & ~kPairBuild, kFp16, kCausal>(a, stream, sms);" in refused
    assert "g_last_cluster_ctas = 1;" in lb
    launch = lb[lb.index("if constexpr (T::kPairs) {\n      PairLaunch l(ctas"):]
    assert launch.index("cudaLaunchKernelEx") < launch.index("g_last_cluster_ctas = 2;") < launch.index("    } else {")
    assert "attr[0].val.clusterDim.x = 2;" in CAPI
    assert "cudaOccupancyMaxActiveClusters(&clusters, kernel, &l.cfg)" in CAPI
    # the tail launch strips the flag (no clusters there)
    assert "~kNarrowAllBuild & ~kPairBuild, kFp16, true>" in " ".join(CAPI.split())
    # one added kernel, bf16 D=256, setting 8, refused at D=192, beside 4-7 in the bf16 O-in-V block
    pair_launch = r"launch<256, 2, kD256N \+ kOInVBuild \+ kOReadLateBuild \+ kPairBuild, (\w+)>"
    assert re.findall(pair_launch, CAPI) == ["false"]
    block = CAPI[CAPI.index("#if VIDATTN_PINGPONG  // the O-in-V builds"):]
    block = block[:block.index("#endif")]
    assert block.index("g_hd_narrow == 7") < block.index("g_hd_narrow == 8") < block.index("pick_hd_o_in_v(")
    assert 'return fail("VIDATTN_HD_NARROW=8 (CTA pairs sharing K/V) is built for head dims 200..256 only");' in block
    assert "if (narrow < 0 || narrow > 8) return 1;" in CAPI
    # reset per call and on a refused launch
    assert "g_last_cluster_ctas = 0;\n  const bool fp16" in CAPI
    assert "g_last_q_box_rows = g_last_cluster_ctas = 0;" in CAPI
    assert "int vidattn_sm90_last_cluster_ctas(void);" in HDR


def _plan_r(tiles: int, grid: int) -> int:
    """plan_tail's last, partial round (its tiles go to the tail launch when it plans one)."""
    return tiles % grid


@pytest.mark.parametrize("grid", [132, 130, 128, 66, 2])
def test_model_every_cta_pair_runs_partner_tiles(grid):
    """The kernel's loop: CTA b runs tiles b, b + grid, ... below the launch's tile count n (all tiles, or those before
    the tail's r). CTAs 2c and 2c + 1 form a cluster. With an even Q-block count M and an even grid, at every local
    index both CTAs run a tile or neither, and the two tiles are Q blocks 2i, 2i + 1 of one (batch, head)."""
    for bh in (1, 3, 8, 24, 64):
        for m in (2, 8, 64, 256, 6, 34):
            tiles = bh * m
            for n in (tiles, tiles - _plan_r(tiles, grid)):
                if n == 0:
                    continue
                ctas = min(n, grid)
                assert ctas % 2 == 0
                for c in range(0, ctas, 2):
                    for local in range((n + grid - 1) // grid):
                        t0, t1 = c + local * grid, c + 1 + local * grid
                        assert (t0 < n) == (t1 < n), (bh, m, n, c, local)
                        if t0 < n:
                            assert t0 // m == t1 // m and t0 % m == t1 % m - 1 and t0 % 2 == 0


def test_model_odd_q_block_counts_would_split_a_pair_across_heads():
    """Why the launcher falls back at an odd Q-block count: tiles 2i, 2i + 1 then straddle two (batch, head)s."""
    m = 3
    straddles = [t for t in range(0, 2 * m * 5, 2) if t // m != (t + 1) // m]
    assert straddles and all((t + 1) % m == 0 for t in straddles)


class FakeLib(test_d256_narrow_all.FakeLib):  # its setter (0..top, else refused), with the cluster size reported
    def vidattn_sm90_last_o_path(self):
        return {4: 3, 6: 4, 7: 4, 8: 4}.get(self.narrow, 0)

    def vidattn_sm90_last_cluster_ctas(self):
        return 2 if self.narrow == 8 else 1


def test_setter_accepts_8_and_an_older_library_refuses_it():
    lib = FakeLib(8)
    with _ext.hd_narrow(8, lib):
        assert lib.narrow == 8 and _ext.last_o_path(lib) == 4 and _ext.last_cluster_ctas(lib) == 2
    assert lib.narrow == 0 and _ext.last_cluster_ctas(lib) == 1
    with pytest.raises(ValueError, match="8 \\(6 in CTA pairs sharing K/V"):
        _ext.set_hd_narrow(8, FakeLib(7))
    with pytest.raises(RuntimeError, match="predates the CTA-pair D=256 variant"):
        _ext.last_cluster_ctas(test_d256_narrow_all.FakeLib(7))


def test_envelope_ab_has_the_side_judged_against_the_routed_build():
    spec = importlib.util.spec_from_file_location("envelope_ab", ROOT / "dev/probes/envelope_ab.py")
    ab = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(ab)
    assert ab.VARIANTS[8] == ("ovp", "CTA pairs sharing K/V", 4, 128) and ab.SETTING_OF_SIDE["ovp"] == 8
    assert ab.reference_side(8) == "ovl"
    assert ab.variant_ran(8, 4, 128, 2) is None
    assert "clusters of 1" in ab.variant_ran(8, 4, 128, 1)  # the fallback: the routed build, timed as itself
    assert "clusters of None" in ab.variant_ran(8, 4, 128, None)  # a library without the getter
    assert ab.variant_ran(7, 4, 128, 1) is None and ab.variant_ran(6, 4, 128) is None
    args = ab.parse_args(["--part", "ov", "--shapes", "D256 8K", "D256 32K", "--with-variant", "--variant-setting",
                          "8", "--rounds", "16"])
    assert args.variant_setting == 8


def test_ptxas_check_file_builds_the_pair_kernel():
    src = (ROOT / "dev/d256_narrow_all_ptxas.cu").read_text()
    assert "#elif KSEL == 6" in src
    assert "flash_fwd_kernel<256, 2, 80 + kOInVBuild + kOReadLateBuild + kPairBuild, false, false>(" in src


def _sim():
    return load_script(ROOT / "dev/probes/pair_protocol_sim.py", register=True)  # (its dataclasses)


def test_protocol_model_runs_clean_alone_and_in_pairs():
    """dev/probes/pair_protocol_sim.py: random interleavings of the barrier protocol (tiles of 0-5 key blocks, random
    redo marks, copies landing late) neither hang nor overwrite a stage in use, for one CTA and for CTA pairs."""
    import random
    sim = _sim()
    for pairs, runs in ((False, 150), (True, 400)):
        rng = random.Random(20261204 + pairs)
        for _ in range(runs):
            tiles, marks = sim.random_case(rng, pairs)
            assert sim.simulate(tiles, marks, pairs, rng) is None, (pairs, tiles, marks)


def test_protocol_model_catches_the_first_pair_design():
    """The model has teeth: with keyless tiles storing O through a V stage and taking an o_done phase (as the routed
    build does, and the pair build did first), two keyless tiles in a row let a V fill land under the peer's O."""
    import random
    sim = _sim()
    rng = random.Random(7)
    found = [sim.simulate([0, 0, 2], [set(), set()], True, rng, zero_tiles_skip_o=False) for _ in range(300)]
    assert any(f is not None and "O sits in it" in f for f in found)
    rng = random.Random(7)
    assert all(sim.simulate([0, 0, 2], [set(), set()], True, rng) is None for _ in range(300))
    # alone, the same tiles are safe through a V stage: the Q of the tile after waits for this CTA's own o_done
    rng = random.Random(7)
    assert all(sim.simulate([0, 0, 2], [set()], False, rng, zero_tiles_skip_o=False) is None for _ in range(300))


def test_keyless_tiles_take_no_o_done_phase_in_pairs():
    assert re.search(r"if constexpr \(T::kPairs\)\s*o_before = o_tiles;\s*else\s*o_before = local - ", FWD)
    assert "if constexpr (T::kPairs) o_tiles += n_blocks > 0 ? 1 : 0;" in FWD
    epi = FWD[FWD.index("if (T::kPairs && n_blocks == 0) {"):]
    epi = epi[:epi.index("} else {")]
    assert "store_o_regs<kHeadDim, kFp16>(p, w.tc, row0, o, row_sum);" in epi and "o_unread" not in epi
    assert "write_lse(p, w.tc, row0, lane, row_max, row_sum);" in epi
