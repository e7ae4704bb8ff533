"""docs/MECHANISMS.md is the reference the code cites: every citation must land on a section.

Checked here: every ``MECHANISMS.md §N`` / ``section N`` citation in the Python sources, the
README and ``docs/`` names an existing numbered heading of docs/MECHANISMS.md (and so do the
document's own ``§N`` cross-references); Python sources cite it by its path in the repository;
every name the mechanism registry accepts has a section; the README links the document.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from client_sdk.mechanisms import MECHANISMS, PRESETS

ROOT = Path(__file__).resolve().parent.parent
REFERENCE = ROOT / "docs" / "MECHANISMS.md"
SKIP_DIRS = {"build", "dist", "node_modules", "__pycache__"}

HEADING = re.compile(r"^## (\d+)\. (.+)$", re.MULTILINE)
# "MECHANISMS.md §12", "MECHANISMS.md section 13", "MECHANISMS.md s. 12", "§11–17", across a
# line break too (wrapped docstrings and Markdown paragraphs).
CITATION = re.compile(
    r"MECHANISMS\.md[\s)\]]*(?:§|sections?\b|s\.)\s*(\d+)(?:\s*[–-]\s*§?\s*(\d+))?"
)
CROSS_REFERENCE = re.compile(r"§(\d+)(?:\s*[–-]\s*§?(\d+))?")


def headings(text: str) -> dict[int, str]:
    """Section number -> heading text of the numbered ``## N. ...`` headings."""
    return {int(m.group(1)): m.group(2) for m in HEADING.finditer(text)}


def cited_sections(text: str, pattern: re.Pattern[str] = CITATION) -> list[int]:
    """Every section number cited in ``text``; a range ``§11–17`` cites each section in it."""
    out: list[int] = []
    for m in pattern.finditer(text):
        first = int(m.group(1))
        last = int(m.group(2)) if m.group(2) else first
        out.extend(range(first, max(first, last) + 1))
    return out


def source_files() -> list[Path]:
    """The project's Python sources, README.md and docs/*.md (no venvs, caches or builds)."""
    files = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
    for path in sorted(ROOT.rglob("*.py")):
        if path == Path(__file__).resolve():  # its own examples cite sections on purpose
            continue
        parts = path.relative_to(ROOT).parts[:-1]
        if any(p.startswith(".") or p in SKIP_DIRS or p.endswith(".egg-info") for p in parts):
            continue
        files.append(path)
    return files


def dangling(text: str, known: dict[int, str], pattern: re.Pattern[str] = CITATION) -> list[int]:
    return [n for n in cited_sections(text, pattern) if n not in known]


@pytest.fixture(scope="module")
def reference() -> str:
    assert REFERENCE.is_file(), "docs/MECHANISMS.md is missing: the code cites it"
    return REFERENCE.read_text(encoding="utf-8")


def test_the_checker_finds_citations_in_every_spelling() -> None:
    text = (
        "see MECHANISMS.md §12, (docs/MECHANISMS.md section\n13) and MECHANISMS.md s.14;\n"
        "MECHANISMS.md s. 15 and the docstrings' MECHANISMS.md §11–17"
    )
    assert cited_sections(text) == [12, 13, 14, 15, 11, 12, 13, 14, 15, 16, 17]
    assert dangling("docs/MECHANISMS.md §99", {12: "x"}) == [99]
    assert dangling("RFC 8259 section 8.1", {}) == []


def test_sections_are_numbered_once_and_in_order(reference: str) -> None:
    numbers = [int(m.group(1)) for m in HEADING.finditer(reference)]
    assert numbers == sorted(set(numbers)), f"section numbers repeat or go back: {numbers}"
    # The sections the code cites today (consistency, heavy hitters, intervals, auditing,
    # central baselines, variance constants) keep their numbers.
    known = headings(reference)
    for number, word in [
        (11, "post-processing"),
        (12, "heavy hitters"),
        (13, "confidence intervals"),
        (14, "auditing"),
        (15, "central"),
        (17, "variance"),
    ]:
        assert word in known[number].lower(), f"§{number} is {known[number]!r}"


def test_every_citation_resolves_to_a_section(reference: str) -> None:
    known = headings(reference)
    bad = {}
    cited = 0
    for path in source_files():
        text = path.read_text(encoding="utf-8")
        cited += len(cited_sections(text))
        missing = dangling(text, known)
        if missing:
            bad[str(path.relative_to(ROOT))] = missing
    assert not bad, f"citations of sections docs/MECHANISMS.md does not have: {bad}"
    assert cited >= 10, "the scan found almost no citations: is the pattern still right?"


def test_python_sources_cite_the_file_by_its_path() -> None:
    bare = re.compile(r"(?<!docs/)MECHANISMS\.md")
    bad = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in source_files()
        if path.suffix == ".py"
        for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1)
        if bare.search(line)
    ]
    assert not bad, f"cite it as docs/MECHANISMS.md §N: {bad}"


def test_cross_references_inside_the_document_resolve(reference: str) -> None:
    missing = dangling(reference, headings(reference), CROSS_REFERENCE)
    assert not missing, f"docs/MECHANISMS.md refers to sections it lacks: {missing}"


@pytest.mark.parametrize("name", [*MECHANISMS, *PRESETS, "auto"])
def test_every_registered_mechanism_has_a_section(reference: str, name: str) -> None:
    titles = headings(reference).values()
    assert any(f"`{name}`" in title for title in titles), (
        f"no section of docs/MECHANISMS.md has `{name}` in its heading"
    )


def test_the_readme_mechanisms_section_links_the_reference() -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme.split("## Mechanisms", 1)[1].split("\n## ", 1)[0]
    assert "(docs/MECHANISMS.md)" in section
