"""Every link in README.md and docs/ stays inside the repository and reaches something there:
a clone has nothing else (the README once linked the contract at ../shared/…, outside it).

Reads the repository's Markdown only; no service runs.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCED = re.compile(r"```.*?```", re.DOTALL)
CODE = re.compile(rf"{FENCED.pattern}|`[^`]+`", re.DOTALL)
LINK = re.compile(
    r"\[[^\]]*\]\(\s*<?([^)\s>]*)>?[^)]*\)|^\s*\[[^\]]+\]:\s*(\S+)|href=\"([^\"]*)\"", re.M
)
BARE_URL = re.compile(r"\b[a-z][a-z0-9+.-]*://[^\s)>\]]+|\bwww\.[^\s)>\]]+|<mailto:[^>]+>")


def prose(page: Path) -> str:
    """The page without its code (blocks and spans), where nothing is a link."""
    return CODE.sub("", page.read_text())


def anchors(page: Path) -> set[str]:
    """The fragments GitHub gives the page's headings (lowercase, punctuation dropped, spaces
    to hyphens, a repeat numbered)."""
    found: set[str] = set()
    text = FENCED.sub("", page.read_text())  # a heading keeps the text of its code spans
    for heading in re.findall(r"^#{1,6}\s+(.*?)\s*#*\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", heading.replace("`", "").lower()).replace(" ", "-")
        candidate, n = slug, 0
        while candidate in found:
            n += 1
            candidate = f"{slug}-{n}"
        found.add(candidate)
    return found


def links(page: Path) -> list[str]:
    return [
        next(g for g in match.groups() if g is not None) for match in LINK.finditer(prose(page))
    ]


def test_the_pages_have_links_to_check():
    assert len(PAGES) > 10
    assert sum(len(links(page)) for page in PAGES) > 50


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_link_stays_in_the_repository_and_reaches_its_target(page):
    for target in links(page):
        assert not re.match(r"[a-z][a-z0-9+.-]*:", target, re.I), f"{target}: leaves the repository"
        path, _, fragment = target.partition("#")
        reached = (page.parent / path).resolve() if path else page
        assert reached.is_relative_to(ROOT), f"{target}: outside the repository"
        assert reached.exists(), f"{target}: no such file in the repository"
        if fragment:
            assert reached.suffix == ".md", f"{target}: a fragment of a file that is not a page"
            assert fragment in anchors(reached), f"{target}: no such heading in {reached.name}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_address_outside_code_becomes_a_link(page):
    """GitHub turns a bare address in prose into a link; in code it stays text."""
    assert BARE_URL.findall(prose(page)) == []


def test_the_readme_links_the_contract():
    assert "docs/contract.md" in links(ROOT / "README.md")
