"""What tests/test_docs.py holds the README and docs/ to, beyond whole quoted commands: options named in prose
exist on the command they are written with, stated defaults are the CLI's, ``make`` lines name real targets and
variables, and links to a measurement find its dated entry in benchmarks/RESULTS.md. Each function returns the
problems it finds in one page's text, one line each."""
from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"```[^\n]*\n(.*?)```", re.S)
_SPAN = re.compile(r"`([^`\n]+)`")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9_-]*")
#: `--opt`, `run --opt VALUE` ... then "(default X", ", default: X" within the clause
_STATED = re.compile(r"`(?P<span>(?:[a-z][a-z-]* ){0,2}--[a-z][a-z0-9-]*(?: [^`\s]+)?)`[^`.;]{0,60}?[(,]\s*"
                     r"(?:the\s+)?defaults?:?\s*(?P<value>[^;)]*)")
_CONTEXT = re.compile(r"(?:`|^\s*(?:\$ )?)evalsuite ([a-z][a-z-]*)", re.M)
_NUMBER = re.compile(r"(?<![\w.])\d[\d,]*(?:\.\d+)?")
Options = dict[str, dict[str, click.Option]]


def inline_spans(text: str) -> list[str]:
    """Inline code outside fenced blocks."""
    fences = [m.span() for m in FENCE.finditer(text)]
    return [m.group(1).strip() for m in _SPAN.finditer(text)
            if m.group(1).strip() and not any(a <= m.start() < b for a, b in fences)]


def named_command(span: str, options: Options) -> str | None:
    """The command a span such as ``run --out DIR`` or ``variants describe --json`` starts with, if any."""
    words = span.split()
    words = words[1:] if words[:1] == ["evalsuite"] else words
    return next((" ".join(words[:k]) for k in (2, 1) if " ".join(words[:k]) in options), None)


@functools.cache
def tool_flags() -> frozenset[str]:
    """Every ``--flag`` the project's code and scripts write: the flags of the tools evalsuite drives (vLLM,
    lm-eval, llama.cpp, bwrap, pytest) and of its benchmark scripts."""
    files = [ROOT / "Makefile", *(ROOT / ".ci").glob("*"), *(ROOT / "evalsuite").rglob("*.py"),
             *(ROOT / "benchmarks").rglob("*.py"), *(ROOT / "benchmarks").rglob("*.sh")]
    return frozenset(f for path in files if path.is_file() for f in _FLAG.findall(path.read_text(errors="replace")))


def _unknown_on(command: str, span: str, options: Options) -> list[str]:
    """The ``--options`` of ``span`` (``run --out DIR --kld``) that ``command`` lacks; an option's value is
    skipped, so ``run --vllm-arg "--max-num-seqs 4"`` names one option."""
    try:
        words = shlex.split(span)
    except ValueError:
        words = span.split()
    words = words[int(words[:1] == ["evalsuite"]) + len(command.split()):]
    unknown, value_next = [], False
    for word in words:
        name = word.split("=")[0]
        if value_next or not word.startswith("--"):
            value_next = False
        elif name not in options[command]:
            unknown.append(name)
        else:
            value_next = "=" not in word and not options[command][name].is_flag
    return unknown


def option_problems(text: str, options: Options, tools: frozenset[str]) -> list[str]:
    """Options named in inline code that do not exist: on the command the span names (``ablate --out``), or, for a
    bare ``--flag``, on any evalsuite command or tool evalsuite drives. Whole ``evalsuite ...`` lines are parsed
    with their values by ``check_command``."""
    known = set().union(*options.values()) | tools
    out = []
    for span in inline_spans(text):
        command = named_command(span, options)
        if command is not None and not span.startswith("evalsuite "):
            out += [f"`{span}`: `evalsuite {command}` has no option {o}" for o in _unknown_on(command, span, options)]
        elif span.startswith("--"):
            out += [f"`{span}`: {f} is no evalsuite option nor a flag of a tool it drives"
                    for f in _FLAG.findall(span) if f not in known]
    return out


def _candidates(text: str, at: int, span: str, flag: str, options: Options) -> list[str]:
    """The commands a stated default may be about: the one the span names, else the last ``evalsuite CMD`` quoted
    in the same paragraph before it that has the option, else every command that has it."""
    command = named_command(span, options)
    if command is not None:
        return [command]
    having = [c for c in options if flag in options[c]]
    paragraph = re.split(r"\n\s*\n", text[:at])[-1]
    return [c for c in _CONTEXT.findall(paragraph) if c in having][-1:] or having


def _same(stated: str, default: object) -> bool:
    def norm(value: str) -> object:
        return float(value.replace(",", "")) if _NUMBER.fullmatch(value) else value
    return norm(stated) == norm(str(default))


def _wrong_default(span: str, command: str, param: click.Option | None, value: str, stated: list[str]) -> str | None:
    """Why ``value`` (``stated``: its first quoted value or number) is not ``param``'s default, else None. A default
    computed at run time (click's is None) is what the help says: every value quoted in code must be in it (but
    ``NAME=VALUE`` examples)."""
    if param is None:
        return None  # no such option there: option_problems says so
    default = param.default
    if default is None or callable(default) or "Sentinel" in repr(default):
        missing = [p for p in _SPAN.findall(value) if "=" not in p and p not in (param.help or "")]
        return (f"`{span}`: stated default `{missing[0]}` is not in `evalsuite {command} {param.opts[0]}`'s help"
                if missing else None)
    if isinstance(default, bool) or not stated or _same(stated[0], default):
        return None
    return f"`{span}`: the docs say the default is {stated[0]}, `evalsuite {command}` has {default}"


