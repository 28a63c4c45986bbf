"""Cross-field rules (REFERENCE.md §4: slime's rules and the gaps it leaves). Each rule returns Problems;
check() runs them all so that every problem is reported at once."""
from __future__ import annotations

from rlrun.config.errors import Problem
from rlrun.config.schema import RunConfig


def check(cfg: RunConfig) -> list[Problem]:
    return []
