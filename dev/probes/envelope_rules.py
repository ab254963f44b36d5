"""The decision rules of the envelope stage (dev/probes/envelope_ab.py), written down before its run and kept free of
torch so that CPU tests can feed them fake data (tests/test_envelope_ab.py).

Every decision is read from paired rounds: in each round both sides ran back to back, in a palindrome order (A B B A
or B A A B, alternating), and the round's ratio is the routed side's time over the challenger's (> 1: the challenger
is faster). A palindrome cancels a linear clock drift within the round; the pairing cancels the drift between rounds
that a ratio of two medians keeps (the call V A/B read the first round ~10% hot on one side only).

verdict(): a one-sided sign test on those ratios. The challenger "wins" a comparison when it is faster in at least
k of n rounds, k the smallest count with P(X >= k | n, 1/2) <= ALPHA (n = 8: 7, p = 0.035; n = 10: 9, p = 0.011; n =
12: 10, p = 0.019), AND the median ratio is at least 1 + MIN_GAIN; it "loses" under the mirror condition; anything
else is a "tie", which leaves the routing as it is. At least MIN_ROUNDS rounds, else "short" (no decision).
"""
from __future__ import annotations

import math
import statistics

ALPHA = 0.05
MIN_GAIN = 0.005  # half a percent: below it a routing change is not worth a new instantiation on the hot path
MIN_ROUNDS = 8
ALL_KEYS = 1 << 30  # the KV_MAX value meaning "every length"


# ---------------------------------------------------------------------------------------------------------------
# the sign test


def sign_test_p(wins: int, n: int) -> float:
    """One-sided P(X >= wins) for X ~ Binomial(n, 1/2): the chance of at least `wins` rounds won by a side that is
    no faster (ties in a round count as neither and are left out of n by the caller)."""
    if n <= 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(max(wins, 0), n + 1)) / 2 ** n


def min_wins(n: int, alpha: float = ALPHA) -> int | None:
    """The smallest k with sign_test_p(k, n) <= alpha (None: n rounds cannot reach alpha)."""
    for k in range(n + 1):
        if sign_test_p(k, n) <= alpha:
            return k
    return None


def palindrome(sides: list[str], r: int) -> list[str]:
    """Round r's order: the sides rotated by r, then the same reversed (every side twice, equidistant from the
    round's middle), so a linear drift within the round adds the same to each side's two spans."""
    if not sides:
        return []
    k = r % len(sides)
    fwd = sides[k:] + sides[:k]
    return fwd + fwd[::-1]


def round_ratios(spans: dict[str, list[list[float]]], routed: str, challenger: str) -> list[float]:
    """Per round, the routed side's summed span time over the challenger's (spans[side][round] = that round's span
    times, ms per call): > 1 means the challenger was faster in that round."""
    a, b = spans.get(routed) or [], spans.get(challenger) or []
    return [sum(x) / sum(y) for x, y in zip(a, b) if x and y and sum(y) > 0]


def verdict(ratios: list[float], alpha: float = ALPHA, min_gain: float = MIN_GAIN,
            min_rounds: int = MIN_ROUNDS) -> dict:
    """The sign-test verdict on per-round ratios (> 1: the challenger faster): 'win', 'loss', 'tie' or 'short'."""
    xs = [x for x in ratios if x == x]  # NaN-free
    wins = sum(1 for x in xs if x > 1.0)
    losses = sum(1 for x in xs if x < 1.0)
    n = wins + losses
    med = statistics.median(xs) if xs else float("nan")
    p_win, p_loss = sign_test_p(wins, n), sign_test_p(losses, n)
    if len(xs) < min_rounds:
        v = "short"
    elif p_win <= alpha and med >= 1.0 + min_gain:
        v = "win"
    elif p_loss <= alpha and med <= 1.0 - min_gain:
        v = "loss"
    else:
        v = "tie"
    return {"verdict": v, "wins": wins, "losses": losses, "n": n, "rounds": len(xs), "median": med,
            "min": min(xs) if xs else float("nan"), "max": max(xs) if xs else float("nan"),
            "p_win": p_win, "p_loss": p_loss, "need": min_wins(n, alpha)}


def describe(v: dict) -> str:
    return (f"{v['verdict']} ({v['wins']}/{v['n']} rounds faster, p={v['p_win']:.3g}; median x{v['median']:.3f}, "
            f"range {v['min']:.3f}..{v['max']:.3f})")


# ---------------------------------------------------------------------------------------------------------------
# question 1: the O-in-V routing constants (csrc/capi.cu)

# Where a ≤ KV_MAX threshold goes when O-in-V wins up to a measured length and not at the next: between the two
# (4096 between 1K and 8K, as dev/NOTES.md's earlier rule had it; 16384 between 8K and 32K).
KV_BOUNDARY = {1024: 4096, 8192: 16384, 32768: ALL_KEYS}
CONSTANTS = ("VIDATTN_D192_NARROW_KV_MAX", "VIDATTN_D192_O_IN_V_KV_MAX", "VIDATTN_D256_NARROW_KV_MAX",
             "VIDATTN_D256_O_IN_V_KV_MAX")


