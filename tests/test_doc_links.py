"""The README's and docs' relative links lead somewhere: the file exists and, for `file.md#anchor`, a heading
of that file has that anchor (GitHub's slug). The README's figures are sentences linking to bench/README.md's
tables, so a renamed benchmark section must not leave a dead link."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "CLAUDE.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def github_anchor(heading: str) -> str:
    text = heading.strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)  # GitHub drops punctuation but keeps word characters and hyphens
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    in_code = False
    found = set()
    for line in page.read_text().splitlines():
        if line.startswith("```"):
            in_code = not in_code
        elif not in_code and line.startswith("#"):
            found.add(github_anchor(line.lstrip("#")))
    return found


def test_github_anchor() -> None:
    assert github_anchor("quickstart_time.py") == "quickstart_timepy"
    assert github_anchor("The test suite, from a fresh clone") == "the-test-suite-from-a-fresh-clone"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_relative_links_resolve(page: Path) -> None:
    dead = []
    for target in LINK.findall(page.read_text()):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked here
        path_part, _, anchor = target.partition("#")
        dest = (page.parent / path_part).resolve() if path_part else page
        if not dest.exists():
            dead.append(f"{target}: no file {dest}")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            dead.append(f"{target}: no heading with anchor #{anchor} in {dest.name}")
    assert not dead, "\n".join(dead)
