"""CPU emulation of the 8-bit path's numerics (q8_quant.cuh + q8_fwd.cuh), to predict its error before a device run:
INT8 Q per row, K smoothed and INT8 per (128-key block, key % 8 / 2 group), V e4m3 per channel, P = 2^(s - m + 8)
in e4m3 with the running max of each 128-key block, and the row sums of row-sum mode 0 (fp32 sums of the unrounded p:
the D=128 builds) or mode 1 (the tensor cores' sums of P as rounded: D=64). Keys past kv_len are left out of K's mean,
V's scales and the softmax, as the pre-pass and the kernel's tail mask do. Not bit-exact (the kernel's exp2 is
approximate, its folded score bias rounds once in fp32 and its FP8 accumulator has ~22 bits inside a block), but the
same quantization.

Row mass (V = ones; dev/NOTES_8bit.md "V = ones under mode 0"): with mode 0 the output row is sum(e4m3(p)) / sum(p),
a weighted mean of e4m3's relative rounding errors. row_mass_bound gives the per-row bound the GPU tests check it
against; row_mass_run draws the tests' kv_lens case many times.

    python3 dev/q8_emulate.py                  # relative L2 of the four accuracy cases, V = ones
    python3 dev/q8_emulate.py --row-mass 300   # the kv_lens V = ones case, 300 draws: max |o - 1| and against the bound
    python3 dev/q8_emulate.py --lin            # a share of P's e4m3 codes by the linear bit trick (no MUFU): its error
    python3 dev/q8_emulate.py --pv-u8          # u8 P x s8 V on the integer tensor cores: its error, and a sink case
    python3 dev/q8_emulate.py --qk-e4m3        # Q and K in e4m3 instead of INT8: its error
"""
import argparse
import math

import torch

E4M3_REL_HALF_ULP = 2.0 ** -4  # e4m3 keeps 3 mantissa bits: round to nearest is off by at most 2^-4 of the value
# One element's relative rounding error d = e4m3(p) / p - 1 with the mantissa of p log-uniform in [1, 2) (p = 2^(s - m
# + 8), s continuous): its mean and standard deviation, integrated cell by cell over e4m3's grid in the binade
# (e4m3_rel_error_moments, checked by tests/test_8bit_rowmass.py). The mean is not 0: just above a power of two the
# grid is twice as coarse as just below it, and values there round down by more.
E4M3_REL_MEAN = -7.02e-4
E4M3_REL_SIGMA = 2.649e-2
# The worst case of the standard deviation given the binade position (mantissa 1: error uniform on +-2^-4): the
# sub-Gaussian variance proxy row_mass_bound uses.
E4M3_REL_SIGMA_MAX = E4M3_REL_HALF_ULP / math.sqrt(3.0)  # 0.03608
# The e4m3 wgmma's accumulator keeps 13 mantissa bits and truncates (SageAttention2's FP22; q8_fwd.cuh's "about 22
# bits"): each of a block's 4 k32 steps loses under 2^-13 of the partial sum (4 * 2^-13 per block), and where products
# are aligned to a step's largest term before they are added, the small ones lose their bits under 2^-13 of it too
# (random rows: ~1e-4 per step; a late sink's last step, the sink beside 31 keys 1e4 times smaller: ~1e-3 of the row).
# The model does not emulate it (not bit-exact); the bound allows 2^-10 per block for both, and the fp32 merge of
# blocks keeps a per-block relative bound for the row. Mode 1 sums P through the same accumulator: twice that.
FP8_ACC_BLOCK_REL = 2.0 ** -10
FP32_SLACK = 1e-5  # rcp.approx, the 1/448 V scale in fp32, the fp32 row sums: ~1e-7 each


