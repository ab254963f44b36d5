"""The kernel timer of scripts/bench_kernel.py and scripts/bench_anchors.py: the median time of `fn()` in ms.

`triton.testing.do_bench` when triton imports (it clears L2 before every call), else a CUDA-event loop that zeroes a
buffer larger than L2 before every timed call, so that neither path times a cache-hot call. Both take their warm-up
and repetition windows from `windows_ms`. torch and triton are imported on first use: the scripts' --dry-run and
their CPU tests need neither a GPU nor triton.

    timer = Timer(quick=False)
    ms = timer(lambda: vidattn.attention(q, k, v, layout="bshd"))
    timer.method  # what the JSON records as "timing"
"""
from __future__ import annotations

import statistics
from typing import Callable

DEFAULT_L2_BYTES = 50 * 2**20  # the H200's L2, for a device that does not report its own
FLUSH_BYTES = 256 * 2**20  # zeroed before every timed call of the event loop: several times any L2 we run on
DO_BENCH_METHOD = "triton.testing.do_bench median"
EVENT_LOOP_METHOD = "CUDA-event loop median (triton unavailable)"


def windows_ms(quick: bool) -> tuple[int, int]:
    """(warm-up, repetition) windows in ms: --quick trades repeatability for a shorter run."""
    return (10, 40) if quick else (25, 100)


def do_bench_median(do_bench: Callable, fn: Callable, warmup_ms: float, rep_ms: float) -> float:
    """`do_bench`'s median of fn() in ms, on the triton releases with `return_mode` and on the older ones that only
    take `quantiles` (and answer a list)."""
    try:
        ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median")
    except TypeError:
        ms = do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5])
    if isinstance(ms, (list, tuple)):
        ms = ms[0]
    return float(ms)


def event_loop_median(fn: Callable, warmup_ms: float, rep_ms: float, flush, event: Callable,
                      synchronize: Callable) -> float:
    """Median ms of fn() timed one call at a time between two events, `flush.zero_()` before each. Three calls
    give the estimate that sizes the warm-up and the repetitions (at least 3) to the windows; the events are read
    after one synchronize at the end, so no host sync falls between timed calls. `event` makes a timing event
    (`torch.cuda.Event(enable_timing=True)`); `synchronize` waits for the device."""
    fn()
    synchronize()
    start, end = event(), event()
    start.record()
    for _ in range(3):
        fn()
    end.record()
    synchronize()
    est = max(start.elapsed_time(end) / 3, 1e-3)
    for _ in range(max(1, int(warmup_ms / est))):
        fn()
    n = max(3, int(rep_ms / est))
    starts = [event() for _ in range(n)]
    ends = [event() for _ in range(n)]
    for i in range(n):
        flush.zero_()
        starts[i].record()
        fn()
        ends[i].record()
    synchronize()
    return statistics.median(s.elapsed_time(e) for s, e in zip(starts, ends))


def _triton_do_bench():
    try:
        from triton.testing import do_bench
    except Exception:  # noqa: BLE001 - triton missing or broken: the event loop times instead
        return None
    return do_bench


class Timer:
    """Median time of fn() in ms: triton's do_bench when importable, else a CUDA-event loop with an L2 flush.
    `do_bench` is for tests (default: triton's, or None when triton does not import)."""

    _UNSET = object()

    def __init__(self, quick: bool, do_bench=_UNSET):
        self.warmup_ms, self.rep_ms = windows_ms(quick)
        self._do_bench = _triton_do_bench() if do_bench is Timer._UNSET else do_bench
        self.method = DO_BENCH_METHOD if self._do_bench is not None else EVENT_LOOP_METHOD
        self._flush = None

    def __call__(self, fn) -> float:
        if self._do_bench is not None:
            return do_bench_median(self._do_bench, fn, self.warmup_ms, self.rep_ms)
        import torch
        if self._flush is None:
            self._flush = torch.empty(FLUSH_BYTES, dtype=torch.int8, device="cuda")
        return event_loop_median(fn, self.warmup_ms, self.rep_ms, self._flush,
                                 lambda: torch.cuda.Event(enable_timing=True), torch.cuda.synchronize)


def l2_bytes() -> int:
    """The current CUDA device's L2 size in bytes (`DEFAULT_L2_BYTES` when it reports none)."""
    import torch
    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    return int(getattr(props, "L2_cache_size", 0) or DEFAULT_L2_BYTES)
