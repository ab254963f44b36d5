"""Small kernel calls for compute-sanitizer (memcheck, racecheck, synccheck): no pytest, exit 0 only if all are right.

    python3 dev/stress/sanitize.py                      # every tool, one line each (the runner; see its docstring)
    compute-sanitizer --tool memcheck --error-exitcode 1 python3 tests/sanitizer_cases.py [--set small]

Inputs are made and the reference computed on the CPU, so under the sanitizer the GPU runs little besides
copies and the vidattn kernels themselves. Run with PYTORCH_NO_CUDA_MEMORY_CACHING=1 so every tensor is its own
allocation and memcheck sees reads or writes past its end (the caching allocator would hide them).
Build the kernel library first (`python -c "import vidattn; vidattn.build()"`), or nvcc runs under the tool.

Every case states the code path it is there for (the tail launch, a block width, a warpgroup count) and fails when
the call took another one, so a launcher change cannot quietly turn a case into a duplicate.
`--set full` (the default) has every case; `--set small` keeps the cheap ones (racecheck and synccheck instrument
every shared-memory access and barrier: the same paths with fewer tiles). Both sets cover the tail launch (its
split and merge kernels, with and without a main launch before it), CTAs that walk several tiles, both D builds and
both D=128 key-block widths, 2 and 3 consumer warpgroups, padded head dims, grouped K/V, kv_lens, causal masks (both
alignments, rows that see no key), the 8-bit path (pre-pass and kernel, both head dims and both D=64 warpgroup counts)
and calls from several Python threads (with and without a prior CUDA call in the thread, on one shared stream and on a
stream each).
Exit codes: 0 all right, 1 a wrong result or a case that missed its path, 2 the kernel did not run (fallback) or no
usable GPU.
"""
from __future__ import annotations

import argparse
import contextlib
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from _support import attention_fp64  # noqa: E402  (tests/ is this script's folder: first on sys.path)

REL_L2_MAX = 1e-2
LSE_ATOL = 1e-2
# The 8-bit path's error on random inputs is about 4e-2 relative L2 (tests/test_8bit_gpu.py); a sanitizer run wants a
# wrong result caught, not the accuracy bound, so it takes a margin.
REL_L2_MAX_8BIT = 6e-2
LSE_ATOL_8BIT = 0.25


@dataclass
class Case:
    """One call. h: heads, or (query heads, K/V heads); "sms+N" for N more heads of one tile each than the GPU has
    SMs. d64_wgs: the exact D=64 kernel's consumer warpgroups (0: the launcher's pick). block_n: the D=128 key-block
    width (0: by key count). precision "8bit" runs the 8-bit kernel at any length (quant8.SHORT_KV_EXACT_MAX is
    set to 0 here). expect: the path the call must take ("tail": a split tail launch; "no tail"; "block_n=N";
    "q8_wgs=N"; "q8 tail" / "q8 no tail": the 8-bit path's tail launch, or its plain launch). q8_tail: the 8-bit
    tail launch's mode for the call (quant8.set_tail; -1 the default; 2 takes kv_lens calls too). tail_rounds: the
    exact kernel's tail plans for the call (_ext.set_tail_rounds; -1 the default, one round; 2 two short rounds; 3 the
    balanced tail). hd_narrow: VIDATTN_HD_NARROW for the call (_ext.hd_narrow; -1 the library's own; 8 the D=256 build
    in CTA pairs, whose "clusters=2" expectation says a pair launch ran). poison: K and V past each batch's kv_lens
    set to this value on the GPU after the reference is taken (NaN or Inf in an unwritten cache slot: the consumers
    zero V's rows past the length in the stage before P V, flash_fwd.cuh zero_v_rows)."""
    name: str
    b: int
    h: object
    sq: int
    skv: int
    d: int
    dtype: torch.dtype = torch.bfloat16
    layout: str = "bshd"
    kv_lens: list | None = None
    d64_wgs: int = 0
    spiked: tuple = ()
    block_n: int = 0
    precision: str = "exact"
    q8_wgs: int = 0
    expect: tuple = ()
    small: bool = True  # in the small set
    offset: float = 0.5  # added to the random inputs (a mean the 8-bit path's K smoothing must remove)
    causal: object = False  # "top_left" or "bottom_right" (skipped, and said so, where vidattn has no causal=)
    q8_tail: int = -1
    tail_rounds: int = -1
    hd_narrow: int = -1
    poison: float | None = None


