"""Draws causal.svg: which key blocks a causal tile loads, computes and masks, and the tile order.
    python3 docs/guide/img/causal_svg.py"""
from pathlib import Path

N = 8                      # query tiles = key blocks (M = N), one head
CELL, X0, Y0 = 34, 70, 60
BLUE, ORANGE, GREY = "#2f6fd6", "#f0a040", "#e4e6ea"


def main() -> None:
    out = ['<svg xmlns="http://www.w3.org/2000/svg" width="990" height="400" viewBox="0 0 990 400" font-family="sans-serif" font-size="12">',
           '<rect width="990" height="400" fill="white"/>',
           f'<text x="{X0}" y="28" font-size="14">One head, top-left causal, M = N: query tile m reads key blocks 0..m</text>',
           f'<text x="{X0 + N * CELL / 2}" y="{Y0 - 8}" text-anchor="middle">key blocks →</text>',
           f'<text x="{X0 - 12}" y="{Y0 + N * CELL / 2}" text-anchor="middle" '
           f'transform="rotate(-90 {X0 - 12} {Y0 + N * CELL / 2})">query tiles →</text>']
    for m in range(N):
        for j in range(N):
            fill = BLUE if j < m else ORANGE if j == m else GREY
            out.append(f'<rect x="{X0 + j * CELL}" y="{Y0 + m * CELL}" width="{CELL - 2}" height="{CELL - 2}" '
                       f'fill="{fill}"/>')
            if j == m:  # the diagonal block: its upper triangle is masked
                x, y = X0 + j * CELL, Y0 + m * CELL
                out.append(f'<polygon points="{x},{y} {x + CELL - 2},{y} {x + CELL - 2},{y + CELL - 2}" '
                           f'fill="white" opacity="0.55"/>')
        order = N - m  # heaviest first: tile N-1 is launched first
        out.append(f'<text x="{X0 + N * CELL + 12}" y="{Y0 + m * CELL + 22}">{m + 1} blocks, launched {order}.</text>')
    lx = 540
    for i, (fill, text) in enumerate([(BLUE, "loaded by TMA, computed, no mask"),
                                      (ORANGE, "diagonal block: computed, keys past the row masked"),
                                      (GREY, "past the tile's last row: never loaded, never computed")]):
        out.append(f'<rect x="{lx}" y="{Y0 + 4 + i * 28}" width="18" height="18" fill="{fill}"/>')
        out.append(f'<text x="{lx + 26}" y="{Y0 + 18 + i * 28}">{text}</text>')
    notes = ["The producer and the consumers compute the same block count",
             "per tile (m + 1), so the ring's stage and phase accounting is",
             "the non-causal one.",
             "",
             "Tiles go heaviest first within a head; odd rounds run the CTAs",
             "in reverse (snake), pairing heavy and light residue classes.",
             "No tail launch for causal calls.",
             "",
             "Bottom-right alignment shifts the diagonal by kv_len - Sq;",
             "a row that sees no key gives O = 0 and LSE = -inf."]
    for i, line in enumerate(notes):
        out.append(f'<text x="{lx}" y="{Y0 + 112 + i * 17}">{line}</text>')
    out.append("</svg>")
    (Path(__file__).with_name("causal.svg")).write_text("\n".join(out) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
