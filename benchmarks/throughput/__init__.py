"""Samples and tokens per second: evalsuite against lm-eval, endpoints, KV caches, prompt reuse, stop rules."""