def default_problems(text: str, options: Options) -> list[str]:
    """Defaults stated beside an option (`` `--batch-size` (default 16) ``, `` `--dtype auto` (the default) ``) that
    no command it may be about has."""
    out = []
    for m in _STATED.finditer(text):
        span, value = m.group("span").strip(), m.group("value")
        flag = _FLAG.findall(span)[0]
        words = span.split()
        stated = (_SPAN.findall(value) + _NUMBER.findall(value))[:1] or \
            (words[words.index(flag) + 1:][:1] if not value.strip() else [])
        commands = _candidates(text, m.start(), span, flag, options)
        wrong = [w for c in commands if (w := _wrong_default(span, c, options[c].get(flag), value, stated))]
        if wrong and len(wrong) == len(commands):
            out.append(wrong[0])
    return out


def _makefile() -> tuple[set[str], set[str]]:
    text = (ROOT / "Makefile").read_text(encoding="utf-8")
    targets = {t for line in re.findall(r"^([A-Za-z0-9_.% -]+):(?!=)", text, re.M) for t in line.split()}
    return targets, set(re.findall(r"^([A-Z_][A-Z0-9_]*)\s*[?:+]?=", text, re.M))


def make_problems(text: str) -> list[str]:
    """``make ...`` lines (fenced or inline) naming a target or a variable the Makefile does not have."""
    targets, variables = _makefile()
    lines = [line for block in FENCE.findall(text) for line in block.splitlines()] + inline_spans(text)
    out = []
    for line in lines:
        line = re.sub(r"^(\w+=\S+\s+)+", "", line.strip().removeprefix("$ "))
        if not line.startswith("make "):
            continue
        for word in shlex.split(line.split(" #")[0].split(" && ")[0])[1:]:
            if "=" in word and word.split("=")[0] not in variables:
                out.append(f"`{line}`: the Makefile has no variable {word.split('=')[0]}")
            elif "=" not in word and not word.startswith("-") and word not in targets:
                out.append(f"`{line}`: the Makefile has no target {word}")
    return out


def github_slug(heading: str) -> str:
    """The anchor GitHub gives a Markdown heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def anchors(markdown: str) -> set[str]:
    """Every heading's anchor, a repeated one numbered as GitHub numbers it (``-1``, ``-2``)."""
    out: set[str] = set()
    seen: dict[str, int] = {}
    for heading in re.findall(r"^#+ (.+)$", markdown, re.M):
        slug = github_slug(heading)
        out.add(f"{slug}-{seen[slug]}" if slug in seen else slug)
        seen[slug] = seen.get(slug, 0) + 1
    return out


def results_link_problems(text: str, results: str) -> list[str]:
    """Links to ``benchmarks/RESULTS.md#anchor`` whose anchor names no heading there."""
    known = anchors(results)
    return [f"RESULTS.md#{a}: no such entry" for a in re.findall(r"RESULTS\.md#([^)\s>]+)", text) if a not in known]


def _table_rows(section: str, header: str) -> list[list[str]]:
    """The cells of each row of the first table in ``section`` whose header row starts with ``header``."""
    at = section.find(header)
    if at < 0:
        return []
    rows = []
    for line in section[at:].splitlines()[2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in re.split(r"(?<!\\)\|", line.strip())[1:-1]])
    return rows


def _code_value(cell: str) -> tuple[bool, object]:
    """The YAML value of a cell's first inline code, and whether it has one."""
    import yaml

    found = _SPAN.search(cell)
    return (found is not None, yaml.safe_load(found.group(1)) if found else None)


def task_parameter_problems(text: str, defaults: dict[str, dict]) -> list[str]:
    """Each ``### `task``` section's parameter table against the task's ``default_params``: every parameter it has,
    each at its default."""
    out = []
    for name, section in re.findall(r"^### `([^`]+)`\n(.*?)(?=^### |\Z)", text, re.M | re.S):
        rows = _table_rows(section, "| parameter | default |")
        if name not in defaults:
            continue
        if not rows and defaults[name]:
            out.append(f"{name}: no parameter table (| parameter | default | meaning |)")
        documented = {}
        for cells in rows:
            has, value = _code_value(cells[1])
            documented[cells[0].strip("`")] = value if has else cells[1]
        out += [f"{name}.{p}: the docs say {v!r}, the task's default is {defaults[name].get(p, 'absent')!r}"
                for p, v in documented.items() if defaults[name].get(p, "absent") != v]
        out += [f"{name}.{p}: not in the docs' parameter table" for p in defaults[name] if p not in documented]
    return out


def policy_default_problems(text: str, shipped: dict) -> list[str]:
    """The policy page's key table: each ``shipped default`` given in code is the shipped policy's."""
    out = []
    for cells in _table_rows(text, "| key | value |"):
        has, value = _code_value(cells[-1])
        key = cells[0].strip("`")
        if has and shipped.get(key, "absent") != value:
            out.append(f"defaults.{key}: the docs say {value!r}, the shipped policy has {shipped.get(key, 'absent')!r}")
    return out
