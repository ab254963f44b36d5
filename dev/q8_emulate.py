"""CPU emulation of the 8-bit path's numerics (q8_quant.cuh + q8_fwd.cuh), to predict its error before a device run:
INT8 Q per row, K smoothed and INT8 per (128-key block, key % 8 / 2 group), V e4m3 per channel, P = 2^(s - m + 8)
in e4m3 with the running max of each 128-key block, row sums of the unrounded p. Not bit-exact (the kernel's exp2 is
approximate and its FP8 accumulator has ~22 bits inside a block), but the same quantization.

    python3 dev/q8_emulate.py
"""
import math

import torch


def quant_int8(x, amax):
    scale = torch.where(amax > 0, amax / 127, torch.ones_like(amax))
    return torch.clamp(torch.round(x / scale), -127, 127), scale


def emulate(q, k, v, scale, block=128):
    """q, k, v: (H, S, D) float64. Returns (H, Sq, D) float64."""
    h, sq, d = q.shape
    skv = k.shape[1]
    q8, qs = quant_int8(q, q.abs().amax(-1, keepdim=True))
    ks = k - k.mean(1, keepdim=True)
    pad = (-skv) % block
    ksp = torch.cat([ks, ks.new_zeros(h, pad, d)], 1).view(h, -1, block // 8, 4, 2, d)  # (.., i, group, pair, d)
    amax = ksp.abs().amax(dim=(2, 4, 5), keepdim=True)
    k8, kscale = quant_int8(ksp, amax)
    kdq = (k8 * kscale).view(h, -1, d)[:, :skv]
    vamax = v.abs().amax(1, keepdim=True)
    vs = torch.where(vamax > 0, vamax / 448, torch.ones_like(vamax))
    v8 = (v / vs).to(torch.float8_e4m3fn).to(torch.float64) * vs
    s = (q8 * qs) @ kdq.transpose(-1, -2) * scale * math.log2(math.e)
    o = torch.zeros(h, sq, d, dtype=torch.float64)
    m = torch.full((h, sq, 1), -math.inf, dtype=torch.float64)
    l = torch.zeros(h, sq, 1, dtype=torch.float64)
    for j in range(0, skv, block):
        sj = s[:, :, j:j + block]
        mn = torch.maximum(m, sj.amax(-1, keepdim=True))
        alpha = torch.exp2(m - mn)
        p = torch.exp2(sj - mn + 8)
        l = l * alpha + p.sum(-1, keepdim=True)
        p8 = p.to(torch.float8_e4m3fn).to(torch.float64)
        o = o * alpha + p8 @ v8[:, j:j + block]
        m = mn
    return o / l


def ref(q, k, v, scale):
    return torch.softmax(q @ k.transpose(-1, -2) * scale, -1) @ v


def rel(a, b):
    return float((a - b).norm() / b.norm())


if __name__ == "__main__":
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
