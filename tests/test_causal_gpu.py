"""Causal masks in the exact kernel on a Hopper GPU: top-left (query i sees keys j <= i, SDPA's is_causal) and
bottom-right (j <= i + kv_len - Sq) alignment, with kv_lens, LSE, both layouts, strided views, grouped K/V, head dims
64, 128 and a padded 96, bf16 and fp16.

Method as tests/test_envelope_gpu.py: fresh random inputs (the seed is in every failure message), float64 attention
on the upcast inputs with the same mask as the reference, and the kernel's error at most a multiple of cuDNN SDPA's
(SDPA's default backend where cuDNN refuses the mask) on the same inputs. Outputs go into NaN-poisoned buffers
wider than the head dim, so a row the kernel skips (a query tile whose key blocks are all past its diagonal) or a
padded column written past D fails. Rows that see no key (bottom-right with fewer keys than queries) must come out
as exact zeros with an LSE of -inf. Every case asserts that the causal kernel ran (explain is None, no tail
launch), and the long cases run several tiles per CTA, so the causal tile schedule (a counter in the workspace,
heaviest Q block first across groups of heads: csrc/sm90/flash_fwd.cuh, next_causal_tile; the static order without
a workspace) and the fixed-reference redo over it are covered; the tests at the end aim at the schedule itself."""
from __future__ import annotations

import contextlib
import math
import sys
import warnings
from pathlib import Path

import pytest
import torch


from conftest import hopper_skip_reason

pytestmark = pytest.mark.gpu
if hopper_skip_reason() is not None:
    pytest.skip(hopper_skip_reason(), allow_module_level=True)

import torch.nn.functional as F  # noqa: E402
from torch.nn.attention import SDPBackend, sdpa_kernel  # noqa: E402

import vidattn  # noqa: E402
from vidattn import _ext, ops  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.accuracy import fa_atol, shape_scores  # noqa: E402

DEV = "cuda"
K_ERR, K_ERR_MAX_ABS, FLOOR, REL_L2_CAP, LSE_ATOL = 1.5, 2.0, 1e-5, 2e-2, 1e-2
CODES = {"top_left": _ext.CAUSAL_TOP_LEFT, "bottom_right": _ext.CAUSAL_BOTTOM_RIGHT}


@pytest.fixture(autouse=True)
def causal_kernel_on():
    """Whatever VIDATTN_CAUSAL_KERNEL says, these tests run the causal kernel (one test turns it off itself)."""
    was = _ext.causal_kernel_enabled
    _ext.causal_kernel_enabled = True
    yield
    _ext.causal_kernel_enabled = was


def new_gen():
    g = torch.Generator(device=DEV)
    return g, g.seed()


def bshd_inputs(b, hq, hkv, sq, skv, d, g, dtype=torch.bfloat16, shift=False):
    def r(s, h):
        x = torch.randn(b, s, h, d, device=DEV, generator=g)
        return (x + 0.5 if shift else x).to(dtype)

    return r(sq, hq), r(skv, hkv), r(skv, hkv)


def as_layout(t, layout):
    return t if layout == "bshd" else t.transpose(1, 2).contiguous()


def keep_mask(mode, b, sq, skv, kv_lens):
    """(B, 1, Sq, Skv) boolean, True where query i sees key j, written out independently of vidattn.ops: keys below
    kv_len first, then j <= i + shift (0, or kv_len - Sq for bottom-right)."""
    kvl = (torch.full((b,), skv, device=DEV) if kv_lens is None else kv_lens.to(DEV)).long()[:, None, None]
    i = torch.arange(sq, device=DEV)[None, :, None]
    j = torch.arange(skv, device=DEV)[None, None, :]
    shift = kvl - sq if mode == "bottom_right" else torch.zeros_like(kvl)
    return ((j < kvl) & (j <= i + shift))[:, None]


def reference(q, k, v, scale, mask):
    """float64 attention on BSHD inputs (K/V repeated per group) under `mask`: (out BSHD, lse (B, H, Sq)); rows
    without a key: out 0, lse -inf."""
    g = q.shape[2] // k.shape[2]
    qb, kb, vb = (t.transpose(1, 2).double() for t in (q, k, v))
    kb, vb = kb.repeat_interleave(g, dim=1), vb.repeat_interleave(g, dim=1)
    outs, lses = [], []
    for h in range(qb.shape[1]):  # one head at a time: 4097^2 fp64 scores per batch element and head
        s = (qb[:, h:h + 1] @ kb[:, h:h + 1].transpose(-1, -2) * scale).masked_fill(~mask, float("-inf"))
        lse = torch.logsumexp(s, -1)
        p = torch.exp(s - lse[..., None].clamp_min(-1e300)).nan_to_num(0.0)
        outs.append(p @ vb[:, h:h + 1])
        lses.append(lse)
    return torch.cat(outs, 1).transpose(1, 2), torch.cat(lses, 1)


