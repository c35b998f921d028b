"""Capacity and bandwidth planner from a model config.json."""
