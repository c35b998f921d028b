"""The release gate: policy YAML -> PASS / FAIL / INCONCLUSIVE per check, variant and overall."""
