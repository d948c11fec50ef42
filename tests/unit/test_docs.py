"""Links in the documentation resolve: every ``docs/...md#anchor`` cited in code, configs and
Markdown names an existing file and one of its headings, and every relative Markdown link of the
READMEs and ``docs/`` points at a file that exists (and, with an anchor, at one of its headings):
nothing cites a missing file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
#: Where citations of docs/*.md#anchor may appear.
CITING = ("rlvr_world", "services", "trainer", "tests", "configs", "bench", "deploy", "docs")
CITATION = re.compile(r"docs/([a-z_]+\.md)#([a-z0-9-]+)")
MARKDOWN_LINK = re.compile(r"\]\(([^)\s]+)\)")


def slug(heading: str) -> str:
    """GitHub's anchor of a Markdown heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    return {
        slug(line.lstrip("#"))
        for line in path.read_text(encoding="utf-8").splitlines()
        if line.startswith("#")
    }


def cited() -> list[tuple[Path, str, str]]:
    found = []
    for top in CITING:
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix not in {".py", ".md", ".yaml", ".toml"} or "_pb2" in path.name:
                continue
            for name, anchor in CITATION.findall(path.read_text(encoding="utf-8")):
                found.append((path, name, anchor))
    return found


def test_slug_follows_githubs_rule() -> None:
    assert slug(" Main job (`make run`)") == "main-job-make-run"
    assert slug("GRPO") == "grpo"


def test_every_cited_docs_anchor_exists() -> None:
    citations = cited()
    assert len(citations) > 20  # the reference citations of the reward, task and video code
    missing = [
        f"{path.relative_to(REPO)}: docs/{name}#{anchor}"
        for path, name, anchor in citations
        if not (REPO / "docs" / name).is_file() or anchor not in anchors(REPO / "docs" / name)
    ]
    assert not missing, missing


PAGES = sorted(
    str(p.relative_to(REPO))
    for p in [
        REPO / "README.md",
        *(REPO / "docs").glob("*.md"),
        *(REPO / "services").glob("*/README.md"),
        REPO / "deploy" / "README.md",
    ]
)


def test_the_pages_include_every_doc() -> None:
    assert {"README.md", "docs/architecture.md", "docs/results.md", "deploy/README.md"} <= set(
        PAGES
    )


@pytest.mark.parametrize("page", PAGES)
def test_relative_links_of_the_pages_resolve(page: str) -> None:
    path = REPO / page
    for target in MARKDOWN_LINK.findall(path.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://", "mailto:")):
            continue
        file_part, _, anchor = target.partition("#")
        linked = (path.parent / file_part).resolve() if file_part else path
        assert linked.exists(), f"{page}: {target} does not exist"
        if anchor and linked.suffix == ".md":
            assert anchor in anchors(linked), f"{page}: {target} names no heading"
