"""Partial-rollout buffer: groups whose generation was aborted, resumed in the next rollout.

With rollout.partial_rollout, the loop aborts in-flight requests once it has enough groups; the
partly generated samples (status ABORTED, response so far kept) wait here and are handed out
first at the next rollout, so their tokens are not wasted (slime's `--partial-rollout`). The
generation continues under the newer weights; Sample.weight_version records the last version.
"""

from __future__ import annotations

from collections import deque

from rlrun.data.sample import Sample, Status


class PartialRolloutBuffer:
    """FIFO of sample groups; state_dict()/load_state_dict() make it part of a checkpoint."""

    def __init__(self):
        self._groups: deque[list[Sample]] = deque()

    def __len__(self) -> int:
        return len(self._groups)

    def add(self, groups: list[list[Sample]]) -> None:
        """Keep groups that have at least one unfinished sample; finished ones need no resuming."""
        for g in groups:
            if any(s.status in (Status.ABORTED, Status.PENDING) for s in g):
                self._groups.append(g)

    def pop(self, k: int) -> list[list[Sample]]:
        """Up to k of the oldest groups."""
        return [self._groups.popleft() for _ in range(min(k, len(self._groups)))]

    def state_dict(self) -> dict:
        return {"groups": [[s.to_dict() for s in g] for g in self._groups]}

    def load_state_dict(self, state: dict) -> None:
        self._groups = deque([[Sample.from_dict(d) for d in g] for g in state["groups"]])
