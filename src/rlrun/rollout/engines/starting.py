"""Starting a kind's engines: every engine is launched before any is waited for, so that their start-ups (a server
process, its imports, loading the weights, capturing CUDA graphs: a minute or more for SGLang) overlap instead of
adding up; then each is waited for in turn.

An engine whose Ray actor died while it started for a reason of the system's (its node lost, its process killed:
Ray's ActorDiedError without an error of its own creation) is launched again, its bundle rescheduled by Ray onto a
node that is left, up to rollout.max_engine_restarts times, each said on stderr (as EngineGroup does for an engine
lost mid-run). An error of the engine's own (a bad model dir raised in its creation, a server that exits) is raised
at once: starting it again would fail the same way. Whatever ends the start, every engine launched so far is
stopped before the error goes on: none is registered anywhere yet, so a started one would outlive the run.
Used by each kind's start (rlrun.rollout.engines.protocol)."""
from __future__ import annotations

import sys
from typing import Callable, TypeVar

E = TypeVar("E")


def start_all(n: int, launch: Callable[[int], E], wait: Callable[[E], E], stop: Callable[[E], None],
              restarts: int) -> list[E]:
    """Engines 0..n-1: launch(i) for each (returns at once), then wait(engine) for each (returns it started and
    healthy; raises what stopped it). stop(engine) ends one, whatever its state."""
    import ray

    engines: list[E | None] = []
    try:
        for i in range(n):
            engines.append(launch(i))
        for i in range(n):
            for attempt in range(restarts + 1):
                try:
                    if engines[i] is None:
                        engines[i] = launch(i)
                    engines[i] = wait(engines[i])
                    break
                except ray.exceptions.ActorDiedError as e:
                    stop(engines[i])
                    engines[i] = None
                    if e.actor_init_failed or attempt == restarts:
                        raise
                    why = " ".join(str(e).split())[:300]
                    print(f"[rlrun] engine {i} died while it started ({why}); starting it again "
                          f"(restart {attempt + 1} of rollout.max_engine_restarts={restarts})",
                          file=sys.stderr, flush=True)
    except BaseException:
        for engine in engines:
            if engine is not None:
                try:
                    stop(engine)
                except Exception:  # noqa: BLE001 - stopping the others goes on; the start's own error is raised
                    pass
        raise
    return engines  # type: ignore[return-value]  (every entry set: the loop breaks only on a started engine)