CASES = [
    # Tail-heavy (no tile is full) with ragged kv_lens, and a degenerate one.
    Case("tails+ragged", 2, 3, 129, 777, 128, kv_lens=[777, 259], expect=("no tail", "block_n=128")),
    Case("skv=1", 1, 2, 65, 1, 64, torch.float16, "bhsd"),
    # The three-warpgroup D=64 build, tail-heavy.
    Case("d64-3wg tails+ragged", 2, 2, 257, 333, 64, kv_lens=[333, 100], d64_wgs=3),
    Case("d64-2wg tails", 1, 2, 200, 333, 64, torch.float16, "bhsd", d64_wgs=2),
    # Spiked heads overflow the fixed-reference softmax, so their tiles are marked and run again (the marks in shared
    # memory, the producer told through an mbarrier: csrc/sm90/flash_fwd.cuh, redo_tiles).
    Case("redo", 1, 4, 300, 500, 128, spiked=(1, 2)),
    # The tail launch (csrc/capi.cu, plan_tail): a last round of one tile ("sms+1" heads of one tile each) runs as
    # key ranges merged by combine_kernel after a main launch; and a lone tile, which is all tail (no main launch).
    Case("tail launch", 1, "sms+1", 100, 2200, 128, expect=("tail",), small=False),
    Case("tail launch small", 1, "sms+1", 100, 1536, 128, expect=("tail",)),
    Case("lone tile split", 1, 1, 100, 2200, 128, expect=("tail",)),
    Case("lone tile split N=176", 1, 1, 100, 2200, 128, torch.float16, block_n=176, expect=("tail", "block_n=176")),
    # Two short rounds (capi.cu, plan_tail; VIDATTN_TAIL_ROUNDS=2, not the default): a last round of 68 one-tile
    # heads, each split in 3 ranges (204 > SMs).
    Case("tail launch in two rounds", 1, "sms+68", 100, 8000, 128, block_n=128, expect=("tail",), small=False,
         tail_rounds=2),
    # The balanced tail (capi.cu, plan_tail; VIDATTN_TAIL_ROUNDS=3, not the default): the same last round of 68 tiles
    # cut into one equal chunk of key blocks per SM, two pieces at most per CTA; and at D=256 with kv_lens, the short
    # batch's pieces past its keys holding none.
    Case("tail launch balanced", 1, "sms+68", 100, 8000, 128, block_n=128, expect=("tail",), small=False,
         tail_rounds=3),
    Case("d256 balanced tail kv_lens", 2, 100, 128, 5000, 256, kv_lens=[5000, 1700], expect=("tail",), small=False,
         tail_rounds=3),
    # Spiked heads in the tail launch's items, all tail and under the balanced plan at D=256: with the split kernel on
    # the fixed reference (tile_config.cuh, VIDATTN_SPLIT_FIXED_REF=1, an A/B build) their ranges overflow and run
    # again exact (call P50 hung here on a redone balanced piece); on the default build they run exact once.
    Case("tail launch redo", 1, 2, 1000, 3000, 128, spiked=(0, 1), expect=("tail",)),
    Case("d256 balanced tail redo", 1, 200, 128, 5000, 256, spiked=(140, 199), expect=("tail",), small=False,
         tail_rounds=3),
    # kv_lens in the tail launch (capi.cu, tail_kv_lens): all tail, batches of 1 and 129 keys leave ranges without a
    # key, whose items store (max -inf, sum 0) for the merge to weigh 0.
    Case("tail kv_lens with empty ranges", 4, 3, 300, 4097, 128, kv_lens=[4097, 1, 129, 2500], expect=("tail",)),
    Case("d64 tail kv_lens with empty ranges", 4, 3, 300, 4097, 64, torch.float16, "bhsd",
         kv_lens=[1, 4097, 129, 2500], expect=("tail",)),
    # The D=128 long-key build (N=176), tail-heavy with ragged kv_lens.
    Case("N=176 tails+ragged", 2, 3, 129, 777, 128, kv_lens=[777, 259], block_n=176, expect=("block_n=176",)),
    # Several tiles per CTA with two Q buffers: O stored behind the next tile's S_0, which rides in the last P V's
    # turn (flash_fwd.cuh, S0Link); batch 1's single key block is a next tile whose S_0 releases its Q.
    Case("merged turns", 2, 140, 200, 300, 128, kv_lens=[300, 100], small=False),
    Case("d64-3wg merged turns", 1, 140, 400, 300, 64, torch.float16, "bhsd", d64_wgs=3, small=False),
    Case("merged turns small", 1, "sms+1", 128, 300, 128, expect=("no tail",)),
    Case("d64-3wg merged turns small", 1, "sms+1", 192, 300, 64, torch.float16, "bhsd", d64_wgs=3),
    # Head dims padded onto a wider build (TMA's zero fill past D, the O store clipped at D; at D=96 the tail
    # launch's merge stops at D too), and grouped-/multi-query K/V.
    Case("d72 tails+ragged", 2, 3, 129, 777, 72, kv_lens=[777, 259]),
    Case("d40 3wg tails+ragged", 2, 2, 257, 333, 40, torch.float16, "bhsd", kv_lens=[333, 100], d64_wgs=3),
    Case("d96 tail launch", 1, "sms+1", 100, 2200, 96, expect=("tail",), small=False),
    Case("d96 lone tile split", 1, 1, 100, 2200, 96, expect=("tail",)),
    # The D=192 / D=256 builds (O's epilogue boxes in Q's buffer) and D=160 padded onto D=192.
    Case("d192 tails+ragged", 2, 3, 129, 777, 192, kv_lens=[777, 259]),
    Case("d256 several tiles per CTA", 1, "sms+1", 256, 500, 256, torch.float16),
    # bf16 D=256 routes to the O-in-V build that waits for its O stores' reads under the next tile's S_0 (o_path 4):
    # several tiles per CTA, so that wait spans tiles (the fp16 case above runs the wide build).
    Case("d256 bf16 read-late several tiles per CTA", 1, "sms+1", 256, 500, 256, expect=("o_path=4",)),
    Case("d256 tail launch", 1, "sms+1", 100, 2200, 256, expect=("tail",), small=False),
    Case("d192 lone tile split", 1, 1, 100, 2200, 192, expect=("tail",)),
    Case("d160 bhsd", 1, 2, 129, 300, 160, torch.float16, "bhsd"),
    Case("gqa 8q/2kv tails+ragged", 2, (8, 2), 129, 777, 128, layout="bhsd", kv_lens=[777, 300]),
    Case("mqa 6q/1kv d64-3wg", 1, (6, 1), 257, 333, 64, torch.float16, d64_wgs=3),
    Case("gqa 4q/2kv split", 1, (4, 2), 100, 2200, 128, expect=("tail",)),
    # The 8-bit path: its pre-pass (K/V statistics, Q and K/V quantization) and kernel, tails on both lengths,
    # kv_lens and the LSE, both head dims, the D=64 build on two and three consumer warpgroups.
    Case("8bit d128 tails+ragged", 2, 2, 300, 700, 128, kv_lens=[700, 333], precision="8bit", offset=0.0),
    Case("8bit d64 3wg", 1, 3, 257, 515, 64, torch.float16, "bhsd", precision="8bit", q8_wgs=3,
         expect=("q8_wgs=3",), offset=0.0),
    Case("8bit d64 2wg ragged", 2, 2, 200, 389, 64, kv_lens=[389, 129], precision="8bit", q8_wgs=2,
         expect=("q8_wgs=2",), offset=0.0),
    Case("8bit d128 key offset", 1, 2, 129, 300, 128, torch.float16, precision="8bit", offset=1.0),
    # The 8-bit tail launch (csrc/capi_8bit.cuh, q8_plan_tail): a main launch of one full round on the 1-D grid, its
    # last tile as key ranges, merged; a lone tile split at D=64 (no main launch); kv_lens keep the plain launch in
    # mode 1.
    Case("8bit d128 tail launch", 1, "sms+1", 100, 2200, 128, precision="8bit", expect=("q8 tail",), offset=0.0,
         small=False),
    Case("8bit d64 lone tile split", 1, 1, 100, 2200, 64, torch.float16, "bhsd", precision="8bit",
         expect=("q8 tail",), offset=0.0),
    Case("8bit d128 ragged in mode 1 keeps the plain launch", 2, 1, 100, 2200, 128, kv_lens=[2200, 1000],
         precision="8bit", expect=("q8 no tail",), offset=0.0, q8_tail=1),
    # Mode 2 (v18b, the default since call P32): kv_lens calls split too; batches of 1 and 129 keys leave most of
    # their ranges without a key.
    Case("8bit tail kv_lens with empty ranges", 3, 2, 100, 2200, 128, kv_lens=[2200, 1, 129], precision="8bit",
         expect=("q8 tail",), offset=0.0, q8_tail=2),
    Case("8bit d64 tail kv_lens with empty ranges", 3, 2, 100, 2200, 64, torch.float16, "bhsd", kv_lens=[700, 129, 1],
         precision="8bit", expect=("q8 tail",), offset=0.0, q8_tail=2),
    # Grouped-query and multi-query K/V at 8 bits: K/V quantized once per key/value head, read by each query head of the
    # group (the K/V passes' grids, the tensor maps, the scales' rows); with kv_lens and the tail launch.
    Case("8bit gqa 8q/2kv ragged", 2, (8, 2), 300, 700, 128, layout="bhsd", kv_lens=[700, 333], precision="8bit",
         offset=0.0),
    Case("8bit mqa 6q/1kv d64", 1, (6, 1), 257, 515, 64, torch.float16, precision="8bit", offset=0.0),
    Case("8bit gqa tail launch", 1, (4, 2), 100, 2200, 128, precision="8bit", expect=("q8 tail",), offset=0.0),
    # Causal masks: tiles past the diagonal skipped, the diagonal block masked, the causal tile order (heaviest Q
    # block first, every other round reversed) over several tiles per CTA, bottom-right alignment with ragged
    # kv_lens, and rows that see no key (bottom-right with fewer keys than queries: zeros, an LSE of -inf).
    Case("causal top-left tails", 2, 3, 777, 777, 128, causal="top_left", expect=("no tail",)),
    Case("causal bottom-right ragged", 2, 2, 129, 777, 128, kv_lens=[777, 259], causal="bottom_right"),
    Case("causal d64-3wg several tiles per CTA", 1, "sms+1", 384, 384, 64, torch.float16, "bhsd", d64_wgs=3,
         causal="top_left"),
    Case("causal gqa 4q/2kv d96", 1, (4, 2), 300, 300, 96, causal="top_left"),
    Case("causal bottom-right rows without keys", 1, 2, 400, 150, 128, causal="bottom_right"),
    # The one-Q-buffer causal builds (D=192 N=96, D=256 N=64): Q loaded first, the wider producer, several tiles per
    # CTA, ragged kv_lens at D=200 (padded onto D=256, fp16).
    Case("causal d192 several tiles per CTA", 1, "sms+1", 300, 300, 192, causal="top_left", expect=("block_n=96",)),
    Case("causal d200 bottom-right ragged", 2, 2, 129, 777, 200, torch.float16, kv_lens=[777, 259],
         causal="bottom_right", expect=("block_n=64",)),
    # bf16 causal D=256 on the O-in-V build (N=80, O through the V stages, its stores' reads waited for a tile late):
    # several tiles per CTA, and spiked heads whose tiles run again past the end-of-list fill (the redo pass's o_done
    # count, which hung before its fix in the fifteenth sitting).
    Case("causal d256 bf16 N=80 several tiles per CTA", 1, "sms+1", 300, 300, 256, causal="top_left",
         expect=("block_n=80", "o_path=4")),
    Case("causal d256 bf16 N=80 redo", 1, 4, 700, 700, 256, spiked=(1, 2), causal="top_left",
         expect=("block_n=80", "o_path=4")),
    # The D=256 build in CTA pairs (VIDATTN_HD_NARROW=8: each CTA multicasts half of every K/V block into both, remote
    # arrivals on the peer's barriers, the redo marks exchanged through the peer's shared memory): several tile pairs
    # per CTA; a pair launch then the tail launch (without clusters); spiked heads redone; ragged kv_lens.
    Case("d256 pairs several tiles per CTA", 1, "sms+1", 256, 500, 256, hd_narrow=8, expect=("clusters=2", "o_path=4")),
    Case("d256 pairs then tail launch", 1, 40, 512, 4224, 256, hd_narrow=8, expect=("clusters=2", "tail"), small=False),
    Case("d256 pairs redo", 1, 4, 256, 700, 256, spiked=(1, 2), hd_narrow=8, expect=("clusters=2",)),
    Case("d256 pairs ragged", 2, 3, 512, 777, 256, kv_lens=[777, 100], hd_narrow=8, expect=("clusters=2",)),
    # A batch without keys between two with keys, ~6 tiles per CTA: each CTA runs two keyless tiles in a row, which
    # store O = 0 from registers and take no o_done phase (flash_fwd.cuh o_tiles; dev/probes/pair_protocol_sim.py).
    Case("d256 pairs batch without keys", 3, "sms+1", 256, 300, 256, kv_lens=[300, 0, 200], hd_narrow=8,
         expect=("clusters=2", "o_path=4"), small=False),
    # NaN / Inf in K and V past kv_lens: each consumer warpgroup stores zeros over V's rows past the length in the
    # partial block's stage and fences them for the async proxy before the turn's bar.sync and its P V (its own named
    # barrier, 8 + warpgroup, only in the A/B builds without the ping-pong or with the rotated key order, which this
    # library does not hold); the plain, three-warpgroup, wide, O-in-V, pair, causal, redo and tail-launch kernels.
    Case("nonfinite past kv_lens d128", 3, 2, 129, 777, 128, kv_lens=[700, 100, 161], poison=float("nan")),
    Case("nonfinite past kv_lens d64 3wg", 2, 2, 257, 333, 64, kv_lens=[333, 100], d64_wgs=3, poison=float("inf")),
    Case("nonfinite past kv_lens d192", 2, 3, 300, 777, 192, torch.float16, "bhsd", kv_lens=[250, 777],
         poison=float("nan")),
    Case("nonfinite past kv_lens d256 O-in-V", 2, 70, 256, 2000, 256, kv_lens=[1973, 100], poison=float("nan"),
         expect=("o_path=4",)),
    Case("nonfinite past kv_lens d256 pairs", 2, 40, 512, 1040, 256, kv_lens=[1003, 923], hd_narrow=8,
         poison=float("-inf"), expect=("clusters=2",)),
    Case("nonfinite past kv_lens causal", 2, 2, 300, 700, 128, kv_lens=[650, 161], causal="bottom_right",
         poison=float("nan")),
    Case("nonfinite past kv_lens redo", 1, 4, 300, 1300, 128, kv_lens=[1250], spiked=(1, 2), poison=float("nan")),
    Case("nonfinite past kv_lens tail launch", 4, 3, 300, 4097, 128, kv_lens=[4097, 1, 129, 2500], expect=("tail",),
         poison=float("inf")),
]

