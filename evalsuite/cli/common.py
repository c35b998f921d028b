"""Options and helpers shared by CLI commands."""
from __future__ import annotations

import os
from pathlib import Path
from typing import Any, Callable

import click

# where runs, reports and baselines go (the commands import them from here): evalsuite.paths
from evalsuite.paths import baselines_root, reports_root, runs_root  # noqa: F401

MODEL_HELP = "'default' (embedded SmolLM2-135M-Instruct), a local folder, a .gguf file, or an HF id (offline cache)."


DEVICE_HELP = ("Where the model runs: auto (CUDA when present, else the CPU), cpu, cuda or cuda:N. A model too big "
               "for the GPU's free memory is spread over the GPUs (then the CPU) with device_map=auto. "
               "[default: auto; with --resume: the run's stored device]")


def device_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--device (None when not given, so that ``--resume`` can keep the stored one)."""
    return click.option("--device", "device", default=None, metavar="auto|cpu|cuda|cuda:N", help=DEVICE_HELP)(fn)


def check_device(device: str | None) -> str:
    """The ``--device`` value (``auto`` when not given), refused (one line, exit 2) before anything loads when it
    is malformed or names a GPU this machine does not have."""
    from evalsuite.models.device import resolve_device

    resolve_device(device or "auto")
    return device or "auto"


def model_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--model, --dtype and --device."""
    fn = device_option(fn)
    fn = click.option("--dtype", default="auto", show_default=True,
                      type=click.Choice(["auto", "bfloat16", "float32", "float16"]),
                      help="Baseline dtype (the reference of every comparison). auto: on CUDA bf16; on the CPU bf16 "
                           "weights computed in bf16 or fp32, whichever this machine multiplies faster (measured "
                           "at load).")(fn)
    return click.option("--model", "-m", default="default", show_default=True, help=MODEL_HELP)(fn)


def task_config_option(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--task-config DIR, passed to the command as ``task_config`` (an absolute path, or None); the command hands it
    on (``RunConfig.task_config``), so nothing outlives the call."""
    return click.option("--task-config", "task_config", type=click.Path(exists=True, file_okay=False, path_type=Path),
                        callback=lambda ctx, param, value: str(value.resolve()) if value is not None else None,
                        metavar="DIR",
                        help="Folder of task parameter files (<task>.yaml). Default: $EVALSUITE_TASK_CONFIG, else "
                             "./tasks when it exists, else each task's built-in defaults. [with --resume: the "
                             "run's]")(fn)


_RUN_DIR: list[Path] = []  # the run folder of the command in progress (where an internal error's traceback goes)


def set_run_dir(path: Path) -> None:
    """Remember the run folder so that an internal error can leave its traceback there."""
    _RUN_DIR[:] = [Path(path)]


def crash_log_dir() -> Path | None:
    """The run folder of the command in progress, when it exists."""
    return _RUN_DIR[0] if _RUN_DIR and _RUN_DIR[0].is_dir() else None


def quiet_libraries() -> None:
    """Keep transformers/tqdm chatter off the terminal; our own progress bars stay."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers.utils import logging as hf_logging

    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()


def table(rows: list[list[str]], header: list[str]) -> str:
    """A plain aligned text table."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *rows)]
    line = lambda r: "  ".join(str(x).ljust(w) for x, w in zip(r, widths)).rstrip()
    return "\n".join([line(header), line(["-" * w for w in widths])] + [line(r) for r in rows])
