"""Starting a kind's engines when the cluster loses a node meanwhile: an engine whose Ray actor died while it
started for a reason of the system's (its node lost, its process killed: Ray's ActorDiedError without an error of
its own creation) is started again, its bundle rescheduled by Ray onto a node that is left, up to
rollout.max_engine_restarts times, each said on stderr (as EngineGroup does for an engine lost mid-run). An error of
the engine's own (a bad model dir raised in its creation, a server that exits) is raised at once: starting it again
would fail the same way. Used by each kind's start (rlrun.rollout.engines.protocol)."""
from __future__ import annotations

import sys
from typing import Callable, TypeVar

T = TypeVar("T")


def start_surviving_node_loss(engine_id: int, start: Callable[[], T], restarts: int) -> T:
    """start() (engine `engine_id` started and healthy), again while its actor dies of a system cause."""
    import ray

    for attempt in range(restarts + 1):
        try:
            return start()
        except ray.exceptions.ActorDiedError as e:
            if e.actor_init_failed or attempt == restarts:
                raise
            why = " ".join(str(e).split())[:300]
            print(f"[rlrun] engine {engine_id} died while it started ({why}); starting it again "
                  f"(restart {attempt + 1} of rollout.max_engine_restarts={restarts})", file=sys.stderr, flush=True)
    raise AssertionError("unreachable")