# The threaded round: each thread runs these (by name) on its stream, after the main thread made the inputs.
THREAD_CASES = ("tails+ragged", "lone tile split", "d64-2wg tails", "8bit d128 tails+ragged",
                "causal bottom-right ragged")
THREAD_CONFIGS = [(streams, prior) for streams in ("shared", "own") for prior in (False, True)]
N_THREADS = 3


def reference(q, k, v, layout, kv_lens, causal=False):
    """fp64 attention on the CPU: (out in `layout`, lse (B, H, Sq)); a row with no key is zeros, LSE -inf."""
    return attention_fp64(q, k, v, kv_lens=kv_lens, layout=layout, causal=causal)


@dataclass
class Prepared:
    case: Case
    heads: tuple
    cpu: tuple
    gpu: tuple
    lens: object
    ref: tuple = field(default=None)


def resolve_heads(h, sms: int):
    """A Case's h on a GPU of `sms` SMs: "sms+N" becomes sms + N heads; a count or a (query, K/V) pair as it is."""
    return sms + int(h[4:]) if isinstance(h, str) and h.startswith("sms+") else h


def prepare(c: Case, sms: int) -> Prepared:
    g = torch.Generator().manual_seed(1234)
    h = resolve_heads(c.h, sms)
    hq, hkv = h if isinstance(h, tuple) else (h, h)
    shape = (lambda s, n: (c.b, s, n, c.d)) if c.layout == "bshd" else (lambda s, n: (c.b, n, s, c.d))
    q, k, v = ((torch.randn(shape(s, n), generator=g) + c.offset).to(c.dtype)
               for s, n in ((c.sq, hq), (c.skv, hkv), (c.skv, hkv)))
    if c.spiked:  # one key past the first key block far above the rest in these heads (bench.accuracy.shape_scores)
        from bench.accuracy import shape_scores
        shape_scores(q, k if c.layout == "bshd" else k.transpose(1, 2), "spike", heads=list(c.spiked))
    lens = torch.tensor(c.kv_lens, dtype=torch.int32).cuda() if c.kv_lens is not None else None
    gpu = tuple(t.cuda() for t in (q, k, v))
    if c.poison is not None:
        for t in gpu[1:]:
            for bi, n in enumerate(c.kv_lens):
                (t[bi, n:] if c.layout == "bshd" else t[bi, :, n:]).fill_(c.poison)
    return Prepared(c, (hq, hkv), (q, k, v), gpu, lens, reference(q, k, v, c.layout, c.kv_lens, c.causal))


