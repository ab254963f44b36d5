# The pieces the guide's generated diagrams share (deferred_o_store_svg.py, late_v_wait_svg.py,
# q_in_registers_svg.py, unrounded_row_sum_svg.py, kv2_vt_tile_svg.py, balanced_tail_svg.py): a bar with its label
# centred on it, a legend entry, and (balanced_tail_svg.py's so far) the diagram's opening and its writing out.
# Positions are in pixels; each diagram scales its own quantities.


def bar(x, w, y, h, fill, label="", min_label_w=30, text_fill=None):
    """A rectangle at (x, y) of width w, labelled in its middle when it is wider than min_label_w."""
    out = f'<rect x="{x:.1f}" y="{y}" width="{w:.1f}" height="{h}" fill="{fill}" stroke="#333" stroke-width="0.6"/>'
    if label and w > min_label_w:
        colour = f' fill="{text_fill}"' if text_fill else ""
        out += (f'<text x="{x + w / 2:.1f}" y="{y + h / 2 + 4}" font-family="sans-serif" font-size="10" '
                f'text-anchor="middle"{colour}>{label}</text>')
    return out


def legend_entry(x, y, fill, name):
    """A colour swatch and its name; the caller advances x by about 18 + 7 * len(name) for the next one."""
    return [f'<rect x="{x}" y="{y}" width="14" height="12" fill="{fill}" stroke="#333" stroke-width="0.6"/>',
            f'<text x="{x + 18}" y="{y + 10}" font-family="sans-serif" font-size="11">{name}</text>']


def svg_header(width, height, title):
    """The opening of a diagram: the root element with its viewBox, a white ground, and the bold title."""
    return [f'<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 {width} {height}" width="{width}" '
            f'height="{height}">',
            '<rect x="0" y="0" width="100%" height="100%" fill="#ffffff"/>',
            f'<text x="20" y="24" font-family="sans-serif" font-size="15" font-weight="bold">{title}</text>']


def write_svg(parts, path):
    """Closes the diagram and writes it to `path` (a Path beside the script), saying so."""
    path.write_text("\n".join(parts + ["</svg>"]) + "\n")
    print(f"wrote {path}")
