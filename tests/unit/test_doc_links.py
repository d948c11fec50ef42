"""Nothing in the docs cites a missing file or a missing section.

Every relative Markdown link of the README, ``docs/``, the services' and the deployment's READMEs
must name a file of the repository, and a ``#anchor`` must name a heading of that file (GitHub's
rule: lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeats) or an
explicit ``<a id=...>``. Code files cited in backticks are not checked here.
"""

from __future__ import annotations

import re
from collections import Counter
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = sorted(
    [
        ROOT / "README.md",
        *(ROOT / "docs").glob("*.md"),
        *(ROOT / "services").glob("*/README.md"),
        ROOT / "deploy" / "README.md",
    ]
)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
FENCE = re.compile(r"^```.*?^```", re.MULTILINE | re.DOTALL)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text."""
    text = re.sub(r"<[^>]+>", "", heading).strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = FENCE.sub("", path.read_text(encoding="utf-8"))
    seen: Counter[str] = Counter()
    found = set(re.findall(r"<a (?:id|name)=\"([^\"]+)\"", text))
    for line in text.splitlines():
        match = re.match(r"^#{1,6} (.+)$", line)
        if match:
            base = slug(match.group(1))
            found.add(base if seen[base] == 0 else f"{base}-{seen[base]}")
            seen[base] += 1
    return found


def test_the_slug_rule_on_examples() -> None:
    assert slug("Main job (`make run`): RLVR does not yet help") == (
        "main-job-make-run-rlvr-does-not-yet-help"
    )
    assert slug("Limits, and where to go next") == "limits-and-where-to-go-next"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_names_an_existing_file_and_heading(doc: Path) -> None:
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    broken = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z]+:", target):
            continue  # http:, https:, mailto:
        path_part, _, anchor = target.partition("#")
        dest = (doc.parent / path_part).resolve() if path_part else doc
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor}")
    assert not broken, broken
