"""Scaling past one process: OpenAI-compatible endpoints as models, and Ray fan-out of run units.

Nothing here is imported by the default in-process path; ``ray`` is imported only by ``ray_exec``.
"""