def cudnn(q, k, v, scale, mask, mode, kv_lens):
    """Same-precision baseline on BSHD inputs (K/V expanded per group): cuDNN SDPA (is_causal where the lengths are
    equal and there is no kv_lens, else the explicit mask), SDPA's default backend where cuDNN refuses; rows without a
    key set to 0."""
    g = q.shape[2] // k.shape[2]
    qb, kb, vb = (t.transpose(1, 2) for t in (q, k, v))
    kb, vb = kb.repeat_interleave(g, dim=1), vb.repeat_interleave(g, dim=1)
    plain = kv_lens is None and q.shape[1] == k.shape[1]
    kw = dict(is_causal=True) if plain else dict(attn_mask=mask)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                o = F.scaled_dot_product_attention(qb, kb, vb, scale=scale, **kw)
        except RuntimeError:
            o = F.scaled_dot_product_attention(qb, kb, vb, scale=scale, **kw)
    o = torch.where(mask.any(-1, keepdim=True), o, o.new_zeros(()))
    return o.transpose(1, 2)


def assert_accurate(out, ref, base, what):
    assert out.shape == ref.shape, f"{what}: shape {tuple(out.shape)} != {tuple(ref.shape)}"
    assert torch.isfinite(out).all(), f"{what}: non-finite values in the output (a row left unwritten?)"
    k_abs = (out.double() - ref).abs().max().item()
    s_abs = (base.double() - ref).abs().max().item()
    norm = ref.norm().clamp_min(1e-300)
    k_rel, s_rel = ((out.double() - ref).norm() / norm).item(), ((base.double() - ref).norm() / norm).item()
    atol = fa_atol(ref, out.dtype)
    msg = f"{what}: kernel max|err| {k_abs:.3e} rel-L2 {k_rel:.3e}; cuDNN max|err| {s_abs:.3e} rel-L2 {s_rel:.3e}"
    assert k_abs <= K_ERR_MAX_ABS * s_abs + atol + FLOOR, msg
    assert k_rel <= K_ERR * s_rel + FLOOR and k_rel <= REL_L2_CAP, msg


def assert_lse(lse, ref_lse, what):
    empty = torch.isneginf(ref_lse)
    assert torch.equal(torch.isneginf(lse), empty), f"{what}: LSE -inf where a row sees no key, and only there"
    err = (lse.double() - ref_lse)[~empty].abs().max().item() if (~empty).any() else 0.0
    assert err < LSE_ATOL, f"{what}: LSE max|err| {err:.3e}"


def run_poisoned(q, k, v, layout, mode, kv_lens=None, pad=24):
    """The kernel through _ext.forward into a NaN-filled buffer `pad` columns wider than D, in the caller's layout,
    and a NaN-filled LSE: (out BSHD view, the padding columns, lse)."""
    qv, kv, vv = (t if layout == "bshd" else t.transpose(1, 2) for t in (q, k, v))
    b, sq, h, d = qv.shape
    shape = (b, sq, h, d + pad) if layout == "bshd" else (b, h, sq, d + pad)
    buf = torch.full(shape, float("nan"), dtype=q.dtype, device=DEV)
    out = buf[..., :d] if layout == "bshd" else buf[..., :d].transpose(1, 2)
    lse = torch.full((b, h, sq), float("nan"), dtype=torch.float32, device=DEV)
    scale = 1.0 / math.sqrt(d)
    assert _ext.kernel_reason(qv, kv, vv, kv_lens, scale, CODES[mode]) is None
    _ext.forward(qv, kv, vv, out, lse, kv_lens, scale, causal=CODES[mode])
    assert _ext.last_tail_splits() == 0, "causal launches have no tail launch"
    return out, buf[..., d:], lse


def check(q, k, v, mode, what, layout="bshd", kv_lens=None):
    """q, k, v: BSHD. The public op and a poisoned launch in `layout`, against fp64 and cuDNN under the mask."""
    b, sq, _, d = q.shape
    skv = k.shape[1]
    what = f"{what} causal={mode}"
    ql, kl, vl = (as_layout(t, layout) for t in (q, k, v))
    assert vidattn.explain(ql, kl, vl, layout=layout, kv_lens=kv_lens, causal=mode) is None, what
    scale = 1.0 / math.sqrt(d)
    mask = keep_mask(mode, b, sq, skv, kv_lens)
    ref, ref_lse = reference(q, k, v, scale, mask)
    base = cudnn(q, k, v, scale, mask, mode, kv_lens)
    out, lse = vidattn.attention(ql, kl, vl, layout=layout, kv_lens=kv_lens, return_lse=True, causal=mode)
    out = out if layout == "bshd" else out.transpose(1, 2)
    assert_accurate(out, ref, base, what)
    assert_lse(lse, ref_lse, what)
    empty = ~mask.any(-1)[:, 0]  # (B, Sq)
    if empty.any():
        assert (out.transpose(1, 2)[empty[:, None].expand(-1, q.shape[2], -1)] == 0).all(), \
            f"{what}: rows without keys must be exact zeros"
    pout, pad_cols, plse = run_poisoned(ql, kl, vl, layout, mode, kv_lens)
    assert torch.isnan(pad_cols).all(), f"{what}: the kernel wrote past the head dim"
    assert torch.equal(pout, out), f"{what}: the poisoned launch differs from the op's"
    assert torch.equal(torch.isnan(plse), torch.zeros_like(plse, dtype=torch.bool)), f"{what}: LSE rows unwritten"
    assert_lse(plse, ref_lse, what + " (poisoned)")
    return out


