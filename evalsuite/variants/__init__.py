"""Variants: {weights, kv cache} specs, and building them from a loaded baseline."""
from evalsuite.variants.spec import VariantSpec, WeightSpec, parse_variant, parse_variant_list

__all__ = ["VariantSpec", "WeightSpec", "parse_variant", "parse_variant_list"]
