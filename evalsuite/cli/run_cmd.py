"""``evalsuite run``: baseline + variants on identical samples, stored as they complete, then gated."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from evalsuite.cli.common import (baselines_root, check_device, model_options, quiet_libraries, runs_root, table,
                                  task_config_option)
from evalsuite.paths import BASELINES_HELP, RUNS_HELP
from evalsuite.errors import EvalsuiteError
from evalsuite.core.config import DEFAULT_TASKS, DEFAULT_VARIANTS, RunConfig
from evalsuite.backends.served.vllm.cli import vllm_options


def parse_duration(text: str) -> float:
    """``600`` / ``90s`` / ``10m`` / ``1.5h`` -> seconds; anything else (or <= 0) is a one-line error."""
    units = {"s": 1.0, "m": 60.0, "h": 3600.0}
    raw = text.strip().lower()
    scale = units.get(raw[-1:], None)
    number = raw[:-1] if scale is not None else raw
    try:
        value = float(number) * (scale or 1.0)
    except ValueError:
        value = float("nan")
    if not value > 0 or value == float("inf"):
        raise EvalsuiteError(f"bad --budget {text!r}: expected a positive duration such as 600, 90s, 10m or 1h")
    return value


def parse_params(items: tuple[str, ...]) -> dict[str, dict]:
    """``--param needle.context_lens=[512,1024]`` -> {"needle": {"context_lens": [512, 1024]}} (YAML values)."""
    import yaml

    out: dict[str, dict] = {}
    for item in items:
        key, eq, value = item.partition("=")
        task, dot, name = key.partition(".")
        if not eq or not dot or not task or not name:
            raise EvalsuiteError(f"bad --param {item!r}: expected TASK.NAME=VALUE")
        out.setdefault(task, {})[name] = yaml.safe_load(value)
    return out


@click.command()
@model_options
@task_config_option
@click.option("--variants", "-v", default=",".join(DEFAULT_VARIANTS), show_default=True,
              help="Comma-separated variant specs; the baseline (bf16) is added first if missing.")
@click.option("--tasks", "-t", default=",".join(DEFAULT_TASKS), show_default=True, help="Comma-separated tasks.")
@click.option("--limit", type=click.IntRange(min=1), help="A fixed set: at most N samples per task (spread evenly).")
@click.option("--max-samples", type=click.IntRange(min=1),
              help="Sequential run: draw samples until the gate decides; a safety cap of N per task (with "
                   "--budget the default is each task's stream size, or 1000 for an endless stream).")
@click.option("--round-size", default=16, show_default=True, type=click.IntRange(min=1),
              help="Pairs of a task's first look in a sequential run (--budget or --max-samples).")
@click.option("--budget", "budget", metavar="DURATION",
              help="Wall-clock budget of the whole command, e.g. 600, 90s, 10m, 1h (loading, every look, the "
                   "report): a sequential run that draws where a decision is cheapest and stops a (variant, task) "
                   "whose open checks cannot decide in what is left (docs/gate.md, Sequential runs).")
@click.option("--seed", default=1234, show_default=True, help="Sample-generation seed.")
@click.option("--param", "params", multiple=True, metavar="TASK.NAME=VALUE", help="Override a task parameter.")
@click.option("--batch-size", default=16, show_default=True, type=click.IntRange(min=1),
              help="Prompts decoded together (a sequential run's looks go in chunks of one batch).")
@click.option("--out", type=click.Path(path_type=Path), help=f"Runs folder [default: {RUNS_HELP}].")
@click.option("--run-id", help="Name of the run folder (default run-YYYYmmdd-HHMMSS).")
@click.option("--resume", "resume", metavar="RUN", help="Continue an interrupted run (its stored config is used).")
@click.option("--accumulate", is_flag=True,
              help="Grow the evidence across invocations: continue the run of this exact configuration and code "
                   "(<runs folder>/acc-<key>) under the new budget, or start it (docs/gate.md).")
@click.option("--policy", type=click.Path(path_type=Path), help="Gate policy YAML (default: the shipped policy).")
@click.option("--tenants", "tenants_path", type=click.Path(path_type=Path),
              help="tenants.yaml (docs/tenants.md): the run also draws each tenant's slices (the tasks its policy "
                   "names, the needle at its contexts), spends the budget on their open checks too, and ends with "
                   "the decision per tenant (its exit code: `evalsuite tenants RUN`).")
@click.option("--no-gate", is_flag=True, help="Only run and store; do not gate.")
@click.option("--kld/--no-kld", default=True, show_default=True, help="Teacher-forced KL divergence vs baseline.")
@click.option("--noise-floor", is_flag=True, help="Also rerun the baseline at another batch size (noise floor).")
@click.option("--baseline", "baseline_dir", type=click.Path(path_type=Path),
              help="Stored baselines folder to reuse strictly: a mismatch is an error. Without it (and without "
                   f"--store-baseline), a matching baseline in the stored baselines folder ({BASELINES_HELP}) is "
                   "reused when that folder exists, and one that does not match is logged and recomputed.")
@click.option("--store-baseline", "store_baseline", type=click.Path(path_type=Path),
              help="Reuse the matching stored baseline answers in this folder and store this run's back (grown: "
                   "a later run regenerates none of them and asks the baseline only for new samples).")
@click.option("--shipped-baseline", "shipped_baseline", type=click.Path(path_type=Path, file_okay=False),
              help="A shipped baselines folder (<folder>/<cpu class>/<fingerprint>/, e.g. the checkout's "
                   "baselines/), only read: its matching answers seed --store-baseline's folder; a miss names the "
                   "differing field and the baseline is generated (docs/gate.md, Shipped baseline).")
@click.option("--lm-eval-task", "lm_eval_tasks", multiple=True,
              help="Also run this lm-eval generate_until task (the task 'lm_eval:NAME'; local data).")
@click.option("--lm-eval-include", type=click.Path(path_type=Path),
              help="Folder of lm-eval task YAMLs (sets lm_eval:NAME.include for every --lm-eval-task).")
@click.option("--weight-kernels", type=click.Choice(["dequantized", "quanto"]), default="dequantized",
              show_default=True, help="Weight-only variants: multiply by quanto's quantized values unpacked once "
                                      "(same values, faster here), or run quanto's own modules (speed as deployed).")
@click.option("--reuse-prompt-kv", is_flag=True,
              help="KV-cache-only variants start from the baseline's prompt K/V instead of a second prefill "
                   "(faster on long prompts; their answers then depend on the baseline's batching).")
@click.option("--recompute-identical", is_flag=True,
              help="Generate even for a variant that computes exactly what the baseline computes (bit-identical "
                   "weights, unquantized cache); by default it takes the baseline's answers and KLD 0.")
@click.option("--verify", "verify", type=click.Choice(["auto", "on", "off"]), default="auto", show_default=True,
              help="Greedy variants are checked against the baseline's answer ids in one teacher-forced pass and "
                   "decode only after a divergence (the same answers, docs/verification.md). auto: every greedy "
                   "variant, except weight-only ones in bf16 compute on kernels that are not batch-invariant "
                   "(near-ties send most of their rows to a decode there: regenerating is faster); on: every "
                   "greedy variant; off: every variant generates every answer.")
@click.option("--verify-audit", type=float, default=0.0, show_default=True, metavar="F",
              help="Regenerate a seeded fraction F (0-1) of the verified samples in full and record how many agree.")
@click.option("--quiet", "-q", is_flag=True, help="No progress bars.")
@click.option("--ray", "ray_address", is_flag=False, flag_value="local", default=None, metavar="[ADDRESS]",
              help="Fan (variant x task x shard) units out to Ray (a local instance, or ADDRESS).")
@click.option("--engine", type=click.Choice(["inprocess", "vllm"]), default=None,
              help="vllm: evalsuite serves the baseline and every variant with vLLM servers it starts (docs/vllm.md).")
@click.option("--vllm-python", metavar="PATH", envvar="EVALSUITE_VLLM_PYTHON",
              help="Python with vLLM for --engine vllm (default: $EVALSUITE_VLLM_PYTHON, else this Python when it "
                   "has vLLM, else ./.venv-vllm).")
@vllm_options
def run(model: str, dtype: str, device: str | None, task_config: str | None, variants: str, tasks: str,
        limit: int | None,
        max_samples: int | None, round_size: int, budget: str | None, seed: int, params: tuple[str, ...],
        batch_size: int, out: Path | None, run_id: str | None, resume: str | None, accumulate: bool,
        policy: Path | None, tenants_path: Path | None,
        no_gate: bool, kld: bool, noise_floor: bool, baseline_dir: Path | None, store_baseline: Path | None,
        shipped_baseline: Path | None, lm_eval_tasks: tuple[str, ...],
        lm_eval_include: Path | None, weight_kernels: str, reuse_prompt_kv: bool, recompute_identical: bool,
        verify: str, verify_audit: float, quiet: bool,
        ray_address: str | None = None, engine: str | None = None, vllm_python: str | None = None,
        **vllm: Any) -> int:
    """Run the baseline and every variant on the same samples of each task, store every scored sample as it
    completes (SQLite, resumable), measure memory and speed, then gate against a policy.

    Exit codes: 0 pass, 1 fail (or inconclusive under on_inconclusive: fail), 2 bad input, 3 internal error.
    """
    from evalsuite.cli.backends import make_backend
    from evalsuite.cli.common import set_run_dir
    from evalsuite.gate.decide import store_decider
    from evalsuite.gate.policy import load_policy
    from evalsuite.run.pipeline import execute, new_run_id, process_started
    from evalsuite.tenants.spec import load_tenants
    from evalsuite.store.sqlite import resolve_run_dir, score_table
    from evalsuite.variants.spec import split_specs

    root = out or runs_root()
    parsed = load_policy(policy)  # a bad policy is refused before anything loads or runs; parsed once
    tenants = load_tenants(tenants_path) if tenants_path is not None else []  # so is a bad tenants file
    if shipped_baseline is not None and store_baseline is None:
        raise EvalsuiteError("--shipped-baseline seeds --store-baseline's folder: give --store-baseline too")
    if accumulate and (resume or run_id):
        raise EvalsuiteError("--accumulate names and continues its own run folder: drop --resume / --run-id")
    if not 0.0 <= verify_audit <= 1.0:
        raise EvalsuiteError(f"--verify-audit must be a fraction in [0, 1], got {verify_audit}")
    if device is not None or not resume:
        device = check_device(device)  # a bad or absent device: one line, exit 2, no run folder
    if resume:
        run_dir = resolve_run_dir(resume, root)
        config = resumed(run_dir, device, budget, max_samples, task_config)
    else:
        if store_baseline is not None and baseline_dir is not None:
            raise EvalsuiteError("--baseline (strict reuse) and --store-baseline (reuse and grow) exclude each other")
        task_list, task_params = task_options(tasks, params, lm_eval_tasks, lm_eval_include)
        if tenants:
            task_list, task_params = tenant_draws(task_list, task_params, tenants)
        config = RunConfig(model=model, dtype=dtype, device=device or "auto", variants=split_specs(variants),
                           tasks=task_list, task_params=task_params, task_config=task_config, seed=seed, limit=limit,
                           batch_size=batch_size,
                           kld=kld, noise_floor=noise_floor, max_samples=max_samples, round_size=round_size,
                           budget_s=parse_duration(budget) if budget is not None else None,
                           weight_kernels=weight_kernels, reuse_prompt_kv=reuse_prompt_kv,
                           reuse_identical=not recompute_identical, verify=verify != "off",
                           verify_bf16=verify == "on",
                           verify_audit=verify_audit)  # refuses --limit with --max-samples / --budget
        run_dir = root / (run_id or new_run_id())
        if accumulate:
            config, run_dir, resume = accumulated(config, root)
    set_run_dir(run_dir)
    quiet_libraries()
    baselines = store_baseline or baseline_dir or (baselines_root() if baselines_root().exists() else None)
    from evalsuite.backends.served.vllm.cli import engine_backend

    backend = engine_backend(config, run_dir, engine, vllm_python, bool(resume), **vllm) or \
        make_backend(config, run_dir, ray_address)
    store = execute(config, run_dir, resume=bool(resume), backend=backend,
                    progress=not quiet, log=click.echo, baselines=baselines, strict_baseline=baseline_dir is not None,
                    decide=store_decider(parsed, [t.policy for t in tenants]),
                    grow_baseline=store_baseline is not None, started=process_started(), shipped=shipped_baseline)
    record_serving(store, tenants, tenants_path)
    click.echo(f"\nrun {run_dir.name}: stored in {store.path}")
    header, rows = score_table(store)
    click.echo(table(rows, header))
    if no_gate:
        return 0
    from evalsuite.cli.finish import gate_and_report

    return gate_and_report(store, parsed, echo=click.echo, tenants=tenants or None)


def tenant_draws(tasks: list[str], params: dict[str, dict], tenants: list[Any]) -> tuple[list[str], dict]:
    """``--tenants``: the run's tasks and parameters with the tenants' slices added (``tenants.run.with_tenants``),
    each addition said."""
    from evalsuite.tasks.needle import NeedleTask
    from evalsuite.tenants.run import with_tenants

    tasks, params, said = with_tenants(tasks, params, tenants, NeedleTask.default_params["context_lens"])
    for line in said:
        click.echo(line)
    return tasks, params


def record_serving(store: Any, tenants: list[Any], path: Path | None) -> None:
    """Keep the model's config.json (the planner's shape) and the tenants (policies inlined) in the run's state, so
    that ``evalsuite tenants RUN`` and the report need neither again."""
    from evalsuite.cli.tenants_cmd import model_config
    from evalsuite.tenants.spec import stored

    state = store.state()
    config = model_config(state, None) if not state.model_config else {}
    extra = {"tenants": stored(tenants, str(path))} if tenants else {}
    store.update_state(**({"model_config": config} if config else {}), **extra)


def resumed(run_dir: Path, device: str | None, budget: str | None, max_samples: int | None,
            task_config: str | None = None) -> RunConfig:
    """The stored config of the run in ``run_dir``, on ``device`` (else its stored one), with the task parameter
    folder ``task_config`` where given and, where given, under a new budget and cap (a budgeted run continues under
    them): every change validated (``RunConfig.resumed_with``: one line, exit 2)."""
    from evalsuite.run.pipeline import resume_config

    config = resume_config(run_dir)
    changes: dict[str, Any] = {"device": device or check_device(config.device)}
    if budget is not None:
        changes["budget_s"] = parse_duration(budget)
    if max_samples is not None:
        changes["max_samples"] = max_samples
    if task_config is not None:
        changes["task_config"] = task_config
    return config.resumed_with(**changes)


def task_options(tasks: str, params: tuple[str, ...], lm_eval_tasks: tuple[str, ...],
                 lm_eval_include: Path | None) -> tuple[list[str], dict[str, dict[str, Any]]]:
    """(task names, task parameters) of ``--tasks``, ``--param`` and ``--lm-eval-task`` / ``--lm-eval-include``."""
    task_list = [t.strip() for t in tasks.split(",") if t.strip()]
    task_params = parse_params(params)
    for name in lm_eval_tasks:
        task_list.append(f"lm_eval:{name}")
        if lm_eval_include is not None:
            task_params.setdefault(f"lm_eval:{name}", {})["include"] = str(lm_eval_include.resolve())
    return task_list, task_params


def accumulated(config: RunConfig, root: Path) -> tuple[RunConfig, Path, str | None]:
    """``--accumulate``: the run folder of ``config`` (evalsuite.run.accumulate), and, when it already holds a
    run, its stored config under this invocation's budget, cap and device, and its name to resume."""
    from evalsuite.store.sqlite import Store
    from evalsuite.run.accumulate import accumulate_id
    from evalsuite.run.pipeline import resume_config

    run_dir = root / accumulate_id(config)
    resume = None
    if (run_dir / Store.FILENAME).exists():
        config = resume_config(run_dir).resumed_with(budget_s=config.budget_s, max_samples=config.max_samples,
                                                     device=config.device)
        resume = run_dir.name
    click.echo(f"--accumulate: {'continuing' if resume else 'starting'} {run_dir} (remove it to start over)")
    return config, run_dir, resume
