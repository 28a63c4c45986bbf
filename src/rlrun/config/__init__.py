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
    """All problems at once: an override Hydra cannot apply (an unknown key, a bad syntax) or a value of
    the wrong type (optim.lr=abc) is reported, left out, and the rest is composed and validated again,
    so that it hides no other problem. A group option that does not exist (model=qwen3-5b) stops there:
    the rest would be judged against another profile, and its problems would not be the user's."""
    from rlrun.config.compose import GROUPS, ComposeError, compose
    from rlrun.config.validate import validate

    problems: list[Problem] = []
    todo = list(overrides)
    for _ in range(len(todo) + 1):  # every round leaves out at least one override, or ends
        try:
            composed = compose(todo, config_dir, use_cache=use_cache)
        except ComposeError as e:
            problems += e.problems
            if not e.complete or not e.dropped or any(_key(o) in GROUPS for o in e.dropped):
                raise ConfigError(problems) from None
            todo = [o for o in todo if o not in e.dropped]
            continue
        try:
            cfg = validate(composed.raw)
        except ConfigError as e:
            bad = [o for o in todo if _key(o) in getattr(e, "schema_paths", ())]
            new = [p for p in e.problems if p.path not in {q.path for q in problems}]
            problems += new
            if not bad:
                raise ConfigError(problems) from None
            todo = [o for o in todo if o not in bad]
            continue
        if problems:
            raise ConfigError(problems)
        return cfg, composed
    raise ConfigError(problems)


def _key(override: str) -> str:
    return override.lstrip("+~").split("=", 1)[0].split("@")[0]
