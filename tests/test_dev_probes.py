"""The developer's probes in dev/probes/ (A/B timing, accuracy tails, timeline, clock and neighbour probes,
call overhead) on the CPU: their parsing, statistics and clean refusals without a GPU. Marked `dev` (tests/conftest.py)."""
import json
import math
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
PROBES = ROOT / "dev" / "probes"
sys.path.insert(0, str(ROOT))

from _support import cpu_only as _cpu_only, load_script, one_thread  # noqa: E402,F401 - an autouse fixture


def _load(name):
    return load_script(PROBES / f"{name}.py", importable=True)


@pytest.mark.parametrize("backend", ["vidattn", "cudnn"])
def test_kernel_once_refuses_cleanly_without_the_kernel(backend):
    import subprocess
    import sys as _sys

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run the kernel")
    proc = subprocess.run([_sys.executable, str(PROBES / "kernel_once.py"), "wan_cross", "--backend", backend],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1 and "cannot run here" in proc.stderr


@pytest.mark.parametrize("args, says", [
    (["--causal", "--precision", "8bit"], "no causal mask"),
    (["--hd-narrow", "1", "--backend", "cudnn"], "vidattn bf16 only"),
    (["--hd-narrow", "1", "--precision", "8bit"], "vidattn bf16 only"),
])
def test_kernel_once_refuses_options_that_do_not_apply(args, says):
    import subprocess
    import sys as _sys

    proc = subprocess.run([_sys.executable, str(PROBES / "kernel_once.py"), "custom", "--dims", "1", "2", "64", "64",
                           "256", *args], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and says in proc.stderr


def test_causal_cost_round_ratios_and_sides(monkeypatch):
    """causal_cost.py's sides per library (the narrow side only at D >= 192) and its --help, on the CPU."""
    cc = _load("causal_cost")
    sides = cc.sides_for(256, {"base": object(), "new": object()}, None)
    assert [n for n in sides if n.startswith("base_")] == ["base_causal", "base_static", "base_narrow", "base_dense"]
    assert sides["new_causal"][0] and not sides["new_dense"][0] and "cudnn_causal" in sides
    assert "base_narrow" not in cc.sides_for(128, {"base": object()}, None)
    assert "fa3_causal" in cc.sides_for(64, {"base": object()}, lambda *a, **k: None)
    # the static side is the library's own launch without a workspace (causal_sched_ab's static policy)
    seen = []
    monkeypatch.setattr(cc._ext, "forward", lambda *a, lib=None, causal=0: seen.append(
        (cc._ext.workspace(lib, None), causal)))
    lib = object()
    cc.sides_for(128, {"base": lib}, None)["base_static"][1](None, None, None, None)
    assert seen == [(None, cc._ext.CAUSAL_TOP_LEFT)]


def test_harness_probe_refuses_cleanly_without_a_gpu(monkeypatch):
    probe = _load("harness_probe")
    _cpu_only(monkeypatch)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        probe.main(["--shape", "wan14b_self"])


@pytest.mark.parametrize("builds", ["176", "64,128,176"])
def test_block_n_sweep_wants_two_widths(builds, capsys):
    sweep = _load("block_n_sweep")
    with pytest.raises(SystemExit) as exc:
        sweep.main(["--builds", builds])
    assert exc.value.code == 2 and "two widths" in capsys.readouterr().err


def test_time_interleaved_orders_rounds_and_enters_each_context(monkeypatch):
    """kernel_ab_time.time_interleaved (the timing loop of the A/B script, block_n_sweep.py and harness_probe.py),
    with do_bench faked: the rounds follow a Williams design (for three names: the three cyclic orders, then their
    reverses), each measurement runs inside its entry's context, each name gets one time per round, in the order
    measured, and the warm-up is 20 ms unless the caller names one; order="rotated" is the earlier scheme."""
    import contextlib
    import types

    events = []
    warmups = []

    def do_bench(fn, warmup, rep, return_mode):
        assert (rep, return_mode) == (7.0, "median")
        warmups.append(warmup)
        fn()
        return float(len(events))

    monkeypatch.setitem(sys.modules, "triton", types.ModuleType("triton"))
    monkeypatch.setitem(sys.modules, "triton.testing", types.SimpleNamespace(do_bench=do_bench))
    ab = _load("kernel_ab_time")

    @contextlib.contextmanager
    def context(name):
        events.append(f"enter {name}")
        yield
        events.append(f"exit {name}")

    fns = {n: (lambda n=n: context(n), lambda n=n: events.append(f"run {n}")) for n in ("a", "b", "c")}
    times = ab.time_interleaved(fns, rounds=4, rep_ms=7.0)
    runs = [e.split()[1] for e in events if e.startswith("run")]
    assert runs == list("abc" "bca" "cab" "cba")
    assert events[:3] == ["enter a", "run a", "exit a"]
    assert all(len(t) == 4 for t in times.values())
    assert times["a"] == [2.0, 17.0, 23.0, 35.0]  # events before each of a's return: 3 per measurement
    events.clear()
    ab.time_interleaved(fns, rounds=4, rep_ms=7.0, order="rotated")
    assert [e.split()[1] for e in events if e.startswith("run")] == list("abc" "bca" "cab" "abc")
    assert set(warmups) == {20}
    ab.time_interleaved({"a": fns["a"]}, rounds=1, rep_ms=7.0, warmup_ms=25)
    assert warmups[-1] == 25


def _timeline_rows(probe, tiles=5, blocks=10, steady=1000, epilogue=400, ctas=2):
    """Synthetic stamps as a timeline build writes them: per CTA `tiles` tiles of `blocks` key blocks, warpgroup 1
    100 cycles behind warpgroup 0, Q issued 800 cycles before each tile starts."""
    cons = [[[[0] * probe.EVENTS for _ in range(probe.WGS)] for _ in range(probe.MAX_LOCAL)]
            for _ in range(probe.MAX_CTAS)]
    prod = [[[0] * probe.PEVENTS for _ in range(probe.MAX_LOCAL)] for _ in range(probe.MAX_CTAS)]
    period = 300 + (blocks - 1) * steady + 700 + 500 + epilogue + 100
    for c in range(ctas):
        t = 1000
        for local in range(tiles):
            for w in range(2):
                b = t + 100 * w
                r = cons[c][local][w]
                r[probe.START], r[probe.QFULL], r[probe.K0FULL], r[probe.S0DONE] = b, b + 50, b + 60, b + 300
                r[probe.DRAIN] = r[probe.S0DONE] + (blocks - 1) * steady + 700
                r[probe.LASTPV] = r[probe.DRAIN] + 500
                r[probe.EPI] = r[probe.LASTPV] + epilogue
                r[probe.BLOCKS] = blocks
                # the first key iteration 700 cycles longer than the others (S_0's softmax in it)
                r[probe.ITER2] = r[probe.S0DONE] + steady + 700
                r[probe.LASTITER] = r[probe.ITER2] + (blocks - 3) * steady
                # summed over the blocks - 1 key iterations: 30 cycles each on the ring, 20 * (w + 1) on the turn
                r[probe.KVWAIT], r[probe.TURNWAIT], r[probe.PVWAIT] = 30 * (blocks - 1), 20 * (w + 1) * (blocks - 1), 0
                r[probe.SWAIT] = 600 * (blocks - 1)
                # warpgroup 1: V late in 3 of its blocks - 1 iterations, the first one among them (the high word)
                r[probe.KLATE], r[probe.VLATE] = 0, 3 * w + (w << 32)
            # clock64 and %globaltimer read together as the producer takes the tile up: a 1.5 GHz clock
            prod[c][local] = [t - 900, t - 800, 500 * blocks, 200 * blocks, t - 1000, round((t - 1000) / 1.5)]
            t += period
    return cons, prod, period


def test_timeline_probe_analyses_the_stamps_it_reads():
    probe = _load("timeline_probe")
    cons, prod, period = _timeline_rows(probe)
    r = probe.analyse(cons, prod, 132)
    assert r["tiles"] == 2 * 3 * 2  # 2 CTAs x the 3 middle tiles x 2 warpgroups
    assert r["period_cycles"] == period and r["steady_cycles_per_block"] == 1000 + 700 / 9
    assert r["boundary_cycles"] == pytest.approx(period - 10 * (1000 + 700 / 9))
    assert (r["first_iteration_cycles"], r["steady_iteration_cycles"], r["last_iteration_cycles"]) == (1700, 1000, 1000)
    assert r["phases_median_cycles"]["epilogue"] == 400 and r["phases_median_cycles"]["q wait"] == 50
    assert r["wg1_start_minus_wg0_start_cycles"] == 100
    assert r["q_issued_before_tile_start_cycles"] == 800 and r["q_issue_to_q_full_cycles"] == 850
    assert r["waits_per_iteration_cycles"] == {"kv_full_wait": 30, "turn_wait": 30, "pv_wait": 0,
                                             "s_issue_wait": 600}
    assert r["waits_per_iteration_p90_cycles"]["turn_wait"] == 40
    assert r["producer_waits_per_block_cycles"] == {"k_empty_wait": 500, "v_empty_wait": 200}
    assert r["late_share"] == {"k": 0.0, "v": pytest.approx(3 / 18)}  # 3 of 9 iterations late, in half the rows
    assert r["late_share_first_iteration"] == {"k": 0.0, "v": 0.5}
    # A longer epilogue lengthens the period by as much, and the boundary with it: the analysis must see it.
    cons2, prod2, period2 = _timeline_rows(probe, epilogue=900)
    r2 = probe.analyse(cons2, prod2, 132)
    assert r2["boundary_cycles"] - r["boundary_cycles"] == pytest.approx(500) and period2 - period == 500
    # No complete tile row (a launch that did not stamp): nothing to report, no division by zero.
    empty, eprod, _ = _timeline_rows(probe, tiles=0)
    assert probe.analyse(empty, eprod, 132) == {"tiles": 0}


def test_timeline_probe_tile_table_in_microseconds():
    """The per-phase table (issue 26's D=256 boundary): every stamp-to-stamp row of a tile, per warpgroup, adds up
    to the period; cycles turn into microseconds at the clock the producer's clock64 / %globaltimer pairs give; the
    boundary is the period less the tile's blocks at the steady iteration's time."""
    probe = _load("timeline_probe")
    cons, prod, period = _timeline_rows(probe)
    r = probe.analyse(cons, prod, 132)
    assert r["clock_ghz"] == pytest.approx(1.5, rel=1e-4)
    rows = r["tile_rows"]
    assert sorted(rows) == [0, 1]
    for w in (0, 1):
        t = rows[w]
        assert t["tiles"] == 2 * 3 and t["period"] == period and t["blocks"] == 10 and t["steady_iteration"] == 1000
        assert t["rows"] == {"q wait": 50, "K_0 wait": 10, "S_0 (turn + wgmma)": 240, "softmax_0 + iteration 1": 1700,
                             "iterations 2..n-2": 7000, "iteration n-1": 1000, "last P V (turn + wgmma)": 500,
                             "epilogue (O out, Q/V back)": 400, "to the next tile": 100}
        assert sum(t["rows"].values()) == period
    lines = probe.us_table(rows, r["clock_ghz"])
    epi = next(x for x in lines if "epilogue" in x).split()
    assert [float(epi[-4]), epi[-3], float(epi[-2])] == [pytest.approx(400 / 1500, abs=1e-3), "3.6%", 0.267]
    assert "boundary (period - blocks x steady iteration) 0.667 us = 9.1% of the period" in lines[-1]
    # no clock pairs (a build before them): the table stays in cycles
    assert "1000.000 cyc" in probe.us_table(rows, None)[-1]
    # a longer epilogue shows in its row and in the boundary, nowhere else
    cons2, prod2, _ = _timeline_rows(probe, epilogue=900)
    r2 = probe.analyse(cons2, prod2, 132)["tile_rows"][0]
    assert r2["rows"]["epilogue (O out, Q/V back)"] == 900 and r2["period"] == period + 500
    assert {k: v for k, v in r2["rows"].items() if "epilogue" not in k} == \
        {k: v for k, v in rows[0]["rows"].items() if "epilogue" not in k}
    # tiles of fewer than 4 key blocks have no steady iteration to cut: none counted
    short, sprod, _ = _timeline_rows(probe, blocks=3)
    assert probe.tile_rows(short, 132) == {}
    assert probe.us_table({}, 1.5) == ["   (no tile of 4+ key blocks in the middle of a CTA's list)"]
    assert (probe.fmt_us(1500, 1.5), probe.fmt_us(1500, None), probe.fmt_us(None, 1.5)) == ("1.000 us", "1500 cyc", "-")


def test_timeline_d256_script_builds_the_subset_and_runs_both_shapes():
    """The device command's script: a timeline build of the kernel subset with the library's own nvcc flags, both
    1K shapes of the probe, the probe's tables at the end of its output; and the probe knows both shapes."""
    text = (PROBES / "timeline_d256.sh").read_text()
    assert "-DVIDATTN_KERNEL_SUBSET=1" in text and '-DVIDATTN_DIAG_TIMELINE="$LEVEL"' in text
    assert "scripts/nvcc_flags.py" in text and "timeline_probe.py ${TL_SHAPES:-d256_1k d128_1k}" in text
    probe = _load("timeline_probe")
    assert probe.EXTRA_SHAPES["d256_1k"][1:] == (16, 8, 1024, 1024, 256)
    assert probe.EXTRA_SHAPES["d128_1k"][1:] == (16, 8, 1024, 1024, 128)
    assert probe.EXTRA_SHAPES["d192_1k"][1:] == (16, 10, 1024, 1024, 192)  # the envelope's D192 1K row


def test_timeline_layout_matches_the_header():
    """The probe's row layout is diag_timeline.cuh's: a build whose rows it misreads would print plausible nonsense."""
    import re

    hdr = (ROOT / "csrc/sm90/diag_timeline.cuh").read_text()
    m = re.search(r"kTlMaxCtas = (\d+), kTlMaxLocal = (\d+), kTlWGs = (\d+), kTlEvents = (\d+), "
                  r"kTlProducerEvents = (\d+);", hdr)
    probe = _load("timeline_probe")
    assert tuple(int(x) for x in m.groups()) == (probe.MAX_CTAS, probe.MAX_LOCAL, probe.WGS, probe.EVENTS,
                                                 probe.PEVENTS)
    assert int(re.search(r"kTlClockPair = (\d+)", hdr).group(1)) == probe.CLOCK_PAIR
    assert int(re.search(r"kTlTimerNs = (\d+)", hdr).group(1)) == probe.TIMER_NS


def _stamps_entry(cons, prod, read=None, name=""):
    """A fake timeline C entry that copies the rows `cons` / `prod` into the probe's buffers (and notes its `name`
    in `read` at each call)."""
    import ctypes

    flat_c = [x for c in cons for l in c for w in l for x in w]
    flat_p = [x for c in prod for l in c for x in l]

    def diag(cbuf, cbytes, pbuf, pbytes, reset):
        if read is not None:
            read.append(name)
        if cbuf is not None:
            ctypes.memmove(cbuf, (ctypes.c_uint64 * len(flat_c))(*flat_c), cbytes)
            ctypes.memmove(pbuf, (ctypes.c_uint64 * len(flat_p))(*flat_p), pbytes)
        return 0
    return diag


def _fake_cuda_for_timeline(monkeypatch):
    """torch.cuda as the timeline probe's main() uses it, on the CPU: events 0.25 ms apart, 132 SMs."""
    import types

    class Event:
        clock = 0.0

        def __init__(self, enable_timing=True):
            self.t = 0.0

        def record(self):
            Event.clock += 0.25
            self.t = Event.clock

        def elapsed_time(self, other):
            return other.t - self.t
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(torch.cuda, "get_device_properties", lambda i: types.SimpleNamespace(multi_processor_count=132))


def test_timeline_probe_main_prints_the_tables_last(monkeypatch, capsys, tmp_path):
    """main() end to end on the CPU with a fake timeline library (the synthetic rows of _timeline_rows) and a fake
    CUDA: both 1K shapes are known, each gets its table with the build and the clock in its head, the tables come
    last, and the JSON is written. What a device run would fail on after its build is caught here."""
    import types

    probe = _load("timeline_probe")
    cons, prod, period = _timeline_rows(probe)
    lib = types.SimpleNamespace(vidattn_sm90_diag_timeline=_stamps_entry(cons, prod),
                                vidattn_sm90_last_o_path=lambda: 2, vidattn_sm90_last_error=lambda: b"")
    from vidattn import _ext
    import bench_kernel
    _fake_cuda_for_timeline(monkeypatch)
    monkeypatch.setattr(torch, "Generator", lambda device=None: types.SimpleNamespace(manual_seed=lambda s: None))
    monkeypatch.setattr(bench_kernel, "make_inputs", lambda s, n, g: [(torch.zeros(1), torch.zeros(1), torch.zeros(1))])
    monkeypatch.setattr(_ext, "load", lambda: lib)
    monkeypatch.setattr(_ext, "forward", lambda *a: None)
    monkeypatch.setattr(_ext, "last_block_n", lambda *a: 80)
    probe.main(["d256_1k", "d128_1k", "--warm-ms", "1", "--launches", "2", "--json", str(tmp_path / "t.json")])
    out = capsys.readouterr().out
    tail = out[out.index("== d256_1k: where a tile's time goes"):]
    assert "== d128_1k: where a tile's time goes" in tail and "N=80 O path 2" in tail and "clock 1.500 GHz" in tail
    assert "epilogue (O out, Q/V back)" in tail and "boundary (period - blocks x steady iteration) 0.667 us" in tail
    assert "Q issued (producer, all of it) 0.533 us before warpgroup 0's tile start" in tail
    saved = json.loads((tmp_path / "t.json").read_text())
    assert saved["d256_1k"]["tile_rows"]["0"]["period"] == period and saved["d128_1k"]["clock_ghz"] > 1.49


def test_timeline_sparse_script_builds_both_units_with_stamps():
    """The block-sparse timeline's device script: both translation units built with the stamps and a dense subset (2:
    D=64 only, 3: none), the probe's block-sparse shapes by default (the dense one only where the subset has it);
    each unit reads back its own rows (static in the header), through an entry of its own."""
    text = (PROBES / "timeline_sparse.sh").read_text()
    assert '-DVIDATTN_DIAG_TIMELINE="$LEVEL" -DVIDATTN_KERNEL_SUBSET="$SUBSET"' in text
    assert "csrc/capi.cu \\\n    csrc/capi_sparse.cu" in text and "scripts/nvcc_flags.py" in text
    assert 'SHAPES="sparse:64:tile3d sparse:64:band sparse:64:scattered sparse:64:full"' in text
    assert '[[ $SUBSET == 2 ]] && SHAPES="$SHAPES sparse:64:dense"' in text
    hdr = (ROOT / "csrc/sm90/diag_timeline.cuh").read_text()
    assert "static __device__ unsigned long long g_tl_consumer" in hdr
    assert "static inline cudaError_t tl_copy_rows" in hdr
    assert 'extern "C" int vidattn_sm90_diag_timeline_sparse(' in (ROOT / "csrc/capi_sparse.cu").read_text()
    capi = (ROOT / "csrc/capi.cu").read_text()
    assert "VIDATTN_KERNEL_SUBSET == 3) return false" in capi and "VIDATTN_KERNEL_SUBSET == 2) return" in capi
    probe = _load("timeline_probe")
    assert all(probe.is_sparse_key(k) for k in ("sparse:64:tile3d", "sparse:128:band", "sparse:64:dense",
                                                       "sparse:64:full"))
    assert not any(probe.is_sparse_key(k) for k in ("sparse:96:tile3d", "sparse:64:stripes", "seed4k", "sparse:64"))


def test_timeline_probe_reads_three_warpgroups_and_the_sparse_entry(monkeypatch, capsys):
    """A block-sparse shape's rows come from the block-sparse unit's entry, read for as many warpgroups as its tile
    has (three at D=64 with 192-row tiles); a library whose block-sparse kernels carry no stamps is refused by name."""
    import types

    probe = _load("timeline_probe")
    cons, prod, period = _timeline_rows(probe)
    for c in range(2):  # a third warpgroup, 100 cycles behind the second
        for local in range(5):
            cons[c][local][2] = [x + 100 if i not in (probe.BLOCKS, probe.KVWAIT, probe.TURNWAIT, probe.PVWAIT,
                                                      probe.SWAIT, probe.KLATE, probe.VLATE) else x
                                 for i, x in enumerate(cons[c][local][1])]
    r3 = probe.analyse(cons, prod, 132, wgs=3)
    assert r3["tiles"] == 2 * 3 * 3 and sorted(r3["tile_rows"]) == [0, 1, 2]
    assert probe.analyse(cons, prod, 132)["tiles"] == 2 * 3 * 2  # (two by default: the dense builds' rows)
    read = []

    def entry(name):
        return _stamps_entry(cons, prod, read, name)
    from vidattn import _ext
    _fake_cuda_for_timeline(monkeypatch)
    monkeypatch.setattr(_ext, "last_block_n", lambda *a: 128)
    rec = types.SimpleNamespace(name="K6-SR-like block-sparse tile3d", b=1, h=28, sq=32768, skv=32768, d=64)
    monkeypatch.setattr(probe, "sparse_case", lambda key: (rec, 0.15, lambda: None, 3))
    lib = types.SimpleNamespace(vidattn_sm90_diag_timeline=entry("dense"),
                                vidattn_sm90_diag_timeline_sparse=entry("sparse"),
                                vidattn_sm90_last_o_path=lambda: 0, vidattn_sm90_last_error=lambda: b"")
    monkeypatch.setattr(_ext, "load", lambda: lib)
    probe.main(["sparse:64:tile3d", "--warm-ms", "1", "--launches", "2"])
    out = capsys.readouterr().out
    assert set(read) == {"sparse"} and "warpgroup 2" in out and "== sparse:64:tile3d: where a tile's time goes" in out
    lib_old = types.SimpleNamespace(vidattn_sm90_diag_timeline=entry("dense"), vidattn_sm90_last_o_path=lambda: 0,
                                    vidattn_sm90_last_error=lambda: b"")
    monkeypatch.setattr(_ext, "load", lambda: lib_old)
    with pytest.raises(SystemExit, match="block-sparse kernels carry no stamps"):
        probe.main(["sparse:64:tile3d"])
    with pytest.raises(SystemExit):
        probe.main(["sparse:96:tile3d"])
    lib.vidattn_sm90_diag_timeline_sparse = lambda *a: 1  # a refused copy says which entry refused
    monkeypatch.setattr(_ext, "load", lambda: lib)
    with pytest.raises(SystemExit, match="block-sparse timeline copy failed"):
        probe.main(["sparse:64:tile3d", "--warm-ms", "1", "--launches", "2"])


def test_timeline_probe_refuses_cleanly_without_a_gpu(monkeypatch):
    probe = _load("timeline_probe")
    _cpu_only(monkeypatch)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        probe.main(["seed4k"])


def test_neighbour_probe_plan_samples_and_table():
    """neighbour_probe.py's pure parts: each repetition runs all 8 (predecessor, target) pairs once, the repetitions
    in different orders; nvidia-smi lines parse with their times (clock_probe.parse_timed_samples, which the probe
    samples through: a header or "[N/A]" skipped); samples are assigned to the target windows they fall in; the table
    has one row per pair with the target's median time and the first / last quarter of its calls in a window."""
    probe = _load("neighbour_probe")
    plan = probe.pair_plan(3)
    assert len(plan) == 24 and len(set(plan)) == 8
    assert all(sorted(plan[8 * r:8 * r + 8]) == sorted(set(plan)) for r in range(3))
    assert plan[:8] != plan[8:16]
    assert {t for _, t in plan} == {"vidattn", "cudnn"} and {p for p, _ in plan} == set(probe.PREDECESSORS)
    lines = ["timestamp, clocks.current.sm [MHz], power.draw [W], temperature.gpu",
             "2026/12/01 11:20:20.100, 1650, 690.5, 60", "2026/12/01 11:20:20.300, [N/A], 700, 60",
             "2026/12/01 11:20:21.500, 1980, 120.0, 55", "garbage"]
    samples = _load("clock_probe").parse_timed_samples(lines)
    assert [(c, p) for _, c, p, _ in samples] == [(1650.0, 690.5), (1980.0, 120.0)]
    assert samples[1][0] - samples[0][0] == pytest.approx(1.4)
    t0 = samples[0][0]
    records = [{"pred": "cudnn", "target": "vidattn", "t0": t0 - 0.05, "t1": t0 + 0.05, "ms": 9.8,
                "times": [10.0, 9.9, 9.8, 9.7, 9.6, 9.5, 9.4, 9.3]},
               {"pred": "cudnn", "target": "vidattn", "t0": t0 + 5, "t1": t0 + 6, "ms": 9.6, "times": [9.9, 9.6, 9.2]},
               {"pred": "idle", "target": "vidattn", "t0": t0 + 1.3, "t1": t0 + 1.5, "ms": 9.1}]
    rows = {(r["pred"], r["target"]): r for r in probe.summarize(records, samples)}
    assert rows[("cudnn", "vidattn")]["ms"] == pytest.approx(9.7) and rows[("cudnn", "vidattn")]["samples"] == 1
    assert rows[("cudnn", "vidattn")]["clock_mhz"] == 1650.0
    assert rows[("idle", "vidattn")]["clock_mhz"] == 1980.0 and rows[("idle", "vidattn")]["n"] == 1
    # first / last quarter of each window's calls, pooled: (10.0, 9.9, 9.9) and (9.4, 9.3, 9.2)
    assert rows[("cudnn", "vidattn")]["head_ms"] == pytest.approx(9.9)
    assert rows[("cudnn", "vidattn")]["tail_ms"] == pytest.approx(9.3)
    assert math.isnan(rows[("idle", "vidattn")]["head_ms"])


def test_call_and_forward_overhead_run_on_cpu(capsys, fresh_warnings):
    """The two host-time probes run end to end on the CPU (no device column there) and print one row per path;
    a malformed --shape is refused."""
    call = _load("call_overhead")
    assert call.main(["--device", "cpu", "--shape", "1,16,2,64", "--calls", "5", "--profile"]) == 0
    out = capsys.readouterr().out
    for path in ("| vidattn |", "| vidattn (custom op) |", "| sdpa |"):
        assert path in out
    assert "cumulative" in out  # the cProfile listing
    with pytest.raises(SystemExit):
        call.main(["--shape", "1,16,2"])
    fwd = _load("forward_overhead")
    assert fwd.main(["--preset", "tiny", "--device", "cpu", "--height", "64", "--width", "64", "--frames", "5",
                     "--iters", "2", "--top", "3", "--no-gc"]) == 0
    out = capsys.readouterr().out
    assert out.count("## ") == 2 and "gc off while timing" in out
    assert fwd.main(["--preset", "tiny", "--device", "cpu", "--height", "64", "--width", "64", "--frames", "5",
                     "--iters", "1", "--top", "1", "--paths", "sdpa,vidattn-nolaunch,vidattn-sdpa,sdpa"]) == 0
    out = capsys.readouterr().out
    assert [line.split(":")[0] for line in out.splitlines() if line.startswith("## ")] == [
        "## sdpa", "## vidattn-nolaunch", "## vidattn-sdpa", "## sdpa"]
    from vidattn import _ext
    assert _ext.forward.__module__ == "vidattn._ext"  # the stubs are undone
    with pytest.raises(SystemExit):
        fwd.main(["--paths", "sdpa,cudnn"])


def test_accuracy_tail_runs_on_cpu(capsys, tmp_path):
    """The error-tail probe runs on the CPU (the math backend as its only column): cuDNN's column against itself
    reads ratio 1 and no failures; an unknown shape is refused."""
    tail = _load("accuracy_tail")
    out_json = tmp_path / "tail.json"
    assert tail.main(["--device", "cpu", "--seeds", "2", "--shapes", "777_d64", "--json", str(out_json)]) == 0
    rows = json.loads(out_json.read_text())
    assert set(rows) == {"777_d64/randn/cudnn", "777_d64/shift/cudnn"}
    for r in rows.values():
        assert r["draws"] == 2 and r["ratio_max"] == 1.0 and r["suite_fails"] == 0 and r["fa_fails"] == 0
        assert 0.0 < r["suite_margin_max"] <= 0.5 + 1e-6  # cuDNN's own worst element: its output rounding
    with pytest.raises(SystemExit):
        tail.main(["--device", "cpu", "--shapes", "999_d128"])


def test_accuracy_tail_margins():
    """The two bounds' margins on a hand-made draw: one element 1.5 ulp off fails the suite's bound (no 2x-base
    cover) and passes FlashAttention's, whose atol is about two ulps at 0.3 + ref."""
    tail = _load("accuracy_tail")
    ref = torch.full((64,), 0.33, dtype=torch.float64)
    out = ref.to(torch.bfloat16)
    base_abs = (out.double() - ref).abs().max().item()  # the rounding of 0.33: under half an ulp (2^-9)
    bad = out.clone()
    bad[5] = (ref[5] + 1.5 * 2.0 ** -9).to(torch.bfloat16)
    s = tail.draw_stats(bad, ref, base_abs)
    assert not s["suite_ok"] and s["suite_margin"] > 1.0
    assert s["fa_ok"] and s["fa_margin"] < 1.0
    assert tail.draw_stats(out, ref, base_abs)["suite_ok"]


def test_round_positions_pools_rounds_by_position(tmp_path, capsys):
    """round_positions.py puts each round's time at the position its recorded order gave the backend, pooled over
    runs; a run without recorded orders is left out, and none at all is an error."""
    rp = _load("round_positions")
    orders = [["vidattn", "cudnn"], ["cudnn", "vidattn"]]
    run = {"config": {"round_orders": orders},
           "results": [{"name": "Wan", "ms_rounds": {"vidattn": [9.0, 10.0, 9.2, 10.4], "cudnn": [12.0, 12.2, 12.1, 12.3]}}]}
    times = rp.position_times([run, {"config": {}, "results": run["results"]}], ["vidattn", "cudnn"])
    assert times[("Wan", "vidattn")] == {0: [9.0, 9.2], 1: [10.0, 10.4]}
    assert times[("Wan", "cudnn")] == {1: [12.0, 12.1], 0: [12.2, 12.3]}
    rows = rp.table(times)
    assert rows[2] == "| Wan | vidattn | 9.100 (2) | 10.200 (2) | 1.121 |"
    # by predecessor: round 0's first follows the setup, round 2's first the last of round 1 (vidattn itself)
    after = rp.position_times([run], ["vidattn"], by="predecessor")[("Wan", "vidattn")]
    assert after == {"setup": [9.0], "cudnn": [10.0, 10.4], "vidattn": [9.2]}
    assert rp.table({("Wan", "vidattn"): after})[0] == "| shape | backend | after cudnn | after setup | after vidattn |"
    f = tmp_path / "run.json"
    f.write_text(json.dumps(run))
    assert rp.main([str(f), "--shapes", "wan"]) == 0
    assert "| Wan | cudnn |" in capsys.readouterr().out
    g = tmp_path / "old.json"
    g.write_text(json.dumps({"config": {}, "results": []}))
    assert rp.main([str(g)]) == 1


def test_accuracy_tail_sink_inputs():
    """The "sink" draw puts one key two thirds along (past the first key block of any build) that takes about half
    of a typical row's weight, its V row offset; "shift" offsets q, k and v by 0.5."""
    tail = _load("accuracy_tail")
    g = torch.Generator().manual_seed(3)
    q, k, v = tail.make_inputs("sink", 1, 1, 128, 777, 128, g, torch.device("cpu"), torch.bfloat16)
    assert q.dtype == torch.bfloat16 and q.shape == (1, 128, 1, 128) and k.shape == (1, 777, 1, 128)
    j = (2 * 777) // 3
    assert j >= 176
    w = torch.softmax((q.double()[0, :, 0] @ k.double()[0, :, 0].T) * 128 ** -0.5, -1)[:, j]
    assert 0.3 < w.median().item() < 0.7 and w.max().item() > 0.8
    assert (v.double()[0, j, 0] - v.double()[0, :, 0].mean(0)).mean().item() > 0.5
    g = torch.Generator().manual_seed(3)
    qs, _, _ = tail.make_inputs("shift", 1, 1, 4096, 8, 64, g, torch.device("cpu"), torch.float32)
    assert abs(qs.mean().item() - 0.5) < 0.02
    with pytest.raises(SystemExit):
        tail.main(["--device", "cpu", "--inputs", "ramp"])


def test_forward_kernels_groups_and_table():
    fk = _load("forward_kernels")
    assert fk.short_name("void at::native::vectorized_elementwise_kernel<4, Mul>(int, X)") == \
        "at::native::vectorized_elementwise_kernel"
    assert fk.short_name("nvjet_tst_128x256_64x4(x)") == "nvjet_tst_128x256_64x4"
    g = fk.group([("k<1>(a)", 1500.0), ("k<2>(b)", 500.0), ("other", 250.0)])
    assert g == {"k": {"ms": 2.0, "count": 2}, "other": {"ms": 0.25, "count": 1}}
    t = fk.table({"sdpa": g, "8bit": {"k": {"ms": 1.0, "count": 2}}}, top=5).splitlines()
    assert t[2] == "| k | 2.0 | 1.0 |" and t[3] == "| other | 0.2 | 0.0 |" and t[-1] == "| all kernels | 2.2 | 1.0 |"
    with pytest.raises(SystemExit):
        fk.main(["--paths", "fp8"])



def test_rope_probe_refuses_cleanly(monkeypatch):
    probe = _load("rope_probe")
    with pytest.raises(SystemExit, match="unknown shapes|needs a CUDA GPU"):
        probe.main(["--shapes", "nope"])
    _cpu_only(monkeypatch)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        probe.main([])


def test_rope_probe_times_the_tested_reference():
    """The probe's stock Wan RoPE is vidattn.rotary.rope_reference, which tests/test_rope.py holds bit for bit to
    diffusers' WanAttnProcessor code (no copy of it in the probe to drift)."""
    import inspect
    probe = _load("rope_probe")
    src = inspect.getsource(probe.case)
    assert 'stock = lambda: rotary.rope_reference(x, cos, sin, "wan")' in src
    assert not hasattr(probe, "diffusers_wan_rope")


def test_device_session_stage_letters_are_unique_and_documented():
    """A stage letter used twice runs the first case only (bash `case`): the fifth sitting's call 'Z' ran an old
    stage that way, and the new one never ran."""
    import re
    text = (ROOT / "dev/device_session.sh").read_text()
    cases = re.findall(r"^([A-Z][0-9]*)\)$", text, flags=re.M)
    assert len(cases) == len(set(cases)), sorted(c for c in cases if cases.count(c) > 1)
    documented = re.findall(r"^#   bash dev/device_session\.sh ([A-Z][0-9]*) +\[budget_s\]", text, flags=re.M)
    assert sorted(documented) == sorted(cases)


def test_settings_e2e_parses_and_refuses():
    """dev/settings_e2e.py's KEY=VALUE settings: the known selectors as integers; unknown or repeated keys, missing
    values, equal settings and a family the registry does not know are refused before any model is built."""
    mod = load_script(ROOT / "dev" / "settings_e2e.py", importable=True)
    assert mod.parse_setting(["v12=2", "nr=3"]) == {"v12": 2, "nr": 3} and mod.parse_setting([]) == {}
    assert mod.parse_setting(["tail=1"]) == {"tail": 1} and mod.parse_setting(["tkv=0"]) == {"tkv": 0}
    assert mod.describe({"v12": 2, "nr": 3}) == "nr=3 v12=2" and mod.describe({}) == "defaults"
    for bad in (["v13=1"], ["v12"], ["v12=x"], ["v12=1", "v12=2"]):
        with pytest.raises(ValueError, match="setting"):
            mod.parse_setting(bad)
    with pytest.raises(SystemExit):
        mod.main(["--a", "v12=1", "--b", "v12=1"])
    with pytest.raises(SystemExit):
        mod.main(["--a", "tail=1", "--b", "tail=2", "--family", "no_such_family"])
    with pytest.raises(SystemExit):
        mod.main(["--path", "bf16", "--a", "tkv=0", "--b", "tkv=1"])


def test_norm_rope_once_refuses_cleanly_without_a_gpu():
    import subprocess
    import sys as _sys

    if torch.cuda.is_available():
        pytest.skip("a GPU is present: the script would run the kernel")
    proc = subprocess.run([_sys.executable, str(PROBES / "norm_rope_once.py"), "1", "16", "2", "128"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr


def test_q8_crossover_rule_and_refusals():
    """dev/probes/q8_crossover.py: the crossover is the shortest length from which every longer one measured is >= 1%
    faster at 8 bits (a dip above it moves it up); bad lengths are refused before torch is asked for a GPU."""
    mod = _load("q8_crossover")
    rows = [{"keys": 8192, "ratio": 0.977}, {"keys": 12288, "ratio": 1.009}, {"keys": 13568, "ratio": 1.042},
            {"keys": 16384, "ratio": 1.053}]
    assert mod.crossover(rows) == 13568
    assert mod.crossover(rows + [{"keys": 24576, "ratio": 0.99}]) is None  # the longest not ahead: no crossover
    assert mod.crossover([{"keys": 4096, "ratio": 1.2}, {"keys": 8192, "ratio": 1.1}]) == 4096
    with pytest.raises(SystemExit, match="comma-separated integers"):
        mod.main(["--lengths", "8k"])
    with pytest.raises(SystemExit, match="--head-dims"):
        mod.main(["--head-dims", "96"])


def test_lineage_kernels_names_one_step_or_refuses():
    """dev/probes/lineage_kernels.py times one lineage step's kernels: a name that matches no step, or several, is
    refused by name before anything is built or any GPU is touched."""
    mod = _load("lineage_kernels")
    with pytest.raises(SystemExit, match="not one step"):
        mod.main(["no_such_step"])
    with pytest.raises(SystemExit, match="not one step"):
        mod.main(["1"])  # 01, 10-16


def test_q8_lib_ab_parses_sides_and_rotates_the_order():
    ab = _load("q8_lib_ab")
    assert ab.parse_side("old=.build/oldlib/lib.so:-1") == ("old", ".build/oldlib/lib.so", -1, -1)
    assert ab.parse_side("new1=/a:b/lib.so:1") == ("new1", "/a:b/lib.so", 1, -1)
    assert ab.parse_side("p2=/a:b/lib.so:-1:2") == ("p2", "/a:b/lib.so", -1, 2)  # a pre-pass mode after the tail
    assert ab.parse_side("p0=lib.so:0:0") == ("p0", "lib.so", 0, 0)
    # quant8.PREP_MODES decides: mode 3 left the tree (dev/experiments/q8_prep_once.patch)
    for bad in ("lib.so:1", "x=lib.so", "x=lib.so:2", "=lib.so:0", "x=lib.so:1:4", "x=lib.so:-1:-2", "x=lib.so:-1:3"):
        with pytest.raises(SystemExit, match="a side is name=library.so:tail"):
            ab.parse_side(bad)
    sides = ["a", "b", "c"]
    assert [ab.rotated(sides, r)[0] for r in range(4)] == ["a", "b", "c", "a"]
    with pytest.raises(SystemExit, match="two or more sides"):
        ab.main(["a=x.so:0"])
    with pytest.raises(SystemExit, match="--shapes: names from"):
        ab.main(["a=x.so:0", "b=y.so:1", "--shapes", "nope"])


def test_q8_tail_lse_summary_and_refusals(monkeypatch):
    """dev/probes/q8_tail_lse.py: max and (upper) median over draws; a bad draw count and a machine without a Hopper GPU
    are refused before any kernel runs."""
    mod = _load("q8_tail_lse")
    assert mod.summary([3.0, 1.0, 2.0, 5.0]) == (5.0, 3.0)
    with pytest.raises(ValueError):
        mod.summary([])
    with pytest.raises(SystemExit, match="--seeds"):
        mod.main(["--seeds", "0"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="Hopper"):
        mod.main([])


def test_q8_prep_probe_bytes_kinds_and_refusals(monkeypatch):
    """dev/probes/q8_prep_probe.py: the least bytes of each pre-pass kernel (16-bit reads, 8-bit writes), kernels
    grouped by name, unknown shapes and a machine without a GPU refused before any kernel runs."""
    mod = _load("q8_prep_probe")
    b, h, s, d = 1, 2, 256, 128
    n = b * h * s * d
    assert mod.kernel_bytes("void vidattn::sm90::q8_stats_q_kernel<128, false>(...)", b, h, s, d) == 4 * n + 2 * n + n
    assert mod.kernel_bytes("q8_kv2_kernel<false>", b, h, s, d) == 4 * n + 2 * n
    assert mod.kernel_bytes("q8_kv_kernel<64, false>", b, h, s, d) == 4 * n + 2 * n
    assert mod.kernel_bytes("q8_kv_stats_kernel<128, false>", b, h, s, d) == 4 * n
    assert mod.kernel_bytes("q8_fwd_kernel<128, 3>", b, h, s, d) is None
    assert mod.kind("void vidattn::sm90::q8_kv2_kernel<false>(Q8PrepParams)") == "q8_kv2_kernel"
    assert mod.kind("q8_fwd_kernel<128, 3, false>") == "q8_fwd_kernel"
    with pytest.raises(SystemExit, match="unknown shapes"):
        mod.main(["--shapes", "nope"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        mod.main([])


@pytest.mark.parametrize("args, says", [
    (["old=a.so"], "at least two libraries"),
    (["old=a.so", "old=b.so"], "given twice"),
    (["old=a.so", "b.so"], "name=path"),
    (["old=a.so", "new=b.so", "--rounds", "0"], "--rounds must be >= 1"),
    (["old=a.so", "new=b.so", "--tolerance", "1.5"], "--tolerance in"),
])
def test_kv_lens_ab_refuses_bad_arguments(args, says, capsys):
    probe = _load("kv_lens_ab")
    with pytest.raises(SystemExit, match=says):
        probe.main(args)


def test_kv_lens_ab_refuses_without_a_gpu():
    if torch.cuda.is_available():
        pytest.skip("a GPU is present")
    probe = _load("kv_lens_ab")
    with pytest.raises(SystemExit, match="needs a CUDA GPU"):
        probe.main(["old=a.so", "new=b.so"])


def test_kv_lens_ab_rel_l2():
    probe = _load("kv_lens_ab")
    ref = torch.tensor([3.0, 4.0])
    assert probe.rel_l2(ref, ref) == 0.0
    assert probe.rel_l2(torch.tensor([3.0, 4.5]), ref) == pytest.approx(0.1)
    assert probe.rel_l2(torch.zeros(2), torch.zeros(2)) == 0.0
    assert probe.rel_l2(torch.ones(2), torch.zeros(2)) == float("inf")


def test_kv_lens_ab_paired_ratios():
    probe = _load("kv_lens_ab")
    p = probe.paired({"old": [1.0, 2.0, 4.0], "new": [1.1, 1.9, 4.0]}, "old", "new")
    assert p["rounds"] == 3 and p["rounds_faster"] == 1
    assert p["median"] == pytest.approx(1.0) and p["min"] == pytest.approx(0.95) and p["max"] == pytest.approx(1.1)


def _write_run(folder, label, i, rows):
    (folder / f"{label}_{i}.json").write_text(json.dumps({"seconds": 6, "pause": 2, "rows": rows}))


def test_clock_ab_verdict_ratios_and_rule(tmp_path, capsys):
    probe = _load("clock_ab_verdict")
    s8, s32 = "2x8x8192x256", "1x8x32768x256"
    for i, (b8, c8, b32, c32) in enumerate([(700, 714, 740, 755), (702, 716, 741, 757), (699, 690, 742, 754)]):
        _write_run(tmp_path, "base", i, [{"shape": s8, "path": "vidattn_hd6", "tflops": b8},
                                         {"shape": s32, "path": "vidattn_hd6", "tflops": b32}])
        _write_run(tmp_path, "q4u", i, [{"shape": s8, "path": "vidattn_hd8", "tflops": c8},
                                        {"shape": s32, "path": "vidattn_hd8", "tflops": c32}])
    (tmp_path / "notes.json").write_text("{}")  # not a run: ignored
    runs = probe.load_runs(tmp_path)
    assert sorted(runs) == ["base", "q4u"] and sorted(runs["base"]) == [0, 1, 2]
    r8 = probe.ratios(runs, "base:vidattn_hd6", "q4u:vidattn_hd8", s8)
    assert r8 == pytest.approx([1.02, 716 / 702, 690 / 699])
    out = tmp_path / "v.json"
    assert probe.main([str(tmp_path), "--ref", "base:vidattn_hd6", "--cand", "q4u:vidattn_hd8", "--shapes", s8, s32,
                       "--json", str(out)]) == 0
    got = json.loads(out.read_text())["result"]["q4u:vidattn_hd8"]
    assert got["shapes"][s8]["wins"] and got["shapes"][s32]["wins"] and got["routed"]
    assert "ROUTED" in capsys.readouterr().out
    # two alternations under 1.0, or a median under the bar, or one ratio only: no win
    assert not probe.verdict({s8: [1.03, 0.99, 0.98]}, 1.015)["routed"]
    assert not probe.verdict({s8: [1.01, 1.012, 1.014]}, 1.015)["routed"]
    assert not probe.verdict({s8: [1.05]}, 1.015)["routed"]
    assert not probe.verdict({s8: [1.02, 1.03], s32: [1.0, 1.01]}, 1.015)["routed"]
    assert probe.tflops([{"shape": s8, "path": "p", "tflops": 1.0}, {"shape": s8, "path": "p", "tflops": 3.0}], s8,
                        "p") == 2.0
    assert probe.tflops([], s8, "p") is None


def test_clock_ab_verdict_refuses(tmp_path):
    probe = _load("clock_ab_verdict")
    with pytest.raises(SystemExit, match="label:path"):
        probe.main([str(tmp_path), "--ref", "base", "--cand", "q4u:x", "--shapes", "s"])
    with pytest.raises(SystemExit, match="no <label>_<i>.json runs"):
        probe.main([str(tmp_path), "--ref", "base:a", "--cand", "q4u:x", "--shapes", "s"])


def test_sparse_visits_counts_what_each_design_visits():
    """dev/probes/sparse_visits.py: on the visit probes' masks (every entry one kind of visit) and a full mask, the
    counts are the ones the layouts imply; and on a scattered mask per-warpgroup lists visit fewer blocks."""
    sv = _load("sparse_visits")
    sb = _load("sparse_bench")
    n = 30  # 64-row blocks: 15 tiles of two, 15 128-key blocks
    full = sv.visits(sb.nabla_like(1, 1, 64 * n, 1.0, "cpu", kind="full"))
    assert full == {"entries": 15 * 15, "busy": 2 * 15 * 15, "empty": 0, "now": 2 * 15 * 15, "own": 2 * 15 * 15,
                    "own64": n * n}
    rows = sv.visits(sb.nabla_like(1, 1, 64 * n, None, "cpu", kind="rows"))  # warpgroup 0 every key, 1 none
    assert rows["entries"] == 15 * 15 and rows["busy"] == rows["empty"] == 15 * 15 and rows["own"] == 15 * 15
    assert rows["now"] == pytest.approx(15 * 15 * (1 + sv.EMPTY_VISIT))
    halves = sv.visits(sb.nabla_like(1, 1, 64 * n, None, "cpu", kind="halves"))  # both the first half of each
    assert halves["busy"] == 2 * 15 * 15 and halves["empty"] == 0 and halves["own64"] == n * n // 2
    scattered = sv.visits(sb.nabla_like(1, 1, 64 * 256, 0.1, "cpu"))
    assert scattered["empty"] > 0 and scattered["own"] < scattered["now"] < 2 * scattered["entries"]
    assert 0.7 < sv.EMPTY_VISIT < 0.75  # the "rows" probe's 0.862 of a full mask's time


def test_sparse_bench_masks_and_table():
    """dev/probes/sparse_bench.py: its masks keep what they say (a band alone; a band plus random far blocks), and
    the table reads its rows."""
    sb = _load("sparse_bench")
    band = sb.nabla_like(1, 2, 64 * 100, 0.1, "cpu", kind="band")
    assert band.shape == (1, 2, 100, 100) and abs(band.float().mean().item() - 0.1) < 0.02
    assert bool(band[0, 0].diagonal().all()) and not bool(band[0, 0, 0, 50])
    scattered = sb.nabla_like(1, 1, 64 * 200, 0.25, "cpu")
    assert abs(scattered.float().mean().item() - 0.25) < 0.03
    assert bool(scattered[0, 0].diagonal().all())
    tile = sb.nabla_like(1, 1, 64 * 512, None, "cpu", kind="tile3d")  # an 8 x 8 x 8 grid, window 5: (34 / 64) ** 3
    assert abs(tile.float().mean().item() - (34 / 64) ** 3) < 1e-6 and bool((tile[0, 0] == tile[0, 0].T).all())
    assert bool(tile[0, 0, 0, 2]) and not bool(tile[0, 0, 0, 3]) and bool(tile[0, 0, 0, 2 * 64 + 2 * 8 + 2])
    with pytest.raises(ValueError, match="tile3d"):
        sb.nabla_like(1, 1, 64 * 100, None, "cpu", kind="tile3d")
    full = sb.nabla_like(1, 2, 64 * 30, 1.0, "cpu", kind="full")
    assert full.shape == (1, 2, 30, 30) and bool(full.all())
    # the visit probes: half the blocks each, every listed entry of a two-warpgroup tile one kind of visit
    from vidattn import sparse
    for kind, bits in sb.PROBE_BITS.items():
        m = sb.nabla_like(1, 2, 64 * 30, None, "cpu", kind=kind)
        assert m.shape == (1, 2, 30, 30) and abs(m.float().mean().item() - 0.5) < 1e-6, kind
        tab = sparse.tables(m, 2)
        listed = torch.arange(tab.entries.shape[-2]) < tab.count[..., None]
        assert bool(listed.any()) and bool((tab.entries[..., 1][listed] == bits).all()), kind
        assert bool((tab.entries[..., 0][listed] % 2 == 0).all()), kind  # no entry starts late
    # "full" and the probes run only when named; naming kinds keeps MASKS's order and both scattered densities
    assert sb.masks(None) == sb.MASKS and sb.masks(["full"]) == (("full", 1.0),)
    assert sb.masks(["rows", "halves"]) == (("halves", 0.5), ("rows", 0.5))
    assert sb.masks(["tile3d", "scattered"]) == (("scattered", 0.1), ("scattered", 0.25), ("tile3d", None))
    calls = []

    class Old:  # a package before sparse.warpgroups: 128-row tiles, the op without the warpgroup argument
        @staticmethod
        def tables(blocks, *wgs):
            calls.append(wgs)
            return "tab"

    class Three(Old):
        warpgroups = staticmethod(lambda d: 3 if d == 64 else 2)
    q64, q128 = torch.zeros(1, 4, 1, 64), torch.zeros(1, 4, 1, 128)
    for pkg, q in ((Old, q64), (Three, q128), (Three, q64)):
        tab, fn = sb.sparse_call(pkg, q, q, q, None)
        assert tab == "tab" and callable(fn)
    assert calls == [(), (), (3,)]
    for bad in (["--once", "96", "band"], ["--once", "64", "causal"], ["--masks", "diagonal"]):
        with pytest.raises(SystemExit) as exc:
            sb.main(bad)
        assert exc.value.code == 2
    row = {"shape": "s", "mask": "band", "density": 0.1, "ok": True, "rel_l2_vs_flex": 1e-3,
           "median_ms": {"vidattn sparse": 1.0, "flex compiled": 2.0, "vidattn dense": 5.0, "cuDNN dense": 6.0},
           "sparse_over_flex_median": 2.0, "sparse_over_flex_min": 1.8,
           "tflops_sparse_pairs": {"vidattn sparse": 500, "flex compiled": 250},
           "tflops_dense": {"vidattn dense": 700, "cuDNN dense": 600}}
    text = sb.table({"rows": [row]})
    assert "| s | band | 0.100 | True (1.0e-03) | 1.000 | 2.000 | 2.00x, 1.80x | 500 / 250 | 700 / 600 |" in text


def test_k5_nabla_forward_dry_run(capsys):
    k5 = _load("k5_nabla_forward")
    assert k5.main(["--dry-run"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["cfg"]["attention_type"] == "nabla" and out["size"] == [512, 768, 121]


def test_nabla_forward_harness_falls_back_to_64_tiles_and_alternates(monkeypatch):
    """The harness both NABLA forward probes share (k5_nabla_forward.py): the stock side compiled as diffusers calls
    flex, and where that raises, once more after the 64 x 64 tile patch and a dynamo reset, with both recorded; rounds
    alternate the sides' order."""
    import torch
    k5 = _load("k5_nabla_forward")
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    events = []
    monkeypatch.setattr(k5, "_patch_flex_tiles", lambda: events.append("patch"))
    monkeypatch.setattr(torch._dynamo, "reset", lambda: events.append("reset"))

    def compile_stock():
        events.append("compile")
        return len(events)

    def fwd(compiled):
        if "patch" not in events:
            raise RuntimeError("inductor: BLOCK_N does not divide the block\nmore")
        return compiled
    res = {}
    stock, ref = k5.stock_reference(res, compile_stock, fwd)
    assert events == ["compile", "patch", "reset", "compile"] and stock == ref == 4
    assert res["stock_as_shipped"] == "failed: RuntimeError: inductor: BLOCK_N does not divide the block"
    assert "64" in res["stock_patched"] and res["stock_compile_s"] >= 0
    res = {}
    assert k5.stock_reference(res, lambda: 7, lambda c: c) == (7, 7) and res["stock_as_shipped"] == "compiled"
    assert "stock_patched" not in res
    order = []
    ms = k5.alternate({"a": lambda: order.append("a"), "b": lambda: order.append("b")}, 3)
    assert order == ["a", "b", "b", "a", "a", "b"] and [len(v) for v in ms.values()] == [3, 3]
    # time_sides: a warm-up call per side, then the rounds; speedups over stock compiled for every other side
    clock = iter(range(100))
    monkeypatch.setattr(k5.time, "perf_counter", lambda: next(clock) * 1e-3)  # each timed call reads 1 ms
    calls, res = [], {}
    sides = {k: (lambda k=k: calls.append(k)) for k in ("stock compiled", "vidattn", "vidattn compiled")}
    k5.time_sides(res, sides, 2)
    assert calls[:3] == list(sides) and len(calls) == 3 + 2 * 3
    assert set(res["warmup_ms"]) == set(sides) and all(len(v) == 2 for v in res["ms"].values())
    assert res["speedup_vidattn"] == pytest.approx(1.0) and res["speedup_vidattn_compiled"] == pytest.approx(1.0)
    assert res["round_ratios_vidattn"] == pytest.approx([1.0, 1.0])


def test_k6sr_forward_dry_run_config_and_tiny_model(capsys, tmp_path):
    """dev/probes/k6sr_forward.py on the CPU: --dry-run's plan (the 512x768x121 tile's token grid, the sliding-tile
    prior's density as diffusers' sliding_tile_mask gives it), sizes the model would refuse, CFG = diffusers'
    Kandinsky6SRTransformer3DModel defaults (what the probe says it measures), and the probe's build and inputs on a
    tiny model: the dtypes from_pretrained(torch_dtype=bf16) gives a checkpoint of it, and one forward through the
    stock and the vidattn processor (two latent frames: the prior keeps every block, so the stock eager output,
    dense, is the model's)."""
    import inspect
    import warnings

    k6 = _load("k6sr_forward")
    assert k6.main(["--dry-run"]) == 0
    plan = json.loads(capsys.readouterr().out)
    assert plan["latent"] == [31, 32, 48] and plan["visual_tokens"] == 47616 and plan["blocks_64"] == 744
    assert (plan["heads"], plan["head_dim"], plan["compile"]) == (28, 64, "blocks")
    for bad in (["--height", "500"], ["--width", "704"], ["--frames", "120"]):
        with pytest.raises(SystemExit) as exc:
            k6.main(["--dry-run", *bad])
        assert exc.value.code == 2

    diffusers = pytest.importorskip("diffusers")
    import vidattn
    from diffusers.models.transformers.transformer_kandinsky6_sr import sliding_tile_mask
    params = inspect.signature(diffusers.Kandinsky6SRTransformer3DModel.__init__).parameters
    assert {name: params[name].default for name in k6.CFG} == k6.CFG
    sta = sliding_tile_mask(31, 4, 6, k6.CFG["nabla_window"], "cpu")
    assert plan["sta_density"] == pytest.approx(sta.float().mean().item(), abs=1e-6)
    assert k6.sta_density((5, 16, 24), (3, 1, 3)) == pytest.approx(
        sliding_tile_mask(5, 2, 3, (3, 1, 3), "cpu").float().mean().item())

    tiny = dict(k6.CFG, model_dim=128, ff_dim=64, num_visual_blocks=1)
    model = k6.build(tiny, "cpu", torch.float32)
    model.save_pretrained(tmp_path)
    loaded = diffusers.Kandinsky6SRTransformer3DModel.from_pretrained(tmp_path, torch_dtype=torch.bfloat16)
    built = k6.build(tiny, "cpu", torch.bfloat16)
    for tensors in ("named_parameters", "named_buffers"):
        dtypes = {name: t.dtype for name, t in getattr(built, tensors)()}
        assert dtypes == {name: t.dtype for name, t in getattr(loaded, tensors)()}
    assert dtypes["visual_rope_embeddings.angles_0"] == torch.float32
    assert {torch.float32, torch.bfloat16} == {p.dtype for p in built.parameters()}

    shape = k6.latent_shape(128, 128, 5)
    assert shape == (2, 8, 8)
    kw = k6.inputs(shape, tiny, "cpu", torch.float32)
    assert kw["hidden_states"].shape == (1, 2, 8, 8, 2 * 64 + 1)
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("ignore")
        stock = model(**kw)[0]
        handle = vidattn.apply(model)
        assert len(handle.replaced) == 1 and handle.counts()["stock"] == 0, str(handle)
        out = model(**kw)[0]
    assert stock.shape == (1, 2, 8, 8, 640)
    torch.testing.assert_close(out, stock, atol=2e-4, rtol=2e-3)


def test_sass_loops_finds_the_innermost_key_loop(capsys, tmp_path):
    """dev/tools/sass_loops.py: a backward branch whose body holds HGMMA and MUFU.EX2 is a key loop (counted, smallest
    first); a loop with either alone, and a forward branch, are not."""
    tool = load_script(ROOT / "dev" / "tools" / "sass_loops.py", importable=True)
    lines = ["        /*0000*/                   MOV R1, c[0x0][0x28] ;",
             "        /*0010*/                   HGMMA.64x128x16.F32.BF16 R24, gdesc[UR4], RZ ;",
             "        /*0020*/                   FMNMX R2, R3, R4, !PT ;",
             "        /*0030*/                   SHFL.BFLY PT, R5, R2, 0x1, 0x1f ;",
             "        /*0040*/                   MUFU.EX2 R6, R5 ;",
             "        /*0050*/              @P0   BRA 0x10 ;",
             "        /*0060*/                   MUFU.EX2 R7, R6 ;",
             "        /*0070*/              @P1   BRA 0x60 ;",
             "        /*0080*/                   BRA 0x0 ;",
             "        /*0090*/                   BRA 0xa0 ;",
             "        /*00a0*/                   EXIT ;"]
    loops = tool.key_loops(tool.parse("\n".join(lines)))
    assert [(lp.instrs, lp.hgmma, lp.mufu_ex2, lp.branches, lp.shuffles, lp.fmnmx, lp.start, lp.end)
            for lp in loops] == [(5, 1, 1, 1, 1, 1, 0x10, 0x50), (9, 1, 2, 3, 1, 1, 0x0, 0x80)]
    sass = tmp_path / "k.sass"
    sass.write_text("\n".join(lines))
    assert tool.main([str(sass), "--top", "1"]) == 0
    out = capsys.readouterr().out
    assert "2 key loops" in out and "0x10-0x50" in out and "0x0-0x80" not in out
