"""The package map is the design: no import circle between evalsuite's modules, and no package imports one of a
higher layer. Imports inside functions count (they are how circles hide)."""
from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1] / "evalsuite"

#: layer of each top-level package (or module), and of each backend under backends/; an import may only go to a
#: strictly lower layer or stay inside its own package. cpu/ is what the CPU does to a run; store is what a run
#: stores (records, the SQLite store, the run state) and core the run's torch-free vocabulary over it (config,
#: decision, costs); run/ orchestrates behind the Backend protocol; backends/inprocess the in-process torch backend;
#: backends/served the endpoints and vLLM; backends/ray Ray; cli/ the top.
LAYERS = {
    "errors": 0, "cpu": 0, "paths": 0, "dims": 0, "__main__": 9,
    "store": 1, "sandbox": 1, "kvcache": 1, "models": 1,
    "core": 2, "tasks": 2, "variants": 2, "stats": 2,
    "gate": 3, "capacity": 3, "run": 3,  # same layer: neither imports the other (rounds asks an injected decision)
    "report": 4, "tenants": 4,  # tenants joins gate and capacity; report renders its dict; neither imports the other
    "backends": 5, "backends.inprocess": 5,
    "backends.served": 6, "backends.ray": 6, "lmeval": 6, "sensitivity": 6, "compare": 6,  # compare: logs in, a run out
    "cli": 7,
}
NESTED = ("backends",)  #: folders whose subpackages each have a layer of their own


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(path: Path, name: str) -> set[str]:
    """Every evalsuite module ``path`` imports, at module level or inside a function, resolved to a module of the
    package (``from evalsuite.x import y`` counts as evalsuite.x.y when y is a module, else evalsuite.x)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("evalsuite"))
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                up = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(up + ([base] if base else []))
            if not base.startswith("evalsuite"):
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                out.add(sub if sub in MODULES else base)
    return {m for m in out if m != name}


MODULES = {module_name(p): p for p in ROOT.rglob("*.py")}
GRAPH = {name: imported(path, name) for name, path in MODULES.items()}


def top(name: str) -> str:
    """The unit a layer is given to: the top-level package or module, or ``backends.X``."""
    parts = name.split(".")[1:] or [name]
    return ".".join(parts[:2]) if parts[0] in NESTED and len(parts) > 1 else parts[0]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    found: list[list[str]] = []
    for root in graph:
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on.add(root)
        while work:
            node, it = work[-1]
            nxt = next((n for n in it if n in graph), None)
            if nxt is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    comp = []
                    while True:
                        m = stack.pop()
                        on.discard(m)
                        comp.append(m)
                        if m == node:
                            break
                    if len(comp) > 1:
                        found.append(sorted(comp))
            elif nxt not in index:
                index[nxt] = low[nxt] = len(index)
                stack.append(nxt)
                on.add(nxt)
                work.append((nxt, iter(sorted(graph[nxt]))))
            elif nxt in on:
                low[node] = min(low[node], index[nxt])
    return found


def test_every_package_has_a_layer():
    missing = sorted({top(m) for m in MODULES if top(m) not in LAYERS and m != "evalsuite"})
    assert not missing, f"packages without a layer in tests/test_layers.py: {missing}"


def test_no_import_circle():
    assert cycles(GRAPH) == []


def test_no_import_goes_up_a_layer():
    up = sorted(f"{src} -> {dst}" for src, dsts in GRAPH.items() for dst in dsts
                if src != "evalsuite" and dst != "evalsuite" and top(src) != top(dst)
                and LAYERS[top(dst)] >= LAYERS[top(src)])
    assert up == []


BACKENDS = ("backends", "backends.inprocess", "backends.served", "backends.ray")


@pytest.mark.parametrize("low, high", [("store", {"run", *BACKENDS, "gate", "cli"}),
                                       ("core", {"run", *BACKENDS, "gate", "cli"}),
                                       ("gate", {"run", *BACKENDS, "cli"}),
                                       ("stats", {"run", *BACKENDS, "gate", "cli"}),
                                       ("report", {"run", *BACKENDS, "cli"}),
                                       ("compare", {"models", "kvcache", "variants", "tasks", "run", *BACKENDS,
                                                    "lmeval", "sensitivity", "cli"})])
def test_the_torch_free_core_and_the_gate_import_no_machinery(low, high):
    bad = sorted(f"{src} -> {dst}" for src, dsts in GRAPH.items() if top(src) == low for dst in dsts
                 if top(dst) in high)
    assert bad == []


def test_the_checks_can_fail(tmp_path):
    """The detectors find a circle, and an import hidden inside a function."""
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": set()}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": set()}) == []
    probe = tmp_path / "probe.py"
    probe.write_text("def f():\n    from evalsuite.run import rounds\n    from ..store import sqlite\n")
    assert imported(probe, "evalsuite.gate.probe") == {"evalsuite.run.rounds", "evalsuite.store.sqlite"}
