"""A lost Ray node: turn the error it causes into one that names the node and the last checkpoint.

When a node dies mid-run (its raylet killed, the machine gone) the trainer ranks and engines on it
die with it; the driver then sees whatever call failed first (an actor died, a collective lost a
peer, an engine stopped answering). `name_lost_nodes` wraps the run: on an error it asks Ray which
of the nodes that were alive at the start are now dead (GCS marks a node dead after its missed
health checks, so it waits a bounded time for that), and re-raises a NodeLostError that says
which node, what failed, the newest complete checkpoint and how to continue (run.resume=auto).
"""
from __future__ import annotations

import time
from contextlib import contextmanager
from pathlib import Path

from rlrun import checkpoint as ckpt

# GCS declares a node dead after health_check_failure_threshold (5) checks health_check_period_ms
# (3 s) apart, each allowed health_check_timeout_ms (10 s): 15-50 s with Ray's defaults.
DEATH_WAIT_S = 60.0
OTHER_WAIT_S = 5.0  # any other error (a collective's lost peer, an engine's HTTP failure): a short look
# Ray's system failures: what a driver sees when a process or node under it is gone
SYSTEM_ERRORS = ("RayActorError", "WorkerCrashedError", "NodeDiedError", "ObjectLostError", "OwnerDiedError")


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
    return (f"Ray node(s) {nodes} lost during the run (first error: {type(cause).__name__}: {first}); "
            f"last complete checkpoint: {last or 'none (nothing saved yet)'}. Fix: bring the cluster back to "
            f"the plan's size and run again with run.resume=auto (same run.output_dir and run.name) to "
            f"continue from it.")


@contextmanager
def name_lost_nodes(save_dir: Path, wait_s: float = DEATH_WAIT_S):
    """Wrap the loop: an error that comes with (or soon after) the death of a node that was alive
    when it started becomes a NodeLostError naming the node and the last checkpoint."""
    import ray.exceptions

    system = tuple(getattr(ray.exceptions, n) for n in SYSTEM_ERRORS if hasattr(ray.exceptions, n))
    before = alive_node_ids()
    if len(before) <= 1:  # one node: losing it loses this driver too; nothing to name
        yield
        return
    try:
        yield
    except Exception as e:  # noqa: BLE001 - re-raised, unchanged unless a node was lost
        # A dead actor or worker can be reported before the GCS has marked its node dead: wait for
        # that; an ordinary error (a bug, a config problem) is re-raised after a short look.
        lost = lost_since(before, wait_s if isinstance(e, system) else OTHER_WAIT_S)
        if not lost:
            raise
        raise NodeLostError(describe(lost, e, Path(save_dir))) from e
