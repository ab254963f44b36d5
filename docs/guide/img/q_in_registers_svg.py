# Writes docs/guide/img/q_in_registers.svg: what one S = Q K^T k-step reads from shared memory with Q there and with
# Q in registers (from the wgmma shapes), and the measured ratios to cuDNN, read from an A/B
# files under bench/results/archive/session11_20261201/ (median over rounds, as kernel_ab_time.py prints them):
#   python3 docs/guide/img/q_in_registers_svg.py
import json
import statistics
from pathlib import Path

from svg_bars import bar, legend_entry

REPO = Path(__file__).resolve().parents[3]
AB = REPO / "bench/results/archive/session11_20261201"
C = {"q": "#f8c471", "k": "#f5b041", "v": "#7fb3d5", "a": "#d5d8dc", "b": "#85c1e9", "c": "#a9dfbf"}
SERIES = ("a", "b", "c")  # the bars of one shape, in the order of ratio_panel's names
TEXT = 'font-family="sans-serif"'


def ratios(call: str, names: list[str]) -> dict:
    """shape -> {name: cuDNN median time / name's median time} from one call's ab_times.json."""
    times = json.loads((AB / call / "ab_times.json").read_text())["times_ms"]
    out = {}
    for shape, t in times.items():
        cd = statistics.median(t["cudnn"])
        out[shape] = {n: cd / statistics.median(t[n]) for n in names if n in t}
    return out


def bytes_panel(parts, y0):
    """Shared-memory bytes per warpgroup per 128-key block at D=128: S reads Q (A) and K (B) per k-step, P V reads V."""
    parts.append(f'<text x="20" y="{y0}" {TEXT} font-size="13" font-weight="bold">Shared memory read per warpgroup '
                 'per 128-key block (D = 128): 8 S k-steps, 8 P V k-steps</text>')
    px = 7.0  # px per KB
    rows = [("Q from shared memory", [("q", 16, "Q (A) 8 x 2 KB"), ("k", 32, "K (B) 8 x 4 KB"),
                                      ("v", 32, "V (B) 8 x 4 KB")]),
            ("Q in registers", [("k", 32, "K (B) 8 x 4 KB"), ("v", 32, "V (B) 8 x 4 KB")])]
    for i, (name, segs) in enumerate(rows):
        y = y0 + 14 + i * 34
        parts.append(f'<text x="20" y="{y + 16}" {TEXT} font-size="12">{name}</text>')
        x = 190.0
        for key, kb, label in segs:
            parts.append(bar(x, kb * px, y, 22, C[key], label))
            x += kb * px
        total = sum(kb for _, kb, _ in segs)
        parts.append(f'<text x="{x + 8:.1f}" y="{y + 16}" {TEXT} font-size="12">{total} KB</text>')
    parts.append(f'<text x="190" y="{y0 + 96}" {TEXT} font-size="11" fill="#555">Q goes into registers once per tile '
                 '(ldmatrix, 32 per thread) in wgmma\'s A fragment layout, the layout P already has for P V.</text>')


def ratio_panel(parts, y0, title, rows, names, labels, lo=1.0, hi=1.30, bar_w=300):
    parts.append(f'<text x="20" y="{y0}" {TEXT} font-size="13" font-weight="bold">{title}</text>')
    x0 = 190
    for i, (shape_label, vals) in enumerate(rows):
        y = y0 + 12 + i * (12 * len(names) + 12)
        parts.append(f'<text x="20" y="{y + 6 * len(names) + 4}" {TEXT} font-size="12">{shape_label}</text>')
        for j, n in enumerate(names):
            v = vals[n]
            w = (v - lo) / (hi - lo) * bar_w
            parts.append(bar(x0, w, y + 12 * j, 11, C[SERIES[j]]))
            parts.append(f'<text x="{x0 + w + 5:.1f}" y="{y + 12 * j + 9}" {TEXT} font-size="10">{labels[j]} '
                         f'{v:.3f}</text>')


def main():
    W, H = 1000, 700
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {W} {H}" width="{W}" height="{H}">',
             '<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>',
             f'<text x="20" y="24" {TEXT} font-size="15" font-weight="bold">Q held in registers for S = Q K^T '
             '(VIDATTN_Q_IN_REGS_MAX_N): a fifth less shared-memory reading at N = 128</text>']
    bytes_panel(parts, 56)
    c2 = ratios("call2", ["def", "qr", "s128", "qr128"])
    long_rows = [(lab, c2[s]) for lab, s in (("seed 16K", "seed16k"), ("Wan 1.3B self", "wan13b_self"),
                                             ("Wan 14B self", "wan14b_self"), ("HunyuanVideo", "hunyuan_720p"))]
    ratio_panel(parts, 190, "Long D = 128 shapes on the N = 128 build (call 2, x cuDNN): Q in registers closes the gap "
                            "to N = 176", long_rows, ["s128", "qr128", "def"],
                ["N=128, Q in shared memory", "N=128, Q in registers", "N=176 (shipped)"], lo=1.0, hi=1.30)
    short = {}
    for call, new in (("call2", "qr"), ("call3", "qr"), ("call4", "qd")):
        r = ratios(call, ["def", new])
        for s in ("wan_cross", "fa1k_d128"):
            short.setdefault(s, []).append((call, r[s]["def"], r[s][new]))
    short_rows = []
    for s, lab in (("wan_cross", "Wan cross"), ("fa1k_d128", "FA-bench 1K")):
        for call, d, q in short[s]:
            short_rows.append((f"{lab} ({call})", {"def": d, "q": q}))
    ratio_panel(parts, 420, "The short-key build itself (N = 128), three A/Bs of 7 rounds (x cuDNN)", short_rows,
                ["def", "q"], ["Q in shared memory", "Q in registers"], lo=1.0, hi=1.15, bar_w=500)
    lx, ly = 20, H - 26
    for key, name in (("q", "Q (A operand)"), ("k", "K (B)"), ("v", "V (B)"), ("a", "Q in shared memory"),
                      ("b", "Q in registers"), ("c", "N = 176, Q in shared memory (shipped)")):
        parts += legend_entry(lx, ly, C[key], name)
        lx += 18 + 7 * len(name) + 16
    parts.append(f'<text x="20" y="{H - 4}" {TEXT} font-size="10" fill="#555">Ratios: cuDNN median time / vidattn '
                 'median time, from bench/results/archive/session11_20261201/call2-4/ab_times.json; bars start at 1.0.</text>')
    parts.append("</svg>")
    Path(__file__).with_suffix("").with_name("q_in_registers.svg").write_text("\n".join(parts) + "\n")


if __name__ == "__main__":
    main()
