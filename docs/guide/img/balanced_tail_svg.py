# Writes docs/guide/img/balanced_tail.svg (schematic, not measured): the last round of tiles on the plain schedule
# and as the balanced tail (VIDATTN_TAIL_ROUNDS=3), on a small card of 8 SMs with 6 tiles of 10 key blocks left:
# python3 docs/guide/img/balanced_tail_svg.py
from pathlib import Path

from svg_bars import bar, legend_entry, svg_header, write_svg

SMS, TILES, NB = 8, 6, 20
U = -(-TILES * NB // SMS)  # blocks per CTA: 15
BW, BH = 14, 18  # pixels a key block, a row's height
PART = 2  # a piece's partial store, in block widths (schematic)
X0 = 110
COLOURS = ["#5dade2", "#f5b041", "#58d68d", "#af7ac5", "#ec7063", "#48c9b0"]


def row_label(parts, y, text):
    parts.append(f'<text x="{X0 - 8}" y="{y + 13}" font-family="sans-serif" font-size="10" '
                 f'text-anchor="end">{text}</text>')


def main():
    parts = svg_header(960, 625, f"The last round: {TILES} tiles of {NB} key blocks on {SMS} SMs (schematic)")
    # plain: one tile per CTA, SMs - TILES idle
    y = 60
    parts.append(f'<text x="20" y="{y - 8}" font-family="sans-serif" font-size="13" font-weight="bold">Plain '
                 '(VIDATTN_TAIL_ROUNDS=1 where one range a tile per SM splits nothing): the round lasts a whole '
                 'tile</text>')
    for g in range(SMS):
        row_label(parts, y + g * (BH + 4), f"CTA {g}")
        if g < TILES:
            parts.append(bar(X0, NB * BW, y + g * (BH + 4), BH, COLOURS[g], f"tile {g}: blocks 0-{NB - 1}"))
        else:
            parts.append(f'<text x="{X0 + 4}" y="{y + g * (BH + 4) + 13}" font-family="sans-serif" font-size="10" '
                         'fill="#888">idle</text>')
    end_plain = X0 + NB * BW
    # balanced: the tiles' blocks end to end, one chunk of U per CTA
    y2 = y + SMS * (BH + 4) + 50
    parts.append(f'<text x="20" y="{y2 - 8}" font-family="sans-serif" font-size="13" font-weight="bold">Balanced '
                 f'(3): the {TILES * NB} blocks end to end, one chunk of u = ceil({TILES} x {NB} / {SMS}) = {U} per '
                 'CTA, at most two pieces</text>')
    for g in range(SMS):
        yy = y2 + g * (BH + 4)
        row_label(parts, yy, f"CTA {g}")
        b0, b1 = min(g * U, TILES * NB), min((g + 1) * U, TILES * NB)
        x = X0
        b = b0
        while b < b1:
            t = b // NB
            e = min(b1, (t + 1) * NB)
            parts.append(bar(x, (e - b) * BW, yy, BH, COLOURS[t], f"t{t}: {b - t * NB}-{e - t * NB - 1}",
                             min_label_w=40))
            x += (e - b) * BW
            parts.append(bar(x, PART * BW, yy, BH, "#eef0f2", "part.", min_label_w=20))
            x += PART * BW
            b = e
    end_bal = X0 + (U + 2 * PART) * BW
    parts.append(f'<line x1="{end_plain}" y1="{y - 6}" x2="{end_plain}" y2="{y2 + SMS * (BH + 4)}" stroke="#c0392b" '
                 'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{end_plain + 4}" y="{y + SMS * (BH + 4) + 8}" font-family="sans-serif" font-size="10" '
                 'fill="#c0392b">the plain round ends</text>')
    parts.append(f'<line x1="{end_bal}" y1="{y2 - 4}" x2="{end_bal}" y2="{y2 + SMS * (BH + 4)}" stroke="#1e8449" '
                 'stroke-dasharray="4 3"/>')
    parts.append(f'<text x="{end_bal + 4}" y="{y2 + SMS * (BH + 4) + 12}" font-family="sans-serif" font-size="10" '
                 'fill="#1e8449">balanced tail ends, then the merge (combine_kernel)</text>')
    ly = y2 + SMS * (BH + 4) + 34
    x = 20
    for t in range(TILES):
        parts += legend_entry(x, ly, COLOURS[t], f"tile {t}")
        x += 70
    parts += legend_entry(x, ly, "#eef0f2", "partial store (O fp32, row max, row sum)")
    notes = [
        "Item k x SMs + g is piece k of CTA g (csrc/tail_plan.h, balanced_piece); the merge finds tile t's pieces at",
        "CTAs floor(t nb / u) .. floor(((t + 1) nb - 1) / u), and weighs them as it weighs ranges.",
        "Measured at D=256 (H200, 132 SMs): 32K keys, 68 tiles of 410 blocks, u = 212: +0.8% a call (11 of 12 rounds,",
        "call P48); 8K, 100 tiles of 103 blocks, u = 79: -1.3%. Why 8K lost (call P49): the split kernel's key block",
        "costs 1.12 of the main launch's (its exact softmax) and the merge ~10 blocks: 104 against the plain 103.",
        "The plan prices that now (balanced_tail_chunk) and leaves 8K plain; the setting is off by default (calls P48-P51).",
    ]
    for i, n in enumerate(notes):
        parts.append(f'<text x="20" y="{ly + 34 + 16 * i}" font-family="sans-serif" font-size="11">{n}</text>')
    write_svg(parts, Path(__file__).with_name("balanced_tail.svg"))


if __name__ == "__main__":
    main()
