"""The device memory one vidattn call allocates beyond its inputs, per path: the documented figures of
docs/reliability.md, which the soak (dev/stress/soak.py) checks its memory against.

Each call allocates its output, its LSE when asked, and a workspace, all from torch's caching allocator on the
caller's stream, and frees the workspace when it returns (the output is the caller's):
- exact kernel: the tail launch's scratch, one item per SM of 128 x (256 + 2) fp32 (csrc/capi.cu, kTailItemBytes;
  two, kTailMaxItemsPerSm, under VIDATTN_TAIL_ROUNDS=2 or 3), allocated on every call whether or not the call takes the
  tail launch (vidattn/_ext.py, workspace): 16.6 MiB on an H200's 132 SMs (33.3 MiB under 2 or 3), whatever the
  shape.
- 8-bit kernel: quantized Q, K and V^T (one byte per element, Q padded to 384 rows and K/V to 128 keys), their
  scales, K's mean and V's maxima, and an fp32 per query row (csrc/capi_8bit.cuh, q8_layout), each part rounded up
  to 256 bytes: about 3 bytes per element of Q, K and V together, 1.19 GB at Wan 14B 720p; and where the tail launch
  has a plan (q8_plan_tail, on by default), its ranges' partials, 192 x (D + 2) fp32 a range: up to 2 x SMs ranges,
  25 MB at D=128 on an H200 (Wan 1.3B: 216 ranges, 21.6 MB).
- SDPA (the fallback): whatever PyTorch's backend allocates; not vidattn's to document.

The constants mirror the C sources; tests/test_reliability_stress.py reads them back from csrc/ so a change there
fails CI until this file (and the docs) follow, and the GPU suite compares these figures with the library's own
(vidattn_sm90_workspace_bytes, vidattn_q8_workspace_bytes).
"""
from __future__ import annotations

# csrc/capi.cu: kTailItemBytes = 128 * (256 + 2) * sizeof(float) (sized for the widest build, D=256)
TAIL_ITEM_BYTES = 128 * (256 + 2) * 4
# csrc/capi.cu: kTailMaxItemsPerSm (under VIDATTN_TAIL_ROUNDS=2 the tail launch's ranges run in at most two short
# rounds), the default rounds, kTailMaxSplits, VIDATTN_TAIL_MIN_BLOCKS, VIDATTN_TAIL_MIN_TILE_BLOCKS
TAIL_ITEMS_PER_SM = 2
EXACT_TAIL_ROUNDS = 1
EXACT_TAIL_MAX_SPLITS = 32
EXACT_TAIL_MIN_BLOCKS = 3
EXACT_TAIL_MIN_TILE_BLOCKS = 12
# csrc/sm90/q8_quant.cuh
Q8_BLOCK_N = 128
Q8_BLOCK_M_PAD = 384
Q8_K_GROUPS = 4
ALIGN = 256
H200_SMS = 132
# csrc/capi_8bit.cuh, q8_plan_tail: the tail launch's tiles, ranges and the least key blocks a range
Q8_TAIL_BLOCK_M = 192
Q8_TAIL_MAX_SPLITS = 32
Q8_TAIL_MIN_BLOCKS = 4
Q8_TAIL_MAX_ITEMS_PER_SM = 2