def prefix_kv_max(verdicts: dict[int, str]) -> int:
    """capi.cu routes O-in-V by `seqlen_kv <= KV_MAX`, so it can take only a prefix of the lengths: the boundary
    after the longest prefix of measured lengths (ascending) on which O-in-V won; 0 if it did not win the shortest."""
    kv = 0
    for length in sorted(verdicts):
        if verdicts[length] != "win":
            break
        kv = KV_BOUNDARY.get(length, 2 * length)
    return kv


def ov_routing(verdicts: dict[tuple[int, int], str], current: dict[str, int]) -> dict:
    """New values of the four constants from the verdicts of O-in-V against the routed side per (head dim, keys).

    capi.cu's order: a call of at most NARROW_KV_MAX keys runs narrow; of the rest, at most O_IN_V_KV_MAX keys run
    O-in-V; the rest wide. So
    - D=256 (no narrow routing): O_IN_V_KV_MAX = prefix_kv_max over 1K, 8K, 32K.
    - D=192: the lengths past NARROW_KV_MAX (8K, 32K) give O_IN_V_KV_MAX by the prefix rule; if O-in-V also beat the
      narrow build at 1K, NARROW_KV_MAX goes to 0 and O_IN_V_KV_MAX covers 1K at least (4096).
    A non-prefix pattern (O-in-V winning only at a longer length) cannot be routed by these constants; it is
    reported in `unroutable` and changes nothing. A head dim measured at only some of the lengths (a --shapes run)
    changes nothing either, with a note.
    """
    new = dict(current)
    notes, unroutable = [], []
    for d in (192, 256):
        vs = {s: v for (dd, s), v in verdicts.items() if dd == d}
        if not vs:
            continue
        if set(vs) != set(KV_BOUNDARY):  # a prefix rule over some of the lengths would move the others blind
            notes.append(f"D={d}: measured at {sorted(vs)} keys only; the rule needs {sorted(KV_BOUNDARY)}: "
                         f"no change")
            continue
        narrow_max = current.get(f"VIDATTN_D{d}_NARROW_KV_MAX", 0)
        long_vs = {s: v for s, v in vs.items() if s > narrow_max}
        short_vs = {s: v for s, v in vs.items() if s <= narrow_max}
        kv = prefix_kv_max(long_vs)
        if short_vs and all(v == "win" for v in short_vs.values()):
            new[f"VIDATTN_D{d}_NARROW_KV_MAX"] = 0
            kv = max(kv, KV_BOUNDARY.get(max(short_vs), 2 * max(short_vs)))
            notes.append(f"D={d}: O-in-V beat narrow at {sorted(short_vs)} keys: narrow routing off")
        new[f"VIDATTN_D{d}_O_IN_V_KV_MAX"] = kv
        for s, v in sorted(long_vs.items()):
            if v == "win" and s > kv:
                unroutable.append(f"D={d} {s} keys (O-in-V won, a shorter length did not: a ≤ threshold cannot "
                                  f"route it)")
    return {"constants": new, "changed": {k: (current.get(k), v) for k, v in new.items() if current.get(k) != v},
            "notes": notes, "unroutable": unroutable}


def constant_lines(capi_text: str, names=CONSTANTS) -> dict[str, tuple[int, str]]:
    """Line number (1-based) and text of each `#define NAME value` in capi.cu: the one-line edits."""
    out = {}
    for i, line in enumerate(capi_text.splitlines(), 1):
        parts = line.split(None, 2)
        if len(parts) == 3 and parts[0] == "#define" and parts[1] in names:
            out[parts[1]] = (i, line)
    return out


def parse_define(line: str) -> int:
    """The value of `#define NAME value`: an integer, or `(1 << 30)` / `1<<30`."""
    value = line.split(None, 2)[2].split("//")[0].strip().strip("()").replace(" ", "")
    if "<<" in value:
        a, b = value.split("<<")
        return int(a) << int(b)
    return int(value)


def current_constants(capi_text: str, names=CONSTANTS) -> dict[str, int]:
    return {k: parse_define(line) for k, (_, line) in constant_lines(capi_text, names).items()}


CAUSAL_CONSTANTS = ("VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64", "VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D128",
                    "VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX")


def edit_lines(capi_text: str, changed: dict[str, tuple[int | None, int]]) -> list[str]:
    """The one-line edits, as `csrc/capi.cu:LINE  old -> new`."""
    where = constant_lines(capi_text, CONSTANTS + CAUSAL_CONSTANTS)
    out = []
    for name, (_, value) in sorted(changed.items()):
        line_no, line = where.get(name, (0, f"#define {name} ?"))
        text = "(1 << 30)" if value == ALL_KEYS else str(value)
        out.append(f"csrc/capi.cu:{line_no}  `{line.strip()}` -> `#define {name} {text}`")
    return out


