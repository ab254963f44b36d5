"""The causal tile schedule's host-side model (dev/probes/causal_schedule_sim.py), no GPU: the tile order that
flash_fwd.cuh's tile_coord<true> walks covers every (Q block, head, batch) once, heaviest first across each group;
the group rule mirrors capi.cu; list scheduling hands every tile to exactly one CTA, within a CTA's redo capacity;
and the policies' makespans at the bench shapes (the static order's 1.51x at 32K, 16 heads, that the dynamic
schedule removes)."""
from __future__ import annotations

import re
from pathlib import Path

import pytest
from _support import load_script

ROOT = Path(__file__).resolve().parent.parent
sim = load_script(ROOT / "dev/probes/causal_schedule_sim.py")


@pytest.mark.parametrize("b,h,mb,group", [(1, 16, 256, 2), (2, 16, 64, 8), (3, 7, 11, 4), (1, 13, 5, 13),
                                          (2, 5, 1, 3), (1, 1, 9, 1), (4, 3, 7, 64)])
def test_tile_order_is_a_permutation_heaviest_first_per_group(b, h, mb, group):
    group = min(group, b * h)
    seen = [sim.tile_coord(t, mb, h, b * h, group) for t in range(mb * b * h)]
    assert sorted(seen) == sorted((m, hh, bb) for m in range(mb) for hh in range(h) for bb in range(b))
    for t in range(1, len(seen)):
        (m0, h0, b0), (m1, h1, b1) = seen[t - 1], seen[t]
        g0, g1 = (b0 * h + h0) // group, (b1 * h + h1) // group
        assert g1 >= g0, "groups in order"
        if g1 == g0:
            assert m1 <= m0, "within a group, Q blocks never grow"