def causal_api(vidattn) -> bool:
    """Whether this vidattn takes causal= (the causal cases are skipped, and said so, where it does not)."""
    import inspect
    return all("causal" in inspect.signature(f).parameters for f in (vidattn.attention, vidattn.explain))


def call(vidattn, p: Prepared):
    """The kernel call and the path it took (None: fine; else what was expected and missed)."""
    from vidattn import _ext
    c = p.case
    extra = {"causal": c.causal} if c.causal else {}
    out, lse = vidattn.attention(*p.gpu, layout=c.layout, kv_lens=p.lens, return_lse=True, precision=c.precision,
                                 **extra)
    missed = []
    for want in c.expect:
        if want == "tail" and _ext.last_tail_splits() < 2:
            missed.append("a split tail launch")
        elif want == "no tail" and _ext.last_tail_splits() != 0:
            missed.append("no tail launch")
        elif want.startswith("block_n=") and _ext.last_block_n() != int(want[8:]):
            missed.append(f"{want} (ran {_ext.last_block_n()})")
        elif want.startswith("o_path=") and _ext.last_o_path() != int(want[7:]):
            missed.append(f"{want} (ran {_ext.last_o_path()})")
        elif want.startswith("clusters=") and _ext.last_cluster_ctas() != int(want[9:]):
            missed.append(f"{want} (ran {_ext.last_cluster_ctas()})")
        elif want in ("q8 tail", "q8 no tail"):
            from vidattn import quant8
            splits = quant8.last_tail_splits()
            if (splits < 2) if want == "q8 tail" else (splits != 0):
                missed.append(f"{want} (ran {splits} key ranges)")
        elif want.startswith("q8_wgs="):
            from vidattn import quant8
            if quant8.last_variant()[0] != int(want[7:]):
                missed.append(f"{want} (ran {quant8.last_variant()[0]})")
    return out, lse, "; ".join(missed) or None


