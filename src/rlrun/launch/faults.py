"""A lost Ray node: turn the error it causes into one that names the node and the last checkpoint.

When a node dies mid-run (its raylet killed, the machine gone) the trainer ranks and engines on it
die with it; the driver then sees whatever call failed first (an actor died, a collective lost a
peer, an engine stopped answering). `name_lost_nodes` wraps the run: on an error it asks Ray which
of the nodes that were alive at the start are now dead (GCS marks a node dead after its missed
health checks, so it waits a bounded time for that), and re-raises a NodeLostError that says
which node, what failed, the newest complete checkpoint and how to continue (run.resume=auto).
A watcher thread also polls the node table: the driver may be waiting where no error ever comes
(an engine restart whose bundle's node is gone never gets placed), so a dead node interrupts the
main thread (SIGUSR2) and the run fails the same way.

A lost node that carried only rollout engines (and not this driver) does not stop the run
(`engines_only`): Ray reschedules the placement group's bundles of a dead node onto the nodes
left, rlrun.rollout.engines.group.EngineGroup restarts the engines there with the current weights, and
rollout.max_engine_restarts bounds it (then the run stops naming the engine's node).
"""
from __future__ import annotations

import signal
import sys
import threading
import time
from contextlib import contextmanager
from pathlib import Path

from rlrun import checkpoint as ckpt

# GCS declares a node dead after health_check_failure_threshold (5) checks health_check_period_ms
# (3 s) apart, each allowed health_check_timeout_ms (10 s): 15-50 s with Ray's defaults.
DEATH_WAIT_S = 60.0
POLL_S = 2.0  # the watcher's look at Ray's node table
OTHER_WAIT_S = 5.0  # an error that is not Ray's (an engine's HTTP failure, a bug in the driver): a short look


class NodeLostError(RuntimeError):
    pass


def alive_node_ids() -> dict[str, str]:
    import ray

    return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes() if n.get("Alive")}


def lost_since(before: dict[str, str], wait_s: float) -> dict[str, str]:
    """Nodes of `before` that Ray reports dead, waiting up to wait_s for the GCS to notice."""
    deadline = time.monotonic() + wait_s
    while True:
        now = alive_node_ids()
        lost = {n: ip for n, ip in before.items() if n not in now}
        if lost or time.monotonic() >= deadline:
            return lost
        time.sleep(1.0)


def describe(lost: dict[str, str], cause: BaseException, save_dir: Path) -> str:
    try:
        last = ckpt.find_latest(save_dir)
    except FileNotFoundError as e:
        last = f"none usable ({e})"
    nodes = ", ".join(f"{n[:12]} ({ip})" for n, ip in lost.items())
    first = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300]
    how = first if isinstance(cause, _NodeGone) else f"first error: {type(cause).__name__}: {first}"
    return (f"Ray node(s) {nodes} lost during the run ({how}); "
            f"last complete checkpoint: {last or 'none (nothing saved yet)'}. Fix: bring the cluster back to "
            f"the plan's size and run again with run.resume=auto (same run.output_dir and run.name) to "
            f"continue from it.")


class _NodeGone(Exception):
    """Raised in the main thread by the watcher's signal: a node died while the driver waited."""


