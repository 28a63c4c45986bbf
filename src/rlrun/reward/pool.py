"""Worker processes that score with a hard per-task time limit.

Why processes: a grader can hang inside sympy (math-verify's SIGALRM does not interrupt every C
call) or eat memory on a hostile 10 MB response. Each worker runs one task at a time; a task that
passes its deadline gets its worker killed and replaced, scores 0 and is counted as a timeout,
and the batch goes on. Workers are started with "spawn" (safe next to torch/Ray threads) and
import math-verify and discover the reward types before they report ready, so neither eats into a task's time.
"""

from __future__ import annotations

import multiprocessing as mp
import threading
import time
from multiprocessing.connection import wait

READY = "ready"


def run_task(task: tuple):
    """Execute one task in the current process: ("rule"|"custom"|"custom_group", rm_type, *args)."""
    kind, rm_type, *args = task
    if kind == "rule":
        from rlrun.reward.rules import rule_score

        return rule_score(rm_type, *args)
    from rlrun.reward.custom import call_custom

    out = call_custom(rm_type, *args)
    if kind == "custom_group":
        out = [float(x) for x in out]
        if len(out) != len(args[0]):
            raise ValueError(f"custom reward {rm_type} returned {len(out)} scores for a group of {len(args[0])}")
        return out
    return float(out)


def _worker_main(conn) -> None:
    import math_verify  # noqa: F401 - preload sympy before the first deadline starts

    from rlrun.config.kinds import discover

    discover()  # and the reward types (rlrun.config.kinds.REWARDS), which a rule's lookup reads

    conn.send(READY)
    while True:
        try:
            task = conn.recv()
        except EOFError:
            return
        try:
            conn.send(("ok", run_task(task)))
        except Exception as e:  # noqa: BLE001 - reported to the parent and counted as an error
            conn.send(("error", f"{type(e).__name__}: {e}"[:500]))


class _Worker:
    def __init__(self, ctx, start_timeout_s: float):
        self.conn, child = ctx.Pipe()
        self.proc = ctx.Process(target=_worker_main, args=(child,), daemon=True)
        self.proc.start()
        child.close()
        if not self.conn.poll(start_timeout_s) or self.conn.recv() != READY:
            self.kill()
            raise RuntimeError(f"reward worker did not start within {start_timeout_s}s")

    def kill(self) -> None:
        self.proc.kill()
        self.proc.join(5)
        self.conn.close()


class RewardPool:
    """A fixed set of worker processes; `run` maps tasks to (value, "ok"|"timeout"|"error")."""

    def __init__(self, num_workers: int = 2, start_timeout_s: float = 120.0):
        if num_workers < 1:
            raise ValueError(f"RewardPool needs num_workers >= 1, got {num_workers}")
        self._ctx = mp.get_context("spawn")
        self._start_timeout_s = start_timeout_s
        self._workers = [_Worker(self._ctx, start_timeout_s) for _ in range(num_workers)]
        self._lock = threading.Lock()  # one batch at a time: workers hold one task each

    def run(self, tasks: list[tuple], timeouts_s: list[float]) -> list[tuple[object, str]]:
        with self._lock:
            return self._run(tasks, timeouts_s)

    def _run(self, tasks: list[tuple], timeouts_s: list[float]) -> list[tuple[object, str]]:
        results: list[tuple[object, str] | None] = [None] * len(tasks)
        pending = list(range(len(tasks) - 1, -1, -1))  # pop() from the end keeps input order
        busy: dict[int, tuple[int, float]] = {}  # worker index -> (task index, deadline)
        while pending or busy:
            for w in range(len(self._workers)):
                if w not in busy and pending:
                    i = pending.pop()
                    self._workers[w].conn.send(tasks[i])
                    busy[w] = (i, time.monotonic() + timeouts_s[i])
            nearest = min(d for _, d in busy.values())
            ready = wait([self._workers[w].conn for w in busy], timeout=max(0.0, nearest - time.monotonic()))
            now = time.monotonic()
            for w in list(busy):
                i, deadline = busy[w]
                conn = self._workers[w].conn
                if conn in ready:
                    try:
                        status, value = conn.recv()
                    except (EOFError, OSError):  # the worker died (e.g. out of memory)
                        status, value = "error", "worker died"
                        self._replace(w)
                    results[i] = (value, status)  # value is the error text when status == "error"
                    del busy[w]
                elif now >= deadline:
                    results[i] = (None, "timeout")
                    self._replace(w)
                    del busy[w]
        return results  # type: ignore[return-value]

    def _replace(self, w: int) -> None:
        self._workers[w].kill()
        self._workers[w] = _Worker(self._ctx, self._start_timeout_s)

    def close(self) -> None:
        for worker in self._workers:
            worker.kill()
        self._workers = []

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