# ---------------------------------------------------------------------------------------------------------------
# question 2: the causal length thresholds (VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D64 / _D128) and the static-imbalance rule


def pooled_verdict(per_shape: list[list[float]], **kw) -> dict:
    """The verdict over every round of every shape measured at one length (dynamic over static per round)."""
    return verdict([x for xs in per_shape for x in xs], **kw)


def causal_threshold(current: int, verdicts: dict[int, str]) -> dict:
    """The new min_sq of one causal build from the per-length verdicts of the dynamic schedule (short group first,
    forced) against static, graph-timed.

    Lowering: walk the measured lengths below `current` downward; each 'win' moves the threshold to it, the first
    non-win stops the walk (dynamic must win at every measured length from the new threshold up).
    Raising: a 'loss' at a measured length at or above `current` moves the threshold to the shortest measured length
    above the longest loss at which dynamic won (none measured: twice the longest loss).
    Ties leave a length on the side it is on: the status quo needs a significant result to move."""
    losses_above = [s for s, v in verdicts.items() if s >= current and v == "loss"]
    if losses_above:
        worst = max(losses_above)
        wins_after = sorted(s for s, v in verdicts.items() if s > worst and v == "win")
        new = wins_after[0] if wins_after else 2 * worst
        return {"min_sq": new, "moved": "up", "why": f"dynamic lost at {sorted(losses_above)}"}
    new = current
    for s in sorted((s for s in verdicts if s < current), reverse=True):
        if verdicts[s] != "win":
            break
        new = s
    return {"min_sq": new, "moved": "down" if new < current else "none",
            "why": "dynamic won at every measured length from here up" if new < current else "no change by the rule"}


IMBALANCE_RULE_PERMILLE = 1100


def imbalance_rule(results: list[tuple[str, float, str]]) -> dict:
    """VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX: results are (shape, simulated static makespan / mean, verdict of the
    short-group-first schedule against static) at shapes below the length thresholds. The rule goes on (1100)
    only if every shape it would route (simulated over 1.10) is a 'win' and at least one such shape was measured;
    a 'loss' among them keeps it off; otherwise (ties) it stays as it is (0)."""
    routed = [(name, v) for name, sim, v in results if sim > IMBALANCE_RULE_PERMILLE / 1000]
    if routed and all(v == "win" for _, v in routed):
        return {"permille": IMBALANCE_RULE_PERMILLE, "why": "won at every shape it routes: " +
                ", ".join(n for n, _ in routed)}
    bad = [n for n, v in routed if v == "loss"]
    return {"permille": 0, "why": ("lost at " + ", ".join(bad)) if bad else
            ("nothing measured it would route" if not routed else "not a win at every shape it routes")}


# ---------------------------------------------------------------------------------------------------------------
# question 3: where D=256 at 1K keys loses (boundary, tail wave or per block)

SMS = 132


def d256_blocks(keys: int, n: int = 80) -> float:
    """Key blocks a tile runs at key count `keys`, counting the partial last block by its 16-key steps (the
    narrowed P V; S = Q K^T runs the full width): the fractional blocks its time scales with."""
    full, rem = divmod(keys, n)
    return full + (-(-rem // 16) * 16) / n if rem else float(full)


def tile_rounds(tiles: int, sms: int = SMS) -> int:
    return -(-tiles // sms)


def fit_boundary(points: list[tuple[float, float]]) -> dict:
    """Least squares of per-round time (us) against key blocks per tile: t = a + b * blocks. a is what a tile costs
    besides its blocks (the boundary: prologue, epilogue, pipeline fill and drain), b the time of one block."""
    n = len(points)
    if n < 2:
        raise ValueError("need two lengths at least")
    mx = sum(x for x, _ in points) / n
    my = sum(y for _, y in points) / n
    sxx = sum((x - mx) ** 2 for x, _ in points)
    b = sum((x - mx) * (y - my) for x, y in points) / sxx
    a = my - b * mx
    resid = [y - (a + b * x) for x, y in points]
    return {"a_us": a, "b_us": b, "max_resid_us": max(abs(r) for r in resid)}


def d256_decomposition(per_round_us_1k: float, fit: dict, tiles: int = 1024, sms: int = SMS,
                       keys: int = 1024) -> dict:
    """Shares of a D=256 1K launch lost to the tail wave, the tile boundary and the blocks' own time over what
    `fit`'s per-block cost alone would give: the diagnosis of question 3."""
    rounds = tile_rounds(tiles, sms)
    blocks = d256_blocks(keys)
    tail = 1.0 - tiles / (rounds * sms)
    boundary = fit["a_us"] / per_round_us_1k
    return {"tail_share": tail, "boundary_share": boundary, "block_share": fit["b_us"] * blocks / per_round_us_1k,
            "largest": "tail wave" if tail > boundary else "tile boundary"}
