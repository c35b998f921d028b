"""The GPU check (gpu_gate.sh, docs/gpu-gate.md), its bundle and steps, and decode speed on a GPU."""
