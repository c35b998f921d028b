"""Scaling past one process: Ray fan-out of run units (``ray`` is imported only when it runs)."""