def check(p: Prepared, out, lse, missed, tag="") -> int:
    c = p.case
    out, lse = out.cpu(), lse.cpu()
    ref, ref_lse = p.ref
    eight = c.precision == "8bit"
    # Finite everywhere, except an LSE of -inf exactly where the reference row has no key.
    rows = torch.isfinite(ref_lse)
    finite = bool(torch.isfinite(out).all()) and torch.equal(torch.isfinite(lse), rows) \
        and bool((lse[~rows] == float("-inf")).all())
    rel = ((out.double() - ref).norm() / ref.norm()).item() if finite else float("nan")
    lse_err = (lse.double()[rows] - ref_lse[rows]).abs().max().item() if finite and rows.any() else 0.0 \
        if finite else float("nan")
    ok = (finite and rel < (REL_L2_MAX_8BIT if eight else REL_L2_MAX)
          and lse_err < (LSE_ATOL_8BIT if eight else LSE_ATOL) and out.shape == ref.shape)
    verdict = "ok" if ok and missed is None else ("WRONG" if not ok else f"MISSED PATH: expected {missed}")
    heads = p.heads if p.heads[0] != p.heads[1] else p.heads[0]
    print(f"[sanitizer_cases] {c.name}{tag}: B{c.b} H{heads} {c.sq}x{c.skv} D{c.d} {c.dtype} {c.layout} "
          f"kv_lens={c.kv_lens} {c.precision}: rel-L2 {rel:.2e}, max|lse err| {lse_err:.2e} -> {verdict}", flush=True)
    return 0 if ok and missed is None else 1


