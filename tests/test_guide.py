"""docs/guide: every SVG is well-formed, self-contained SVG; every page links images and files that exist; every
lineage step (docs/guide/lineage/NN_*.cu) has a page. CPU only, no GPU, no network."""
import re
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDE = ROOT / "docs" / "guide"
IMG = GUIDE / "img"
LINEAGE = ROOT / "docs" / "guide" / "lineage"
SVG_NS = "{http://www.w3.org/2000/svg}"
STEPS = [f"{n:02d}" for n in range(1, 13)]

LINK = re.compile(r"\]\(([^)\s]+)\)")


def _pages():
    return sorted(GUIDE.glob("[0-9][0-9]_*.md"))


def _page_for(step):
    pages = sorted(GUIDE.glob(f"{step}_*.md"))
    assert len(pages) <= 1, f"more than one page for step {step}: {pages}"
    return pages[0] if pages else None


def _links(md_path):
    return [m.group(1).split("#", 1)[0] for m in LINK.finditer(md_path.read_text(encoding="utf-8"))]


def _svgs():
    return sorted(IMG.glob("*.svg"))


def test_guide_exists():
    assert (GUIDE / "README.md").is_file()
    assert _svgs(), "docs/guide/img has no SVG"


@pytest.mark.parametrize("svg", _svgs(), ids=lambda p: p.name)
def test_svg_is_plain_svg(svg):
    root = ET.parse(svg).getroot()  # raises on malformed XML
    assert root.tag == f"{SVG_NS}svg", f"{svg.name}: root is {root.tag}, not an SVG element in the SVG namespace"
    assert root.get("viewBox"), f"{svg.name}: no viewBox (it would not scale on the page)"
    for el in root.iter():
        tag = el.tag.replace(SVG_NS, "")
        assert tag not in ("script", "foreignObject", "image"), f"{svg.name}: <{tag}> is not allowed"
        for key, value in el.attrib.items():
            assert not key.lower().startswith("on"), f"{svg.name}: event handler {key}"
            if key.endswith("href"):
                assert value.startswith("#"), f"{svg.name}: external reference {value}"
        style = (el.text or "") if tag == "style" else el.get("style", "")
        assert "@import" not in style and "url(http" not in style, f"{svg.name}: external resource in CSS"
    # Fonts: generic families only, so the page renders the same everywhere.
    text = svg.read_text(encoding="utf-8")
    for fam in re.findall(r'font-family="([^"]+)"', text):
        assert fam in ("sans-serif", "serif", "monospace"), f"{svg.name}: font-family {fam!r} is not generic"


@pytest.mark.parametrize("step", STEPS)
def test_step_page(step):
    page = _page_for(step)
    assert page is not None, f"no docs/guide/{step}_*.md"
    text = page.read_text(encoding="utf-8")
    assert "<!-- step-result:begin -->" in text and "<!-- step-result:end -->" in text, f"{page.name}: markers"
    assert text.index("<!-- step-result:begin -->") < text.index("<!-- step-result:end -->")
    links = _links(page)
    images = [l for l in links if l.startswith("img/")]
    assert images, f"{page.name}: no diagram"
    for link in links:
        if link.startswith(("http://", "https://")):
            continue
        if link.startswith("diffs/"):
            assert link == f"diffs/{step}.diff", f"{page.name}: links {link}, expected diffs/{step}.diff"
            # Written by dev/tools/lineage_diffs.py: required once that script has run (the folder exists) and both
            # this step's file and its predecessor's exist.
            prev = f"{int(step) - 1:02d}"
            if (GUIDE / "diffs").is_dir() and sorted(LINEAGE.glob(f"{step}_*.cu")) and sorted(
                LINEAGE.glob(f"{prev}_*.cu")
            ):
                assert (GUIDE / link).is_file(), f"{page.name}: {link} missing: run dev/tools/lineage_diffs.py"
            continue
        if link.startswith("lineage/") and not sorted(LINEAGE.glob(f"{step}_*.cu")):
            continue  # this step's file is not written yet; checked below once it is
        assert (page.parent / link).resolve().exists(), f"{page.name}: broken link {link}"
    if step != "01":
        assert f"diffs/{step}.diff" in links, f"{page.name}: no link to diffs/{step}.diff"
    # The step file: when it exists, the page must link exactly that file (and be named after it).
    step_files = sorted(LINEAGE.glob(f"{step}_*.cu"))
    if not step_files:
        pytest.skip(f"docs/guide/lineage/{step}_*.cu not written yet")
    step_file = step_files[0]
    assert f"lineage/{step_file.name}" in links, f"{page.name}: does not link {step_file.name}"
    assert page.stem == step_file.stem, f"{page.name}: page name differs from {step_file.name}"


def test_pages_beyond_the_lineage_link_what_exists():
    for page in GUIDE.glob("*.md"):
        if page.name == "README.md" or page in _pages():
            continue
        for link in _links(page):
            if not link.startswith(("http://", "https://")):
                assert (page.parent / link).resolve().exists(), f"{page.name}: broken link {link}"
        assert any(l.startswith("img/") for l in _links(page)), f"{page.name}: no diagram"


def test_every_lineage_step_has_a_page():
    for cu in sorted(LINEAGE.glob("[0-9][0-9]_*.cu")):
        assert (GUIDE / f"{cu.stem}.md").is_file(), f"{cu.name} has no page docs/guide/{cu.stem}.md"


def test_index():
    text = (GUIDE / "README.md").read_text(encoding="utf-8")
    assert "<!-- lineage-results:begin -->" in text and "<!-- lineage-results:end -->" in text
    links = _links(GUIDE / "README.md")
    for link in links:
        if not link.startswith(("http://", "https://")):
            assert (GUIDE / link).resolve().exists(), f"README.md: broken link {link}"
    for page in _pages():
        assert page.name in links, f"README.md does not link {page.name}"
    for svg in _svgs():
        assert f"img/{svg.name}" in links, f"README.md does not list img/{svg.name}"
    # Every diagram is used by at least one page (step pages, or the pages beyond the lineage).
    extra = [p for p in GUIDE.glob("*.md") if p.name != "README.md" and p not in _pages()]
    for page in extra:
        assert page.name in links, f"README.md does not link {page.name}"
    used = {l for p in _pages() + extra for l in _links(p)}
    for svg in _svgs():
        assert f"img/{svg.name}" in used, f"img/{svg.name} is on no page"
