"""The order in which interleaved timing rounds take their backends or builds (bench_kernel.py, kernel_ab_time.py).

On the long shapes the H200 runs at its 700 W limit, where a kernel's clock depends on what ran just before it.
Rotating one fixed order each round (what both scripts did until the twelfth session) moves every name's position
but not its neighbours: round r's order is a cyclic shift of round 0's, so a name always runs right after the same
other name (in bench_kernel.py vidattn always after FlashAttention-2, cuDNN always after SDPA's default choice,
which is cuDNN again), except when it opens a round. A Williams design (a Latin square balanced for first-order
carry-over) varies the neighbour: over n rounds for n names (2n when n is odd) every name runs right after every
other name equally often, and every name takes every position equally often.

    round_orders(["vidattn", "sdpa", "cudnn", "flash"], 4)
    # [['vidattn', 'sdpa', 'flash', 'cudnn'], ['sdpa', 'cudnn', 'vidattn', 'flash'],
    #  ['cudnn', 'flash', 'sdpa', 'vidattn'], ['flash', 'vidattn', 'cudnn', 'sdpa']]
"""
from __future__ import annotations

ORDERS = ("williams", "rotated")


def williams_rows(n: int) -> list[list[int]]:
    """The rows of a Williams design for n treatments: n rows when n is even, 2n (the rows and their reverses) when
    n is odd, as a single n-row Latin square cannot balance carry-over for odd n."""
    if n < 1:
        raise ValueError(f"need at least one name, got {n}")
    first, lo, hi = [0], 1, n - 1
    while len(first) < n:  # 0, 1, n-1, 2, n-2, ...
        if len(first) % 2:
            first.append(lo)
            lo += 1
        else:
            first.append(hi)
            hi -= 1
    rows = [[(x + i) % n for x in first] for i in range(n)]
    return rows + [r[::-1] for r in rows] if n % 2 and n > 1 else rows


def round_orders(names, rounds: int, order: str = "williams") -> list[list]:
    """The names in the order each of `rounds` rounds takes them. "williams": the design's rows in turn (so use a
    multiple of len(names), or of 2 * len(names) for an odd count, for exact balance); "rotated": round r starts
    at the r-th name of the fixed cyclic order (the earlier scheme, kept to reproduce old runs)."""
    names = list(names)
    if order == "rotated":
        n = len(names)
        return [names[r % n:] + names[:r % n] for r in range(rounds)] if n else [[] for _ in range(rounds)]
    if order != "williams":
        raise ValueError(f"unknown round order {order!r}; choose one of {ORDERS}")
    if not names:
        return [[] for _ in range(rounds)]
    rows = williams_rows(len(names))
    return [[names[i] for i in rows[r % len(rows)]] for r in range(rounds)]
