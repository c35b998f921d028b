"""The backends behind ``run.backend.Backend``: ``inprocess`` (transformers in this process), ``served`` (OpenAI
endpoints, llama.cpp and vLLM servers) and ``ray`` (the in-process backend on Ray workers)."""
