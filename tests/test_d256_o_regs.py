"""The D=256 O-in-V build's variant that stores O from registers (csrc/sm90/flash_fwd.cuh, store_o_regs and
quad_transpose; tile_config.cuh kORegs; capi.cu VIDATTN_HD_NARROW=4) on the CPU: the quad transpose executed from
its source text on four simulated lanes, the fragment-to-row/column mapping of the stores (rows past seqlen_q and
columns past the caller's head dim left alone), the routing (one added kernel, D=256 only, off by default, bf16),
the producer no longer waiting for O before refilling V, and the Python setter's range. The kernel itself:
tests/test_d256_o_regs_gpu.py."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from vidattn import _ext

ROOT = Path(__file__).resolve().parent.parent
FWD = (ROOT / "csrc/sm90/flash_fwd.cuh").read_text()
CAPI = (ROOT / "csrc/capi.cu").read_text()
CFG = (ROOT / "csrc/sm90/tile_config.cuh").read_text()
PARAMS = (ROOT / "csrc/sm90/fwd_params.h").read_text()


def _body(src: str, signature: str) -> str:
    start = src.index(signature)
    open_ = src.index("{", start)
    depth, i = 0, open_
    while True:
        depth += {"{": 1, "}": -1}.get(src[i], 0)
        if depth == 0:
            return src[open_ + 1:i]
        i += 1


def _ternaries(expr: str) -> str:
    return re.sub(r"(\w+) \? ([\w\[\]]+) : ([\w\[\]]+)", r"(\2 if \1 else \3)", expr)


def quad_transpose_from_source(words: list[list[int]]) -> list[list[int]]:
    """Runs quad_transpose's statements, as written in flash_fwd.cuh, on the 4 lanes of a quad in lock step (each
    __shfl_xor_sync reads the partner lane's value of its argument)."""
    body = _body(FWD, "void quad_transpose(uint32_t (&w)[4], int q)")
    stmts = [s.strip() for s in body.split(";") if s.strip()]
    lanes = [{"w": list(words[q]), "q": q} for q in range(4)]
    for st in stmts:
        m = re.fullmatch(r"const bool hi = \(q & 2\) != 0, odd = \(q & 1\) != 0", st)
        if m:
            for env in lanes:
                env["hi"], env["odd"] = bool(env["q"] & 2), bool(env["q"] & 1)
            continue
        m = re.fullmatch(r"(?:uint32_t )?(\w+) = __shfl_xor_sync\(0xffffffff, (.+), (\d)\)", st)
        if m:
            var, expr, mask = m.group(1), _ternaries(m.group(2)), int(m.group(3))
            sent = [eval(expr, {}, env) for env in lanes]  # noqa: S307 - our own source text
            for q, env in enumerate(lanes):
                env[var] = sent[q ^ mask]
            continue
        m = re.fullmatch(r"w\[(\d)\] = (.+)", st)
        assert m, f"quad_transpose: a statement this test does not model: {st!r}"
        i, expr = int(m.group(1)), _ternaries(m.group(2))
        vals = [eval(expr, {}, env) for env in lanes]  # noqa: S307
        for env, val in zip(lanes, vals):
            env["w"][i] = val
    return [env["w"] for env in lanes]


def test_quad_transpose_gives_each_lane_one_group_in_column_order():
    words = [[(lane, j) for j in range(4)] for lane in range(4)]
    out = quad_transpose_from_source(words)
    # lane q's word j is lane j's word q: columns 2j, 2j + 1 of group 4s + q, so the four words are 8 columns in order
    assert out == [[(j, q) for j in range(4)] for q in range(4)]


def test_quad_transpose_keeps_register_indices_constant():
    body = _body(FWD, "void quad_transpose(uint32_t (&w)[4], int q)")
    assert re.findall(r"w\[([^\]]*)\]", body) and all(x in "0123" for x in re.findall(r"w\[([^\]]*)\]", body))