def e4m3_rel_error_moments():
    """(mean, standard deviation) of e4m3(x) / x - 1 for x log-uniform in [1, 2): exact per rounding cell (the grid
    1 + i/8, each cell's integral of (g / x - 1) / x in closed form and of its square by a fine midpoint rule)."""
    mean = sq = 0.0
    for i in range(9):
        g = 1 + i / 8
        a, b = max(1.0, g - 1 / 16), min(2.0, g + 1 / 16)
        mean += g * (1 / a - 1 / b) - math.log(b / a)
        x = torch.linspace(a, b, 20001, dtype=torch.float64)
        sq += float(torch.trapezoid((g / x - 1) ** 2 / x, x))
    mean, sq = mean / math.log(2), sq / math.log(2)
    return mean, math.sqrt(sq - mean * mean)


def quant_int8(x, amax):
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    return torch.clamp(torch.round(x / scale), -127, 127), scale


LAZY_GROUP = 64  # rows that decide a lazy block's redo together: one consumer warpgroup (bar.red.or over 128 threads)


def lin_e4m3(x, c=-0.5):
    """P's e4m3 value from x = log2 p without an exponential: the code read straight off 8 (x + 7) + c (e4m3's bias 7,
    3 mantissa bits), rounded to nearest, i.e. one FFMA with a magic number added (and rounding toward -inf for c =
    -0.5). Inside a binade this is 1 + frac(x) for 2^frac(x), the piecewise-linear exponential (up to +6.1%); c
    shifts it down. Codes below 0 are 0 (a clamp at the magic number), 126 (448) at most."""
    code = torch.round(8 * (x.double() + 7) + c).clamp(min=0, max=126)
    e = torch.floor(code / 8)
    m = code - 8 * e
    return torch.where(e > 0, torch.exp2(e - 7) * (1 + m / 8), 2.0 ** -6 * m / 8)


def e4m3_scaled(x, amax):
    """x in e4m3 with its amax at 448 (e4m3's largest): the value each element's code stands for."""
    scale = torch.where(amax > 0, amax / 448, torch.ones_like(amax))
    return (x / scale).to(torch.float8_e4m3fn).to(torch.float64) * scale


