"""Tools of the calculator agent (bound in agent_config.yaml as custom_tools:<name>)."""

from __future__ import annotations


def calculator(a: int, b: int) -> int:
    """a + b (integers)."""
    return int(a) + int(b)