def run_case(vidattn, p: Prepared) -> int:
    from vidattn import _ext, quant8
    c = p.case
    if c.causal and not causal_api(vidattn):
        print(f"[sanitizer_cases] {c.name}: skipped (this vidattn has no causal=)")
        return 0
    extra = {"causal": c.causal} if c.causal else {}
    reason = vidattn.explain(*p.gpu, layout=c.layout, kv_lens=p.lens, precision=c.precision, **extra)
    if reason is not None:
        print(f"[sanitizer_cases] {c.name}: the kernel would not run ({reason}); nothing to sanitize")
        return 2
    if c.q8_wgs:
        quant8.set_d64_warpgroups(c.q8_wgs)
    if c.q8_tail != -1:
        quant8.set_tail(c.q8_tail)
    if c.tail_rounds != -1:
        _ext.set_tail_rounds(c.tail_rounds)
    try:
        with _ext.d64_warpgroups(c.d64_wgs), _ext.d128_block_n(c.block_n), \
                (_ext.hd_narrow(c.hd_narrow) if c.hd_narrow != -1 else contextlib.nullcontext()):
            out, lse, missed = call(vidattn, p)
            torch.cuda.synchronize()
    finally:
        if c.q8_wgs:
            quant8.set_d64_warpgroups(0)
        if c.q8_tail != -1:
            quant8.set_tail(-1)
        if c.tail_rounds != -1:
            _ext.set_tail_rounds(-1)
    return check(p, out, lse, missed)


