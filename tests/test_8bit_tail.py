"""The 8-bit path's tail launch (csrc/capi_8bit.cuh q8_plan_tail, q8_fwd.cuh's kSplit; dev/NOTES_8bit.md "v18"),
without a GPU: the plan's model (dev/stress/budget.py's q8_tail_plan), its choices on the video shapes, the C side as written (the setter's range, the
builds with a split twin, the exclusions, the workspace), the kernel's key ranges and the quant8 selector against a
faked library. tests/test_8bit_tail_gpu.py checks on the GPU that the library's plan is this model's."""
from __future__ import annotations

import math
import sys
from pathlib import Path

import pytest

from _support import FakeQ8Lib
from vidattn import quant8

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
from dev.stress import budget  # noqa: E402

CAPI = (REPO / "csrc/capi_8bit.cuh").read_text()
KERNEL = (REPO / "csrc/sm90/q8_fwd.cuh").read_text()


# The plan's model is dev/stress/budget.py's (the workspace mirror, whose test reads its constants back from the C
# source); here it is checked against the shapes and the invariants the notes state.
tail_plan = budget.q8_tail_plan
BLOCK_M, MAX_SPLITS, MIN_BLOCKS = budget.Q8_TAIL_BLOCK_M, budget.Q8_TAIL_MAX_SPLITS, budget.Q8_TAIL_MIN_BLOCKS
BLOCK_N = budget.Q8_BLOCK_N


