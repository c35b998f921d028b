"""Models: load the baseline (embedded default, folder, GGUF, HF id) with a content fingerprint."""
from evalsuite.models.loader import LoadedModel, load_model, offline, wrap_model

__all__ = ["LoadedModel", "load_model", "offline", "wrap_model"]
