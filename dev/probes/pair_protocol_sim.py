"""A model of the D=256 O-in-V read-late kernel's barrier protocol, alone (one CTA) or in CTA pairs that share each K/V
block (tile_config.cuh kPairs), run under random interleavings: does any schedule hang, or write a stage that is
still being read?

Each CTA has a producer thread and two consumer warpgroups (each one actor: its four warps arrive together). They run
the kernel's barrier operations in the kernel's order (flash_fwd.cuh: producer, mainloop, consumer, the epilogue's O
into a V stage, flush_o a tile late, the ping-pong turns, the redo pass and, in pairs, the marks' exchange and the exit
handshake); TMA copies land at random later times and count their bytes on the target CTA's barrier. mbarriers are
modelled as PTX defines them (a phase completes when its pending arrivals reach zero and its transaction count is
zero; `try_wait.parity p` passes once the phase of parity p has completed, so parity 1 passes at the start). What a
schedule must not do:

- hang: no actor can move and no copy is in flight while some actor has not finished;
- overwrite: a K/V copy lands in a CTA's stage while a warpgroup there reads it (between its `full` wait and its
  `empty` arrival), before every warpgroup there has released the stage's previous fill, or while O sits in it (from
  the epilogue's write until its o_done arrival); O is written into a stage with a copy in flight, or that the other
  warpgroup's O holds;
- touch an exited CTA: a copy or a remote arrival reaching a CTA whose threads have all finished.

    python3 dev/probes/pair_protocol_sim.py                    # pairs, 2000 random runs
    python3 dev/probes/pair_protocol_sim.py --single --runs 500

Pure Python, no GPU. It models the protocol, not the instructions: a bug in a PTX wrapper or an address it cannot see.
"""
from __future__ import annotations

import argparse
import random
from dataclasses import dataclass, field

STAGES = 2
WGS = 2
WARPS = 4
BLOCK_BYTES = 2  # a block's bytes on a `full` barrier (each CTA of a pair copies half of them)
Q_BYTES = 1


class Violation(Exception):
    pass


@dataclass
class Barrier:
    count: int
    pending: int = 0
    tx: int = 0
    phase: int = 0  # completed phases

    def __post_init__(self):
        self.pending = self.count

    def ready(self, parity: int) -> bool:
        # the phase of parity p has completed: the current (incomplete) phase's parity differs from p
        return (self.phase & 1) != parity

    def _maybe_complete(self):
        if self.pending == 0 and self.tx == 0:
            self.phase += 1
            self.pending = self.count

    def arrive(self, n: int = 1):
        if self.pending < n:
            raise Violation(f"arrivals past the barrier's count ({n} on {self.pending} pending)")
        self.pending -= n
        self._maybe_complete()

    def expect_tx(self, nbytes: int):
        self.tx += nbytes
        self.arrive()

    def complete_tx(self, nbytes: int):
        self.tx -= nbytes
        self._maybe_complete()


@dataclass
class Cta:
    rank: int
    bars: dict = field(default_factory=dict)
    turns: list = field(default_factory=lambda: [0] * WGS)
    reading: dict = field(default_factory=dict)   # (kind, stage) -> set of warpgroups reading it
    released: dict = field(default_factory=dict)  # (kind, stage, wg) -> fills released
    o_in: dict = field(default_factory=dict)      # stage -> warpgroup whose O sits in it
    in_flight: dict = field(default_factory=dict)  # (kind, stage) -> copies in flight
    named: dict = field(default_factory=dict)     # named barrier id -> arrivals of its current round
    named_gen: dict = field(default_factory=dict)
    marks: set = field(default_factory=set)
    peer_marks: set = field(default_factory=set)
    redo: list = field(default_factory=list)
    exited: bool = False


def make_cta(rank: int, pairs: bool) -> Cta:
    c = Cta(rank)
    m = 2 if pairs else 1
    for s in range(STAGES):
        c.bars[("k_full", s)] = Barrier(1)
        c.bars[("v_full", s)] = Barrier(1)
        c.bars[("k_empty", s)] = Barrier(m * WARPS * WGS)
        c.bars[("v_empty", s)] = Barrier(m * WARPS * WGS)
    c.bars[("q_full", 0)] = Barrier(1)
    c.bars[("q_empty", 0)] = Barrier(WARPS * WGS)
    for w in range(WGS):
        c.bars[("o_done", w)] = Barrier(m * WARPS)
    c.bars[("redo_ready", 0)] = Barrier(1)
    c.bars[("pair_marks", 0)] = Barrier(1)
    c.bars[("pair_done", 0)] = Barrier(WARPS * WGS)
    for s in range(STAGES):
        for w in range(WGS):
            c.released[("k", s, w)] = c.released[("v", s, w)] = 0
    return c