def emulate(q, k, v, scale, block=128, kv_len=None, sums="p", bug=None, lazy=0, stats=None, lin_share=0.0,
            lin_c=-0.5, pv="e4m3", qk="int8"):
    """q, k, v: (H, S, D) float64 (v may have another width than q and k). Returns (H, Sq, Dv) float64.

    kv_len: keys past it are masked (None: all). sums: "p" row-sum mode 0 (fp32 sums of the unrounded p), "p8" mode 1
    (sums of P as rounded). bug (for the tests of the checks, never the kernel's arithmetic): "sum_skips_first_block"
    / "sum_skips_last_block" (the row sums miss key block 0 / the last block), "pv_drops_last_partial" (P V leaves
    out a last block shorter than `block`), "p_saturates" (P's offset one too high: 2^9 > 448 saturates in e4m3),
    "lazy_no_redo" (the lazy reference keeps a saturated block instead of redoing it).

    lazy (q8_fwd.cuh's kLazy, v10): 0 the exact running max every block; h > 0 the lazy reference: block 0, the tail
    block and a redone block set m = max(m, block max + h); every other block uses m as it stands (alpha = 1) unless
    some row of its group of LAZY_GROUP rows (a warpgroup; rows counted from 0, as the kernel's tiles) has a p that
    rounds to e4m3's 448 (p >= 432), then the group redoes the block exactly. stats: a dict that gets "blocks" (group
    blocks on the lazy path) and "redos" added.

    lin_share (a design, not the kernel's arithmetic; dev/NOTES_8bit.md "P's codes without MUFU"): the first
    round(16 lin_share) keys of every 16 take P's e4m3 value from lin_e4m3(x, lin_c) instead of exp2 and rounding;
    their row sums are the values as coded, in either sums mode (no unrounded p exists for them).

    pv="u8s8" (a design, dev/NOTES_8bit.md "P as u8 and V as s8"): P V on the integer tensor cores, P rounded to an
    integer in [0, 255] (linear, no exponent) and V symmetric INT8 per channel (amax / 127), the row sums those
    integers' (exact); lazy, lin_share and sums do not apply.

    qk="e4m3" (a design, dev/NOTES_8bit.md "S from an e4m3 Q K^T"): Q and the smoothed K in e4m3 at the INT8 path's
    granularity (a scale per row of Q, per (128-key block, group) of K, each amax at 448) instead of INT8."""
    if pv not in ("e4m3", "u8s8"):
        raise ValueError(f"pv is 'e4m3' or 'u8s8', got {pv!r}")
    if qk not in ("int8", "e4m3"):
        raise ValueError(f"qk is 'int8' or 'e4m3', got {qk!r}")
    h, sq, d = q.shape
    n = k.shape[1] if kv_len is None else kv_len
    k, v = k[:, :n], v[:, :n]
    ks = k - k.mean(1, keepdim=True)
    pad = (-n) % block
    ksp = torch.cat([ks, ks.new_zeros(h, pad, d)], 1).view(h, -1, block // 8, 4, 2, d)  # (.., i, group, pair, d)
    amax = ksp.abs().amax(dim=(2, 4, 5), keepdim=True)
    qamax = q.abs().amax(-1, keepdim=True)
    if qk == "e4m3":
        qdq = e4m3_scaled(q, qamax)
        kdq = e4m3_scaled(ksp, amax).view(h, -1, d)[:, :n]
    else:
        q8, qs = quant_int8(q, qamax)
        qdq = q8 * qs
        k8, kscale = quant_int8(ksp, amax)
        kdq = (k8 * kscale).view(h, -1, d)[:, :n]
    vamax = v.abs().amax(1, keepdim=True)
    if pv == "u8s8":
        vq, vs = quant_int8(v, vamax)
        v8 = vq * vs
    else:
        v8 = e4m3_scaled(v, vamax)
    s = qdq @ kdq.transpose(-1, -2) * scale * math.log2(math.e)
    o = q.new_zeros(h, sq, v.shape[-1])
    m = q.new_full((h, sq, 1), -math.inf)
    l = q.new_zeros(h, sq, 1)
    for j in range(0, n, block):
        sj = s[:, :, j:j + block]
        mn = torch.maximum(m, sj.amax(-1, keepdim=True) + lazy)
        if lazy and 0 < j and j + block <= n:
            p_lazy = torch.exp2(sj - m + 8).float()
            sat = (p_lazy.clamp(max=448).to(torch.float8_e4m3fn).double() >= 448).any(-1)  # (h, sq)
            pad_rows = (-sq) % LAZY_GROUP
            grp = torch.cat([sat, sat.new_zeros(h, pad_rows)], 1).view(h, -1, LAZY_GROUP).any(-1)
            if stats is not None:
                stats["blocks"] = stats.get("blocks", 0) + grp.numel()
                stats["redos"] = stats.get("redos", 0) + int(grp.sum())
            if bug != "lazy_no_redo":
                redo = grp.repeat_interleave(LAZY_GROUP, 1)[:, :sq, None]
                mn = torch.where(redo, mn, m)
            else:
                mn = m
        alpha = torch.exp2(m - mn)
        if pv == "u8s8":
            pu = torch.round(torch.exp2(sj - mn + 8).float().double()).clamp(0, 255)
            l, o, m = l * alpha + pu.sum(-1, keepdim=True), o * alpha + pu @ v8[:, j:j + block], mn
            continue
        p = torch.exp2(sj - mn + (9 if bug == "p_saturates" else 8)).float()  # fp32, as the kernel's
        p8 = p.clamp(max=448).to(torch.float8_e4m3fn).double()  # cvt.rn.satfinite: 448 at most
        p_sum = p.double() if sums == "p" else p8
        if lin_share > 0:
            lin = (torch.arange(sj.shape[-1]) % 16) < round(16 * lin_share)
            pl = lin_e4m3(sj - mn + 8, lin_c)
            p8, p_sum = torch.where(lin, pl, p8), torch.where(lin, pl, p_sum)
        part = p_sum.sum(-1, keepdim=True)
        skip = (bug == "sum_skips_first_block" and j == 0) or (bug == "sum_skips_last_block" and j + block >= n)
        l = l * alpha + (0 if skip else part)
        pv_j = p8 @ v8[:, j:j + block]  # not `pv`: that is the argument naming the P V arithmetic
        o = o * alpha + (0 if bug == "pv_drops_last_partial" and j + block > n else pv_j)
        m = mn
    return o / l


def ref(q, k, v, scale):
    return torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v


def rel(a, b):
    return float((a - b).norm() / b.norm())


def half_ulp_above_one(dtype):
    """The most an output near 1 moves when stored as dtype (round to nearest; the ulp just above 1)."""
    return torch.finfo(dtype).eps / 2 if dtype in (torch.bfloat16, torch.float16) else 0.0


def int8_steps(q, k):
    """The largest INT8 quantization steps of Q's rows and of the smoothed K's keys (dq, dk), and the standard
    deviation of one score's INT8 rounding error per unit softmax scale (as tests/test_8bit_gpu.py's lse_bound):
    1 / sqrt(12) * (max |q| * dk + max |k - mean| * dq). q, k: (B, S, H, D)."""
    qf, kf = q.double(), k.double()
    kf = kf - kf.mean(1, keepdim=True)
    dq = float(qf.abs().amax(-1).max()) / 127
    dk = float(kf.abs().amax(-1).max()) / 127
    sigma = (float(qf.norm(dim=-1).max()) * dk + float(kf.norm(dim=-1).max()) * dq) / math.sqrt(12)
    return dq, dk, sigma


def mass_terms(q, k, scale=None, kv_lens=None):
    """Per row (B, Sq, H): sqrt(sum w_j^2) over the keys whose p is rounded with an unknown error, and the top key's
    own term. The row's top key sets the kernel's final row max, so its p is 2^8 up to the folded bias's rounding
    (q8_fwd.cuh kCvt 2: under 0.75 c in log2, c = Q's row scale x K's group scale <= dq dk scale log2 e), which e4m3
    keeps exactly: it is left out of the sum and its error 0.75 dq dk scale w_top added instead, where the fp64 top
    leads the runner-up by more than 10 sigma of the INT8 score error (then the kernel's top is the same key). A late
    attention sink's row thus gets the bound of its small keys, not of its one large weight."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    qh, kh = (t.transpose(1, 2).double() for t in (q, k))
    s = torch.matmul(qh, kh.transpose(-1, -2)) * scale
    if kv_lens is not None:
        keep = torch.arange(k.shape[1], device=k.device)[None, :] < torch.as_tensor(kv_lens, device=k.device)[:, None]
        s = s.masked_fill(~keep[:, None, None, :], float("-inf"))
    w = torch.softmax(s, -1)
    sumsq = w.square().sum(-1)
    dq, dk, sigma = int8_steps(q, k)
    if s.shape[-1] > 1:
        top2 = s.topk(2, dim=-1).values
        gap = top2[..., 0] - top2[..., 1]  # inf where the row has one key
    else:
        gap = torch.full_like(sumsq, math.inf)
    alone = gap > 10 * sigma * scale
    w_top = w.amax(-1)
    sumsq = torch.where(alone, (sumsq - w_top.square()).clamp_min(0), sumsq)
    top = torch.where(alone, 0.75 * dq * dk * scale * w_top, torch.zeros_like(w_top))
    return sumsq.sqrt().transpose(1, 2), top.transpose(1, 2)


def weight_root(q, k, scale=None, kv_lens=None):
    """sqrt(sum w_j^2) as the bound uses it (mass_terms), (B, Sq, H)."""
    return mass_terms(q, k, scale, kv_lens)[0]


def row_mass_bound(q, k, scale=None, kv_lens=None, out_dtype=torch.bfloat16, sums="p", alpha=1e-7, n_rows=None):
    """Per-row bound on |out - 1| for attention(q, k, ones) on the 8-bit path, as (B, Sq, H) float64 on q's device.
    q, k: (B, S, H, D); kv_lens: per batch element or None; sums: the row-sum mode that ran ("p": mode 0, fp32 sums of
    the unrounded p, the D=128 builds; "p8": mode 1, the tensor cores' sums of P as rounded).

    Mode 0: out_r = sum_j e4m3(p_j) / sum_j p_j = 1 + sum_j w_j d_j, w the row's softmax weights, d_j the relative
    rounding error of p_j to e4m3: |d_j| <= 2^-4, mean E4M3_REL_MEAN, independent across keys (each score's place
    inside its e4m3 ulp). Given the binade positions each w_j (d_j - mean) is close to uniform on +-w_j 2^-4 / m_j,
    strictly sub-Gaussian with variance proxy at most (w_j sigma_max)^2, sigma_max = 2^-4 / sqrt(3); so
    P(|out_r - 1 - mean| > t) <= 2 exp(-t^2 / (2 sigma_max^2 sum w^2)). With c = sqrt(2 ln(2 N / alpha)) for the N rows
    checked, a correct kernel exceeds c sigma_max sqrt(sum w^2) on any of them with probability below alpha (a union
    bound; alpha 1e-7 per call: under 1e-6 for a test module's dozen calls). The sum leaves out a top key that the
    kernel rounds exactly (mass_terms).
    Mode 1: numerator and denominator are the same sum of P as rounded, through the same accumulator: only its
    truncation (twice FP8_ACC_BLOCK_REL) and the fp32 steps remain.
    Both add the floor: the output's rounding near 1 (2^-8 for bf16, 2^-11 for fp16), the accumulator's truncation,
    E4M3_REL_MEAN and the top key's term (mode 0) and FP32_SLACK.

    w is an fp64 softmax of the unquantized scores; the kernel's INT8 scores move sum w^2 by a few percent, which the
    worst-case sigma (1.36x the average 0.0265) covers. Keys with equal scores break the independence (their errors are
    equal): random inputs do not have them."""
    floor = half_ulp_above_one(out_dtype) + FP32_SLACK
    if sums == "p8":
        return torch.full((q.shape[0], q.shape[1], q.shape[2]), floor + 2 * FP8_ACC_BLOCK_REL, dtype=torch.float64,
                          device=q.device)
    assert sums == "p", sums
    root, top = mass_terms(q, k, scale, kv_lens)
    n = root.numel() if n_rows is None else n_rows
    c = math.sqrt(2 * math.log(2 * n / alpha))
    return c * E4M3_REL_SIGMA_MAX * root + top + floor + FP8_ACC_BLOCK_REL + abs(E4M3_REL_MEAN)


def emulate_bshd(q, k, v, scale=None, kv_lens=None, sums="p", out_dtype=torch.bfloat16, bug=None):
    """emulate over (B, S, H, D) tensors with per-batch kv_lens, the result rounded to out_dtype (as the kernel's
    store) and returned as float64 (B, Sq, H, Dv)."""
    scale = 1 / math.sqrt(q.shape[-1]) if scale is None else scale
    outs = []
    for b in range(q.shape[0]):
        n = None if kv_lens is None else int(kv_lens[b])
        o = emulate(*(t[b].transpose(0, 1).double() for t in (q, k, v)), scale, kv_len=n, sums=sums, bug=bug)
        outs.append(o.transpose(0, 1))
    o = torch.stack(outs)
    return o.to(out_dtype).double() if out_dtype is not None else o


KV_LENS_CASE = dict(b=3, sq=300, skv=1000, h=2, d=128, lens=(1000, 37, 129))  # tests/test_8bit_gpu.py's kv_lens case
LONG_CASE = dict(b=1, sq=64, skv=4096, h=2, d=128, lens=(4096,))  # long rows: sqrt(sum w^2) ~ 0.026, the bound tight
SINK_CASE = dict(LONG_CASE, sink=True)  # test_row_mass_and_late_sink's late sink: the last key takes ~85% of a row


def row_mass_case(seed, case=KV_LENS_CASE, sums="p", out_dtype=torch.bfloat16, bug=None, out_scale=1.0):
    """One draw of a V = ones case (bf16 randn q and k, as the GPU tests), emulated: (raw, err, bound, root), each
    (B, Sq, H) float64: the output before its rounding, |o - 1| after it (out_dtype), row_mass_bound and
    sqrt(sum w^2). bug / out_scale: a defect to show the bound catches (emulate's bugs; a scale error of the output)."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(case["b"], case["sq"], case["h"], case["d"], generator=g).bfloat16()
    k = torch.randn(case["b"], case["skv"], case["h"], case["d"], generator=g).bfloat16()
    if case.get("sink"):
        e = torch.randn(case["d"], generator=g, dtype=torch.float64)
        e = e / e.norm()
        q = (q.double() + 4 * e).bfloat16()
        k[:, -1] = (30 * e).bfloat16()
    ones = torch.ones(case["b"], case["skv"], case["h"], 1)
    raw = emulate_bshd(q, k, ones, kv_lens=case["lens"], sums=sums, out_dtype=None, bug=bug)[..., 0] * out_scale
    err = (raw.to(out_dtype).double() - 1).abs()
    bound = row_mass_bound(q, k, kv_lens=case["lens"], out_dtype=out_dtype, sums=sums)
    return raw, err, bound, weight_root(q, k, kv_lens=case["lens"])


def row_mass_run(draws, seed0=0, sums="p"):
    """The kv_lens case over many draws: per draw the max error (bf16 output) and the max ratio to the bound, and the
    per-row z = (o - 1 - mean) / (sigma sqrt(sum w^2)) before the output rounding (the model says std <= 1)."""
    maxes, ratios, zs = [], [], []
    for i in range(draws):
        raw, err, bound, root = row_mass_case(seed0 + i, sums=sums)
        maxes.append(float(err.max()))
        ratios.append(float((err / bound).max()))
        zs.append(((raw - 1 - E4M3_REL_MEAN) / (E4M3_REL_SIGMA * root)).flatten())
    return torch.tensor(maxes), torch.tensor(ratios), torch.cat(zs)


def _row_mass_report(draws):
    maxes, ratios, z = row_mass_run(draws)
    fail = (maxes > 2e-2).double().mean()
    qs = torch.tensor([0.5, 0.9, 0.99])
    print(f"kv_lens V = ones case (3x300x2, 1000 keys, kv_lens 1000/37/129, D=128, mode 0), {draws} draws:")
    print(f"  max |o - 1| (bf16 output): median {maxes.median():.4f}, max {maxes.max():.4f}; "
          f"> 2e-2 (the old MASS) in {fail:.1%} of draws; values seen {sorted(set(maxes.tolist()))}")
    print(f"  max |o - 1| / row_mass_bound: quantiles 50/90/99% {torch.quantile(ratios, qs).tolist()}, "
          f"max {ratios.max():.3f}")
    print(f"  z = (o - 1 - mean) / (sigma sqrt(sum w^2)), sigma {E4M3_REL_SIGMA:.4f}, over {z.numel()} rows: std "
          f"{z.std():.3f}, mean {z.mean():+.3f}, max |z| {z.abs().max():.2f}, "
          f"P(|z| > 3) {(z.abs() > 3).double().mean():.2e} (Gaussian 2.7e-3), "
          f"P(|z| > 4) {(z.abs() > 4).double().mean():.2e} (6.3e-5)")
    m1, _, _ = row_mass_run(min(draws, 20), sums="p8")
    print(f"  row-sum mode 1 (sums of P as rounded, D=64): max |o - 1| over {min(draws, 20)} draws {m1.max():.4f}")


def lazy_cases(d=128, h=2, n=2048, seed=0):
    """The accuracy cases of this file's report (plain, key offset, sharpened x4, late sink) and a long row (32K keys,
    V = 4 + N(0, 1): the drift case of v9), as (name, q, k, v, scale) in (H, S, D) float64."""
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(h, n, d, generator=g).bfloat16().double() for _ in range(3))
    sc = 1 / math.sqrt(d)
    off = 8 * torch.randn(d, generator=g, dtype=torch.float64)
    e = torch.randn(d, generator=g, dtype=torch.float64)
    e /= e.norm()
    qs, ks = q + 4 * e, k.clone()
    ks[:, -1] = 30 * e
    out = [("plain", q, k, v, sc), ("key offset", q, k + off, v, sc), ("sharpened x4", q, k, v, 4 * sc),
           ("sharpened x8", q, k, v, 8 * sc), ("late sink", qs, ks, v, sc)]
    ql, kl = (torch.randn(1, m, d, generator=g).bfloat16().double() for m in (256, 32768))
    vl = 4 + torch.randn(1, 32768, d, generator=g).bfloat16().double()
    out.append(("long row 32K", ql, kl, vl, sc))
    return out


def _lazy_report():
    print("v10 lazy reference: relative L2 vs fp64, and the share of (warpgroup, block) pairs redone")
    for name, q, k, v, s in lazy_cases():
        r = ref(q, k, v, s)
        row = [f"{name:13s}"]
        for lazy in (0, 1, 2):
            st = {}
            e = rel(emulate(q, k, v, s, lazy=lazy, stats=st), r)
            red = f" redo {st['redos'] / max(st['blocks'], 1):.1%}" if lazy else ""
            row.append(f"h{lazy}: {e:.3e}{red}")
        print("  ".join(row))
    q, k, v, s = lazy_cases()[0][1:]
    ones = torch.ones_like(v)
    for lazy in (0, 1, 2):
        print(f"V = ones, plain, h{lazy}: max |o - 1| {float((emulate(q, k, ones, s, lazy=lazy) - 1).abs().max()):.3e}")
    bad = rel(emulate(q, k, v, 4 * s, lazy=1, bug="lazy_no_redo"), ref(q, k, v, 4 * s))
    print(f"negative control (no redo, sharpened x4, h1): {bad:.3e}")


def _sums_report():
    """v13: the row sums of P as rounded to e4m3 (sums "p8", the tensor cores' ones product) against v12's fp32 sums of
    the unrounded p ("p"), on the accuracy cases: relative L2 against fp64, and of one against the other."""
    print("v13 row sums (p8: of P as rounded, by the tensor cores) against v12's (p: fp32 sums of the unrounded p)")
    for name, q, k, v, s in lazy_cases():
        r = ref(q, k, v, s)
        a, b = emulate(q, k, v, s, sums="p"), emulate(q, k, v, s, sums="p8")
        print(f"{name:13s} p: {rel(a, r):.3e}  p8: {rel(b, r):.3e}  p8 vs p: {rel(b, a):.3e}")
    q, k, v, s = lazy_cases()[0][1:]
    ones = torch.ones_like(v)
    for sums in ("p", "p8"):
        print(f"V = ones, plain, {sums}: max |o - 1| {float((emulate(q, k, ones, s, sums=sums) - 1).abs().max()):.3e}")


def sink_case(n=32768, d=128, rows=64, seed=1):
    """Small weights under a sink: every row scores one key ln(n) + 0.5 nats above n others that score about 0, so the
    sink holds ~0.6 of each row and the n small keys the rest, each at ~e^-(ln n + 0.5) of the sink (at n = 32768
    under 2^-15). As (q, k, v, scale) in (1, S, D) float64."""
    g = torch.Generator().manual_seed(seed)
    sc = 1 / math.sqrt(d)
    u = torch.randn(d, generator=g, dtype=torch.float64)
    u /= u.norm()
    q = u + 0.05 * torch.randn(1, rows, d, generator=g, dtype=torch.float64)
    k = 0.01 * torch.randn(1, n, d, generator=g, dtype=torch.float64)
    k[:, 0] = u * (math.log(n) + 0.5) / sc
    v = torch.randn(1, n, d, generator=g, dtype=torch.float64)
    return q, k, v, sc


def _pv_report():
    """P as u8 and V as s8 on the integer tensor cores against the present e4m3 P V: the accuracy cases and the
    sink case (small weights under a large one)."""
    print("P V: e4m3 x e4m3 (now) against u8 P x s8 V (rel L2 against fp64)")
    cases = lazy_cases() + [("sink + 32K", *sink_case())]
    for name, q, k, v, s in cases:
        r = ref(q, k, v, s)
        print(f"{name:13s} e4m3 {rel(emulate(q, k, v, s), r):.3e}  u8s8 {rel(emulate(q, k, v, s, pv='u8s8'), r):.3e}",
              flush=True)


def _qk_report():
    """Q and K in e4m3 (the operands an f16-accumulating S would need) against the present INT8 Q K^T: the accuracy
    cases, at both head dims."""
    print("S from Q K^T: INT8 (now) against e4m3 at the same granularity (rel L2 against fp64)")
    for d in (128, 64):
        for name, q, k, v, s in lazy_cases(d=d):
            r = ref(q, k, v, s)
            print(f"D{d} {name:13s} int8 {rel(emulate(q, k, v, s), r):.3e}  e4m3 "
                  f"{rel(emulate(q, k, v, s, qk='e4m3'), r):.3e}", flush=True)


def _lin_report():
    """The linear bit trick for a share of P's codes (lin_e4m3): relative L2 against fp64 on the accuracy cases, by
    share and offset, beside the emulation of the present arithmetic."""
    print("P's codes by the linear bit trick for a share of each 16 keys (rel L2 against fp64; share 0: as now)")
    for name, q, k, v, s in lazy_cases():
        r = ref(q, k, v, s)
        row = [f"{name:13s} now {rel(emulate(q, k, v, s), r):.3e}"]
        for share in (0.125, 0.25, 0.5):
            for c in (0.0, -0.5):
                row.append(f"{share:g}/c{c:g} {rel(emulate(q, k, v, s, lin_share=share, lin_c=c), r):.3e}")
        print("  ".join(row), flush=True)


if __name__ == "__main__":
    ap = argparse.ArgumentParser()
    ap.add_argument("--row-mass", type=int, default=0, metavar="DRAWS")
    ap.add_argument("--lazy", action="store_true", help="v10: the lazy reference (headroom 0-2) on the accuracy cases")
    ap.add_argument("--sums", action="store_true", help="v13: row sums of P as rounded vs fp32 sums of p")
    ap.add_argument("--lin", action="store_true", help="a share of P's codes by the linear bit trick: its error")
    ap.add_argument("--pv-u8", action="store_true", help="u8 P x s8 V against the present e4m3 P V")
    ap.add_argument("--qk-e4m3", action="store_true", help="Q and K in e4m3 against the present INT8 Q K^T")
    args = ap.parse_args()
    if args.qk_e4m3:
        _qk_report()
        raise SystemExit
    if args.pv_u8:
        _pv_report()
        raise SystemExit
    if args.lin:
        _lin_report()
        raise SystemExit
    if args.sums:
        _sums_report()
        raise SystemExit
    if args.lazy:
        _lazy_report()
        raise SystemExit
    if args.row_mass:
        _row_mass_report(args.row_mass)
        raise SystemExit
    torch.manual_seed(0)
    for d in (128, 64):
        h, n = 2, 2048
        q, k, v = (torch.randn(h, n, d, dtype=torch.bfloat16).double() for _ in range(3))
        sc = 1 / math.sqrt(d)
        off = 8 * torch.randn(d, dtype=torch.float64)
        e = torch.randn(d, dtype=torch.float64)
        e /= e.norm()
        qs, ks = q + 4 * e, k.clone()
        ks[:, -1] = 30 * e
        for name, (qq, kk, vv, s) in {"plain": (q, k, v, sc), "key offset": (q, k + off, v, sc),
                                       "sharpened": (q, k, v, 4 * sc), "late sink": (qs, ks, v, sc)}.items():
            print(f"d{d} {name:10s} rel L2 {rel(emulate(qq, kk, vv, s), ref(qq, kk, vv, s)):.2e}")
        ones = torch.ones_like(v)
        print(f"d{d} V=ones max|o-1| {float((emulate(q, k, ones, sc) - 1).abs().max()):.2e}, "
              f"late sink {float((emulate(qs, ks, ones, sc) - 1).abs().max()):.2e}")
