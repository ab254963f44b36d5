"""bench/timing.py, the one timer of scripts/bench_kernel.py and scripts/bench_anchors.py, on the CPU: the windows,
do_bench's median on both triton APIs, and the CUDA-event loop driven by fake events on a fake clock (its
estimate, warm-up, repetition count, L2 flush before every timed call and a single synchronize after them)."""
from __future__ import annotations

import statistics
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench import timing  # noqa: E402
from _support import load_script  # noqa: E402


class FakeDevice:
    """A device clock: fn() advances it by the next of `costs_ms` (cycled); events read it when recorded."""

    def __init__(self, costs_ms):
        self.now, self.costs, self.calls, self.flushes, self.syncs = 0.0, list(costs_ms), 0, 0, 0
        self.log = []  # "fn", "flush", "sync" in order

    def fn(self):
        self.now += self.costs[self.calls % len(self.costs)]
        self.calls += 1
        self.log.append("fn")

    def zero_(self):  # the flush buffer
        self.flushes += 1
        self.log.append("flush")

    def synchronize(self):
        self.syncs += 1
        self.log.append("sync")

    def event(self):
        device = self

        class Event:
            t = None

            def record(self):
                self.t = device.now

            def elapsed_time(self, end):
                assert self.t is not None and end.t is not None, "read before both ends were recorded"
                return end.t - self.t

        return Event()


def _event_loop(dev, warmup_ms, rep_ms):
    return timing.event_loop_median(dev.fn, warmup_ms, rep_ms, dev, dev.event, dev.synchronize)


def test_windows_quick_and_full():
    assert timing.windows_ms(False) == (25, 100) and timing.windows_ms(True) == (10, 40)
    full, quick = timing.Timer(False, do_bench=None), timing.Timer(True, do_bench=None)
    assert (full.warmup_ms, full.rep_ms, quick.warmup_ms, quick.rep_ms) == (25, 100, 10, 40)


def test_do_bench_median_on_both_triton_apis():
    seen = []

    def new_api(fn, warmup, rep, return_mode):
        seen.append((warmup, rep, return_mode))
        fn()
        return 1.25

    def old_api(fn, warmup, rep, quantiles=None, **kw):
        if kw:
            raise TypeError(f"unexpected {sorted(kw)}")
        seen.append((warmup, rep, quantiles))
        return [0.75]

    ran = []
    timer = timing.Timer(True, do_bench=new_api)
    assert timer.method == timing.DO_BENCH_METHOD == "triton.testing.do_bench median"
    assert timer(lambda: ran.append(1)) == 1.25 and ran == [1]
    assert timing.Timer(False, do_bench=old_api)(lambda: None) == 0.75
    assert seen == [(10, 40, "median"), (25, 100, [0.5])]


def test_event_loop_sizes_warmup_and_reps_to_the_windows_and_flushes_every_timed_call():
    dev = FakeDevice([2.0])
    assert _event_loop(dev, warmup_ms=25, rep_ms=100) == 2.0
    # 1 first call + 3 for the estimate (2 ms) + 12 warm-up (25 / 2) + 50 timed (100 / 2)
    assert dev.calls == 1 + 3 + 12 + 50 and dev.flushes == 50
    timed = dev.log[dev.log.index("flush"):]
    assert timed == ["flush", "fn"] * 50 + ["sync"]  # no host sync between timed calls
    assert dev.syncs == 3


def test_event_loop_takes_the_median_and_at_least_three_reps():
    dev = FakeDevice([30.0, 90.0, 60.0])
    # estimate (30 + 90 + 60) / 3 = 60 ms > the windows: one warm-up call, three timed calls
    ms = _event_loop(dev, warmup_ms=25, rep_ms=100)
    assert dev.calls == 1 + 3 + 1 + 3 and dev.flushes == 3
    timed = [30.0, 90.0, 60.0][(1 + 3 + 1) % 3:] + [30.0, 90.0, 60.0]
    assert ms == statistics.median(timed[:3]) == 60.0

    dev = FakeDevice([0.0])  # a call faster than the events resolve: the estimate is floored, not divided by 0
    _event_loop(dev, warmup_ms=0.004, rep_ms=0.01)
    assert dev.flushes == 10


def test_without_triton_the_timer_says_it_runs_the_event_loop(monkeypatch):
    monkeypatch.setitem(sys.modules, "triton", None)
    monkeypatch.setitem(sys.modules, "triton.testing", None)
    timer = timing.Timer(False)
    assert timer._do_bench is None
    assert timer.method == timing.EVENT_LOOP_METHOD == "CUDA-event loop median (triton unavailable)"


def test_both_scripts_time_with_the_one_timer():
    bk = load_script(REPO / "scripts" / "bench_kernel.py", "bench_kernel_timing_test", register=True)
    ba = load_script(REPO / "scripts" / "bench_anchors.py", "bench_anchors_timing_test", register=True,
                     importable=True)
    assert bk.Timer is timing.Timer and ba.Timer is timing.Timer
    assert bk.l2_bytes is timing.l2_bytes and ba.l2_bytes is timing.l2_bytes
    for mod in (bk, ba):
        assert not [n for n in vars(mod) if "Timer" in n and n != "Timer"], "a second timer in " + mod.__name__


@pytest.mark.gpu
def test_gpu_event_loop_times_a_matmul():
    import torch

    a = torch.randn(4096, 4096, device="cuda", dtype=torch.bfloat16)
    timer = timing.Timer(True, do_bench=None)
    ms = timer(lambda: a @ a)
    assert 0.01 < ms < 50, ms  # 137 GFLOP: ~0.2 ms on an H200
    assert timing.l2_bytes() > 1 << 20