# Operations an actor yields: ("wait", cta, bar, parity), ("arrive", cta, bar, n), ("expect", bar, bytes),
# ("copy", kind, stage, fill, targets, bytes), ("read", kind, stage, +1 / -1), ("o_write", stage), ("o_free", stage),
# ("turn_wait",), ("turn_pass",), ("named", id, count), ("exchange",), ("call", fn).


def producer(c: Cta, peer: Cta | None, tiles: list[int], zero_tiles_skip_o: bool = True):
    """flash_fwd.cuh producer (non-causal, O-in-V, kK1First): per tile K_0, Q, K_1, V_0, V_1, K_2, V_2, ...; V_0 and V_1
    wait for the previous tile's O stores (o_done); then the redo tiles."""
    targets = [c] + ([peer] if peer else [])
    share = BLOCK_BYTES // len(targets)
    # o_tiles: the tiles before that stored O through a V stage; in pairs only those with keys (flash_fwd.cuh, o_tiles)
    st = {"start": 0, "kfill": [0] * STAGES, "vfill": [0] * STAGES, "kph": 0, "vph": 0, "o_tiles": 0}

    def load(kind, j, local):
        s = (st["start"] + j) % STAGES
        ph_key = "kph" if kind == "k" else "vph"
        phase = (st[ph_key] >> s) & 1
        st[ph_key] ^= 1 << s
        yield ("wait", c, (f"{kind}_empty", s), phase ^ 1)
        o_before = st["o_tiles"] if peer and zero_tiles_skip_o else local
        if kind == "v" and j < 2 and o_before > 0:
            yield ("wait", c, ("o_done", j), (o_before - 1) & 1)
        yield ("expect", c, (f"{kind}_full", s), BLOCK_BYTES)
        fills = st[f"{kind}fill"]
        yield ("copy", kind, s, fills[s], targets, share)
        fills[s] += 1

    def load_q(local):
        yield ("wait", c, ("q_empty", 0), (local & 1) ^ 1)
        yield ("expect", c, ("q_full", 0), Q_BYTES)
        yield ("copy", "q", 0, local, [c], Q_BYTES)

    def produce(n, local):
        if n == 0:
            yield from load_q(local)
        for j in range(n):
            if j != 1:
                yield from load("k", j, local)
            if j == 0:
                yield from load_q(local)
            if j == 0 and n > 1:
                yield from load("k", 1, local)
            yield from load("v", j, local)
        st["start"] = (st["start"] + n) % STAGES
        st["o_tiles"] += 1 if n > 0 or not (peer and zero_tiles_skip_o) else 0

    for local, n in enumerate(tiles):
        yield from produce(n, local)
    yield ("wait", c, ("redo_ready", 0), 0)
    for i, t in enumerate(c.redo):
        yield from produce(tiles[t], len(tiles) + i)


