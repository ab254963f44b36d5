"""The 8-bit pre-pass's K/V pass selector (csrc/sm90/q8_quant.cuh q8_kv2_kernel, quant8.set_kv_pass), without a GPU:
the Python selector against a faked library, and the C side as written (off by default, D=128 only, both dtypes)."""
from __future__ import annotations

from pathlib import Path

import pytest

from _support import check_q8_selector
from vidattn import quant8

REPO = Path(__file__).resolve().parent.parent
CAPI = (REPO / "csrc/capi_8bit.cuh").read_text()
QUANT = (REPO / "csrc/sm90/q8_quant.cuh").read_text()


def test_set_kv_pass_validates_reaches_the_library_and_needs_it():
    check_q8_selector("kv_pass", quant8.set_kv_pass, quant8.last_kv_pass, top=1)


def test_kv_pass_in_the_c_abi():
    """On by default since call N5 of the ninth sitting; the setter's range; the environment variable; the whole-row kernel at D=128 only (D=64 runs
    the per-key pass whatever is asked, and says so through last_kv_pass); the last launch's pass reset per call."""
    assert "#define VIDATTN_Q8_KV_PASS 1" in CAPI
    assert 'extern "C" int vidattn_q8_set_kv_pass(int mode)' in CAPI and "if (mode < -1 || mode > 1) return 1;" in CAPI
    assert 'env_default("VIDATTN_Q8_KV_PASS", VIDATTN_Q8_KV_PASS, 0, 1)' in CAPI
    assert "const int kv_pass = kD == 128 ? (g_q8_kv_pass < 0 ? env_kv_pass : g_q8_kv_pass) : 0;" in CAPI
    assert "g_q8_last_kv_pass = kv_pass;" in CAPI and "g_q8_last_kv_pass = -1;" in CAPI
    assert "q8_kv2_kernel<kFp16>\n          <<<" in CAPI


def test_whole_row_layout_covers_the_block_and_keeps_the_groups():
    """q8_kv2_kernel's layout as written: 8 warps x 16 keys = 128 (one key block); a lane's step st is key
    warp * 16 + 2 st + sub, whose scale group (key % 8 / 2) is st % 4, and its V byte goes where q8_vperm_pos puts it
    (byte 4 (st % 4) + sub + 2 (st / 4) of the group's 16)."""
    assert "constexpr int kQ8Kv2Threads = 256;" in QUANT and "constexpr int kD = 128, kSteps = 8;" in QUANT
    assert "const int key0 = blockIdx.x * kQ8BlockN + warp * 16 + sub;" in QUANT
    keys = sorted(w * 16 + 2 * st + sub for w in range(8) for st in range(8) for sub in range(2))
    assert keys == list(range(128))

    def vperm_pos(k):  # q8_quant.cuh q8_vperm_pos
        return 4 * ((k & 7) >> 1) + (k & 1) + 2 * (k >> 3)

    for st in range(8):
        for sub in range(2):
            k = 2 * st + sub
            assert (k % 8) // 2 == st % 4
            assert vperm_pos(k) == 4 * (st % 4) + sub + 2 * (st // 4)
    # the byte_perm selectors: even key's byte e into byte 0, odd key's into byte 1 (x = mine, y = the partner's)
    for e in range(4):
        for sub in range(2):
            sel = (e | (4 + e) << 4) if sub == 0 else ((4 + e) | e << 4)
            even_src = sel & 0xF
            assert even_src == (e if sub == 0 else 4 + e)  # sub 0 holds the even key: its own word (x)


def test_vt_tile_swizzle_is_a_bijection_and_conflict_free():
    """kv2's V^T tile (VIDATTN_Q8_KV2_SMEM_T): warp w's 16 keys of channel ch go to chunk w ^ ((ch / 8) % 8) of row ch,
    and thread i of the store reads chunk (i % 8) ^ ((ch / 8) % 8) of row ch = i / 8 for the global chunk i % 8, so
    what a thread stores is what warp i % 8 wrote. Rows are 128 bytes (8 chunks of 16), so a 16-byte access's banks
    are set by its chunk alone: the eight lanes of each quarter warp (one shared-memory wavefront of 16-byte accesses)
    must touch eight distinct chunks, on the write (lanes 8 channels apart) and on the read (one row's chunks)."""
    assert "vt_tile[ch][warp ^ ((ch / 8) % 8)] = make_uint4(" in QUANT
    assert "vt_tile[ch][chunk ^ ((ch / 8) % 8)];" in QUANT
    assert "#define VIDATTN_Q8_KV2_SMEM_T 1" in QUANT

    def phys(ch, chunk):
        return chunk ^ ((ch // 8) % 8)

    # Writes: lane's channels ch = (lane % 16) * 8 + 4 * (lane / 16) + e, chunk = warp.
    for warp in range(8):
        for e in range(4):
            for quarter in range(4):
                lanes = range(8 * quarter, 8 * quarter + 8)
                chans = [(ln % 16) * 8 + 4 * (ln // 16) + e for ln in lanes]
                assert len({phys(c, warp) for c in chans}) == 8
    # Reads: thread i -> (ch, chunk) = (i // 8, i % 8); each (ch, chunk) once, and each quarter warp one row's 8 chunks.
    seen = set()
    for r in range(4):
        for t in range(256):
            i = t + 256 * r
            seen.add((i // 8, i % 8))
        for q0 in range(0, 256, 8):
            assert len({phys((q0 + r * 256) // 8, (q0 + j) % 8) for j in range(8)}) == 8
    assert seen == {(c, k) for c in range(128) for k in range(8)}
    # Every (row, physical chunk) slot is written exactly once by the 8 warps x 128 channels.
    slots = [(ch, phys(ch, w)) for ch in range(128) for w in range(8)]
    assert len(set(slots)) == 128 * 8


@pytest.mark.parametrize("d", [64, 128])
def test_per_key_pass_k_tile_swizzle(d):
    """q8_kv_kernel's K' tile (VIDATTN_Q8_KV_K_SMEM): thread (key) k writes chunk c of its row at c ^ ((k / (8 / kC)) %
    kC), kC = D / 16 chunks a row; thread i of the copy-out reads row i / kC, chunk i % kC from the same place and
    stores it at byte 16 i of the block's contiguous K' rows. A bijection, and the eight 16-byte accesses of every
    quarter warp fall in eight distinct bank groups (16-byte units mod 8) on both sides."""
    assert "ktile[tid][c16 ^ ((tid / (8 / kC)) % kC)] = make_uint4(" in QUANT
    assert "ktile[row][c ^ ((row / (8 / kC)) % kC)];" in QUANT
    assert "#define VIDATTN_Q8_KV_K_SMEM 1" in QUANT
    kc = d // 16

    def slot(row, c):  # 16-byte units from the tile's start
        return row * kc + (c ^ ((row // (8 // kc)) % kc))

    for c16 in range(kc):  # writes: 128 threads, quarter warps of 8 consecutive keys, the same chunk
        for q0 in range(0, 128, 8):
            assert len({slot(k, c16) % 8 for k in range(q0, q0 + 8)}) == 8
    reads = {}
    for r in range(kc):  # reads: thread i -> (row, chunk) = divmod(i, kC)
        for q0 in range(0, 128, 8):
            groups = set()
            for t in range(q0, q0 + 8):
                i = t + r * 128
                row, c = divmod(i, kc)
                groups.add(slot(row, c) % 8)
                reads[i] = (row, c)
            assert len(groups) == 8
    assert sorted(reads.values()) == [(k, c) for k in range(128) for c in range(kc)]
    assert len({slot(k, c) for k in range(128) for c in range(kc)}) == 128 * kc