def run_threads(vidattn, prepared: dict, streams: str, prior: bool, timeout: float = 600.0) -> int:
    """N_THREADS Python threads, each running THREAD_CASES once. `prior`: the thread does CUDA work of its own
    first; without it the kernel call is the thread's first CUDA work (its stream was made by the main thread).
    Each call's start is printed (thread, case, seconds into the round), so a log cut short by a tool's time limit
    names the calls still in flight; a thread not done after `timeout` seconds fails the round."""
    cases = [prepared[n] for n in THREAD_CASES if n in prepared]
    tag = f" [thread {{}}/{N_THREADS}, {streams} stream, {'a' if prior else 'no'} prior CUDA call]"
    t0 = time.monotonic()
    print(f"[sanitizer_cases:progress] threaded round{tag.format('*')}: start", flush=True)
    shared = torch.cuda.Stream()
    own = [torch.cuda.Stream() for _ in range(N_THREADS)]
    results, errors = {}, []

    def work(i):
        try:
            if prior:
                torch.zeros(1, device="cuda").add_(1)
            stream = shared if streams == "shared" else own[i]
            with torch.cuda.stream(stream):
                for j in range(len(cases)):
                    p = cases[(i + j) % len(cases)]  # threads start on different cases
                    print(f"[sanitizer_cases:progress] thread {i}: {p.case.name} at {time.monotonic() - t0:.1f} s",
                          flush=True)
                    out, lse, _ = call(vidattn, p)  # the path checks are the single-threaded cases' business
                    results[(i, p.case.name)] = (out, lse)
            stream.synchronize()
        except BaseException as exc:  # noqa: BLE001 - reported below with the thread's index
            errors.append((i, repr(exc)))

    threads = [threading.Thread(target=work, args=(i,)) for i in range(N_THREADS)]
    for t in threads:
        t.start()
    deadline = t0 + timeout
    for t in threads:
        t.join(timeout=max(0.0, deadline - time.monotonic()))
    print(f"[sanitizer_cases:progress] threaded round{tag.format('*')}: joined at {time.monotonic() - t0:.1f} s",
          flush=True)
    if any(t.is_alive() for t in threads) or errors:
        print(f"[sanitizer_cases] threads{tag.format('*')}: {'a thread hung' if not errors else errors} -> WRONG")
        return 1
    torch.cuda.synchronize()
    rc = 0
    for (i, name), (out, lse) in sorted(results.items()):
        rc = max(rc, check(prepared[name], out, lse, None, tag.format(i)))
    return rc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--set", choices=("full", "small"), default="full")
    ap.add_argument("--only", default="", help="run the cases whose name holds this text (and no threads)")
    ap.add_argument("--no-threads", action="store_true")
    ap.add_argument("--thread-timeout", type=float, default=600.0,
                    help="seconds a threaded round may take before it fails as hung")
    args = ap.parse_args(argv)
    if not torch.cuda.is_available():
        print("[sanitizer_cases] CUDA is not available")
        return 2
    import vidattn
    from vidattn import quant8
    quant8.SHORT_KV_EXACT_MAX = 0  # the 8-bit cases run the 8-bit kernel at their short lengths
    quant8.GROUPED_EXACT_HEAD_DIMS = ()  # and on grouped K/V at D=64
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    chosen = [c for c in CASES if (args.set == "full" or c.small) and args.only in c.name]
    causal = causal_api(vidattn)
    needed = {c.name for c in chosen} | (set() if args.only or args.no_threads else set(THREAD_CASES))
    needed = {n for n in needed if causal or not next(c for c in CASES if c.name == n).causal}
    prepared = {c.name: prepare(c, sms) for c in CASES if c.name in needed}
    rc = 0
    for c in chosen:
        if c.name not in prepared:
            print(f"[sanitizer_cases] {c.name}: skipped (this vidattn has no causal=)")
            continue
        rc = max(rc, run_case(vidattn, prepared[c.name]))
    if not (args.only or args.no_threads):
        for streams, prior in THREAD_CONFIGS:
            rc = max(rc, run_threads(vidattn, prepared, streams, prior, args.thread_timeout))
    torch.cuda.synchronize()
    print(f"[sanitizer_cases] {'all right' if rc == 0 else 'FAILED'} ({len(chosen)} cases, "
          f"{0 if args.only or args.no_threads else len(THREAD_CONFIGS)} threaded rounds)", flush=True)
    return rc


if __name__ == "__main__":
    sys.exit(main())
