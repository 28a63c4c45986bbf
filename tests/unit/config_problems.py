"""Shared by the model-architecture test files: the problems `rlrun validate`'s load reports for a set of overrides."""
from __future__ import annotations


def config_problems(overrides: list[str]) -> dict:
    """dotted key -> Problem of a config that fails to load; {} for a valid one."""
    from rlrun.config import load
    from rlrun.config.errors import ConfigError

    try:
        load(overrides)
    except ConfigError as exc:
        return {p.path: p for p in exc.problems}
    return {}