def test_group_one_is_the_head_major_order():
    """causal_group 1 (the static fallback's) decodes as the kernel did before the dynamic schedule."""
    mb, h, b = 7, 3, 2
    for t in range(mb * h * b):
        hb, i = divmod(t, mb)
        assert sim.tile_coord(t, mb, h, b * h, 1) == (mb - 1 - i, hb % h, hb // h)


def test_group_rule_matches_capi():
    src = (ROOT / "csrc/capi.cu").read_text()
    m = re.search(r"kCausalGroupBytes = (\d+)ll << (\d+);", src)
    assert m and sim.GROUP_BYTES == int(m.group(1)) << int(m.group(2))
    assert "kv_bytes = a.seqlen_kv * kHeadDim * 2 * 2" in src
    assert sim.group_heads(1, 16, 32768, 128) == 1
    assert sim.group_heads(2, 16, 8192, 128) == 4
    assert sim.group_heads(1, 40, 75600, 128) == 1
    assert sim.group_heads(1, 2, 1024, 64) == 2  # never more than the (batch, head) pairs


@pytest.mark.parametrize("cap", [1, 3, sim.REDO_CAP])
def test_list_scheduling_hands_out_every_tile_once(cap):
    work = sim.grouped_list(2, 5, 3001, 1000, 128, 4, bottom_right=True)  # includes tiles of 0 blocks
    g = 24
    if cap * g < len(work):
        cap = -(-len(work) // g)  # the host guarantees tiles <= CTAs * capacity per launch
    assign = []
    sim.dynamic(work, g, 0.5, cap=cap, assign=assign)
    assert None not in assign and len(assign) == len(work)
    counts = [assign.count(c) for c in range(g)]
    assert max(counts) <= cap and sum(counts) == len(work)


def test_makespans_at_the_bench_shapes():
    r32 = sim.simulate(1, 16, 32768, 128)
    assert r32["static_snake"]["ratio"] > 1.45  # the measured 0.94x cuDNN at 32K
    for b, h, s, d in [(2, 16, 8192, 128), (1, 16, 32768, 128), (2, 32, 8192, 64), (1, 32, 32768, 64)]:
        r = sim.simulate(b, h, s, d)
        assert r["dynamic_grouped"]["ratio"] < 1.008, (b, h, s, d, r["dynamic_grouped"])
        assert r["dynamic_grouped"]["ratio"] <= r["static_snake"]["ratio"] + 1e-9
    # head after head, the dynamic counter alone hands out heavy tiles late: at 8K, 2 x 16 heads, 5% over the mean
    assert sim.simulate(2, 16, 8192, 128)["dynamic"]["ratio"] > 1.04


def test_work_model_counts_blocks_to_the_diagonal():
    # 8K at M = N = 128: Q block m runs m + 1 key blocks; bottom-right with fewer keys leaves early rows empty
    assert [sim.tile_blocks(m, 128, 128, 8192, 8192) for m in (0, 1, 63)] == [1, 2, 64]
    assert sim.tile_blocks(0, 128, 128, 3001, 1000, bottom_right=True) == 0
    assert sim.tile_blocks(23, 128, 128, 3001, 1000, bottom_right=True) == 8


# ---- short problems: the static order below a length threshold (capi.cu, causal_dynamic_for) --------------------
def _ab():
    return load_script(ROOT / "dev/probes/causal_sched_ab.py")


def test_crossover_is_the_start_of_the_winning_suffix():
    ab = _ab()
    assert ab.crossover([(1024, 0.94), (2048, 1.01), (4096, 1.05)]) == 2048
    # a win below a loss does not count: dynamic must hold from the threshold on
    assert ab.crossover([(1024, 1.02), (2048, 0.97), (4096, 1.05), (8192, 1.1)]) == 4096
    assert ab.crossover([(1024, 1.0), (2048, 1.01)]) == 1024
    assert ab.crossover([(1024, 1.2), (4096, 0.99)]) is None
    assert ab.crossover([(1024, 0.995), (2048, 1.01)], tol=0.01) == 1024


def test_recommended_threshold_is_per_head_dim():
    ab = _ab()
    rows = [{"d": 128, "s": 1024, "speedup": 0.94}, {"d": 128, "s": 1024, "speedup": 0.96},
            {"d": 128, "s": 2048, "speedup": 1.02}, {"d": 128, "s": 4096, "speedup": 1.1},
            {"d": 64, "s": 1024, "speedup": 1.03}, {"d": 64, "s": 2048, "speedup": 1.08},
            {"d": 64, "s": 4096, "speedup": 1.1}]
    assert ab.recommended_min_sq(rows) == {64: 1024, 128: 2048}
    rows.append({"d": 64, "s": 8192, "speedup": 0.9})
    assert ab.recommended_min_sq(rows) == {64: None, 128: 2048}
    # the sweep's shapes hold both head dims at every length, the 1K D=128 shape that lost among them
    assert (4, 16, 1024, 128) in ab.CROSSOVER
    for s in (1024, 2048, 4096, 8192):
        assert {d for _, _, ss, d in ab.CROSSOVER if ss == s} == {64, 128}


def test_paired_speedup_cancels_drift_between_rounds():
    """Both policies slow down together in rounds 2-4 (clock drift): the per-round ratios stay at 1, the ratio of
    the two medians does not."""
    ab = _ab()
    row = {"speedup": 203 / 258, "speedup_rounds": [1.0, 1.0, 0.99, 1.0, 1.01]}
    assert ab.paired_speedup(row) == 1.0
    assert ab.paired_speedup({"speedup": 0.97}) == 0.97  # an older sweep's row
    rows = [dict(row, d=128, s=4096), {"d": 128, "s": 8192, "speedup": 1.4}]
    assert ab.recommended_min_sq(rows) == {128: 4096}


def test_verdict_names_each_head_dim_and_flags_a_difference():
    ab = _ab()
    lines = ab.verdict({64: 2048, 128: 8192}, {64: 2048, 128: 2048})
    assert len(lines) == 2 and "D=64" in lines[0] and "D=128" in lines[1]
    assert "differs" not in lines[0] and "differs" in lines[1]
    assert "none" in ab.verdict({64: None}, {64: 2048})[0]


CROSSOVER_H200 = ROOT / "bench/results/h200_2026-12-02_pm/call_g/causal/crossover.json"


def test_shipped_thresholds_are_the_measured_crossovers():
    """capi.cu's defaults are what the committed H200 sweep gives by the sweep's own rule (the median of the per-round
    ratios, from the shortest length dynamic holds at and beyond)."""
    import json
    ab = _ab()
    picks = ab.recommended_min_sq(json.loads(CROSSOVER_H200.read_text())["rows"])
    src = (ROOT / "csrc/capi.cu").read_text()
    for d in (64, 128):
        m = re.search(rf"#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D{d} (\d+)", src)
        assert m, f"the D={d} threshold is a build parameter"
        assert int(m.group(1)) == picks[d], (d, picks)


def test_capi_routes_short_problems_to_the_static_order():
    src = (ROOT / "csrc/capi.cu").read_text()
    for d in (64, 128):
        m = re.search(rf"#define VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D{d} (\d+)", src)
        assert m, "the threshold is a build parameter"
        assert 0 < int(m.group(1)) <= 8192, "8K and longer measured 1.02-1.64x with the dynamic schedule"
    # one threshold per causal build, picked by the launched build's head dim; head dims up to 64 run on the D=64
    # build, 65-128 on the D=128 build (vidattn_sm90_build_head_dim), none past 128
    assert ("int causal_build_slot(int64_t head_dim) { return head_dim < 1 || head_dim > 128 ? -1 : head_dim <= 64 ? 0 "
            ": 1; }") in src
    assert "return seqlen_q >= g_causal_dynamic_min_sq[causal_build_slot(build_head_dim)];" in src
    # the dynamic schedule needs the workspace and a long enough problem; anything else runs the static order
    assert re.search(r"a\.workspace_bytes >= causal_sched_bytes\(sms\) &&\s+"
                     r"causal_dynamic_for\(kHeadDim, a\.seqlen_q\)\)", src)
    hdr = (ROOT / "csrc/capi.h").read_text()
    for fn in ("vidattn_sm90_set_causal_dynamic_min_sq", "vidattn_sm90_set_causal_dynamic_min_sq_for",
               "vidattn_sm90_causal_dynamic_min_sq_for", "vidattn_sm90_last_causal_dynamic"):
        assert f"{fn}(" in hdr and f'extern "C" int {fn}(' in src
