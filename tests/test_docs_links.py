"""The README is the front door: short, and every link in it and in docs/ leads somewhere.

Relative links (``[text](path)``, ``[text](path#anchor)``, ``[text](#anchor)``, images too)
in README.md and docs/*.md must name a file or folder of the repository and, for a Markdown
file, a heading in it. Anchors follow GitHub's rule: the heading's text without its markup,
lowercased, punctuation dropped, each space a ``-``, and ``-1``, ``-2``… on repeats.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"
README_MAX_LINES = 500
PAGES = [README, *sorted((REPO / "docs").glob("*.md"))]

FENCE = re.compile(r"^\s*(```|~~~)")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
CODE_SPAN = re.compile(r"`[^`]*`")
LINK = re.compile(r"!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
EXTERNAL = ("http://", "https://", "mailto:")


def prose(text: str) -> str:
    """``text`` without fenced code blocks (their lines left empty, so line numbers hold)."""
    out, fenced = [], False
    for line in text.split("\n"):
        if FENCE.match(line):
            fenced = not fenced
            out.append("")
        else:
            out.append("" if fenced else line)
    return "\n".join(out)


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's Markdown text."""
    text = re.sub(r"!?\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # links and images: their text
    # Outside code spans a <tag> is HTML and shows nothing; inside one it is text.
    parts = text.split("`")
    text = "".join(part if i % 2 else re.sub(r"<[^>]+>", "", part) for i, part in enumerate(parts))
    text = re.sub(r"[^\w\- ]", "", text.lower())
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    """Every heading anchor of the Markdown file ``path``."""
    seen: Counter[str] = Counter()
    found = set()
    for line in prose(path.read_text()).split("\n"):
        m = HEADING.match(line)
        if not m:
            continue
        base = slug(m.group(2))
        found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
        seen[base] += 1
    return found


def links(path: Path) -> list[tuple[int, str]]:
    """(line, target) of every link in ``path``'s prose, code spans left out."""
    text = CODE_SPAN.sub(lambda m: re.sub(r"[^\n]", " ", m.group()), prose(path.read_text()))
    return [(text.count("\n", 0, m.start()) + 1, m.group(2)) for m in LINK.finditer(text)]


def broken(page: Path, root: Path = REPO) -> list[str]:
    """What is wrong with ``page``'s links (``page`` inside ``root``), one line each."""
    problems = []
    for line, target in links(page):
        if target.startswith(EXTERNAL):
            continue
        where = f"{page.relative_to(root)}:{line}: {target}"
        file_part, _, anchor = target.partition("#")
        dest = (page.parent / file_part).resolve() if file_part else page
        if not dest.is_relative_to(root):
            problems.append(f"{where}: outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            problems.append(f"{where}: no heading #{anchor} in {dest.relative_to(root)}")
    return problems


def test_slugs_follow_github() -> None:
    assert slug("What runs now: `acpgate ps`") == "what-runs-now-acpgate-ps"
    assert slug("Several hosts, one store (PostgreSQL)") == "several-hosts-one-store-postgresql"
    assert slug("The built-in agent's tools") == "the-built-in-agents-tools"
    assert slug("`[agents.<alias>]`") == "agentsalias"
    assert slug("Edge ↔ adapter") == "edge--adapter"


def test_broken_links_are_found(tmp_path: Path) -> None:
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "a.md").write_text("# A page\n\n## Twice\n\n## Twice\n")
    page = tmp_path / "README.md"
    page.write_text(
        "# Top\n\n[ok](docs/a.md#a-page) [repeat](docs/a.md#twice-1) [self](#top)\n"
        "[gone](docs/b.md) [no heading](docs/a.md#nowhere)\n"
        "![picture](docs/missing.png) [out](../x.md) `[code](docs/none.md)`\n"
        "```\n[fenced](docs/none.md)\n```\n[web](https://example.com/x)\n")
    assert broken(page, tmp_path) == [
        "README.md:4: docs/b.md: no such file",
        "README.md:4: docs/a.md#nowhere: no heading #nowhere in docs/a.md",
        "README.md:5: docs/missing.png: no such file",
        "README.md:5: ../x.md: outside the repository",
    ]


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_every_link_resolves(page: Path) -> None:
    problems = broken(page)
    assert not problems, "\n".join(problems)


def test_readme_is_the_front_door() -> None:
    lines = README.read_text().count("\n")
    assert lines <= README_MAX_LINES, f"README.md has {lines} lines: move detail to docs/"
    targets = {t.partition("#")[0] for _, t in links(README)}
    unlinked = [p.name for p in PAGES[1:] if f"docs/{p.name}" not in targets]
    assert not unlinked, f"README's Documentation index does not link {unlinked}"
