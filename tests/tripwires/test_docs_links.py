"""The docs a reader is sent to exist: every `docs/<page>.md#<section>` named in the code, tests,
benchmarks and examples, and every relative link between the pages of `docs/`, reaches a page of
this repository and a heading on it. A section renamed or a page moved breaks here, not in a
reader's browser; and nothing cites a design document the repository does not hold."""

from __future__ import annotations

import re
from functools import cache
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITING = ("src", "tests", "bench", "examples", "deploy")
SUFFIXES = {".py", ".md", ".yaml", ".yml", ".toml", ".html", ".sh", ".txt"}
CITATION = re.compile(r"\bdocs/([\w/.-]+?\.md)(?:#([\w-]+))?")
LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"#{1,6} (.+)")


def slug(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@cache
def anchors(page: Path) -> frozenset[str]:
    found: set[str] = set()
    fenced = False
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            fenced = not fenced
        elif not fenced and (m := HEADING.match(line)):
            found.add(slug(m.group(1)))
    return frozenset(found)


def citing_files() -> list[Path]:
    return sorted(
        p
        for top in CITING
        for p in (ROOT / top).rglob("*")
        if p.is_file() and p.suffix in SUFFIXES and "vendor" not in p.parts
    )


def test_every_docs_section_the_code_names_exists() -> None:
    broken = []
    for path in citing_files():
        for m in CITATION.finditer(path.read_text()):
            page = DOCS / m.group(1)
            if not page.is_file() or (m.group(2) and m.group(2) not in anchors(page)):
                broken.append(f"{path.relative_to(ROOT)}: {m.group(0)}")
    assert not broken, broken


def test_every_link_between_the_docs_pages_lands() -> None:
    broken = []
    for path in sorted([*DOCS.rglob("*.md"), ROOT / "README.md", ROOT / "CHANGELOG.md"]):
        for m in LINK.finditer(path.read_text()):
            target, _, section = m.group(1).partition("#")
            if re.match(r"[a-z]+:", target):
                continue  # another site: not this repository's to check
            page = (path.parent / target) if target else path
            if not page.exists() or (section and page.suffix == ".md" and section not in anchors(page)):
                broken.append(f"{path.relative_to(ROOT)}: {m.group(1)}")
    assert not broken, broken


def test_nothing_cites_a_design_document_outside_the_repository() -> None:
    citing = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in [*citing_files(), *DOCS.rglob("*.md"), ROOT / "README.md"]
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if re.search(r"\bSPEC(\.md| \d| section)", line)
    ]
    assert not citing, citing
