# Writes docs/guide/img/head_dims.svg from the measured anchors (vidattn, FlashAttention-3 bf16, cuDNN at head dims
# 96/192/256, Allegro and the padded 72/80/112): python3 docs/guide/img/head_dims_svg.py
import re
from pathlib import Path

from svg_bars import bar, legend_entry

ROOT = Path(__file__).resolve().parents[3]
LOG = "bench/results/h200_2026-12-02_envelope/kernel_f/anchors_f.log"
SERIES = (("vidattn", "vidattn", "#5dade2"), ("fa3", "FlashAttention-3 bf16", "#f5b041"), ("cudnn", "cuDNN", "#aab7b8"))


def rows(text):
    """The non-causal anchor lines: (shape, {backend: TFLOPS}) in the log's order."""
    out = []
    for m in re.finditer(r"^\[anchors\] (.+?): (.+) TFLOPS$", text, re.M):
        name = m.group(1)
        if name.startswith("causal"):
            continue
        vals = {k: float(v) for k, v in re.findall(r"(\w+) ([\d.]+)", m.group(2))}
        out.append((name, vals))
    return out


def main():
    data = rows((ROOT / LOG).read_text(encoding="utf-8"))
    W, bw, gap = 1000, 18, 14
    H = 330
    x0, y0, ph = 60, 50, 220
    top = 800.0
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}">',
             '<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>',
             '<text x="20" y="24" font-family="sans-serif" font-size="15" font-weight="bold">Head dims 72..256 on '
             'the H200: TFLOPS at the shape\'s own D (bf16, non-causal; measured)</text>']
    for t in range(0, int(top) + 1, 200):
        y = y0 + ph - t / top * ph
        parts.append(f'<line x1="{x0}" y1="{y:.1f}" x2="{W - 20}" y2="{y:.1f}" stroke="#ddd" stroke-width="0.6"/>')
        parts.append(f'<text x="{x0 - 6}" y="{y + 4:.1f}" font-family="sans-serif" font-size="10" '
                     f'text-anchor="end">{t}</text>')
    x = x0 + 10
    for name, vals in data:
        for key, _, fill in SERIES:
            v = vals.get(key)
            if v is not None:
                h = v / top * ph
                parts.append(bar(x, bw, round(y0 + ph - h, 1), round(h, 1), fill))
            x += bw
        parts.append(f'<text x="{x - 1.5 * bw:.1f}" y="{y0 + ph + 14}" font-family="sans-serif" font-size="9" '
                     f'text-anchor="middle">{name.replace(" (padded)", "*")}</text>')
        x += gap
    lx, ly = 60, H - 46
    for _, label, fill in SERIES:
        parts += legend_entry(lx, ly, fill, label)
        lx += 18 + 7 * len(label) + 16
    parts.append(f'<text x="20" y="{H - 12}" font-family="sans-serif" font-size="10" fill="#555">* padded on the next '
                 f'build up (72, 80 on D=96; 112 on D=128). Source: {LOG} (one run, triton do_bench medians).</text>')
    parts.append("</svg>")
    (Path(__file__).parent / "head_dims.svg").write_text("\n".join(parts) + "\n", encoding="utf-8")


if __name__ == "__main__":
    main()
