"""The ``evalsuite`` command line. Subcommands live one per module and are imported only when used."""
from __future__ import annotations

import sys
from importlib import import_module
from pathlib import Path

import click

from evalsuite.errors import EvalsuiteError

#: command name -> ("module:attribute", one-line help shown in ``evalsuite --help``)
COMMANDS: dict[str, tuple[str, str]] = {
    "smoke": ("evalsuite.cli.smoke:smoke", "Load a model, build variants, answer one prompt each, show bytes."),
    "variants": ("evalsuite.cli.variants_cmd:variants", "Inspect variant specs (describe SPEC)."),
    "tasks": ("evalsuite.cli.tasks_cmd:tasks", "List the registered tasks (built-in and plugins)."),
    "run": ("evalsuite.cli.run_cmd:run", "Run baseline + variants on tasks, store every sample, gate."),
    "gate": ("evalsuite.cli.gate_cmd:gate", "Re-gate a stored run against a policy (no model needed)."),
    "compare": ("evalsuite.cli.compare_cmd:compare", "Gate lm-eval / inspect_ai / evalsuite sample logs (no model)."),
    "baseline": ("evalsuite.cli.baseline_cmd:baseline", "Store a pinned baseline for a model and tasks."),
    "tenants": ("evalsuite.cli.tenants_cmd:tenants", "Per tenant (a workload + a policy): the variant that serves it."),
    "report": ("evalsuite.cli.report_cmd:report", "Rebuild a run's HTML/Markdown/JSON/JUnit report."),
    "ablate": ("evalsuite.cli.ablate_cmd:ablate", "Sweep group sizes/bits: quality vs bytes curves."),
    "sensitivity": ("evalsuite.cli.sensitivity_cmd:sensitivity", "Per-layer sensitivity; --fix proposes a keep-set."),
    "plan": ("evalsuite.cli.plan_cmd:plan", "Capacity and bandwidth planner from a config.json."),
    "export-lm-eval": ("evalsuite.cli.lmeval_cmd:export_lm_eval", "Export a task as an lm-eval task folder."),
}


class LazyGroup(click.Group):
    """A click group whose subcommands are imported on first use (fast ``--help``, no heavy imports)."""

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [name for name, (ref, _) in COMMANDS.items() if _available(ref)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in COMMANDS or not _available(COMMANDS[name][0]):
            return None
        module, _, attr = COMMANDS[name][0].partition(":")
        return getattr(import_module(module), attr)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = [(n, COMMANDS[n][1]) for n in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def _available(ref: str) -> bool:
    from importlib.util import find_spec

    return find_spec(ref.partition(":")[0]) is not None


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="evalsuite")
def cli() -> None:
    """evalsuite: is this quantized variant safe to release, and for whom?

    Runs a baseline model and its quantized variants (weights and/or KV cache) on the same samples,
    compares them sample by sample, and gates the release with PASS / FAIL / INCONCLUSIVE.
    Exit codes: 0 pass, 1 fail (or inconclusive under on_inconclusive: fail), 2 bad input, 3 internal error,
    130 interrupted (Ctrl-C).
    """


INTERNAL_ERROR = 3


def _internal_error(exc: BaseException) -> None:
    """One line on stderr; the traceback goes to the run folder's ``error.log`` (else a temporary file)."""
    import tempfile
    import time
    import traceback

    from evalsuite.cli.common import crash_log_dir

    folder = crash_log_dir()
    if folder is not None:
        path = folder / "error.log"
    else:
        path = Path(tempfile.gettempdir()) / f"evalsuite-error-{time.strftime('%Y%m%d-%H%M%S')}.log"
    text = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))
    try:
        with open(path, "a", encoding="utf-8") as fh:
            fh.write(text)
        where = f"traceback in {path}"
    except OSError:
        where = "traceback could not be written"
    first = (str(exc).strip().splitlines() or [""])[0][:200]
    click.echo(f"evalsuite: internal error: {type(exc).__name__}: {first} ({where})", err=True)
    sys.exit(INTERNAL_ERROR)


def process_policies() -> None:
    """The process-wide choices of an evalsuite command, made before torch loads (importing evalsuite makes
    none): how OpenMP threads wait (``evalsuite.cpu.threads``) and MKL's reproducibility mode (``evalsuite.cpu.mkl``);
    and the task prefixes of the packages above the task registry (``lm_eval:``,
    ``evalsuite.lmeval.register_tasks``)."""
    from evalsuite.lmeval import register_tasks
    from evalsuite.cpu.mkl import choose_cbwr
    from evalsuite.cpu.threads import choose_wait_policy

    choose_wait_policy()
    choose_cbwr()
    register_tasks()


def main() -> None:
    """Console entry point: EvalsuiteError -> one line on stderr, exit 2; any other exception -> exit 3."""
    process_policies()
    try:
        rc = cli.main(standalone_mode=False)
        sys.exit(rc if isinstance(rc, int) else 0)
    except EvalsuiteError as exc:
        click.echo(f"evalsuite: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except click.exceptions.Exit as exc:
        sys.exit(exc.exit_code)
    except click.ClickException as exc:
        click.echo(f"evalsuite: error: {exc.format_message()}", err=True)
        sys.exit(2)
    except (click.Abort, KeyboardInterrupt):
        click.echo("evalsuite: aborted", err=True)
        sys.exit(130)
    except Exception as exc:  # a bug, not bad input: exit 3 so CI can tell it from a FAIL verdict
        _internal_error(exc)
