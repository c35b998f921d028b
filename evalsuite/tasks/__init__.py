"""Task plugins: the Task API, the registry, and built-in tasks (needle, reasoning, code, json)."""
from evalsuite.tasks.base import GenSettings, Sample, Score, Task
from evalsuite.tasks.registry import Registry, default_registry
from evalsuite.tasks.stream import take

__all__ = ["GenSettings", "Sample", "Score", "Task", "Registry", "default_registry", "take"]
