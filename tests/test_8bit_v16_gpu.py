"""v16 (dev/NOTES_8bit.md "v16"): D=64's schedule 1 with four consumer warpgroups (quant8.set_d64_warpgroups(4)) on a
Hopper GPU. Built only into an experiment library (`-DVIDATTN_Q8_D64_WG4=1`, VIDATTN_LIBRARY pointing at it); in the
default build a forced 4 must be refused with a clear error, nothing launched (tested here too). In the experiment
build: the output and LSE are the three-warpgroup default's bit for bit (each row's arithmetic is the same, only the
rows a warpgroup holds change), on odd lengths, 1-3 tiles of 256 rows, kv_lens tails and a keyless row, fp16, the
BHSD layout; against fp64 within the 8-bit suite's bound; V = ones within the row-mass bound."""
from __future__ import annotations

import math

import pytest
import torch

pytestmark = pytest.mark.gpu
if not torch.cuda.is_available() or torch.cuda.get_device_capability()[0] != 9:
    pytest.skip("the 8-bit kernel needs an sm_90 (Hopper) GPU", allow_module_level=True)

import test_8bit_gpu as base  # noqa: E402
from vidattn import quant8  # noqa: E402

DEV = base.DEV


@pytest.fixture(autouse=True)
def eight_bit_kernel_at_every_length(monkeypatch):
    monkeypatch.setattr(quant8, "SHORT_KV_EXACT_MAX", 0)
    yield
    quant8.set_d64_warpgroups(0)


def run(wgs, q, k, v, kv_lens=None, layout_bhsd=False):
    quant8.set_d64_warpgroups(wgs)
    try:
        out = torch.full_like(q, float("nan"))
        b, h, s = (q.shape[0], q.shape[1], q.shape[2]) if layout_bhsd else (q.shape[0], q.shape[2], q.shape[1])
        lse = torch.full((b, h, s), float("nan"), device=DEV)
        if layout_bhsd:
            quant8.forward_8bit(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), out.transpose(1, 2), lse,
                                kv_lens, 1 / math.sqrt(q.shape[-1]))
        else:
            quant8.forward_8bit(q, k, v, out, lse, kv_lens, 1 / math.sqrt(q.shape[-1]))
        torch.cuda.synchronize()
        return out, lse, (quant8.last_warpgroups(), quant8.last_sequential(), quant8.last_cvt())
    finally:
        quant8.set_d64_warpgroups(0)
        quant8._launch_error = None


def v16_built():
    q, k, v = (base.randn(1, 300, 2, 64, seed=i) for i in range(3))
    try:
        run(4, q, k, v)
    except RuntimeError as exc:
        if "experiment builds only" in str(exc):
            return False
        raise
    return True


BUILT = v16_built()
needs_v16 = pytest.mark.skipif(not BUILT, reason="this library was built without v16 (-DVIDATTN_Q8_D64_WG4=1)")


def same_bits(a, b):
    return torch.equal(a.contiguous().view(torch.int16 if a.element_size() == 2 else torch.int32),
                       b.contiguous().view(torch.int16 if b.element_size() == 2 else torch.int32))


@pytest.mark.skipif(BUILT, reason="the experiment build runs v16")
def test_refused_in_the_default_build():
    base.assert_forced_launch_refused(64, "experiment builds only", seq=-1, mode=-1, wgs=4)


@needs_v16
@pytest.mark.parametrize("sq", [1, 255, 256, 257, 700])
@pytest.mark.parametrize("skv", [77, 128, 2049])
def test_four_warpgroups_bit_for_bit(sq, skv):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(2, n, 3, 64, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
    k = base.on_quarter_grid(k)
    a, la, ra = run(0, q, k, v)
    b, lb, rb = run(4, q, k, v)
    assert ra == (3, 1, 1) and rb == (4, 1, 1), (ra, rb)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed}"
    assert not torch.isnan(b).any()
    lens = torch.tensor([skv, max(1, skv // 3)], dtype=torch.int32, device=DEV)
    a, la, _ = run(0, q, k, v, kv_lens=lens)
    b, lb, _ = run(4, q, k, v, kv_lens=lens)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed} (kv_lens)"


@needs_v16
def test_fp16_bhsd_and_a_keyless_row():
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(3, n, 2, 64, seed=seed + i, dtype=torch.float16) for i, n in enumerate((600, 1000, 1000)))
    k = base.on_quarter_grid(k)
    qt, kt, vt = (x.transpose(1, 2).contiguous() for x in (q, k, v))
    a, la, _ = run(0, qt, kt, vt, layout_bhsd=True)
    b, lb, _ = run(4, qt, kt, vt, layout_bhsd=True)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed}"
    lens = torch.tensor([1000, 0, 129], dtype=torch.int32, device=DEV)
    a, la, _ = run(0, q, k, v, kv_lens=lens)
    b, lb, _ = run(4, q, k, v, kv_lens=lens)
    assert same_bits(a, b) and same_bits(la, lb), f"seed {seed} (a keyless batch)"


@needs_v16
@pytest.mark.parametrize("sq,skv", [(113, 113), (1023, 517), (4224, 4224), (300, 32760)])
def test_four_warpgroups_against_fp64(sq, skv):
    seed = int(torch.randint(0, 1 << 20, ()).item())
    q, k, v = (base.randn(1, n, 2, 64, seed=seed + i) for i, n in enumerate((sq, skv, skv)))
    quant8.set_d64_warpgroups(4)
    try:
        base.check(q, k, v, seed=seed, lse=True, bound=base.REL_L2_LOOSE)
        assert quant8.last_warpgroups() == 4
        base.assert_row_mass(vidattn_8bit(q, k, torch.ones_like(v)), q, k, seed=seed)
    finally:
        quant8.set_d64_warpgroups(0)


def vidattn_8bit(q, k, v):
    import vidattn

    return vidattn.attention(q, k, v, precision="8bit")
