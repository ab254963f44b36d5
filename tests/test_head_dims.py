"""Head dims on the CPU: which build each multiple of 8 up to 256 runs on (the D=64, 96, 128, 192 and 256 builds,
the others padded onto the next one up), what `kernel_build` and `explain` say, causal calls past D=128 on SDPA, and
the shared-memory and register arithmetic behind the new builds' tiles (csrc/sm90/tile_config.cuh), recomputed here
so that a changed tile size must change this test too. The kernel's own answers: tests/test_head_dims_gpu.py."""
from __future__ import annotations

import re
import warnings
from pathlib import Path

import pytest
import torch

import vidattn
from vidattn import _ext, ops

ROOT = Path(__file__).resolve().parent.parent
INSIDE = "no library in this test"


@pytest.fixture
def device_could_run(monkeypatch):
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: INSIDE)


def qkv(d, sq=5, skv=7, h=2, dtype=torch.bfloat16):
    g = torch.Generator().manual_seed(d)
    return tuple(torch.randn(1, s, h, d, generator=g).to(dtype) for s in (sq, skv, skv))


EXPECTED = {**{d: 64 for d in range(8, 65, 8)}, 72: 96, 80: 96, 88: 96, 96: 96, 104: 128, 112: 128, 120: 128,
            128: 128, **{d: 192 for d in range(136, 193, 8)}, **{d: 256 for d in range(200, 257, 8)}}


def test_every_multiple_of_8_up_to_256_runs_on_the_next_build_up():
    assert _ext.HEAD_DIMS == (64, 96, 128, 192, 256) and _ext.MAX_HEAD_DIM == 256
    assert {d: _ext.build_head_dim(d) for d in range(8, 257, 8)} == EXPECTED


@pytest.mark.parametrize("d", [0, 4, 100, 201, 264, 512])
def test_no_build_outside(d):
    assert _ext.build_head_dim(d) is None and _ext.build_description(d) is None


def test_d96_switch_puts_72_to_96_back_on_the_padded_d128_build():
    assert [_ext.build_head_dim(d, d96_build=False) for d in (64, 72, 88, 96, 104, 136)] == [64, 128, 128, 128, 128,
                                                                                             192]


def test_causal_builds_at_64_128_192_256():
    """72..96 run causal on the D=128 build (there is no causal D=96 build), the rest on the next build up."""
    for code in (_ext.CAUSAL_TOP_LEFT, _ext.CAUSAL_BOTTOM_RIGHT):
        assert [_ext.build_head_dim(d, code) for d in (8, 64, 72, 96, 128, 136, 192, 200, 256, 264)] == [
            64, 64, 128, 128, 128, 192, 192, 256, 256, None]


@pytest.mark.parametrize("d,words", [(96, "D=96 build"), (112, "D=112 on the D=128 build, columns zero-filled by TMA"),
                                     (72, "D=72 on the D=96 build, columns zero-filled by TMA"),
                                     (160, "D=160 on the D=192 build, columns zero-filled by TMA"),
                                     (192, "D=192 build"), (256, "D=256 build"),
                                     (200, "D=200 on the D=256 build, columns zero-filled by TMA")])
def test_build_description(d, words):
    assert _ext.build_description(d) == words


def test_kernel_build_names_the_build_when_the_kernel_runs(monkeypatch):
    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    monkeypatch.setattr(_ext, "load", lambda: None)  # no library: the Python mirror answers
    monkeypatch.setattr(_ext, "causal_reason", lambda causal, lib, head_dim=0: None)
    assert ops.kernel_build(*qkv(112)) == "D=112 on the D=128 build, columns zero-filled by TMA"
    assert ops.kernel_build(*qkv(256)) == "D=256 build"
    assert ops.kernel_build(*qkv(80, dtype=torch.float16)) == "D=80 on the D=96 build, columns zero-filled by TMA"
    assert ops.kernel_build(*qkv(264)) is None  # SDPA: explain says why
    assert ops.kernel_build(*qkv(64), causal=True) == "D=64 build"


def test_kernel_build_is_none_where_explain_gives_a_reason(device_could_run):
    assert ops.kernel_build(*qkv(96)) is None and vidattn.explain(*qkv(96)) == INSIDE


