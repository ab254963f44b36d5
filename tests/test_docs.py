"""The user-facing docs hold together: the README stays short, its code parses, every script, file and link it or
the docs name exists, and every results file the index lists is committed. CPU only, no network."""
import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = [README, ROOT / "docs" / "results.md", ROOT / "docs" / "handbook.md", ROOT / "dev" / "README.md",
         ROOT / "bench" / "results" / "INDEX.md"]
# Files and folders a command or sentence names, e.g. `python3 scripts/plot_results.py`, `dev/probes/kernel_ab.sh`.
PATH_RE = re.compile(r"(?<![\w/.-])((?:scripts|dev|docs|bench|tests|csrc|vidattn|pipelines)/[\w./-]*\w)")


def test_readme_is_short():
    assert len(README.read_bytes()) <= 12000  # bytes: the limit is checked on the file, and →, · and ᵀ take more than one


def test_readme_python_blocks_parse():
    blocks = re.findall(r"```python\n(.*?)```", README.read_text(), flags=re.S)
    assert len(blocks) >= 3
    for code in blocks:
        ast.parse(code)


@pytest.mark.parametrize("page", PAGES + sorted((ROOT / "docs" / "guide").glob("*.md")),
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_links_resolve(page):
    text = page.read_text()
    missing = []
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text):
        if "://" in target:
            continue
        if not (page.parent / target).exists():
            missing.append(target)
    assert not missing, f"{page.relative_to(ROOT)} links to missing files: {missing}"


@pytest.mark.parametrize("page", PAGES[:4], ids=lambda p: str(p.relative_to(ROOT)))
def test_named_paths_exist(page):
    missing = []
    for path in PATH_RE.findall(page.read_text()):
        path = path.rstrip(".")
        if any(c in path for c in "*<>{}") or "NN" in path or path.endswith("_"):
            continue  # a pattern or a placeholder, not a file
        if not (ROOT / path).exists():
            missing.append(path)
    assert not missing, f"{page.relative_to(ROOT)} names missing paths: {missing}"


def test_index_lists_committed_files():
    index = ROOT / "bench" / "results" / "INDEX.md"
    results = index.parent
    missing = []
    for name in re.findall(r"`([\w./-]+\.(?:json|md|log|png)|[\w./-]+/)`", index.read_text()):
        if name.startswith(("scripts/", "dev/", "docs/", "tests/")) or any(c in name for c in "*<>{}"):
            continue
        if not ((results / name).exists() or (results / "archive" / name).exists() or (ROOT / name).exists()):
            missing.append(name)
    assert not missing, f"INDEX.md names files that are not there: {missing}"


def test_top_level_results_are_indexed():
    """Every file or folder at the top of bench/results backs a figure and is named in the index; the rest lives
    in archive/."""
    index = (ROOT / "bench" / "results" / "INDEX.md").read_text()
    unlisted = [p.name for p in (ROOT / "bench" / "results").iterdir()
                if p.name not in ("INDEX.md", "archive") and p.name not in index
                and not (p.name.startswith("forward_") and "forward_<family>_20261130" in index)]
    assert not unlisted, f"bench/results/ holds files the index does not name: {unlisted}"


def test_user_docs_speak_of_no_sessions_or_machines():
    pages = [README, ROOT / "docs" / "results.md", ROOT / "docs" / "handbook.md", *sorted((ROOT / "docs" / "guide").glob("*.md"))]
    bad = []
    for page in pages:
        # Archive paths (bench/results/archive/session...) are file names, kept for provenance.
        text = re.sub(r"archive/session\w+", "", page.read_text())
        for pat in (r"\b(first|second|third|fourth|fifth|sixth|seventh|eighth|ninth|tenth|eleventh|twelfth|"
                    r"thirteenth|fourteenth|fifteenth)\s+session", r"\bsession\s*\d", r"issue[- ]\d+'?s? bar",
                    r"\blent\b", r"\blease\b"):
            bad += [f"{page.name}: {m.group(0)}" for m in re.finditer(pat, text, flags=re.I)]
    assert not bad, bad