def cheapest_tail_split(r: int, nb: int, sms: int, min_blocks: int, max_splits: int, max_items_per_sm: int) -> int:
    """csrc/tail_plan.h's cheapest_tail_split, which both tail plans share: for a last round of r tiles of nb key
    blocks, the cheapest s of 2..max_splits (at least min_blocks blocks a range, at most max_items_per_sm x SMs ranges)
    by the cost ceil(r s / SMs) x (ceil(nb / s) + 2) + r s / 50 in key-block times, or 1 when none saves a tenth of
    nb. tests/test_tail_plan_host.py compiles the header and holds the two to each other."""
    best, pick, s = float(nb), 1, 2
    while s <= max_splits and nb // s >= min_blocks and r * s <= max_items_per_sm * sms:
        cost = -(-(r * s) // sms) * (-(-nb // s) + 2) + r * s / 50.0
        if cost < best:
            best, pick = cost, s
        s += 1
    return 1 if best > 0.9 * nb else pick


def balanced_tail_chunk(r: int, nb: int, sms: int, min_blocks: int) -> int:
    """csrc/tail_plan.h's balanced_tail_chunk: the balanced tail's key blocks per CTA, u = ceil(r nb / SMs) for a last
    round of r tiles of nb blocks (r < SMs, so u <= nb: a chunk holds at most two pieces), taken when its cost, as call
    P49 measured it, 1.12 u + 4.2 + (r + SMs) / 20 main-launch block times, saves a tenth of nb and u >= min_blocks;
    else 0 (also where r nb passes an int)."""
    if r <= 0 or r >= sms or nb <= 0 or r * nb > 0x7FFFFFFF:
        return 0
    u = -(-(r * nb) // sms)
    cost = 1.12 * u + 4.2 + (r + sms) / 20.0
    return u if u >= min_blocks and cost <= 0.9 * nb else 0


def balanced_tail_pieces(t: int, nb: int, u: int) -> int:
    """csrc/tail_plan.h's balanced_tail_pieces: the pieces (CTAs) of tail tile t under a chunk of u blocks."""
    return ((t + 1) * nb - 1) // u - t * nb // u + 1


def exact_tail_splits(tiles: int, blocks: int, sms: int = H200_SMS, rounds: int = EXACT_TAIL_ROUNDS) -> int:
    """Key ranges per tile of the exact kernel's tail launch (csrc/capi.cu, plan_tail) for a launch of `tiles` tiles
    of `blocks` key blocks each, or 0 for none: the last round's r = tiles mod SMs tiles split SMs // r ways (each
    range at least EXACT_TAIL_MIN_BLOCKS blocks, tiles of at least EXACT_TAIL_MIN_TILE_BLOCKS); where that is below 2
    and two rounds are allowed (`rounds` 2; the build's default is 1), the cheapest s of the 8-bit plan's cost model
    (rounds of ceil(blocks / s) + 2 blocks, plus r s / 50) over s <= EXACT_TAIL_MAX_SPLITS and r s <=
    TAIL_ITEMS_PER_SM x SMs, taken when it saves a tenth of the tile. Under the balanced tail (`rounds` 3) the plan
    there is balanced_tail_chunk's, and this returns the most pieces any tail tile has (vidattn_sm90_last_tail_splits
    reports the same)."""
    r = tiles % sms
    if r == 0 or blocks < EXACT_TAIL_MIN_TILE_BLOCKS:
        return 0
    splits = min(sms // r, blocks // EXACT_TAIL_MIN_BLOCKS)
    if splits < 2 and rounds == 3:
        u = balanced_tail_chunk(r, blocks, sms, EXACT_TAIL_MIN_BLOCKS)
        return max(balanced_tail_pieces(t, blocks, u) for t in range(r)) if u else 0
    if splits < 2 and rounds == 2:
        splits = cheapest_tail_split(r, blocks, sms, EXACT_TAIL_MIN_BLOCKS, EXACT_TAIL_MAX_SPLITS, TAIL_ITEMS_PER_SM)
    return splits if splits >= 2 else 0


def exact_workspace_bytes(sms: int = H200_SMS, rounds: int = EXACT_TAIL_ROUNDS) -> int:
    """The exact kernel's per-call workspace (vidattn_sm90_workspace_bytes) on a GPU of `sms` SMs, under the tail
    launch's `rounds` setting."""
    return (TAIL_ITEMS_PER_SM if rounds >= 2 else 1) * sms * TAIL_ITEM_BYTES


def _up(n: int, to: int) -> int:
    return -(-n // to) * to


def q8_tail_plan(b: int, h: int, sq: int, skv: int, sms: int = H200_SMS) -> tuple:
    """(tail tiles, key ranges per tile) of the 8-bit tail launch for (B, H, Sq, Skv), or (0, 1) for the plain
    launch: q8_plan_tail's arithmetic (its cost model in key-block times of one CTA; dev/NOTES_8bit.md "v18")."""
    tiles = -(-sq // Q8_TAIL_BLOCK_M) * h * b
    r, nb = tiles % sms, -(-skv // Q8_BLOCK_N)
    if r == 0:
        return 0, 1
    splits = cheapest_tail_split(r, nb, sms, Q8_TAIL_MIN_BLOCKS, Q8_TAIL_MAX_SPLITS, Q8_TAIL_MAX_ITEMS_PER_SM)
    return (r, splits) if splits >= 2 else (0, 1)


def q8_layout(b: int, h: int, sq: int, skv: int, d: int, sms: int = H200_SMS, h_kv: int | None = None) -> dict:
    """The 8-bit path's workspace part by part, as csrc/capi_8bit.cuh's q8_layout lays it out for (B, H, Sq, Skv, D)
    with the tail launch on (its default): {part: (byte offset, bytes)}, each part starting at a multiple of ALIGN.
    The tail parts (ws_o, ws_ml) only where the call plans a tail launch. K's and V's parts are per key/value head
    (h_kv, default h: grouped-query attention quantizes each once for its group)."""
    bh, bhkv = b * h, b * (h if h_kv is None else h_kv)
    sq_pad, skv_pad = _up(sq, Q8_BLOCK_M_PAD), _up(skv, Q8_BLOCK_N)
    parts = [("q8", bh * sq_pad * d),                                     # Q, int8
             ("q_scale", bh * sq_pad * 4),                                # Q's row scales
             ("k8", bhkv * skv_pad * d),                                  # K, int8
             ("k_scale", bhkv * (skv_pad // Q8_BLOCK_N) * Q8_K_GROUPS * 4),  # K's block scales
             ("vt8", bhkv * d * skv_pad),                                 # V^T, e4m3
             ("v_scale", bhkv * d * 4),                                   # V's channel scales
             ("k_sum", bhkv * d * 4), ("v_amax", bhkv * d * 4),           # K's sums, V's maxima
             ("lse_corr", bh * sq * 4)]                                   # the LSE correction per query row
    tiles, splits = q8_tail_plan(b, h, sq, skv, sms) if d in (64, 128) else (0, 1)
    if tiles:
        parts += [("ws_o", tiles * splits * Q8_TAIL_BLOCK_M * d * 4),     # the tail ranges' O
                  ("ws_ml", tiles * splits * Q8_TAIL_BLOCK_M * 2 * 4)]    # and row statistics
    layout, at = {}, 0
    for name, nbytes in parts:
        layout[name] = (at, nbytes)
        at += _up(nbytes, ALIGN)
    return layout


def q8_workspace_bytes(b: int, h: int, sq: int, skv: int, d: int, sms: int = H200_SMS, h_kv: int | None = None) -> int:
    """The 8-bit path's per-call workspace (vidattn_q8_workspace_bytes_kv), for (B, H, Sq, Skv, D) and h_kv key/value
    heads (default h) on a GPU of `sms` SMs, with the tail launch on (its default)."""
    if min(b, h, sq, skv, d) < 1 or (h_kv is not None and (h_kv < 1 or h % h_kv)):
        return 0
    return sum(_up(nbytes, ALIGN) for _, nbytes in q8_layout(b, h, sq, skv, d, sms, h_kv).values())


def output_bytes(b: int, h: int, sq: int, d: int, elem: int = 2, lse: bool = False) -> int:
    """The call's output (and LSE): the caller keeps these."""
    return b * h * sq * d * elem + (b * h * sq * 4 if lse else 0)


def call_bytes(b: int, h: int, sq: int, skv: int, d: int, precision: str = "exact", sms: int = H200_SMS,
               elem: int = 2, lse: bool = False) -> int:
    """What one call allocates at its peak: output (and LSE) plus its path's workspace. Padded head dims (D=72
    runs on the D=128 build) allocate for their own D: the kernel pads on the fly."""
    ws = q8_workspace_bytes(b, h, sq, skv, d, sms) if precision == "8bit" else exact_workspace_bytes(sms)
    return output_bytes(b, h, sq, d, elem, lse) + ws


# Shapes the docs quote (B, H, Sq, Skv, D): the self-attention of one transformer forward.
QUOTED = {
    "Wan 2.1 1.3B 480p (81 frames)": (1, 12, 32760, 32760, 128),
    "Wan 2.1 14B 720p (81 frames)": (1, 40, 75600, 75600, 128),
    "LTX-Video 768x512 (121 frames)": (1, 32, 6144, 6144, 64),
    "CogVideoX-5B 720x480 (49 frames)": (1, 48, 17776, 17776, 64),
}


def table() -> str:
    """The docs' workspace table (markdown), from the formulas above."""
    rows = ["| call (self-attention) | exact: workspace | 8-bit: workspace | output (bf16) |", "|---|---|---|---|"]
    for name, (b, h, sq, skv, d) in QUOTED.items():
        rows.append(f"| {name}, B{b} H{h} S{sq} D{d} | {exact_workspace_bytes() / 2**20:.1f} MiB | "
                    f"{q8_workspace_bytes(b, h, sq, skv, d) / 1e9:.3f} GB | "
                    f"{output_bytes(b, h, sq, d) / 1e9:.3f} GB |")
    return "\n".join(rows)


if __name__ == "__main__":
    print(table())