def consumer(c: Cta, peer: Cta | None, w: int, tiles: list[int], zero_tiles_skip_o: bool = True):
    """flash_fwd.cuh consumer (non-causal, O-in-V, read-late, fixed reference, ping-pong, late V wait)."""
    st = {"start": 0, "kph": 0, "vph": 0, "o_unread": False}

    def arrive_pair(bar):
        yield ("arrive", c, bar, WARPS)
        if peer:
            yield ("arrive", peer, bar, WARPS)

    def flush():
        if st["o_unread"]:
            ostage = st["ostage"]
            yield ("o_free", ostage)
            yield from arrive_pair(("o_done", w))
            st["o_unread"] = False

    def consume(n, local):
        yield ("wait", c, ("q_full", 0), local & 1)
        start = st["start"]
        if n == 0:
            yield from flush()
            yield ("arrive", c, ("q_empty", 0), WARPS)
        else:
            s = start
            yield ("wait", c, ("k_full", s), (st["kph"] >> s) & 1)
            st["kph"] ^= 1 << s
            yield ("read", "k", s, +1)
            yield ("turn_wait",)
            yield from flush()  # read-late: before the turn passes
            yield ("turn_pass",)
            yield ("read", "k", s, -1)
            yield from arrive_pair(("k_empty", s))
            if n == 1:
                yield ("arrive", c, ("q_empty", 0), WARPS)
            for j in range(1, n):
                s, prev = (start + j) % STAGES, (start + j - 1) % STAGES
                yield ("wait", c, ("k_full", s), (st["kph"] >> s) & 1)
                st["kph"] ^= 1 << s
                yield ("read", "k", s, +1)
                vpar = (st["vph"] >> prev) & 1
                st["vph"] ^= 1 << prev
                yield ("turn_wait",)
                yield ("wait", c, ("v_full", prev), vpar)
                yield ("read", "v", prev, +1)
                yield ("turn_pass",)
                yield ("read", "k", s, -1)
                yield from arrive_pair(("k_empty", s))
                if j == n - 1:
                    yield ("arrive", c, ("q_empty", 0), WARPS)
                yield ("read", "v", prev, -1)
                yield from arrive_pair(("v_empty", prev))
            last = (start + n - 1) % STAGES
            yield ("wait", c, ("v_full", last), (st["vph"] >> last) & 1)
            st["vph"] ^= 1 << last
            yield ("read", "v", last, +1)
            yield ("turn_wait",)
            yield ("turn_pass",)
            yield ("read", "v", last, -1)
            yield from arrive_pair(("v_empty", last))
        st["start"] = (start + n) % STAGES
        if n == 0 and peer and zero_tiles_skip_o:
            return  # O = 0 stored from registers: no V stage, no o_done phase (kPairs)
        ostage = st["start"] if w == 0 else st["start"] ^ 1
        yield ("wait", c, ("v_empty", ostage), ((st["vph"] >> ostage) & 1) ^ 1)
        yield ("o_write", ostage)
        st["ostage"], st["o_unread"] = ostage, True

    if w == WGS - 1:
        yield ("turn_pass",)
    for local, n in enumerate(tiles):
        yield from consume(n, local)
    yield from flush()
    yield ("named", 7, WGS)
    if peer and w == 0:
        yield ("exchange",)
    if peer:
        yield ("named", 7, WGS)
    if w == 0:
        yield ("call", lambda: c.bars[("redo_ready", 0)].arrive())
    for i, t in enumerate(c.redo):
        yield from consume(tiles[t], len(tiles) + i)
    yield from flush()
    if w == 0:
        yield ("turn_wait",)
    if peer:
        yield ("arrive", peer, ("pair_done", 0), WARPS)
        yield ("wait", c, ("pair_done", 0), 0)


