"""Gate results produced elsewhere: lm-eval ``--log_samples`` output, inspect_ai logs or evalsuite run folders, a
baseline and variants, paired exactly (task, document id, identical prompt) and stored as an evalsuite run, so that
``evalsuite gate``, ``report`` and ``tenants`` work on it (``evalsuite compare``, docs/compare.md).

One module per step: a reader per format (``lmeval_log``, ``inspect_log``, ``evalsuite_run``) -> ``LogRun``
(``source``); the score per task and repeats averaged (``scoring``); exact pairing (``pairing``); the run folder
(``write``); ``build.compare_logs`` ties them together. No model and no torch: inspect_ai is imported only to read
its logs.
"""
from __future__ import annotations
