# Writes docs/guide/img/late_v_wait.svg (schematic: the order of events in one key iteration, bar lengths
# illustrative, not measured): python3 docs/guide/img/late_v_wait_svg.py
from pathlib import Path

from svg_bars import bar, legend_entry

S = 0.2  # px per cycle
X0 = 170
C = {"k": "#f5b041", "v": "#7fb3d5", "s": "#f8c471", "pv": "#85c1e9", "soft": "#82e0aa", "wait": "#ffffff",
     "idle": "#fdebd0", "other": "#d5d8dc"}


def rect(x0, x1, y, h, fill, label=""):
    return bar(X0 + x0 * S, (x1 - x0) * S, y, h, fill, label, min_label_w=30)


def panel(parts, y0, title, rows):
    parts.append(f'<text x="20" y="{y0}" font-family="sans-serif" font-size="13" font-weight="bold">{title}</text>')
    for i, (name, segs) in enumerate(rows):
        y = y0 + 12 + i * 32
        parts.append(f'<text x="20" y="{y + 16}" font-family="sans-serif" font-size="12">{name}</text>')
        for seg in segs:
            parts.append(rect(seg[0], seg[1], y, 22, C[seg[2]], seg[3] if len(seg) > 3 else ""))


def main():
    W, H = 1000, 420
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}">',
             '<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>',
             '<text x="20" y="24" font-family="sans-serif" font-size="15" font-weight="bold">One key iteration of '
             'warpgroup 0 when V_{j-1} lands late (schematic; N = 176: S_j and P V each 704 tensor cycles)</text>']
    # K_j lands at 300, V_{j-1} at 900 (its stage was the last one released: after both warpgroups' P V)
    before = [
        ("K_j load", [(0, 300, "k", "K_j in flight")]),
        ("V_{j-1} load", [(0, 900, "v", "V_{j-1} in flight (released last)")]),
        ("warpgroup 0", [(0, 900, "wait", "waits for K_j and V_{j-1}"), (900, 960, "other", ""),
                         (960, 1664, "wait", "S_j runs"), (1664, 3000, "soft", "softmax S_j, P V wait, pack")]),
        ("tensor cores", [(0, 200, "other", "wg 1"), (200, 960, "idle", "idle"), (960, 1664, "s", "S_j"),
                          (1664, 2368, "pv", "P_{j-1} V_{j-1}"), (2368, 3000, "other", "wg 1 ...")]),
    ]
    after = [
        ("K_j load", [(0, 300, "k", "K_j in flight")]),
        ("V_{j-1} load", [(0, 900, "v", "V_{j-1} in flight (released last)")]),
        ("warpgroup 0", [(0, 300, "wait", "waits K_j"), (300, 360, "other", ""),
                         (360, 900, "wait", "V wait (turn held), S_j runs"), (900, 940, "other", ""),
                         (940, 1064, "wait", "S_j"), (1064, 2400, "soft", "softmax S_j, P V wait, pack")]),
        ("tensor cores", [(0, 200, "other", "wg 1"), (200, 360, "idle", ""), (360, 1064, "s", "S_j"),
                          (1064, 1768, "pv", "P_{j-1} V_{j-1}"), (1768, 3000, "other", "wg 1 ...")]),
    ]
    panel(parts, 56, "Before: S_j and P_{j-1} V_{j-1} are issued together once both K_j and V_{j-1} have landed", before)
    panel(parts, 226, "After (VIDATTN_LATE_V_WAIT): S_j is issued on K_j alone; V_{j-1} is waited for inside the turn, "
                      "while S_j runs", after)
    lx, ly = 20, 392
    for key, name in (("k", "K load"), ("v", "V load"), ("s", "S = Q K^T"), ("pv", "P V"), ("soft", "softmax"),
                      ("other", "other warpgroup / issue"), ("idle", "tensor cores idle")):
        parts += legend_entry(lx, ly, C[key], name)
        lx += 18 + 7 * len(name) + 16
    parts.append(f'<text x="20" y="{H - 4}" font-family="sans-serif" font-size="10" fill="#555">A V stage is released '
                 'only after both warpgroups\' P V (and a K stage after their S), so of the two loads a key iteration '
                 'needs, V is the one that lands last; 1 px = 5 cycles.</text>')
    parts.append("</svg>")
    Path(__file__).with_suffix("").with_name("late_v_wait.svg").write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
