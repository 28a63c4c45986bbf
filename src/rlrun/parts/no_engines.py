"""Weight sync, offload and eval of a run without engines (a replay, an SFT run): nothing to push to or
evaluate on. One object stands in for the three parts (rlrun.parts.seams)."""
from __future__ import annotations

from contextlib import contextmanager


class NoEngines:
    def sync(self, version: int, only_if_stale: bool = False) -> None:
        pass

    def push_all(self, version: int, want: str | None = None, resume: bool = True, flushed: bool = False) -> None:
        pass

    def abort_all(self) -> None:  # the fleet of the async loop (rlrun.parts.seams.Fleet): none
        pass

    def pop_metrics(self) -> dict:
        return {}

    @contextmanager
    def training(self, version: int, timer, push: bool = True):
        yield

    def evaluate(self, rollout_id: int) -> dict[str, float]:
        return {}
