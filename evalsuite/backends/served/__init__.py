"""Served models: OpenAI-compatible endpoints as backends, the mixed backend (served variants against an
in-process baseline), served KLD and pairing, and evalsuite's own vLLM engine (``backends.served.vllm``)."""
