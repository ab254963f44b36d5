# Writes docs/guide/img/unrounded_row_sum.svg (schematic: where each score's row sum is taken, and the CUDA-core
# instructions per score in the N = 176 steady loop, counted in the SASS of the shipped builds):
# python3 docs/guide/img/unrounded_row_sum_svg.py
from pathlib import Path

from svg_bars import bar, legend_entry

C = {"ffma": "#f8c471", "mufu": "#f5b041", "f2fp": "#85c1e9", "int": "#ec7063", "fadd": "#82e0aa",
     "wgmma": "#d5d8dc"}
FONT = 'font-family="sans-serif"'


def box(x, y, w, h, fill, label):
    return bar(x, w, y, h, fill, label, min_label_w=10)


def arrow(x0, y0, x1, y1):
    return (f'<line x1="{x0}" y1="{y0}" x2="{x1}" y2="{y1}" stroke="#333" stroke-width="1.2" '
            f'marker-end="url(#head)"/>')


def text(x, y, s, size=12, weight="normal", fill="#000", anchor="start"):
    return (f'<text x="{x}" y="{y}" {FONT} font-size="{size}" font-weight="{weight}" fill="{fill}" '
            f'text-anchor="{anchor}">{s}</text>')


def flow(parts, y0, title, rounded_sum):
    """s -> FFMA -> MUFU -> p (fp32) -> F2FP -> p^ (bf16) -> P V, with the row sum tapped before or after F2FP."""
    parts.append(text(20, y0, title, 13, "bold"))
    y = y0 + 22
    xs = [20, 150, 280, 430, 560, 720]
    labels = [("s (fp32)", "#ffffff"), ("FFMA s*c - m0*c", C["ffma"]), ("MUFU.EX2", C["mufu"]),
              ("p (fp32)", "#ffffff"), ("F2FP: p^ (bf16)", C["f2fp"]), ("P V (wgmma)", C["wgmma"])]
    for (label, fill), x in zip(labels, xs):
        parts.append(box(x, y, 110, 26, fill, label))
    for a, b in zip(xs, xs[1:]):
        parts.append(arrow(a + 110, y + 13, b - 2, y + 13))
    ys = y + 64
    if rounded_sum:
        parts.append(box(560, ys, 110, 26, C["int"], "unpack: LOP3, IMAD"))
        parts.append(box(720, ys, 110, 26, C["fadd"], "FADD: sum p^"))
        parts.append(arrow(615, y + 26, 615, ys - 2))
        parts.append(arrow(670, ys + 13, 718, ys + 13))
        parts.append(text(850, ys + 10, "O = sum p^ v / sum p^:", 11))
        parts.append(text(850, ys + 24, "an exact weighted mean of V", 11))
    else:
        parts.append(box(430, ys, 110, 26, C["fadd"], "FADD: sum p"))
        parts.append(arrow(485, y + 26, 485, ys - 2))
        parts.append(text(560, ys + 10, "O = sum p^ v / sum p: each p^ is p to within 2^-9, so a row carries a "
                          "scale", 11))
        parts.append(text(560, ys + 24, "error of up to 2^-9 of its dominant key's share (FlashAttention's sum)", 11))


def main():
    W, H = 1120, 430
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}">',
             '<defs><marker id="head" markerWidth="8" markerHeight="8" refX="7" refY="4" orient="auto">'
             '<path d="M0,0 L8,4 L0,8 z" fill="#333"/></marker></defs>',
             '<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>',
             text(20, 24, "One score of the steady key loop on the CUDA cores: where its row sum is taken", 15, "bold")]
    flow(parts, 54, "Step 14 (rounded sums): the sum reads P as P V sees it, after the bf16 rounding", True)
    flow(parts, 184, "Step 15 (unrounded sums): the sum reads p in fp32 as exponentiated, before the rounding", False)
    # instructions per score, the N = 176 loop's SASS (F2FP packs two scores)
    y = 318
    parts.append(text(20, y, "CUDA-core instructions per score (SASS of the N = 176 steady loop)", 13, "bold"))
    rows = [("step 14", [("ffma", 1, "FFMA"), ("mufu", 1, "MUFU"), ("f2fp", 0.5, "F2FP"), ("int", 1, "LOP3 / IMAD"),
                         ("fadd", 1, "FADD")]),
            ("step 15", [("ffma", 1, "FFMA"), ("mufu", 1, "MUFU"), ("f2fp", 0.5, "F2FP"), ("fadd", 1, "FADD")])]
    for i, (name, segs) in enumerate(rows):
        yy = y + 12 + i * 32
        parts.append(text(20, yy + 16, name))
        x = 90
        for key, n, label in segs:
            parts.append(bar(x, n * 90, yy, 22, C[key], label, min_label_w=20))
            x += n * 90
        parts.append(text(x + 10, yy + 16, f"{sum(n for _, n, _ in segs):g} per score", 11))
    lx, ly = 560, y + 20
    for key, name in (("ffma", "FMA"), ("mufu", "exp2 (MUFU)"), ("f2fp", "pack to bf16"), ("int", "integer op"),
                      ("fadd", "row-sum add"), ("wgmma", "tensor cores")):
        parts += legend_entry(lx, ly, C[key], name)
        lx += 18 + 7 * len(name) + 16
        if lx > W - 120:
            lx, ly = 560, ly + 20
    parts.append(text(20, H - 8, "At the 700 W limit an instruction costs energy the tensor cores would use: dropping "
                      "the sums whole bought 2.5-6.5% (a timing-only build); dropping the unpack alone, up to 5.6%.",
                      10, fill="#555"))
    parts.append("</svg>")
    Path(__file__).with_suffix("").with_name("unrounded_row_sum.svg").write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
