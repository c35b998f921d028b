"""The README and docs/ hold to what a user reads them for: a short README with every page linked, no lab notebook
(commit hashes, per-machine timing tables), every quoted ``evalsuite ...`` command parsable by the real CLI, and a
command reference that matches the code."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalsuite.cli.reference import check_command, reference

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = sorted((ROOT / "docs").glob("*.md"))
MAX_README = 16_000  # 12,000 + the per-tenant example and its real output (issue 64)
_FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
_INLINE = re.compile(r"`(evalsuite [^`]+)`")
_HASH = re.compile(r"\b(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}\b")


def quoted_commands(text: str) -> list[str]:
    """Every ``evalsuite ...`` command line quoted in Markdown: in fenced blocks (continuation lines joined, a
    ``$ `` prompt dropped) and in inline code."""
    out = []
    for block in _FENCE.findall(text):
        for line in block.replace("\\\n", " ").splitlines():
            line = line.strip().removeprefix("$ ")
            line = re.sub(r"^(\w+=\S+\s+)+", "", line)
            if line.startswith("evalsuite ") and not line.startswith("evalsuite-"):
                line = line.split(" # ")[0].split(" && ")[0].split(" || ")[0].split(" | ")[0]
                out.append(" ".join(line.split()))
    outside = _FENCE.sub("", text)
    out += [m for m in _INLINE.findall(outside)]
    return out


def test_quoted_commands_are_found_in_blocks_and_inline():
    text = "run `evalsuite gate RUN` then\n```bash\n$ evalsuite run --tasks json \\\n  --budget 5m  # note\n```\n"
    assert quoted_commands(text) == ["evalsuite run --tasks json --budget 5m", "evalsuite gate RUN"]


def test_the_checker_refuses_an_option_or_command_that_does_not_exist():
    assert check_command("evalsuite run --budget 9m --tasks json") is None
    assert "No such option" in check_command("evalsuite run --no-such-option")
    assert "no such command" in check_command("evalsuite frobnicate RUN")
    assert check_command("evalsuite gate RUN [--policy P]") is None  # a synopsis: brackets are optional parts


def test_the_readme_is_short_and_holds_no_lab_notebook():
    text = README.read_text(encoding="utf-8")
    assert len(text) <= MAX_README, f"README.md is {len(text)} characters (at most {MAX_README})"
    assert not _HASH.findall(text), f"commit hashes in README.md: {_HASH.findall(text)[:5]}"
    timing_rows = [line for line in text.splitlines() if line.startswith("|") and re.search(
        r"\b(EPYC|Xeon|Zen|AVX2|AVX-512|AMX)\b", line) and re.search(r"\d+(\.\d+)?\s*(s|min)\b|\d+:\d\d", line)]
    assert not timing_rows, f"per-machine timing rows in README.md: {timing_rows[:3]}"


def test_the_readme_opens_with_the_two_commands():
    first_block = _FENCE.search(README.read_text(encoding="utf-8")).group(1).splitlines()
    assert [line.split("#")[0].strip() for line in first_block if line.strip()][:2] == ["make gate", "make test"]


def test_every_docs_page_is_linked_from_the_readme():
    text = README.read_text(encoding="utf-8")
    missing = [p.name for p in DOCS if f"docs/{p.name}" not in text]
    assert not missing, f"docs pages not linked from README.md: {missing}"


@pytest.mark.parametrize("path", [README, *DOCS], ids=lambda p: p.name)
def test_every_quoted_command_parses_with_the_real_cli(path):
    problems = [err for line in quoted_commands(path.read_text(encoding="utf-8")) if (err := check_command(line))]
    assert not problems, "\n".join(problems)


def test_the_command_reference_is_current():
    page = ROOT / "docs" / "cli.md"
    assert page.read_text(encoding="utf-8") == reference(), \
        "docs/cli.md is stale: regenerate it with `make docs` (python -m evalsuite.cli.reference docs/cli.md)"