def emulate_store(d_build: int, head_dim: int, seqlen_q: int, warp_row0: int) -> dict:
    """store_o_regs's index algebra for one warp: (row, column) -> the (lane, register) whose value lands there.
    The accumulator fragment (wgmma m64nN): lane holds rows lane/4 and +8, and o[4g + 2r + {0,1}] is row r's
    columns 8g + 2(lane%4) + {0,1}."""
    src = _body(FWD, "void store_o_regs(")
    # the source's addressing, pinned so that this emulation and the kernel cannot drift apart silently
    assert "const int row = warp_row0 + lane / 4 + 8 * r;" in src
    assert "tc.head * p.o_stride[2] + 8 * q;" in src
    assert "w[j] = ptx::pack2<kFp16>(o[4 * g + 2 * r] * inv[r], o[4 * g + 2 * r + 1] * inv[r]);" in src
    assert "const int g = 4 * set + j;" in src
    assert "if (row_in && 32 * set + 8 * q < p.head_dim)" in src
    assert "*reinterpret_cast<uint4*>(out + 32 * set) = make_uint4(w[0], w[1], w[2], w[3]);" in src
    written = {}
    for r in range(2):
        for s in range(d_build // 32):
            words = [[(lane_q, 4 * (4 * s + j) + 2 * r) for j in range(4)] for lane_q in range(4)]
            quads = quad_transpose_from_source(words)
            for lane in range(32):
                q = lane % 4
                row = warp_row0 + lane // 4 + 8 * r
                col0 = 32 * s + 8 * q
                if not (row < seqlen_q and col0 < head_dim):
                    continue
                for j, (src_q, reg) in enumerate(quads[q]):
                    src_lane = lane - q + src_q  # the quad's lane that held the word before the transpose
                    for e in range(2):
                        key = (row, col0 + 2 * j + e)
                        assert key not in written
                        written[key] = (src_lane, reg + e)
    return written


@pytest.mark.parametrize("head_dim,seqlen_q", [(256, 10_000), (200, 10_000), (256, 37)])
def test_store_mapping_puts_every_fragment_value_at_its_row_and_column(head_dim, seqlen_q):
    warp_row0 = 32
    got = emulate_store(256, head_dim, seqlen_q, warp_row0)
    want = {}
    for lane in range(32):
        for g in range(32):
            for r in range(2):
                for e in range(2):
                    row, col = warp_row0 + lane // 4 + 8 * r, 8 * g + 2 * (lane % 4) + e
                    if row < seqlen_q and col < head_dim:
                        want[(row, col)] = (lane, 4 * g + 2 * r + e)
    assert got == want


def test_variant_is_one_added_d256_kernel_off_by_default():
    launches = re.findall(r"launch<(\d+), 2, kD256N \+ vidattn::sm90::kOInVBuild \+ vidattn::sm90::kORegsBuild, "
                          r"(\w+)>", CAPI)
    assert launches == [("256", "false")]  # bf16, D=256 only
    assert CAPI.count("kORegsBuild") == 2  # that launch and the tail launch's stripped flag
    # the tail launch stores partials: it reuses the O-in-V build's split kernel, not one of its own
    # (and strips the Q-halves and read-late variants' flags too: tests/test_d256_q_halves.py, test_d256_o_read_late.py)
    assert ("kBN & ~kORegsBuild & ~kQHalvesBuild & ~kOReadLateBuild & ~kNarrowAllBuild & ~kPairBuild, kFp16, true>"
            in " ".join(CAPI.split()))  # the tail launch's split kernel: the O-in-V one
    # only setting 4 reaches it; bf16 136..192 is refused under 4, fp16 falls through to the wide builds
    m = re.search(r"if \(!fp16 && g_hd_narrow == 4\) \{\s*if \(a->head_dim <= 192\) return fail\(", CAPI)
    assert m
    assert re.search(r"int g_hd_narrow = 0;", CAPI)
    assert "g_last_o_path = T::kOReadLate ? 4 : T::kORegs ? 3 : T::kOInV ? 2 : T::kOInQ ? 1 : 0;" in CAPI
    # the flag bit sits above kOInVBuild's, and the width is still kBN % kOInVBuild
    o_in_v = int(re.search(r"constexpr int kOInVBuild = 1 << (\d+);", CFG).group(1))
    regs = int(re.search(r"constexpr int kORegsBuild = 1 << (\d+);", CFG).group(1))
    assert regs > o_in_v and (80 + (1 << o_in_v) + (1 << regs)) % (1 << o_in_v) == 80
    assert "static constexpr bool kORegs = (kBN & kORegsBuild) != 0;" in CFG


def test_producer_refills_v_without_waiting_for_o_in_the_variant():
    assert "if constexpr (T::kOInV && !T::kORegs && !kSplit) {" in FWD
    ep = FWD[FWD.index("} else if constexpr (T::kORegs) {"):FWD.index("} else if constexpr (T::kOInV) {")]
    assert "store_o_regs<kHeadDim, kFp16>(p, w.tc, row0, o, row_sum);" in ep
    assert "write_lse(" in ep
    code = "\n".join(line.split("//")[0] for line in ep.splitlines())
    assert "o_done" not in code and "v_empty" not in code and "tma_store" not in code


def test_new_params_are_appended_after_the_existing_ones():
    body = PARAMS[PARAMS.index("struct FwdParams {"):]
    tail = body[body.index("int causal_first_group;"):]
    for field in ("uint16_t* o;", "int64_t o_stride[3];", "int head_dim;"):
        assert field in tail
    assert "p.o = static_cast<uint16_t*>(a.o);" in CAPI and "p.head_dim = static_cast<int>(a.head_dim);" in CAPI


class FakeLib:
    def __init__(self, top: int):
        self.top, self.narrow = top, 0

    def vidattn_sm90_set_hd_narrow(self, v):
        if not 0 <= v <= self.top:
            return 1
        self.narrow = v
        return 0

    def vidattn_sm90_last_o_path(self):
        return 3 if self.narrow == 4 else 0


def test_setter_accepts_4_and_an_older_library_refuses_it():
    assert "if (narrow < 0 || narrow > 8) return 1;" in CAPI
    lib = FakeLib(4)
    with _ext.hd_narrow(4, lib):
        assert lib.narrow == 4 and _ext.last_o_path(lib) == 3
    assert lib.narrow == 0
    with pytest.raises(ValueError, match="4 \\(D=256 O from registers"):
        _ext.set_hd_narrow(4, FakeLib(3))
