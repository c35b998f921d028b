"""Capacity and bandwidth planner from a model config.json (pure arithmetic on the config, no torch)."""
from evalsuite.capacity.bytes import kv_bytes_for_context, kv_bytes_per_token, weight_breakdown, weight_bytes
from evalsuite.capacity.capacity import Combo, Plan, make_plan, parse_reserve, parse_size
from evalsuite.capacity.shape import ModelShape, ParamCount, count_params, load_config, shape_from_config

__all__ = ["Combo", "ModelShape", "ParamCount", "Plan", "count_params", "kv_bytes_for_context",
           "kv_bytes_per_token", "load_config", "make_plan", "parse_reserve", "parse_size", "shape_from_config",
           "weight_breakdown", "weight_bytes"]
