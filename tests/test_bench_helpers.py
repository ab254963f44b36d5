"""The benchmark helpers below scripts/ and dev/probes/ (bench/): the score patterns the GPU suite relies on and the
order of interleaved timing rounds. CPU only."""
import math
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench import accuracy, round_order  # noqa: E402


def test_shape_scores_spike_and_ramp_do_what_the_gpu_tests_rely_on():
    """bench.accuracy.shape_scores (the smoke, GPU, sanitizer and lineage checks' score ramps and spikes), on the CPU:
    a spike lifts one key past the first key block far enough above that block's max that 2^(jump) overflows
    fp32, in the named heads only; a ramp lifts the last key by about 40 log2 units on average (rows of q with
    large sums get more, and may reach the redo)."""
    import torch
    ks = accuracy
    g = torch.Generator().manual_seed(0)
    d = 64
    q = torch.randn(1, 8, 6, d, generator=g) + 0.5
    k0 = torch.randn(1, 300, 6, d, generator=g)

    def log2_scores(k):  # (heads, rows, keys)
        return torch.einsum("bqhd,bkhd->hqk", q, k) * d ** -0.5 * math.log2(math.e)

    k = k0.clone()
    assert ks.shape_scores(q, k, "spike", heads=[0, 4]) is k
    s, s0 = log2_scores(k), log2_scores(k0)
    for h in (0, 4):
        assert (s[h, :, 299] - s[h, :, :128].amax(-1)).min() > 128
    assert torch.equal(s[[1, 2, 3, 5]], s0[[1, 2, 3, 5]])
    k = ks.shape_scores(q, k0.clone(), "ramp")
    lift = (log2_scores(k) - s0)[:, :, -1]
    assert 30 < lift.mean() < 50 and lift.min() > 0
    with pytest.raises(ValueError):
        ks.shape_scores(q, k0.clone(), "slope")


@pytest.mark.parametrize("n", [1, 2, 3, 4, 5, 6])
def test_williams_rows_balance_neighbours_and_positions(n):
    """round_order.williams_rows: every row a permutation, every name in every position equally often, and every
    ordered pair of different names adjacent equally often (once for even n, twice for odd n over 2n rows)."""
    import collections

    ro = round_order
    rows = ro.williams_rows(n)
    assert len(rows) == (2 * n if n % 2 and n > 1 else n)
    assert all(sorted(r) == list(range(n)) for r in rows)
    for pos in range(n):
        assert collections.Counter(r[pos] for r in rows) == {i: len(rows) // n for i in range(n)}
    pairs = collections.Counter((r[i], r[i + 1]) for r in rows for i in range(n - 1))
    assert set(pairs) == {(a, b) for a in range(n) for b in range(n) if a != b}
    assert len(set(pairs.values())) <= 1


def test_round_orders_for_the_four_benchmark_backends():
    """The order bench_kernel.py takes its four backends in: vidattn no longer always right after FlashAttention-2,
    nor cuDNN always right after SDPA's default; "rotated" reproduces the earlier scheme; bad names are refused."""
    ro = round_order
    backends = ["vidattn", "sdpa", "cudnn", "flash"]
    orders = ro.round_orders(backends, 8)
    assert orders[:4] == orders[4:]
    before = {b: {o[o.index(b) - 1] for o in orders if o.index(b) > 0} for b in backends}
    assert before["vidattn"] == {"sdpa", "cudnn", "flash"} and before["cudnn"] == {"vidattn", "sdpa", "flash"}
    rotated = ro.round_orders(backends, 4, "rotated")
    assert {o[o.index("vidattn") - 1] for o in rotated if o.index("vidattn") > 0} == {"flash"}
    assert ro.round_orders([], 2) == [[], []]
    with pytest.raises(ValueError, match="unknown round order"):
        ro.round_orders(backends, 2, "random")
    with pytest.raises(ValueError):
        ro.williams_rows(0)
