# Writes docs/guide/img/deferred_o_store.svg (schematic; bar lengths are the timeline medians at seed 4K):
#   python3 docs/guide/img/deferred_o_store_svg.py
from svg_bars import bar, legend_entry
S = 0.18  # px per cycle
X0 = 150
def rect(x0, x1, y, h, fill, label="", tc="#000"):
    return bar(X0 + x0 * S, (x1 - x0) * S, y, h, fill, label, min_label_w=28, text_fill=tc)
C = {"pv": "#7fb3d5", "s0": "#f5b041", "epi": "#e74c3c", "pack": "#f1948a", "setup": "#d5d8dc", "wait": "#ffffff",
     "soft": "#82e0aa", "st": "#c39bd3", "idle": "#fdebd0"}
parts = []
W, H = 1000, 450
parts.append(f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}">')
parts.append('<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>')
parts.append('<text x="20" y="24" font-family="sans-serif" font-size="15" font-weight="bold">A tile boundary, two consumer warpgroups (schematic, N = 176, cycles from the timeline build at seed 4K)</text>')
def panel(y0, title, wg0, wg1, tc):
    parts.append(f'<text x="20" y="{y0 + 2}" font-family="sans-serif" font-size="13" font-weight="bold">{title}</text>')
    for i, (name, segs) in enumerate((("warpgroup 0", wg0), ("warpgroup 1", wg1), ("tensor cores", tc))):
        y = y0 + 14 + i * 34
        parts.append(f'<text x="20" y="{y + 17}" font-family="sans-serif" font-size="12">{name}</text>')
        for seg in segs:
            parts.append(rect(seg[0], seg[1], y, 24, C[seg[2]], seg[3] if len(seg) > 3 else ""))
# before: WG0 issues its last P V at 0; WG1 one turn behind
before_wg0 = [(0, 704, "wait", "last P V"), (704, 1891, "epilogue" and "epi", "epilogue: normalise, stmatrix, TMA store"),
              (1891, 2561, "setup", "next tile"), (2561, 3265, "wait", "S_0"), (3265, 3965, "soft", "softmax S_0")]
before_wg1 = [(704, 1408, "wait", "last P V"), (1408, 2595, "epi", "epilogue"), (2595, 3265, "setup", "next tile"),
              (3265, 3969, "wait", "S_0"), (3969, 4400, "soft", "softmax")]
before_tc = [(0, 704, "pv", "P V (wg 0)"), (704, 1408, "pv", "P V (wg 1)"), (1408, 2561, "idle", "idle: 1150"),
             (2561, 3265, "s0", "S_0 (wg 0)"), (3265, 3969, "s0", "S_0 (wg 1)"), (3969, 4400, "pv", "S_1 + P V_0 ...")]
after_wg0 = [(0, 704, "wait", "last P V"), (704, 1111, "pack", "pack O"), (1111, 1781, "setup", "next tile"),
             (1781, 2500, "st", "O stores"), (2500, 3200, "soft", "softmax S_0")]
after_wg1 = [(704, 1408, "wait", "last P V"), (1408, 1815, "pack", "pack"), (1815, 2485, "setup", "next tile"),
             (2485, 3204, "st", "O stores"), (3204, 3904, "soft", "softmax")]
after_tc = [(0, 704, "pv", "P V (wg 0)"), (704, 1408, "pv", "P V (wg 1)"), (1408, 1781, "idle", "idle"),
            (1781, 2485, "s0", "S_0 (wg 0)"), (2485, 3189, "s0", "S_0 (wg 1)"), (3200, 4400, "pv", "S_1 + P V_0 ...")]
panel(50, "Before: the epilogue stores O before the next tile's S_0 is issued", before_wg0, before_wg1, before_tc)
panel(210, "After (94a8692): O is packed, S_0 issued, and the stores run while S_0 is on the tensor cores", after_wg0, after_wg1, after_tc)
# legend
lx, ly = 20, 372
for key, name in (("pv", "P V / S + P V"), ("s0", "S_0"), ("epi", "epilogue (stores inside)"), ("pack", "normalise + pack to bf16"),
                  ("st", "stmatrix + TMA store"), ("setup", "tile set-up, Q and K_0 waits"), ("soft", "softmax"), ("idle", "tensor cores idle")):
    parts += legend_entry(lx, ly, C[key], name)
    lx += 18 + 7 * len(name) + 14
    if lx > 860:
        lx, ly = 20, ly + 18
parts.append(f'<text x="20" y="{H - 6}" font-family="sans-serif" font-size="10" fill="#555">Medians per tile from dev/probes/timeline_probe.py (bench/results/archive/session9_20261201/call1, call3): epilogue 1187 -> 407 cycles, S_0 phase 922 -> 1403 cycles; 1 px = 5.6 cycles.</text>')
parts.append("</svg>")
open(__import__("pathlib").Path(__file__).with_suffix("").with_name("deferred_o_store.svg"), "w").write("\n".join(parts) + "\n")
