"""evalsuite's benchmark and study scripts, by kind (benchmarks/RESULTS.md holds what they measured). Each runs from
the checkout's root as a module, e.g. ``python -m benchmarks.sim.gate_oracle --help``."""