class _Watcher(threading.Thread):
    """Polls Ray's node table; once a node of `before` is dead it signals the main thread (SIGUSR2)
    every poll until the driver has left the run. The driver may be blocked where no error would
    ever come (a lock held by an engine restart whose bundle's node is gone, an HTTP wait): the
    signal interrupts the wait and the handler raises _NodeGone there."""

    def __init__(self, before: dict[str, str], poll_s: float, tolerate=lambda lost: False):
        super().__init__(name="rlrun-node-watch", daemon=True)
        self.before, self.poll_s, self.tolerate = before, poll_s, tolerate
        self.lost: dict[str, str] = {}
        self.tolerated: dict[str, str] = {}  # lost nodes that carried only engines (the run goes on)
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(self.poll_s):
            try:
                now = alive_node_ids()
            except Exception:  # noqa: BLE001 - a GCS call that failed once (a loaded head) or Ray going down
                import ray

                if not ray.is_initialized():
                    return  # the driver is leaving anyway
                continue  # a transient failure must not end the watch for the rest of the run
            gone = {n: ip for n, ip in self.before.items() if n not in now and n not in self.tolerated}
            if gone and not self.lost and self.tolerate(gone):
                self.tolerated.update(gone)
                print(f"[rlrun] Ray node(s) {', '.join(f'{n[:12]} ({ip})' for n, ip in gone.items())} lost; they "
                      f"carried only rollout engines, which restart on the nodes left", file=sys.stderr, flush=True)
                continue
            self.lost = self.lost or gone
            if self.lost and not self.done.is_set():
                signal.pthread_kill(threading.main_thread().ident, signal.SIGUSR2)

    def handler(self, signum, frame):
        if self.done.is_set():  # the driver is already leaving the run (a signal sent just before)
            return
        raise _NodeGone(f"the driver was waiting when Ray marked node(s) {sorted(self.lost)} dead")


def engines_only(placement):
    """The tolerate() of name_lost_nodes: lost nodes that held no trainer rank and not this driver."""
    def tolerate(lost: dict[str, str]) -> bool:
        import ray

        driver = ray.get_runtime_context().get_node_id()
        return driver not in lost and "trainer" not in placement.roles_on(lost)
    return tolerate


@contextmanager
def name_lost_nodes(save_dir: Path, wait_s: float = DEATH_WAIT_S, poll_s: float = POLL_S,
                    tolerate=lambda lost: False):
    """Wrap the loop: an error that comes with (or soon after) the death of a node that was alive
    when it started becomes a NodeLostError naming the node and the last checkpoint; a node's
    death while the driver waits on something that will never answer interrupts that wait.
    tolerate(lost nodes) -> True: the run goes on without them (engines_only)."""
    from ray.exceptions import RayError

    before = alive_node_ids()
    if len(before) <= 1 or threading.current_thread() is not threading.main_thread():
        yield  # one node: losing it loses this driver too; off the main thread: no signals
        return
    watcher = _Watcher(before, poll_s, tolerate)
    previous = signal.signal(signal.SIGUSR2, watcher.handler)
    watcher.start()
    try:
        yield
    except Exception as e:  # noqa: BLE001 - re-raised, unchanged unless a node was lost
        watcher.done.set()
        # A failed actor or task (a dead rank, a collective that lost its peer) can be reported
        # before the GCS has marked its node dead: wait for that. Other errors get a short look.
        wait = wait_s if isinstance(e, RayError) else OTHER_WAIT_S
        if not watcher.lost and wait > OTHER_WAIT_S:
            print(f"[rlrun] a Ray actor or task failed; checking whether a node was lost (up to {wait:.0f} s)",
                  file=sys.stderr, flush=True)
        lost = watcher.lost or lost_since({n: ip for n, ip in before.items() if n not in watcher.tolerated}, wait)
        if not lost:
            raise
        msg = describe(lost, e, Path(save_dir))
        # said now, not only in the final traceback: a thread still blocked on the dead node's Ray
        # objects can end the process during the teardown, before the traceback would be printed
        print(f"[rlrun] NodeLostError: {msg}", file=sys.stderr, flush=True)
        raise NodeLostError(msg) from e
    finally:
        watcher.done.set()
        # The watcher may be about to signal (it checked `done` a moment ago): wait for it to end
        # before SIGUSR2's default action (terminate) comes back; if it is stuck in a Ray call,
        # ignore the signal instead.
        watcher.join(timeout=poll_s + 10)
        signal.signal(signal.SIGUSR2, signal.SIG_IGN if watcher.is_alive() else previous)