def simulate(tiles: list[int], marks: list[set], pairs: bool, rng: random.Random, steps: int = 200000,
             zero_tiles_skip_o: bool = True) -> str | None:
    """One random schedule; None if it ran clean, else what went wrong. zero_tiles_skip_o False: in pairs, a tile
    without keys stores its O through a V stage and takes an o_done phase, as the single-CTA build does (the first
    pair build; the model found it unsafe)."""
    ctas = [make_cta(r, pairs) for r in range(2 if pairs else 1)]
    for c, m in zip(ctas, marks):
        c.marks = set(m)
    actors = []
    for c in ctas:
        peer = ctas[1 - c.rank] if pairs else None
        actors.append((c, "producer", producer(c, peer, tiles, zero_tiles_skip_o)))
        for w in range(WGS):
            actors.append((c, f"wg{w}", consumer(c, peer, w, tiles, zero_tiles_skip_o)))
    current = [next(a[2]) for a in actors]
    finished = [False] * len(actors)
    copies = []  # (target cta, kind, stage, fill, bytes)

    def finish(i):
        finished[i] = True
        c = actors[i][0]
        if all(finished[j] for j in range(len(actors)) if actors[j][0] is c):
            c.exited = True

    def check_alive(c: Cta, what: str):
        if c.exited:
            raise Violation(f"{what} reaches CTA {c.rank} after it exited")

    def land(cp):
        c, kind, s, fill, nbytes = cp
        check_alive(c, f"a {kind} copy")
        if kind == "q":
            c.bars[("q_full", 0)].complete_tx(nbytes)
            return
        if c.reading.get((kind, s)):
            raise Violation(f"{kind} copy into CTA {c.rank} stage {s} while warpgroups {c.reading[(kind, s)]} read it")
        for w in range(WGS):
            if c.released[(kind, s, w)] < fill:
                raise Violation(f"{kind} fill {fill} lands in CTA {c.rank} stage {s} before warpgroup {w} released "
                                f"fill {fill - 1}")
        if kind == "v" and s in c.o_in:
            raise Violation(f"v copy into CTA {c.rank} stage {s} while warpgroup {c.o_in[s]}'s O sits in it")
        c.in_flight[(kind, s)] -= 1
        c.bars[(f"{kind}_full", s)].complete_tx(nbytes)

    def run(i):
        c, name, _ = actors[i]
        op = current[i]
        kind = op[0]
        if kind == "wait":
            pass
        elif kind == "arrive":
            check_alive(op[1], "an arrival")
            op[1].bars[op[2]].arrive(op[3])
        elif kind == "expect":
            op[1].bars[op[2]].expect_tx(op[3])
        elif kind == "copy":
            _, k, s, fill, targets, nbytes = op
            for t in targets:
                check_alive(t, f"a {k} copy")
                if k != "q":
                    t.in_flight[(k, s)] = t.in_flight.get((k, s), 0) + 1
                copies.append((t, k, s, fill, nbytes))
        elif kind == "read":
            _, k, s, d = op
            w = int(name[2:])
            readers = c.reading.setdefault((k, s), set())
            if d > 0:
                readers.add(w)
            else:
                readers.discard(w)
                c.released[(k, s, w)] += 1
        elif kind == "o_write":
            s, w = op[1], int(name[2:])
            if c.in_flight.get(("v", s), 0):
                raise Violation(f"O written into CTA {c.rank} stage {s} with a V copy in flight")
            if s in c.o_in:
                raise Violation(f"O of warpgroup {w} into CTA {c.rank} stage {s}, which warpgroup {c.o_in[s]}'s O "
                                "holds")
            if c.reading.get(("v", s)):
                raise Violation(f"O written into CTA {c.rank} stage {s} while it is read")
            c.o_in[s] = w
        elif kind == "o_free":
            c.o_in.pop(op[1], None)
        elif kind == "turn_wait":
            c.turns[int(name[2:])] -= 1
        elif kind == "turn_pass":
            c.turns[(int(name[2:]) + 1) % WGS] += 1
        elif kind == "named":
            bid, count = op[1], op[2]
            gen = c.named_gen.get(bid, 0)
            c.named[bid] = c.named.get(bid, 0) + 1
            if c.named[bid] == count:
                c.named[bid] = 0
                c.named_gen[bid] = gen + 1
            # the actor now waits for the generation to move on
            current[i] = ("named_wait", bid, gen)
            return
        elif kind == "named_wait":
            pass
        elif kind == "exchange":
            peer = ctas[1 - c.rank]
            check_alive(peer, "the marks' exchange")
            peer.peer_marks = set(c.marks)
            peer.bars[("pair_marks", 0)].arrive()
            current[i] = ("wait_then_union", 0)
            return
        elif kind == "wait_then_union":
            c.marks |= c.peer_marks
            c.redo = sorted(c.marks)
        elif kind == "call":
            op[1]()
        try:
            current[i] = next(actors[i][2])
        except StopIteration:
            finish(i)

    def runnable(i) -> bool:
        c, name, _ = actors[i]
        op = current[i]
        if op[0] == "wait":
            return op[1].bars[op[2]].ready(op[3])
        if op[0] == "turn_wait":
            return c.turns[int(name[2:])] > 0
        if op[0] == "named_wait":
            return c.named_gen.get(op[1], 0) > op[2]
        if op[0] == "wait_then_union":
            return c.bars[("pair_marks", 0)].ready(0)
        return True

    for c in ctas:
        if not pairs:
            c.redo = sorted(c.marks)
    for _ in range(steps):
        live = [i for i in range(len(actors)) if not finished[i] and runnable(i)]
        if not live and not copies:
            if all(finished):
                return None
            stuck = [f"CTA {actors[i][0].rank} {actors[i][1]} at {current[i][0]} {current[i][2:]}"
                     for i in range(len(actors)) if not finished[i]]
            return "hang: " + "; ".join(stuck)
        try:
            if copies and (not live or rng.random() < 0.3):
                land(copies.pop(rng.randrange(len(copies))))
            else:
                run(rng.choice(live))
        except Violation as v:
            return str(v)
    return "step limit"


def random_case(rng: random.Random, pairs: bool):
    n_tiles = rng.randint(1, 6)
    tiles = [rng.choice((0, 1, 1, 2, 3, 4, 5)) for _ in range(n_tiles)]
    # a tile without keys is never marked (its row sums are 0: flash_fwd.cuh, consume)
    marks = [{t for t in range(n_tiles) if tiles[t] > 0 and rng.random() < 0.25} for _ in range(2 if pairs else 1)]
    return tiles, marks


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--single", action="store_true", help="one CTA, the routed build (the protocol's reference)")
    args = ap.parse_args(argv)
    rng = random.Random(args.seed)
    bad = 0
    for r in range(args.runs):
        tiles, marks = random_case(rng, not args.single)
        why = simulate(tiles, marks, not args.single, rng)
        if why is not None:
            bad += 1
            if bad <= 5:
                print(f"run {r}: tiles {tiles} marks {marks}: {why}")
    print(f"{'single CTA' if args.single else 'CTA pairs'}: {args.runs - bad} of {args.runs} random schedules clean")
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
