"""The README and docs/ hold to what a user reads them for: a short README with every page linked, no lab notebook
(commit hashes, per-machine timing tables), every quoted ``evalsuite ...`` command parsable by the real CLI, a
command reference that matches the code, and no option, default, make target, environment variable or measurement
link that the code or benchmarks/RESULTS.md does not back."""
from __future__ import annotations

import re
from pathlib import Path

import pytest

from evalsuite import paths
from evalsuite.cli.reference import check_command, command_options, reference
from tests.docs_checks import (default_problems, github_slug, make_problems, option_problems, policy_default_problems,
                               results_link_problems, task_parameter_problems, tool_flags)

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



# --- options, defaults, make lines, environment variables, links to measurements (tests/docs_checks.py) ---

PAGES = [README, *(p for p in DOCS if p.name != "cli.md")]  # cli.md is generated from the commands themselves


def test_an_option_named_with_its_command_must_exist_there():
    options = command_options()
    assert option_problems("`run --out DIR`, `sensitivity --out DIR`, `baseline --out`", options, frozenset()) == []
    assert option_problems('`run --vllm-arg "--max-num-seqs 4"`, `variants describe --json`', options,
                           frozenset()) == []
    assert option_problems("moved by `ablate --out DIR`", options, frozenset()) == [
        "`ablate --out DIR`: `evalsuite ablate` has no option --out"]
    assert option_problems("`--max-model-len`, `--no-such-flag`", options, frozenset({"--max-model-len"})) == [
        "`--no-such-flag`: --no-such-flag is no evalsuite option nor a flag of a tool it drives"]


def test_a_stated_default_must_be_the_cli_s():
    options = command_options()
    run = "```\nevalsuite run --tasks json\n```\nLower `--batch-size` (default {}) if it does not fit."
    assert default_problems(run.format(16), options) == []
    assert default_problems(run.format(32), options) == [
        "`--batch-size`: the docs say the default is 32, `evalsuite run` has 16"]
    assert default_problems(run.format(4), options)  # sensitivity's, not run's
    assert default_problems("`sensitivity --batch-size N` (default 4)", options) == []
    assert default_problems("`--dtype auto` (the default) loads", options) == []
    assert default_problems("`--dtype float32` (the default) loads", options)
    assert default_problems("`compare --out` (default `$EVALSUITE_RUNS`, else `<home>/runs`)", options) == []
    assert default_problems("`compare --out` (default `./runs`)", options) == [
        "`compare --out`: stated default `./runs` is not in `evalsuite compare --out`'s help"]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_option_named_in_the_docs_exists(path):
    problems = option_problems(path.read_text(encoding="utf-8"), command_options(), tool_flags())
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_default_the_docs_state_is_the_cli_s(path):
    problems = default_problems(path.read_text(encoding="utf-8"), command_options())
    assert not problems, "\n".join(problems)


def test_folders_default_under_home_not_the_working_directory():
    """Runs, reports and baselines default to ``<home>/...`` (``$EVALSUITE_HOME``, else the working directory):
    neither a page nor a help text may say ``./runs``."""
    wrong = re.compile(r"\./(runs|reports|baselines)\b")
    found = [f"{p.name}: {m.group(0)}" for p in PAGES for m in wrong.finditer(p.read_text(encoding="utf-8"))]
    found += [f"evalsuite {c} {n}: {o.help}" for c, opts in command_options().items() for n, o in opts.items()
              if wrong.search(o.help or "")]
    assert not found, found


@pytest.mark.parametrize("env, name, root, help_", [
    ("EVALSUITE_RUNS", "runs", paths.runs_root, paths.RUNS_HELP),
    ("EVALSUITE_REPORTS", "reports", paths.reports_root, paths.REPORTS_HELP),
    ("EVALSUITE_BASELINES", "baselines", paths.baselines_root, paths.BASELINES_HELP)])
def test_the_folder_defaults_the_help_and_the_environment_page_state_are_the_code_s(monkeypatch, tmp_path, env, name,
                                                                                    root, help_):
    assert help_ == f"${env}, else <home>/{name}; <home>: $EVALSUITE_HOME, else the working directory"
    page = (ROOT / "docs" / "environment.md").read_text(encoding="utf-8")
    assert re.search(rf"^\| `{env}` \|[^\n]*\(default `<home>/{name}`\)", page, re.M), f"environment.md: {env}"
    monkeypatch.delenv(env, raising=False)
    monkeypatch.delenv("EVALSUITE_HOME", raising=False)
    assert root() == Path(name)
    monkeypatch.setenv("EVALSUITE_HOME", str(tmp_path))
    assert root() == tmp_path / name
    monkeypatch.setenv(env, str(tmp_path / "elsewhere"))
    assert root() == tmp_path / "elsewhere"


