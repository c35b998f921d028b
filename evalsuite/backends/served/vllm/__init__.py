"""evalsuite's own vLLM servers (``evalsuite run --engine vllm``): specs -> server flags, server lifecycle,
same-engine teacher-forced KLD. See docs/vllm.md."""
