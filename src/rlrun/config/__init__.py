"""rlrun's config layer: compose (Hydra) -> validate (pydantic + rules) -> plan. Imports neither torch
nor ray (a test checks), and imports Hydra/pydantic only when first used, so `rlrun plan` starts fast.

    from rlrun.config import load, ConfigError
    cfg = load(["model=qwen3-4b", "hardware=mi300x"])       # RunConfig (frozen) or ConfigError
    plan = rlrun.config.plan.make_plan(cfg)
"""
from __future__ import annotations

import os
from typing import TYPE_CHECKING, Sequence

from rlrun.config.errors import ConfigError, Problem

if TYPE_CHECKING:
    from rlrun.config.compose import Composed
    from rlrun.config.schema import RunConfig

__all__ = ["ConfigError", "Problem", "load", "load_with_choices"]


def load(overrides: Sequence[str] = (), config_dir: str | os.PathLike | None = None, *,
         use_cache: bool = True) -> "RunConfig":
    """Compose conf/ with Hydra overrides, derive the null-means-derived values, validate every rule.
    Raises ConfigError listing every problem (dotted path, values, fix). use_cache: see compose()."""
    return load_with_choices(overrides, config_dir, use_cache=use_cache)[0]


def load_with_choices(overrides: Sequence[str] = (), config_dir: str | os.PathLike | None = None, *,
                      use_cache: bool = True) -> tuple["RunConfig", "Composed"]:
    from rlrun.config.compose import compose
    from rlrun.config.validate import validate

    composed = compose(list(overrides), config_dir, use_cache=use_cache)
    return validate(composed.raw), composed
