"""Rules for the checks: settings (run invariants, the stall watchdog; docs/observability.md)."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.rules import rule
from rlrun.config.schema import RunConfig


@rule
def watchdog(cfg: RunConfig) -> Iterator[Problem]:
    w = cfg.checks.watchdog
    if w.on_stall == "off":
        return
    if w.poll_s >= w.floor_s:
        yield Problem("checks.watchdog.poll_s", f"{w.poll_s} s is not below checks.watchdog.floor_s={w.floor_s}: "
                      f"a stall could pass unseen between two looks", f"set checks.watchdog.poll_s below {w.floor_s}",
                      w.poll_s)
    if w.first_s < w.floor_s:
        yield Problem("checks.watchdog.first_s", f"the bound of a phase with no history ({w.first_s} s) is below "
                      f"checks.watchdog.floor_s={w.floor_s}, the least bound of any phase",
                      f"set checks.watchdog.first_s >= {w.floor_s}", w.first_s)
