"""``python -m evalsuite.lmeval ...``: lm-eval's own command line with the ``evalsuite`` model registered.

Example: ``python -m evalsuite.lmeval run --model evalsuite --model_args model=default,variant=kv4g32
--include_path DIR --tasks NAME --log_samples --output_path out/``.
"""
from __future__ import annotations


def main() -> None:
    """Register ``evalsuite`` with lm-eval, then run lm-eval's CLI on ``sys.argv``."""
    from evalsuite.cpu.mkl import choose_cbwr
    from evalsuite.cpu.threads import choose_wait_policy

    choose_wait_policy()  # the command line's process policies, before lm-eval imports torch (evalsuite.cli.main)
    choose_cbwr()
    from evalsuite.lmeval import register
    from evalsuite.models import offline

    offline()
    register()
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()