def test_a_make_line_must_name_real_targets_and_variables():
    assert make_problems("`make gate GATE_BUDGET=20m` and\n```\nmake test PYTEST_ARGS=\"-x\"\n```\n") == []
    assert make_problems("`make gate GATE_BUGDET=20m`, `make gates`") == [
        "`make gate GATE_BUGDET=20m`: the Makefile has no variable GATE_BUGDET",
        "`make gates`: the Makefile has no target gates"]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_make_line_names_real_targets_and_variables(path):
    problems = make_problems(path.read_text(encoding="utf-8"))
    assert not problems, "\n".join(problems)


def test_every_environment_variable_the_docs_name_is_read_somewhere():
    code = [*(ROOT / "evalsuite").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / ".ci").glob("*"),
            *(p for p in (ROOT / "tests").rglob("*.py") if not p.name.startswith(("test_docs", "docs_"))),
            ROOT / "Makefile"]
    name = re.compile(r"EVALSUITE_[A-Z0-9_]*[A-Z0-9]")
    read = set(name.findall("\n".join(p.read_text(errors="replace") for p in code if p.is_file())))
    named = {v for p in PAGES for v in name.findall(p.read_text(encoding="utf-8"))}
    assert named <= read, f"environment variables the docs name and nothing reads: {sorted(named - read)}"


def test_a_link_to_a_measurement_must_find_its_entry():
    assert github_slug("2026-12-06 · AMX Xeon, cold / second") == "2026-12-06--amx-xeon-cold--second"
    assert github_slug("2026-12-01 · `--engine vllm` on it") == "2026-12-01----engine-vllm-on-it"
    results = "# Log\n### 2026-12-06 · AMX Xeon, cold\n### 2026-12-06 · AMX Xeon, cold\n"
    good = "[a](RESULTS.md#2026-12-06--amx-xeon-cold), [b](RESULTS.md#2026-12-06--amx-xeon-cold-1)"
    assert results_link_problems(good, results) == []
    assert results_link_problems("[c](RESULTS.md#2026-12-07--amx-xeon-cold)", results) == [
        "RESULTS.md#2026-12-07--amx-xeon-cold: no such entry"]


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_every_link_to_a_measurement_finds_its_dated_entry(path):
    results = (ROOT / "benchmarks" / "RESULTS.md").read_text(encoding="utf-8")
    problems = results_link_problems(path.read_text(encoding="utf-8"), results)
    assert not problems, "\n".join(problems)


# --- the defaults of task parameters and policy keys the docs tabulate ---

def _task_defaults() -> dict[str, dict]:
    from evalsuite.tasks.registry import default_registry

    registry = default_registry(plugins=False)
    return {name: dict(registry.get(name).default_params) for name in registry.names()}


def test_a_task_parameter_table_must_hold_the_task_s_defaults():
    page = "### `needle`\n\n| parameter | default | meaning |\n|---|---|---|\n| `depths` | `[0.1, 0.5]` | |\n"
    assert task_parameter_problems(page, {"needle": {"depths": [0.1, 0.5]}}) == []
    assert task_parameter_problems(page, {"needle": {"depths": [0.1, 0.9], "repeats": 1}}) == [
        "needle.depths: the docs say [0.1, 0.5], the task's default is [0.1, 0.9]",
        "needle.repeats: not in the docs' parameter table"]


def test_every_built_in_task_s_parameters_are_tabulated_at_their_defaults():
    problems = task_parameter_problems((ROOT / "docs" / "tasks.md").read_text(encoding="utf-8"), _task_defaults())
    assert not problems, "\n".join(problems)


def test_the_policy_page_states_the_shipped_defaults():
    import yaml
    from importlib.resources import files

    shipped = yaml.safe_load((files("evalsuite.gate") / "default_policy.yaml").read_text(encoding="utf-8"))["defaults"]
    page = (ROOT / "docs" / "policy.md").read_text(encoding="utf-8")
    assert policy_default_problems(page, shipped) == []
    assert policy_default_problems(page, {**shipped, "max_drop": 0.03}) == [
        "defaults.max_drop: the docs say 0.05, the shipped policy has 0.03"]
