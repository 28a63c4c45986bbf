"""What rlrun's own runner cannot run yet, in configs that are valid jobs otherwise (slime runs them, and
`rlrun plan`, `diff` and `export slime` work on them): e.g. a model family a backend plans but does not train
(Family.trained_by), or a memory estimate above the GPU's (the job needs more or larger GPUs).
`rlrun validate` and `rlrun run` (and every point of a sweep) report these
as problems before Ray starts; `rlrun plan` prints them as notes. A check is a small function
RunConfig -> Problems, registered with @check, so that a new limitation (or a lifted one) touches this
file only. Pure Python: `rlrun plan` imports it."""
from __future__ import annotations

from typing import Callable, Iterable, Iterator

from rlrun.config.errors import Problem
from rlrun.config.families import FAMILIES
from rlrun.config.memory import overflow
from rlrun.config.registry import Checks
from rlrun.config.schema import RunConfig

Check = Callable[[RunConfig], Iterable[Problem]]
CHECKS: Checks[Check] = Checks()
check = CHECKS


def problems(cfg: RunConfig) -> list[Problem]:
    return CHECKS.run(cfg)


@check
def family_trained(cfg: RunConfig) -> Iterator[Problem]:
    fam = FAMILIES[cfg.model.family]
    if cfg.train.backend in fam.backends and cfg.train.backend not in fam.trains:
        yield Problem("model.family", f"rlrun's {cfg.train.backend} backend does not train family "
                      f"{cfg.model.family} yet ({fam.why_not}); the config is a valid slime job: `rlrun plan` and "
                      f"`rlrun export slime` work on it", "run it with slime (`rlrun export slime ...`), or pick a "
                      "model whose family rlrun trains (docs/config.md, families)", cfg.model.family)


@check
def memory_fits(cfg: RunConfig) -> Iterator[Problem]:
    """The plan's memory estimate surely above a GPU's memory (checks.memory_fit=stop; the rest is a warning:
    rlrun.config.warn.memory_overflow_accepted)."""

    if cfg.checks.memory_fit == "stop" and (over := overflow(cfg)) and over[1]:
        yield Problem("checks.memory_fit", *over[0])