def key_ranges(n_blocks: int, splits: int):
    """q8_fwd_kernel's ranges: [r n / s, (r + 1) n / s)."""
    return [(r * n_blocks // splits, (r + 1) * n_blocks // splits) for r in range(splits)]


def test_model_reads_the_source_constants():
    """The plan's search is tail_plan.h's (tests/test_tail_plan_host.py compiles it against budget's model), called
    with the 8-bit constants."""
    assert (BLOCK_M, MAX_SPLITS, MIN_BLOCKS, budget.Q8_TAIL_MAX_ITEMS_PER_SM) == (192, 32, 4, 2)
    assert ("vidattn::cheapest_tail_split(r, nb, sms, kQ8TailMinBlocks, kQ8TailMaxSplits, kQ8TailMaxItemsPerSm));"
            in CAPI)
    assert "if (plan.splits < 2) return Q8TailPlan{};" in CAPI
    header = (REPO / "csrc/tail_plan.h").read_text()
    assert "rounds * ((nb + s - 1) / s + 2)) + static_cast<double>(r * s) / 50.0" in header
    assert "nb / s >= min_blocks && r * s <= max_items_per_sm * sms" in header
    assert "return best > 0.9 * static_cast<double>(nb) ? 1 : pick;" in header


@pytest.mark.parametrize("shape,plan", [
    ((1, 12, 32760, 32760), (72, 3)),   # Wan 1.3B self-attention: 2052 tiles, 15 rounds + 72
    ((1, 32, 24576, 24576), (4, 32)),   # LTX: 31 rounds + 4
    ((1, 40, 75600, 75600), (52, 5)),   # Wan 14B 720p: 119 rounds + 52
    ((1, 16, 24000, 24000), (20, 6)),   # HunyuanVideo 1.5
    ((4, 16, 8192, 8192), (0, 1)),      # seed 8K: 20 rounds + 112 tiles, nothing to gain
    ((1, 48, 17776, 17776), (0, 1)),    # CogVideoX: 33 rounds + 108
    ((1, 12, 32760, 512), (0, 1)),      # Wan cross-attention: 4 key blocks, too few to split
    ((1, 1, 100, 2200), (1, 4)),        # a lone tile (the sanitizer case): all tail, no main launch
])
def test_plans_on_the_shapes(shape, plan):
    assert tail_plan(*shape) == plan


def test_plan_invariants():
    """Every plan: a partial round, at most 2 x SMs ranges of at least MIN_BLOCKS key blocks, and a modelled saving of
    at least a tenth of the tile; no plan on full rounds."""
    for sms in (132, 114, 78):
        for h in (1, 3, 12, 24, 40):
            for sq in (1, 191, 192, 193, 4000, 17776):
                for skv in (1, 128, 511, 513, 2049, 9000, 32760):
                    r, s = tail_plan(1, h, sq, skv, sms)
                    tiles = -(-sq // BLOCK_M) * h
                    nb = -(-skv // BLOCK_N)
                    if r == 0:
                        assert s == 1
                        continue
                    assert r == tiles % sms and 2 <= s <= MAX_SPLITS and r * s <= 2 * sms
                    assert nb // s >= MIN_BLOCKS
                    rounds = -(-(r * s) // sms)
                    assert rounds * (-(-nb // s) + 2) + r * s / 50 <= 0.9 * nb
    assert tail_plan(1, 132, 192, 32760) == (0, 1)  # one full round


@pytest.mark.parametrize("n,s", [(16, 4), (17, 4), (256, 3), (192, 32), (591, 5), (8, 2)])
def test_key_ranges_cover_the_blocks_once(n, s):
    rs = key_ranges(n, s)
    assert rs[0][0] == 0 and rs[-1][1] == n
    assert all(a[1] == b[0] for a, b in zip(rs, rs[1:]))
    assert min(hi - lo for lo, hi in rs) >= n // s >= 1


@pytest.mark.parametrize("kv_len,s", [(1, 4), (128, 5), (129, 5), (600, 6), (1500, 3), (4097, 32)])
def test_key_ranges_of_a_short_batch(kv_len, s):
    """Mode 2 (kv_lens): each range takes its blocks from its own batch's kv_len (the kernel's n_blocks), so a batch
    shorter than the plan's key length splits fewer blocks, and with fewer blocks than ranges some ranges hold none.
    They still cover the batch's blocks once, and every non-empty one starts where the last ended."""
    n = (kv_len + BLOCK_N - 1) // BLOCK_N
    rs = key_ranges(n, s)
    assert rs[0][0] == 0 and rs[-1][1] == n and all(a[1] == b[0] for a, b in zip(rs, rs[1:]))
    assert sum(hi - lo for lo, hi in rs) == n
    empty = sum(hi == lo for lo, hi in rs)
    assert empty == max(0, s - n)  # at most one block a range when n < s: exactly n ranges hold one


def merge(parts):
    """combine_kernel's merge of one row's ranges [(m, l, o)], m in base 2 (-inf for a range without keys):
    (o, lse in base 2) or (0, -inf) when no range holds a key."""
    m = max(p[0] for p in parts)
    if m == -math.inf:
        return 0.0, -math.inf
    ws = [2.0 ** (p[0] - m) for p in parts]
    l = sum(w * p[1] for w, p in zip(ws, parts))
    return sum(w * p[2] for w, p in zip(ws, parts)) / l, m + math.log2(l)


def test_empty_ranges_merge_to_the_keys_they_lack():
    """A range without keys stores (max -inf, sum 0, O 0) (q8_store_partial: row_sum 0 -> -inf) and weighs 0 in the
    merge (combine_kernel skips the whole row only when every range is empty, writing O = 0, LSE = -inf)."""
    assert "p.ws_ml[2 * wr] = row_sum[r] > 0.f ? m : kNegInf;" in KERNEL
    combine = (REPO / "csrc/sm90/combine.cuh").read_text()
    assert "if (m != kNegInf) {" in combine and "row_has_sum(l) ? (m + __log2f(l)) * kLn2 : kNegInf;" in combine
    # One row over 3 keys, scores in base 2, values o_k: the plain softmax against the split one with empty ranges.
    scores, vals = [0.5, -1.0, 2.0], [3.0, -2.0, 0.25]
    l_all = sum(2.0 ** x for x in scores)
    o_all = sum(2.0 ** x * v for x, v in zip(scores, vals)) / l_all
    parts = [(-math.inf, 0.0, 0.0), (-math.inf, 0.0, 0.0)]  # two empty ranges
    for x, v in zip(scores, vals):  # one key a range
        parts.append((x, 1.0, v))
    o, lse = merge(parts)
    assert o == pytest.approx(o_all, rel=1e-12) and lse == pytest.approx(math.log2(l_all), rel=1e-12)
    assert merge([(-math.inf, 0.0, 0.0)] * 3) == (0.0, -math.inf)


def test_kernel_source():
    """The split build: the one-dimensional grid decoded in flash_fwd.cuh's tile order, the ranges as above, the
    producer's and the consumer's block offset (K/V coordinates, K's scales, the tail mask at the global key index),
    the partials' epilogue with the LSE's base (P's offset out, q . mean(K) in when LSE is asked)."""
    assert "blk0 = range * n_blocks / p.kv_splits;" in KERNEL
    assert "n_blocks = (range + 1) * n_blocks / p.kv_splits - blk0;" in KERNEL
    assert "m_block = t - hb * p.num_m_blocks;" in KERNEL and "h = hb % p.heads;" in KERNEL
    assert "kv_bh * p.skv_pad + (blk0 + j) * T::kBlockN" in KERNEL and "(blk0 + j) * T::kBlockN, kv_bh * kD" in KERNEL
    assert "ks + j0 * kQ8KGroups" in KERNEL and "ks + (j0 + j) * kQ8KGroups" in KERNEL
    assert KERNEL.count("(j0 + j) * kN") == 2
    assert "float m = row_max[r] - kQ8POffset;" in KERNEL
    assert "m += p.lse_corr[static_cast<int64_t>(bh) * p.seqlen_q + row] * kLog2e;" in KERNEL
    assert "if constexpr (kSplit) q8_store_partial<kD, kWGs, kSumMma>" in KERNEL


def test_c_side():
    """On by default for every call (2; 1 leaves kv_lens calls out); the setter's range and the environment
    variable; split twins only for the default builds; kv_lens calls keep the plain launch below mode 2, prep mode
    2 always; a workspace sized without the tail keeps it too; the last launch's ranges reset per call."""
    assert "#define VIDATTN_Q8_TAIL 2" in CAPI
    assert 'extern "C" int vidattn_q8_set_tail(int mode)' in CAPI and "if (mode < -1 || mode > 2) return 1;" in CAPI
    assert 'env_default("VIDATTN_Q8_TAIL", VIDATTN_Q8_TAIL, 0, 2)' in CAPI
    assert "(kD == 128 && kTurns == 2 && kCvt == 2 && kDescInc == 2 && kV12 == 1 && !kSumMma)" in CAPI
    assert "(kD == 64 && kTurns == 0 && kCvt == 1 && kDescInc == 0 && kV12 == 0 && kSumMma)" in CAPI
    assert ("if (!kTailBuilt || l.tail.tiles == 0 || (a.kv_lens != nullptr && q8_tail_asked() < 2) || prep == 2) {"
            in CAPI)
    assert "if (a->workspace_bytes < l.total)\n    l = q8_layout(" in CAPI and "a->head_dim, false);" in CAPI
    assert "g_q8_last_tail_splits = -1;" in CAPI and "g_q8_last_tail_splits = l.tail.splits;" in CAPI
    assert "return launch_combine<kD, kFp16>(a, p.ws_o, p.ws_ml," in CAPI  # capi.cu's merge launch, shared


def test_set_tail_validates_reaches_the_library_and_needs_it():
    lib = FakeQ8Lib("tail", 2)
    lib.vidattn_q8_last_tail_splits = lambda: 7
    for mode in (1, 0, 2, -1):
        quant8.set_tail(mode, lib=lib)
    assert lib.calls == [1, 0, 2, -1] and quant8.last_tail_splits(lib=lib) == 7
    for bad in (3, -2, 1.0, True, "1", None):
        with pytest.raises(ValueError, match="set_tail: mode must be one of"):
            quant8.set_tail(bad, lib=lib)
    assert lib.calls == [1, 0, 2, -1]
    # A library from before mode 2 refuses it: the library's own error, nothing set.
    before = FakeQ8Lib("tail", 1)
    with pytest.raises(ValueError, match="vidattn_q8_set_tail: invalid value 2"):
        quant8.set_tail(2, lib=before)
    assert before.last == -1
    old = FakeQ8Lib("other", 1)
    with pytest.raises(RuntimeError, match="lacks vidattn_q8_set_tail"):
        quant8.set_tail(1, lib=old)
    assert quant8.last_tail_splits(lib=old) == -1


def test_ab_driver_rule():
    """dev/q8_tail_ab.py's verdict, as the notes fix it before the run."""
    from _support import load_script

    ab = load_script(REPO / "dev/q8_tail_ab.py", "q8_tail_ab_rule")
    assert ab.rule([1.01, 1.02, 1.008, 1.012, 1.006, 1.02]) == "tail wins"
    assert ab.rule([1.01, 1.02, 0.99, 1.012, 1.006, 1.02]) == "tail wins"  # 5 of 6
    assert ab.rule([1.01, 1.02, 0.99, 0.98, 1.006, 1.02]) == "tie"  # 4 of 6
    assert ab.rule([0.99, 0.98, 0.99, 1.001, 0.994, 0.97]) == "tail loses"
    assert ab.rule([1.001, 0.999] * 3) == "tie"
    assert ab.rule([]) == "no rounds"
    assert math.isclose(ab.SHAPES[0][2] * ab.SHAPES[0][3], 12 * 32760)
    # The kv_lens shapes (mode 2 against 1): batch 1, a kv_len short of the keys, a tail planned from the shapes.
    padded = [s for s in ab.SHAPES if len(s) == 7]
    assert padded and all(s[1] == 1 and 0 < s[6] < s[4] for s in padded)
    assert all(tail_plan(*s[1:5])[0] > 0 for s in padded)
    for bad in (["--modes", "1", "1"], ["--modes", "1", "3"], ["--shapes", "nope"],
                ["--path", "exact", "--modes", "1", "2"], ["--path", "bf16"]):
        with pytest.raises(SystemExit):
            ab.main(bad)
    assert ab.PATHS["exact"][2] == "exact" and ab.PATHS["exact"][3] == (0, 1)
    assert ab.PATHS["8bit"][3] == (0, 1, 2) and ab.PATHS["exact-rounds"][3] == (1, 2, 3)
    with pytest.raises(SystemExit):
        ab.main(["--path", "exact-rounds", "--modes", "0", "2"])