MODES = ("top_left", "bottom_right")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("n", [1, 127, 1000, 4097])
@pytest.mark.parametrize("d", [64, 128, 96, 160, 192, 200, 256], ids=lambda d: f"d{d}")
def test_square(d, n, mode):
    """Sq = Skv: both alignments are the same mask (and both run the kernel)."""
    g, seed = new_gen()
    b, h = (2, 8) if n >= 4096 else (2, 3)
    q, k, v = bshd_inputs(b, h, h, n, n, d, g, shift=n == 127)
    check(q, k, v, mode, f"D={d} {n}x{n} seed={seed}")


@pytest.mark.parametrize("layout", ["bshd", "bhsd"])
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sq,skv", [(127, 1000), (1000, 127), (113, 4097), (4097, 1000), (1, 777), (777, 1)],
                         ids=lambda x: str(x))
@pytest.mark.parametrize("d", [64, 128, 192, 256], ids=lambda d: f"d{d}")
def test_lengths_differ(d, sq, skv, mode, layout):
    """Sq != Skv: top-left leaves the keys past Sq unseen (Sq < Skv), bottom-right leaves the first Sq - Skv
    queries without keys (Sq > Skv: zeros, LSE -inf)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, sq, skv, d, g)
    check(q, k, v, mode, f"D={d} {sq}x{skv} {layout} seed={seed}", layout)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sq,skv,lens", [(1000, 1000, (1000, 517)), (1000, 1000, (1, 999)),
                                         (300, 2000, (2000, 150)), (2000, 300, (300, 7))], ids=lambda x: str(x))
@pytest.mark.parametrize("d", [64, 128, 192, 256], ids=lambda d: f"d{d}")
def test_kv_lens(d, sq, skv, lens, mode):
    """kv_lens cut the keys first, then the mask aligns to them: bottom-right's diagonal moves with each batch's
    kv_len (a batch of 7 keys under 2000 queries has 1993 rows without keys)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 3, 3, sq, skv, d, g)
    kv_lens = torch.tensor(lens, dtype=torch.int32, device=DEV)
    check(q, k, v, mode, f"D={d} {sq}x{skv} kv_lens={lens} seed={seed}", "bshd", kv_lens)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("hq,hkv,d", [(32, 8, 128), (8, 1, 64), (6, 2, 96), (6, 3, 192), (8, 2, 256)],
                         ids=lambda x: str(x))
def test_grouped_query(hq, hkv, d, mode):
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, hq, hkv, 1500, 1800, d, g, shift=True)
    check(q, k, v, mode, f"GQA {hq}q/{hkv}kv D={d} seed={seed}")
    kv_lens = torch.tensor([1200], dtype=torch.int32, device=DEV)
    check(q, k, v, mode, f"GQA {hq}q/{hkv}kv D={d} kv_lens seed={seed}", "bhsd", kv_lens)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d", [64, 128, 192, 256])
def test_strided_views(d, mode):
    """q, k, v as slices of one packed (B, S, 3, H, D) projection."""
    g, seed = new_gen()
    qkv = torch.randn(2, 1023, 3, 3, d, device=DEV, generator=g).to(torch.bfloat16)
    q, k, v = qkv.unbind(2)
    check(q, k, v, mode, f"D={d} strided seed={seed}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sq,skv", [(1000, 1000), (4097, 1000), (1000, 4097)], ids=lambda x: str(x))
@pytest.mark.parametrize("d", [64, 128, 96, 192, 256], ids=lambda d: f"d{d}")
def test_fp16(d, sq, skv, mode):
    """fp16 runs the exact online softmax throughout (no fixed reference): its first-block guard for rows without
    keys is the one that keeps them from NaN."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 4, 4, sq, skv, d, g, dtype=torch.float16)
    check(q, k, v, mode, f"fp16 D={d} {sq}x{skv} seed={seed}")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("d", [64, 128, 192, 256])
def test_many_rounds_and_redo(d, mode):
    """More tiles than SMs, so each CTA runs several rounds in the causal order (odd rounds reversed), and a key
    that outscores the first block by ~500 log2 units in one head, so its tiles (those whose rows see it) overflow
    the fixed reference and run again with the exact softmax over that same order."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 8, 8, 4097, 4097, d, g, shift=True)
    shape_scores(q, k, "spike", heads=[3])
    check(q, k, v, mode, f"D={d} 2x8x4097 spike seed={seed}")


