"""benchmarks/RESULTS.md's index by topic: every dated entry has a line there, every line finds its entry, and each
topic lists its entries the latest first."""
from __future__ import annotations

import re
from pathlib import Path

from tests.docs_checks import anchors, github_slug

RESULTS = Path(__file__).resolve().parents[2] / "benchmarks" / "RESULTS.md"
INDEX = "## Index by topic\n"
_TOPIC = re.compile(r"^- \*\*(.+)\*\*$")
_ENTRY = re.compile(r"^  - \[(\d{4}-\d\d-\d\d) · .+\]\(#([^)\s]+)\)$")


def entry_anchors(text: str) -> list[str]:
    """The anchor of every dated entry (a ``### YYYY-MM-DD · ...`` heading), numbered as GitHub numbers repeats."""
    seen: dict[str, int] = {}
    out = []
    for level, heading in re.findall(r"^(#+) (.+)$", text, re.M):
        slug = github_slug(heading)
        anchor = f"{slug}-{seen[slug]}" if slug in seen else slug
        seen[slug] = seen.get(slug, 0) + 1
        if level == "###" and re.match(r"\d{4}-\d\d-\d\d · ", heading):
            out.append(anchor)
    return out


def index_topics(text: str) -> dict[str, list[tuple[str, str]]]:
    """The index's topics, each with its (date, anchor) lines in order."""
    body = text[text.index(INDEX) + len(INDEX):].split("\n## ", 1)[0]
    topics: dict[str, list[tuple[str, str]]] = {}
    current = None
    for line in body.splitlines():
        if m := _TOPIC.match(line):
            current = topics.setdefault(m.group(1), [])
        elif (m := _ENTRY.match(line)) and current is not None:
            current.append((m.group(1), m.group(2)))
    return topics


def test_every_entry_is_indexed_once_and_every_index_line_finds_its_entry():
    text = RESULTS.read_text(encoding="utf-8")
    linked = [a for entries in index_topics(text).values() for _, a in entries]
    missing = [a for a in entry_anchors(text) if a not in linked]
    assert not missing, f"entries without a line in RESULTS.md's index by topic: {missing}"
    assert len(linked) == len(set(linked)), "an entry indexed twice"
    unknown = [a for a in linked if a not in anchors(text)]
    assert not unknown, f"index lines that find no entry: {unknown}"


def test_each_topic_lists_the_latest_first():
    for topic, entries in index_topics(RESULTS.read_text(encoding="utf-8")).items():
        dates = [d for d, _ in entries]
        assert dates == sorted(dates, reverse=True), f"{topic}: not the latest first"