@pytest.mark.parametrize("d", [136, 192, 256])
def test_causal_past_128_on_an_older_library_runs_sdpa_and_says_why(monkeypatch, d):
    """A library built before the D=192/256 causal builds (no vidattn_sm90_causal_max_head_dim) keeps those calls on
    SDPA, and explain says so; the same call without the mask runs on the kernel."""

    class Older:
        @staticmethod
        def vidattn_sm90_causal_modes():
            return 2

    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    monkeypatch.setattr(_ext, "_lib", Older())
    reason = vidattn.explain(*qkv(d), causal=True)
    assert reason.startswith(f"causal masks run on this kernel library up to head dim 128 (head dim {d})")
    assert reason.endswith("(causal='top_left': SDPA runs it with the same mask)")
    assert vidattn.explain(*qkv(d)) is None


@pytest.mark.parametrize("d", [72, 96, 128, 136, 192, 200, 256])
def test_causal_up_to_256_runs_on_a_current_library(monkeypatch, d):
    class Current:
        @staticmethod
        def vidattn_sm90_causal_modes():
            return 2

        @staticmethod
        def vidattn_sm90_causal_max_head_dim():
            return 256

    monkeypatch.setattr(_ext, "device_reason", lambda device: None)
    monkeypatch.setattr(_ext, "runtime_reason", lambda: None)
    monkeypatch.setattr(_ext, "_lib", Current())
    assert vidattn.explain(*qkv(d), causal=True) is None
    assert _ext.build_head_dim(d, _ext.CAUSAL_TOP_LEFT) == next(b for b in (128, 192, 256) if b >= d)


def test_wide_heads_outside_the_kernel_match_sdpa_on_cpu():
    """On the CPU (SDPA fallback) D=160 and 256 answer as SDPA does, LSE included."""
    for d in (160, 256):
        q, k, v = (t.float() for t in qkv(d, sq=9, skv=11))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the once-per-reason fallback warning
            out, lse = vidattn.attention(q, k, v, return_lse=True)
        ref = torch.nn.functional.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
        torch.testing.assert_close(out, ref.transpose(1, 2), atol=1e-5, rtol=1e-5)
        s = torch.einsum("bqhd,bkhd->bhqk", q.double(), k.double()) / d ** 0.5
        torch.testing.assert_close(lse.double(), torch.logsumexp(s, -1), atol=1e-4, rtol=1e-5)


# ---- the tile arithmetic of csrc/sm90/tile_config.cuh, recomputed ------------------------------------------------

SMEM_BUDGET = 227 * 1024
O_SCRATCH = 2 * 4 * 16 * 64 * 2  # two consumer warpgroups, 4 warps, a 16 x 64 box of 16-bit O each


def _macro(name: str) -> int:
    text = (ROOT / "csrc/sm90/tile_config.cuh").read_text()
    return int(re.search(rf"#define {name} (\d+)", text).group(1))


def stages_fit(d: int, n: int, scratch: bool = True) -> int:
    """K/V stages beside one Q buffer, with the separate O scratch or (scratch=False: the wide D=192/256 builds,
    FwdTraits::kOInQ) with O's boxes in Q's buffer."""
    pad = -(-d // 64) * 64
    q = 128 * pad * 2
    return (SMEM_BUDGET - 2048 - (O_SCRATCH if scratch else 0) - q) // (2 * n * pad * 2)


@pytest.mark.parametrize("d,macro,scratch", [(96, "VIDATTN_BLOCK_N_D96", True), (192, "VIDATTN_BLOCK_N_D192", False),
                                             (256, "VIDATTN_BLOCK_N_D256", False),
                                             (192, "VIDATTN_BLOCK_N_D192_NARROW", True),
                                             (256, "VIDATTN_BLOCK_N_D256_NARROW", True)])
def test_new_builds_take_the_widest_key_block_that_leaves_two_stages(d, macro, scratch):
    n = _macro(macro)
    assert n % 16 == 0 and stages_fit(d, n, scratch) >= 2 and stages_fit(d, n + 16, scratch) < 2
    if not scratch:  # the wide width exists because the scratch would leave fewer than two stages
        assert stages_fit(d, n, True) < 2
    # S (N/2) + P (N/4) + O (D/2) fp32/packed registers per consumer thread, within the 240 of setmaxnreg with room
    # for addresses, row statistics and the loop (D=128 at N=176 holds 196 of them and compiles to 234)
    assert n // 2 + n // 4 + d // 2 <= 196
