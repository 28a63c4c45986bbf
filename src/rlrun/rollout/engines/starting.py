"""Starting a kind's engines: every engine is launched before any is waited for, so that their start-ups (a server
process, its imports, loading the weights, capturing CUDA graphs: a minute or more for SGLang) overlap instead of
adding up; then all are waited for at once, and the first that fails ends the start (an engine that dies in its
first seconds, e.g. out of memory on a GPU another job holds, is reported then, not after the others are up).

An engine whose Ray actor died while it started for a reason of the system's (its node lost, its process killed:
Ray's ActorDiedError without an error of its own creation) is launched again, its bundle rescheduled by Ray onto a
node that is left, up to rollout.max_engine_restarts times, each said on stderr (as EngineGroup does for an engine
lost mid-run). An error of the engine's own (a bad model dir raised in its creation, a server that exits) is raised
at once: starting it again would fail the same way. Whatever ends the start, every engine launched so far is
stopped before the error goes on: none is registered anywhere yet, so a started one would outlive the run.
Used by each kind's start (rlrun.rollout.engines.protocol)."""
from __future__ import annotations

import concurrent.futures as cf
import sys
import threading
from typing import Callable, TypeVar

E = TypeVar("E")


def start_all(n: int, launch: Callable[[int], E], wait: Callable[[E], E], stop: Callable[[E], None],
              restarts: int, watch: Callable[[], None] | None = None) -> list[E]:
    """Engines 0..n-1: launch(i) for each (returns at once), then wait(engine) for all of them, each in a thread of
    its own (returns it started and healthy; raises what stopped it). stop(engine) ends one, whatever its state: a
    wait blocked on an engine that is stopped returns or raises. watch(), about once a second meanwhile, raises to
    end the start (something the engines' start runs beside failed: the trainer ranks' build)."""
    import ray

    engines: list[E | None] = [None] * n
    lock, ending = threading.Lock(), threading.Event()

    def start_one(i: int) -> None:
        for attempt in range(restarts + 1):
            with lock:
                if ending.is_set():
                    return
                if engines[i] is None:
                    engines[i] = launch(i)
                engine = engines[i]
            try:
                started = wait(engine)
            except ray.exceptions.ActorDiedError as e:
                if ending.is_set():
                    return  # stopped by the start's end: nothing to report
                stop(engine)
                with lock:
                    engines[i] = None
                if e.actor_init_failed or attempt == restarts:
                    raise
                why = " ".join(str(e).split())[:300]
                print(f"[rlrun] engine {i} died while it started ({why}); starting it again "
                      f"(restart {attempt + 1} of rollout.max_engine_restarts={restarts})", file=sys.stderr, flush=True)
                continue
            with lock:
                engines[i] = started
            return

    pool = cf.ThreadPoolExecutor(max_workers=max(n, 1), thread_name_prefix="rlrun-engine-start")
    try:
        for i in range(n):
            engines[i] = launch(i)
        pending = {pool.submit(start_one, i) for i in range(n)}
        while pending:
            done, pending = cf.wait(pending, timeout=1.0, return_when=cf.FIRST_EXCEPTION)
            for future in done:
                future.result()  # the first engine that failed ends the start
            if watch is not None:
                watch()
    except BaseException:
        ending.set()
        with lock:
            launched = [e for e in engines if e is not None]
        for engine in launched:  # the waits still blocked on them return now
            try:
                stop(engine)
            except Exception:  # noqa: BLE001 - stopping the others goes on; the start's own error is raised
                pass
        pool.shutdown(wait=True, cancel_futures=True)
        raise
    pool.shutdown(wait=True)
    return engines  # type: ignore[return-value]  (every entry set: each start_one returned on a started engine)