def test_causal_rows_match_the_non_causal_kernel_on_their_prefix():
    """Row i of a top-left causal call equals the non-causal kernel on keys [0, i] (kv_lens = i + 1), to the
    rounding of two launches with different block orders (compared to fp64 both)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 2, 2, 700, 700, 128, g)
    out = vidattn.attention(q, k, v, causal=True)
    for i in (0, 1, 127, 128, 175, 176, 383, 699):
        ref = vidattn.attention(q[:, i:i + 1], k[:, :i + 1], v[:, :i + 1])
        err = (out[:, i:i + 1].float() - ref.float()).abs().max().item()
        assert err < 2e-2, f"row {i}: {err:.3e} seed={seed}"


def test_true_is_top_left_and_block_widths():
    """causal=True is top-left (SDPA's is_causal); D=128 causal runs the N=128 build, whatever the key count."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 2, 2, 300, 5000, 128, g)
    a = vidattn.attention(q, k, v, causal=True)
    assert _ext.last_block_n() == 128
    b = vidattn.attention(q, k, v, causal="top_left")
    assert torch.equal(a, b), f"seed={seed}"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("sq,skv", [(600, 400), (400, 600)], ids=lambda x: str(x))
def test_switched_off_runs_sdpa_with_the_same_mask(sq, skv, mode):
    """VIDATTN_CAUSAL_KERNEL=0 (here the module flag it sets): causal calls run SDPA, explain says so, and the answer
    is still the masked one (top-left through SDPA's is_causal, bottom-right through an explicit mask, zero rows)."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 2, 2, sq, skv, 64, g)
    _ext.causal_kernel_enabled = False
    why = vidattn.explain(q, k, v, causal=mode)
    assert why is not None and "VIDATTN_CAUSAL_KERNEL=0" in why and mode in why
    mask = keep_mask(mode, 1, sq, skv, None)
    ref, ref_lse = reference(q, k, v, 1 / 8, mask)
    ops._warned.clear()  # the fallback warns once per reason and process
    with pytest.warns(ops.VidattnFallbackWarning):
        out, lse = vidattn.attention(q, k, v, causal=mode, return_lse=True)
    assert torch.isfinite(out).all(), f"seed={seed}"
    if mode == "bottom_right" and sq > skv:
        assert (out[:, :sq - skv] == 0).all(), f"seed={seed}"
    assert (out.double() - ref).abs().max().item() < 2e-2, f"seed={seed}"
    assert_lse(lse, ref_lse, f"fallback seed={seed}")


def test_8bit_precision_runs_causal_exact():
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 2, 2, 9000, 9000, 128, g)
    why = vidattn.explain(q, k, v, causal=True, precision="8bit")
    assert why is not None and "no causal mask" in why and "exact kernel runs" in why
    exact = vidattn.attention(q, k, v, causal=True)
    assert torch.equal(vidattn.attention(q, k, v, causal=True, precision="8bit"), exact), f"seed={seed}"


def test_compiled_call():
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 4, 4, 1000, 1300, 128, g)
    fn = torch.compile(lambda a, b, c: vidattn.attention(a, b, c, causal="bottom_right"), fullgraph=True)
    assert torch.equal(fn(q, k, v), vidattn.attention(q, k, v, causal="bottom_right")), f"seed={seed}"


def test_c_abi_refuses_an_unknown_mode():
    g, _ = new_gen()
    q, k, v = bshd_inputs(1, 2, 2, 64, 64, 64, g)
    with pytest.raises(_ext.KernelLaunchError, match="causal must be 0"):
        _ext.forward(q, k, v, torch.empty_like(q), None, None, 0.125, lib=_ext.load(), causal=3)
    assert _ext.runtime_reason() is None


# ---- the dynamic tile schedule (csrc/sm90/flash_fwd.cuh, next_causal_tile; capi.cu picks the head groups) ----------
# With the workspace, the CTAs take tiles from a counter in it, heaviest Q block first across groups of heads; the
# counter is tagged per launch and reset by the last CTA out. A tile skipped leaves NaN in the poisoned output, a
# tile of the wrong head or block a wrong value; both fail `check`.


@pytest.fixture
def dynamic_everywhere():
    """Short problems keep the static order by default (capi.cu, VIDATTN_CAUSAL_DYNAMIC_MIN_SQ); the schedule
    tests below run the dynamic schedule at every length, so its small grids and short groups stay covered."""
    lib = _ext.load()
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq(0) == 0
    yield lib
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq(-1) == 0


@contextlib.contextmanager
def imbalance_rule_off(lib):
    """The static-imbalance rule off (capi.cu, causal_static_imbalance) inside the block, so that the length threshold
    alone picks the schedule; the shipped value back after it."""
    assert lib.vidattn_sm90_set_causal_static_imbalance_max(0) == 0
    try:
        yield
    finally:
        assert lib.vidattn_sm90_set_causal_static_imbalance_max(-1) == 0


def schedule_of(lib, q, k, v, mode, use_workspace, monkeypatch):
    """The output and which schedule ran (1: dynamic), with or without the workspace."""
    real = _ext.workspace
    monkeypatch.setattr(_ext, "workspace", real if use_workspace else (lambda lib_, device: None))
    try:
        out = vidattn.attention(q, k, v, causal=mode)
        torch.cuda.synchronize()
        return out, lib.vidattn_sm90_last_causal_dynamic()
    finally:
        monkeypatch.setattr(_ext, "workspace", real)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("b,h,sq,d", [(4, 16, 1024, 128), (8, 32, 1024, 64), (4, 16, 2048, 128), (2, 32, 4096, 64),
                                      (2, 5, 1500, 128)], ids=lambda x: str(x))
def test_short_problems_dynamic_equals_static(b, h, sq, d, mode, dynamic_everywhere, monkeypatch):
    """The crossover shapes (dev/probes/causal_sched_ab.py --sweep crossover): forced dynamic, static (no workspace)
    and the default routing give the same bits (a tile's arithmetic does not depend on the CTA that runs it), and
    the routing takes the schedule its threshold says."""
    lib = dynamic_everywhere
    g, seed = new_gen()
    q, k, v = bshd_inputs(b, h, h, sq, sq, d, g)
    what = f"{b}x{h}x{sq} D={d} {mode} seed={seed}"
    dyn, ran_dyn = schedule_of(lib, q, k, v, mode, True, monkeypatch)
    stat, ran_stat = schedule_of(lib, q, k, v, mode, False, monkeypatch)
    assert (ran_dyn, ran_stat) == (1, 0), what
    assert torch.equal(dyn, stat), what
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq(-1) == 0
    default_min = lib.vidattn_sm90_causal_dynamic_min_sq_for(d)
    auto, ran_auto = schedule_of(lib, q, k, v, mode, True, monkeypatch)
    # Under the length threshold the static order's imbalance may still take the dynamic schedule (the rule has a
    # test of its own below, test_static_imbalance_rule_routes_unbalanced_short_problems).
    unbalanced = lib.vidattn_sm90_last_causal_static_imbalance() > lib.vidattn_sm90_causal_static_imbalance_max() > 0
    assert ran_auto == (1 if sq >= default_min or unbalanced else 0), (what, default_min)
    assert torch.equal(auto, dyn), what
    with imbalance_rule_off(lib):  # the length threshold alone
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq(sq + 1) == 0
        assert schedule_of(lib, q, k, v, mode, True, monkeypatch)[1] == 0, what
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq(sq) == 0
        assert schedule_of(lib, q, k, v, mode, True, monkeypatch)[1] == 1, what
    if b * h * sq * sq <= 1 << 26:  # the float64 reference of the larger shapes would take GBs
        check(q, k, v, mode, what)


def test_dynamic_min_sq_setter_refuses_bad_values():
    lib = _ext.load()
    dims = (64, 128, 192, 256)
    before = {d: lib.vidattn_sm90_causal_dynamic_min_sq_for(d) for d in dims}
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq(-2) == 1
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(64, -2) == 1
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(0, 100) == 1  # no causal build runs these head dims
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(257, 100) == 1
    assert lib.vidattn_sm90_causal_dynamic_min_sq_for(257) == -1
    assert {d: lib.vidattn_sm90_causal_dynamic_min_sq_for(d) for d in dims} == before
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq(-1) == 0
    assert {d: lib.vidattn_sm90_causal_dynamic_min_sq_for(d) for d in dims} == before  # the build's defaults


def test_one_threshold_per_causal_build(monkeypatch):
    """Each head dim takes the threshold of the build it runs on: up to 64 the D=64 build's, 65-128 the D=128
    build's, 129-192 and 193-256 D=192's and D=256's; setting one leaves the others. (The imbalance rule off: 2 heads
    of 1000 rows would take the dynamic schedule below any length threshold.)"""
    lib = _ext.load()
    g, seed = new_gen()
    defaults = {d: lib.vidattn_sm90_causal_dynamic_min_sq_for(d) for d in (64, 128)}
    try:
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(64, 500) == 0
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(128, 5000) == 0
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(192, 500) == 0
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(256, 5000) == 0
        assert lib.vidattn_sm90_causal_dynamic_min_sq_for(40) == 500
        assert lib.vidattn_sm90_causal_dynamic_min_sq_for(72) == 5000
        assert lib.vidattn_sm90_causal_dynamic_min_sq_for(136) == 500
        assert lib.vidattn_sm90_causal_dynamic_min_sq_for(200) == 5000
        for d, want in ((32, 1), (64, 1), (96, 0), (128, 0), (160, 1), (192, 1), (224, 0), (256, 0)):
            q, k, v = bshd_inputs(1, 2, 2, 1000, 1000, d, g)
            with imbalance_rule_off(lib):
                _, ran = schedule_of(lib, q, k, v, "top_left", True, monkeypatch)
            assert ran == want, (d, seed)
            check(q, k, v, "top_left", f"D={d} seed={seed}")
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq_for(64, -1) == 0
        assert lib.vidattn_sm90_causal_dynamic_min_sq_for(64) == defaults[64]
        assert lib.vidattn_sm90_causal_dynamic_min_sq_for(128) == 5000
    finally:
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq(-1) == 0


@pytest.mark.usefixtures("dynamic_everywhere")
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("b,h,sq,skv,d", [
    (1, 40, 4097, 4097, 128),   # many heads: more tiles than SMs in groups whose last one is short
    (3, 7, 2049, 2049, 64),     # batch > 1, an odd head count, three warpgroups (192-row tiles)
    (2, 5, 1000, 3001, 128),    # Sq < Skv
    (2, 5, 3001, 1000, 128),    # Sq > Skv: bottom-right leaves rows without keys
    (1, 1, 131, 131, 128),      # fewer tiles than SMs: a grid of 2 CTAs
    (1, 24, 4097, 4097, 192),   # the one-Q-buffer builds: D=192 and D=256 (N=96 and 64)
    (2, 5, 3001, 1000, 256),
], ids=lambda x: str(x))
def test_dynamic_schedule_every_tile_once(b, h, sq, skv, d, mode):
    g, seed = new_gen()
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g)
    check(q, k, v, mode, f"dynamic schedule {b}x{h}x{sq}x{skv} D={d} seed={seed}")


@pytest.mark.parametrize("fill", ["zeros", "ones", "random", "none"])
@pytest.mark.usefixtures("dynamic_everywhere")
def test_any_workspace_contents(fill, monkeypatch):
    """The counters live in a workspace of any contents (the caching allocator's): zeros, all ones, random bytes;
    and with no workspace at all the static order runs. Back-to-back calls on one stream then each start from the
    last CTA's reset."""
    real = _ext.workspace

    def workspace(lib, device):
        ws = real(lib, device)
        if ws is None or fill == "none":
            return None
        if fill == "zeros":
            ws.zero_()
        elif fill == "ones":
            ws.fill_(255)
        else:
            ws.copy_(torch.randint(0, 256, ws.shape, dtype=torch.uint8, device=ws.device))
        return ws

    monkeypatch.setattr(_ext, "workspace", workspace)
    g, seed = new_gen()
    for trial, (h, sq) in enumerate([(16, 4097), (3, 1500), (16, 4097)]):
        q, k, v = bshd_inputs(1, h, h, sq, sq, 128, g)
        check(q, k, v, "top_left", f"workspace {fill} call {trial} seed={seed}")


@pytest.mark.usefixtures("dynamic_everywhere")
def test_one_workspace_many_launches():
    """The same workspace block for many launches in a row (the caching allocator hands the freed block back at
    once): each launch must find its counters usable after the previous one's reset, including launches of other
    shapes and grids in between."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(2, 12, 12, 3000, 3000, 128, g)
    q2, k2, v2 = bshd_inputs(1, 1, 1, 200, 200, 64, g)
    first = vidattn.attention(q, k, v, causal=True)
    small = vidattn.attention(q2, k2, v2, causal=True)
    for i in range(20):
        assert torch.equal(vidattn.attention(q, k, v, causal=True), first), f"launch {i} seed={seed}"
        assert torch.equal(vidattn.attention(q2, k2, v2, causal=True), small), f"launch {i} seed={seed}"
    check(q, k, v, "top_left", f"after 40 launches seed={seed}")


@pytest.mark.usefixtures("dynamic_everywhere")
@pytest.mark.parametrize("mode", MODES)
def test_cuda_graph_capture_replay(mode):
    """A captured causal call replays right: the launch's epoch is baked into the graph, and each replay finds the
    counters its previous run reset (the graph's workspace block is its own)."""
    g, seed = new_gen()
    b, h, sq, skv, d = 2, 16, 2049, 3000, 128
    q, k, v = bshd_inputs(b, h, h, sq, skv, d, g)
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(2):
            vidattn.attention(q, k, v, causal=mode, return_lse=True)
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        static_out, static_lse = vidattn.attention(q, k, v, causal=mode, return_lse=True)
    for trial in range(3):
        q2, k2, v2 = bshd_inputs(b, h, h, sq, skv, d, g)
        for dst, src in ((q, q2), (k, k2), (v, v2)):
            dst.copy_(src)
        graph.replay()
        eager_out, eager_lse = vidattn.attention(q, k, v, causal=mode, return_lse=True)  # between two replays
        torch.cuda.synchronize()
        what = f"graph replay {trial} causal={mode} seed={seed}"
        assert torch.isfinite(static_out).all(), what
        assert torch.equal(static_out, eager_out) and torch.equal(static_lse, eager_lse), what
    check(q, k, v, mode, f"graph inputs causal={mode} seed={seed}")


@pytest.mark.usefixtures("dynamic_everywhere")
def test_two_streams_at_once():
    """Two causal launches running at once on two streams: each call has its own workspace block (and epoch), so
    neither takes the other's tiles."""
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 16, 16, 4097, 4097, 128, g)
    q2, k2, v2 = bshd_inputs(2, 8, 8, 3000, 3000, 64, g)
    want, want2 = vidattn.attention(q, k, v, causal=True), vidattn.attention(q2, k2, v2, causal=True)
    s1, s2 = torch.cuda.Stream(), torch.cuda.Stream()
    outs = []
    for s in (s1, s2):
        s.wait_stream(torch.cuda.current_stream())
    for _ in range(5):
        with torch.cuda.stream(s1):
            a = vidattn.attention(q, k, v, causal=True)
        with torch.cuda.stream(s2):
            b = vidattn.attention(q2, k2, v2, causal=True)
        outs.append((a, b))
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(outs):
        assert torch.equal(a, want) and torch.equal(b, want2), f"pair {i} seed={seed}"


# ---- the short head group first (capi.cu, VIDATTN_CAUSAL_GROUPING; vidattn_sm90_set_causal_grouping) -------------
# Where the L2 budget's head groups do not divide batch x heads, grouping 1 opens the tile list with the short group
# instead of closing it with it (flash_fwd.cuh, tile_coord: causal_first_group). Every shape below leaves a
# remainder (the group size from capi.cu's rule, mirrored by dev/probes/causal_schedule_sim.py): a tile the new
# decode skips leaves NaN in the poisoned output, one it decodes to the wrong head or block a wrong value, and the
# three orders (short group last, first, the static order) must give the same bits.
def _sim():
    from _support import load_script
    return load_script(Path(__file__).resolve().parent.parent / "dev/probes/causal_schedule_sim.py")


@pytest.fixture
def grouping_switch():
    """The dynamic schedule at every length, the grouping set by the test; both back to the defaults after."""
    lib = _ext.load()
    if not hasattr(lib, "vidattn_sm90_set_causal_grouping"):
        pytest.fail("this library predates vidattn_sm90_set_causal_grouping: rebuild it")
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq(0) == 0
    yield lib
    assert lib.vidattn_sm90_set_causal_dynamic_min_sq(-1) == 0
    assert lib.vidattn_sm90_set_causal_grouping(-1) == 0


def test_grouping_setter_refuses_bad_values():
    lib = _ext.load()
    default = lib.vidattn_sm90_causal_grouping()
    assert default in (0, 1)
    for bad in (-2, 2, 7):
        assert lib.vidattn_sm90_set_causal_grouping(bad) == 1
        assert lib.vidattn_sm90_causal_grouping() == default
    for mode in (0, 1):
        assert lib.vidattn_sm90_set_causal_grouping(mode) == 0 and lib.vidattn_sm90_causal_grouping() == mode
    assert lib.vidattn_sm90_set_causal_grouping(-1) == 0 and lib.vidattn_sm90_causal_grouping() == default


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("b,hq,hkv,sq,skv,d,lens,spike", [
    (2, 7, 7, 3001, 3001, 128, None, False),     # odd length, 14 pairs in groups of 10: the first group of 4
    (2, 9, 9, 5001, 5001, 64, None, False),      # the D=64 build (192-row tiles): 18 pairs in groups of 13
    (2, 7, 7, 3001, 3001, 96, None, False),      # D=96 on the D=128 causal build, padded
    (1, 32, 8, 3001, 3001, 128, None, False),    # GQA 32q/8kv: 32 query-head pairs in groups of 10
    (2, 7, 7, 2000, 3001, 128, (3001, 1234), False),  # Sq < Skv and kv_lens (the groups follow Skv)
    (2, 7, 7, 4000, 3001, 128, (3001, 7), False),     # Sq > Skv: bottom-right leaves rows without keys
    (2, 8, 8, 4097, 4097, 128, None, True),      # 16 pairs in groups of 7, and a spike that makes tiles redo
], ids=lambda x: str(x))
def test_short_group_first_equals_static(b, hq, hkv, sq, skv, d, lens, spike, mode, grouping_switch, monkeypatch):
    lib = grouping_switch
    sim = _sim()
    group = sim.group_heads(b, hq, skv, d)
    first = sim.first_group(b * hq, group, 1)
    g, seed = new_gen()
    what = f"{b}x{hq}/{hkv}x{sq}x{skv} D={d} kv_lens={lens} group {group} first {first} {mode} seed={seed}"
    assert first > 0, f"{what}: the shape must leave a short group"
    q, k, v = bshd_inputs(b, hq, hkv, sq, skv, d, g, shift=spike)
    if spike:
        shape_scores(q, k, "spike", heads=[3])
    kv_lens = None if lens is None else torch.tensor(lens, dtype=torch.int32, device=DEV)

    def run(grouping, use_workspace):
        assert lib.vidattn_sm90_set_causal_grouping(grouping) == 0
        real = _ext.workspace
        monkeypatch.setattr(_ext, "workspace", real if use_workspace else (lambda lib_, device: None))
        try:
            out, lse = vidattn.attention(q, k, v, kv_lens=kv_lens, causal=mode, return_lse=True)
            torch.cuda.synchronize()
            return out, lse, lib.vidattn_sm90_last_causal_dynamic(), lib.vidattn_sm90_last_causal_first_group()
        finally:
            monkeypatch.setattr(_ext, "workspace", real)

    last = run(0, True)
    lead = run(1, True)
    stat = run(1, False)
    assert last[2:] == (1, 0), what
    assert lead[2:] == (1, first), what
    assert stat[2:] == (0, 0), what
    for other, name in ((last, "short group last"), (stat, "static order")):
        assert torch.equal(lead[0], other[0]) and torch.equal(lead[1], other[1]), f"{what}: differs from {name}"
    assert lib.vidattn_sm90_set_causal_grouping(1) == 0
    check(q, k, v, mode, what, "bshd" if hkv == hq else "bhsd", kv_lens)
    assert lib.vidattn_sm90_last_causal_first_group() == first, what


@pytest.mark.usefixtures("grouping_switch")
def test_short_group_first_every_tile_once_many_launches():
    """Opening groups of 5 pairs (40 pairs of 4097 keys in groups of 7) and of a single pair (29 pairs), launched
    back to back on one workspace, each the same bits every time, then against the reference."""
    lib = _ext.load()
    assert lib.vidattn_sm90_set_causal_grouping(1) == 0
    g, seed = new_gen()
    q, k, v = bshd_inputs(1, 40, 40, 4097, 4097, 128, g)
    q2, k2, v2 = bshd_inputs(1, 29, 29, 4097, 4097, 128, g)
    first, first2 = vidattn.attention(q, k, v, causal=True), vidattn.attention(q2, k2, v2, causal=True)
    assert lib.vidattn_sm90_last_causal_first_group() == 1, seed
    for i in range(5):
        assert torch.equal(vidattn.attention(q, k, v, causal=True), first), f"launch {i} seed={seed}"
        assert torch.equal(vidattn.attention(q2, k2, v2, causal=True), first2), f"launch {i} seed={seed}"
    check(q, k, v, "top_left", f"1x40x4097 short group first seed={seed}")
    check(q2, k2, v2, "bottom_right", f"1x29x4097 short group first seed={seed}")


# ---- below the length threshold, by the static order's imbalance (capi.cu, causal_static_imbalance) --------------
@pytest.mark.parametrize("mode", MODES)
def test_static_imbalance_rule_routes_unbalanced_short_problems(mode, monkeypatch):
    """With the rule at 1.10 (vidattn_sm90_set_causal_static_imbalance_max(1100)), short problems whose static order
    the simulator puts over 1.10 of the mean take the dynamic schedule, the others keep the static one; the
    library's estimate is the simulator's; outputs are the static order's bits; 0 turns the rule off."""
    lib = _ext.load()
    if not hasattr(lib, "vidattn_sm90_set_causal_static_imbalance_max"):
        pytest.fail("this library predates the static-imbalance rule: rebuild it")
    sim = _sim()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    g, seed = new_gen()
    assert lib.vidattn_sm90_set_causal_static_imbalance_max(500) == 1
    assert lib.vidattn_sm90_set_causal_static_imbalance_max(-2) == 1
    try:
        # every shape below under the length thresholds whatever the build's defaults, so the rule decides
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq(8192) == 0
        assert lib.vidattn_sm90_set_causal_static_imbalance_max(1100) == 0
        assert lib.vidattn_sm90_causal_static_imbalance_max() == 1100
        for b, h, sq, d in [(1, 16, 4096, 128), (2, 16, 4096, 128), (2, 16, 1024, 64), (1, 12, 3001, 96)]:
            what = f"{b}x{h}x{sq} D={d} {mode} seed={seed}"
            q, k, v = bshd_inputs(b, h, h, sq, sq, d, g)
            want = sim.simulate(b, h, sq, d, g=sms)["static_snake"]["ratio"]
            out, ran = schedule_of(lib, q, k, v, mode, True, monkeypatch)
            assert abs(lib.vidattn_sm90_last_causal_static_imbalance() - round(1000 * want)) <= 1, (what, want)
            assert ran == (1 if want > 1.1 else 0), (what, want)
            stat, ran_stat = schedule_of(lib, q, k, v, mode, False, monkeypatch)
            assert ran_stat == 0 and torch.equal(out, stat), what
            if d == 96:
                check(q, k, v, mode, what)
        assert lib.vidattn_sm90_set_causal_static_imbalance_max(0) == 0
        q, k, v = bshd_inputs(1, 16, 16, 4096, 4096, 128, g)
        assert schedule_of(lib, q, k, v, mode, True, monkeypatch)[1] == 0, "rule off: the length decides"
        assert lib.vidattn_sm90_last_causal_static_imbalance() == 0
    finally:
        assert lib.vidattn_sm90_set_causal_static_imbalance_max(-1) == 0
        assert lib.vidattn_sm90_set_causal_dynamic_min_sq(-1) == 0


# ---- the shipped defaults (capi.cu: VIDATTN_CAUSAL_GROUPING, _DYNAMIC_MIN_SQ_D64/_D128, _STATIC_IMBALANCE_MAX) -----
def _shipped(name):
    import re
    src = (Path(__file__).resolve().parent.parent / "csrc/capi.cu").read_text()
    return int(re.search(rf"#define {name} (-?\d+)\n", src).group(1))


@pytest.mark.parametrize("mode", MODES)
def test_default_routing_is_the_shipped_one(mode, monkeypatch):
    """The loaded library's defaults are capi.cu's (a stale build fails here, not in a benchmark), and a default
    call takes them: at 1x12 heads D=128, the D=128 threshold's length runs the dynamic schedule, opening with the
    group the simulator names; one row less takes it only by the static-imbalance rule
    (capi.cu: the static order's busiest CTA over the mean, in permille, past the shipped maximum); both the static
    order's bits."""
    lib = _ext.load()
    for setter in ("grouping", "dynamic_min_sq", "static_imbalance_max"):
        assert getattr(lib, f"vidattn_sm90_set_causal_{setter}")(-1) == 0
    grouping = _shipped("VIDATTN_CAUSAL_GROUPING")
    assert lib.vidattn_sm90_causal_grouping() == grouping
    imb_max = _shipped("VIDATTN_CAUSAL_STATIC_IMBALANCE_MAX")
    assert lib.vidattn_sm90_causal_static_imbalance_max() == imb_max
    min_sq = {d: _shipped(f"VIDATTN_CAUSAL_DYNAMIC_MIN_SQ_D{d}") for d in (64, 128)}
    assert {d: lib.vidattn_sm90_causal_dynamic_min_sq_for(d) for d in (64, 128)} == min_sq
    sim = _sim()
    g, seed = new_gen()
    for sq, want_dyn in ((min_sq[128], 1), (min_sq[128] - 1, None)):
        what = f"1x12x{sq} D=128 {mode} seed={seed}"
        q, k, v = bshd_inputs(1, 12, 12, sq, sq, 128, g)
        out, ran = schedule_of(lib, q, k, v, mode, True, monkeypatch)
        if want_dyn is None:  # below the length threshold the imbalance rule decides, when it is on
            imbalance = lib.vidattn_sm90_last_causal_static_imbalance()
            assert (imbalance > 0) == (imb_max > 0), what
            want_dyn = int(imb_max > 0 and imbalance > imb_max)
        assert ran == want_dyn, what
        first = sim.first_group(12, sim.group_heads(1, 12, sq, 128), grouping) if want_dyn else 0
        assert lib.vidattn_sm90_last_causal_first_group() == first, what
        # (at 4096 rows the 12 pairs formed groups of 8, the short group of 4 first; from 2048 rows, today's D=128
        # threshold, one group of 12: no remainder, so the simulator's 0 is what the library must report)
        stat, ran_stat = schedule_of(lib, q, k, v, mode, False, monkeypatch)
        assert ran_stat == 0 and torch.equal(out, stat), what
