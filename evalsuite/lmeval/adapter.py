"""lm-eval generate_until tasks as evalsuite tasks (``evalsuite run --lm-eval-task NAME``).

Each lm-eval doc becomes a raw-prompt Sample whose prompt is exactly the context lm-eval builds (description,
few-shot examples with the run's seed, ``doc_to_text``; no chat template, as lm-eval without
``--apply_chat_template``). Generation settings come from the task's ``generation_kwargs``; a generated answer is
scored by the task's own filters and ``process_results``: the first filter pipeline, the first metric.
"""
from __future__ import annotations

import difflib
import hashlib
import json
from pathlib import Path
from typing import Any

from evalsuite.errors import EvalsuiteError
from evalsuite.tasks.base import GenSettings, Sample, Score, Task

PREFIX = "lm_eval:"
#: lm-eval metrics that are 0/1 per doc (paired flips / McNemar apply)
BINARY_METRICS = frozenset({"exact_match", "acc", "acc_norm", "em", "pass@1", "pass_at_1"})


def _stable(obj: Any) -> Any:
    """JSON fallback that does not leak memory addresses (functions by qualified name)."""
    fn = getattr(obj, "func", obj)  # functools.partial
    name = getattr(fn, "__qualname__", None)
    return f"{getattr(fn, '__module__', '')}.{name}" if name else type(obj).__name__


def config_version(lm_task: Any) -> str:
    """``<lm-eval VERSION>+<hash of the task config>``: any config change is a new task version."""
    cfg = lm_task.dump_config()
    cfg.get("metadata", {}).pop("config_source", None)  # where the YAML lives is not what the task is
    blob = json.dumps(cfg, sort_keys=True, default=_stable)
    return f"{lm_task.VERSION}+{hashlib.sha256(blob.encode()).hexdigest()[:10]}"


class LmEvalTask(Task):
    """One lm-eval generate_until task, resolved by the task Registry from ``lm_eval:<name>``.

    Parameters: ``include`` (a folder of lm-eval task YAMLs; without it lm-eval's own index is used) and
    ``limit`` (build only the first N docs). The lm-eval task is loaded when samples are first asked for."""

    description = "lm-eval task"
    default_params: dict[str, Any] = {"include": None, "limit": None}

    def __init__(self, task_name: str) -> None:
        self.task_name = task_name
        self.name = PREFIX + task_name
        self.version = "unloaded"
        self.lm_task: Any = None
        self.metric: str | None = None
        self._docs: dict[str, dict] = {}
        self._samples: list[Sample] = []
        self._gen_kwargs: dict[str, Any] = {}

    def _load(self, params: dict[str, Any], seed: int) -> None:
        tasks = load_lm_eval_tasks([self.task_name], params["include"])
        if len(tasks) != 1:
            raise EvalsuiteError(f"lm-eval {self.task_name!r} expands to {len(tasks)} tasks; name them one by one: "
                                 f"{', '.join(sorted(map(str, tasks)))}")
        lm_task = next(iter(tasks.values()))
        if lm_task.OUTPUT_TYPE != "generate_until":
            raise EvalsuiteError(
                f"lm-eval task {lm_task.config.task!r} is {lm_task.OUTPUT_TYPE}: evalsuite run takes generate_until "
                "tasks only; run it with lm-eval and the evalsuite model (python -m evalsuite.lmeval)")
        self.lm_task, self.version = lm_task, config_version(lm_task)
        metrics = list(getattr(lm_task, "_metric_fn_list", {}) or {})
        self.metric = metrics[0] if metrics else None
        self.binary = self.metric in BINARY_METRICS
        lm_task.set_fewshot_seed(seed)
        lm_task.build_all_requests(limit=params["limit"], rank=0, world_size=1, cache_requests=False)
        self._docs, self._samples = {}, []
        for inst in lm_task.instances:
            sid = f"doc{inst.doc_id}"
            self._docs[sid] = inst.doc
            self._samples.append(Sample(id=sid, prompt=inst.args[0], target=_jsonable(inst.doc),
                                        metadata={"doc_id": inst.doc_id}))
        self._gen_kwargs = dict(lm_task.instances[0].args[1]) if lm_task.instances else {}

    def samples(self, params: dict[str, Any], seed: int) -> list[Sample]:
        p = self.params(params)
        if p["include"] is not None:
            p["include"] = str(Path(p["include"]).expanduser().resolve())
        self._load(p, seed)
        if not self._samples:
            raise EvalsuiteError(f"lm-eval task {self.name!r} has no docs")
        return list(self._samples)

    def gen_settings(self, params: dict[str, Any]) -> GenSettings:
        from evalsuite.lmeval.model import gen_settings

        return gen_settings(self._gen_kwargs)

    def score(self, sample: Sample, output: str) -> Score:
        """The lm-eval task's own filters + process_results on one output; the first metric is the score."""
        from lm_eval.api.instance import Instance

        doc = self._docs[sample.id]
        inst = Instance(request_type="generate_until", doc=doc, arguments=(sample.prompt, self._gen_kwargs),
                        idx=0, metadata=(self.lm_task.config.task, sample.metadata.get("doc_id"), 1))
        inst.resps = [output]
        ensembles = getattr(self.lm_task, "_filters", None) or []
        for ensemble in ensembles[:1]:
            ensemble.apply([inst])
        key = next(iter(inst.filtered_resps), None)
        filtered = inst.filtered_resps[key] if key is not None else output
        metrics = self.lm_task.process_results(doc, [filtered])
        name = self.metric if self.metric in metrics else next(iter(metrics))
        value = float(metrics[name])
        numeric = {k: float(v) for k, v in metrics.items() if isinstance(v, (int, float, bool))}
        return Score(value=value, extracted=str(filtered)[:200], reason=f"{name}={value:g} (filter {key})",
                     metrics=numeric)


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def load_lm_eval_tasks(names: list[str], include: str | Path | None) -> dict[str, Any]:
    """lm-eval Task objects by name (groups and tags expand to their leaf tasks). With ``include`` only that
    folder is indexed (fast, offline); without it lm-eval's built-in task index is used."""
    from lm_eval.tasks import TaskManager

    if include is not None and not Path(include).is_dir():
        raise EvalsuiteError(f"lm-eval include folder not found: {include}")
    manager = TaskManager(include_path=str(include), include_defaults=False) if include else TaskManager()
    for name in names:
        if name not in manager.all_tasks and not Path(name).is_file():
            near = difflib.get_close_matches(name, manager.all_tasks, n=3, cutoff=0.5)
            hint = f"; did you mean {', '.join(near)}?" if near else ""
            raise EvalsuiteError(f"unknown lm-eval task {name!r}{' in ' + str(include) if include else ''}{hint}")
    try:
        return dict(manager.load(list(names))["tasks"])
    except (OSError, ValueError, KeyError, ImportError) as exc:
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise EvalsuiteError(f"cannot load lm-eval task(s) {', '.join(names)}: {first}") from None
