"""``python -m evalsuite.lmeval ...``: lm-eval's own command line with the ``evalsuite`` model registered.

Example: ``python -m evalsuite.lmeval run --model evalsuite --model_args model=default,variant=kv4g32
--include_path DIR --tasks NAME --log_samples --output_path out/``.
"""
from __future__ import annotations


def main() -> None:
    """Register ``evalsuite`` with lm-eval, then run lm-eval's CLI on ``sys.argv``."""
    from evalsuite.lmeval import register
    from evalsuite.models import offline

    offline()
    register()
    from lm_eval.__main__ import cli_evaluate

    cli_evaluate()
