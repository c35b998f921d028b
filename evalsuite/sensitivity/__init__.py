"""Layer sensitivity of quantized variants: per-unit KLD, mixed-precision keep-sets (docs/sensitivity.md)."""
from evalsuite.sensitivity.measure import Measurer, Sensitivity, UnitResult, run_units

__all__ = ["Measurer", "Sensitivity", "UnitResult", "run_units"]
