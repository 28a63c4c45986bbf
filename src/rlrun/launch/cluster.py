"""Ray cluster: start an embedded one or join an existing one, and check it can hold the plan.

The resource check runs before any placement group or actor exists, so a plan that does not fit
fails in a second with what was asked and what exists, instead of hanging in Ray's scheduler.
"""
from __future__ import annotations

import os
import signal
import subprocess
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import ray

from rlrun.launch import reaper


class ResourceError(RuntimeError):
    """The Ray cluster cannot hold the plan (message says what was asked and what exists)."""


@dataclass(frozen=True)
class NodeResources:
    node_id: str
    ip: str
    cpus: float
    gpus: float
    accelerator: str | None = None  # Ray's accelerator_type resource (e.g. H100, AMD-Instinct-MI300X-OAM)


def _accelerator(resources: dict) -> str | None:
    return next((k.split(":", 1)[1] for k in resources if k.startswith("accelerator_type:")), None)


@dataclass
class Cluster:
    """A connected Ray cluster; `owned` is True when rlrun started it (and must stop it)."""

    address: str | None
    owned: bool
    reaper: subprocess.Popen | None = None  # kills the embedded cluster's processes if we die

    def shutdown(self) -> None:
        # Disconnect in both cases; only an embedded cluster's processes die with it.
        if ray.is_initialized():
            ray.shutdown()
        if self.reaper is not None:
            # ray.shutdown() leaves Ray's agents draining for a while: the reaper ends them now.
            self.reaper.terminate()
            self.reaper.wait(timeout=30)
            self.reaper = None


def plan_demand(plan) -> list[int]:
    """Devices (GPU or CPU bundles) the plan puts on each of its nodes, node 0 first."""
    return plan.devices_per_node()


def start(address: str | None, vendor: str, plan, *, quiet: bool = True) -> Cluster:
    """Connect to Ray. `address=None` starts an embedded single-node cluster.

    On the cpu profile the embedded cluster gets exactly the logical CPUs the plan's bundles
    need (plus one for the probe tasks), whatever the machine has: bundles are a bookkeeping
    unit there, the actors share the real cores. On GPU hardware Ray detects the real GPUs.
    """
    if ray.is_initialized():
        # A test or a notebook already connected us; reuse it but do not own it.
        return Cluster(address=address, owned=False)
    common = dict(
        include_dashboard=False,
        logging_level="ERROR" if quiet else "INFO",
        log_to_driver=not quiet,
        configure_logging=True,
    )
    if address:
        with _keep_signal_handlers():
            ray.init(address=address, **common)
        return Cluster(address=address, owned=False)
    kwargs: dict = {}
    if vendor == "cpu":
        kwargs = dict(num_cpus=sum(plan_demand(plan)) + 1, num_gpus=0,
                      # the object store only carries small batches and the tiny model's weights
                      object_store_memory=256 * 1024**2)
    # address="local": always a new embedded cluster. Without it ray.init() joins any cluster that
    # `ray start` left running on this machine (Ray finds its processes), and on the CPU profile it then
    # fails on num_cpus/num_gpus; cluster.address=auto is the way to join one.
    with _keep_signal_handlers():
        ray.init(address="local", **kwargs, **common)
    ray_pids = [p for p in reaper.descendants(os.getpid()) if _is_ray_process(p)]
    return Cluster(address=None, owned=True, reaper=reaper.spawn(ray_pids))


@contextmanager
def _keep_signal_handlers():
    """ray.init replaces the driver's SIGTERM handler: in Python (ray._private.worker.sigterm_handler:
    sys.exit, so the run's stop request is never recorded) and, joining a cluster, in the core worker's
    C++ (it logs "SIGTERM received" and the process dies at once). `rlrun stop`, `ray job stop`, Slurm and
    a Ctrl-C'd shell send SIGTERM/SIGINT: the handlers the runner set before are put back, so the
    teardown and the stop message run."""
    main = threading.current_thread() is threading.main_thread()
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGTERM, signal.SIGINT)} if main else {}
    try:
        yield
    finally:
        for sig, handler in saved.items():
            if handler is not None:
                signal.signal(sig, handler)


def _is_ray_process(pid: int) -> bool:
    try:
        return b"ray" in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False


def alive_nodes() -> list[NodeResources]:
    out = []
    for n in ray.nodes():
        if not n.get("Alive"):
            continue
        res = n.get("Resources", {})
        out.append(NodeResources(node_id=n["NodeID"], ip=n["NodeManagerAddress"], cpus=float(res.get("CPU", 0.0)),
                                 gpus=float(res.get("GPU", 0.0)), accelerator=_accelerator(res)))
    return out


def live_nodes(dashboard: str) -> list[NodeResources]:
    """Alive nodes of the cluster whose dashboard (Jobs API) address is `dashboard`, read through
    Ray's state API without joining the cluster (no driver is started)."""
    from ray.util.state.api import StateApiClient
    from ray.util.state.common import ListApiOptions, StateResource
    from ray.util.state.exception import RayStateApiException

    from rlrun.launch import auth

    try:  # ray.util.state.list_nodes with Ray's auth token when one is found here (rlrun.launch.auth)
        client = StateApiClient(address=dashboard, headers={"Content-Type": "application/json", **auth.headers()})
        found = client.list(StateResource.NODES, options=ListApiOptions(detail=True), raise_on_missing_output=False)
    except RayStateApiException as e:
        raise ConnectionError(f"no Ray dashboard answered at {dashboard}: {str(e).splitlines()[0]}") from e
    out = []
    for n in found:
        if n.state == "ALIVE":
            res = n.resources_total or {}
            out.append(NodeResources(node_id=n.node_id, ip=n.node_ip, cpus=float(res.get("CPU", 0.0)),
                                     gpus=float(res.get("GPU", 0.0)), accelerator=_accelerator(res)))
    return out


def check_accelerator(hardware_name: str, vendor: str, nodes: list[NodeResources]) -> str | None:
    """Raise ResourceError when GPU nodes report an accelerator type other than hardware.name (an
    h100 plan on MI300X nodes); returns a note when no node reports one (logical GPUs, or a Ray that
    could not read the device), since then only the counts were checked."""
    if vendor == "cpu":
        return None
    types = sorted({n.accelerator for n in nodes if n.gpus and n.accelerator})
    if not types:
        return (f"no GPU node reports an accelerator type (logical GPUs?): hardware={hardware_name} was checked "
                f"by GPU counts only")
    want = hardware_name.upper()
    wrong = [t for t in types if want not in t.upper().replace("-", "")]
    if wrong:
        raise ResourceError(
            f"hardware={hardware_name} does not match the cluster's GPUs: Ray reports accelerator type(s) {types}. "
            f"Fix: choose the hardware profile of those GPUs (conf/hardware/*.yaml), or submit to a cluster of "
            f"{hardware_name} nodes.")
    return None


def check_resources(plan, vendor: str, nodes: list[NodeResources]) -> None:
    """Raise ResourceError unless each plan node can be given a distinct Ray node that holds it.

    Greedy largest-first matching is exact here: every plan node needs only one resource kind
    (GPUs, or CPUs on the cpu profile), so matching sorted demands to sorted capacities is optimal.
    """
    demand = plan_demand(plan)
    kind = "CPU" if vendor == "cpu" else "GPU"
    caps = sorted((int(n.cpus if kind == "CPU" else n.gpus) for n in nodes), reverse=True)
    if vendor == "cpu" and len(nodes) >= 1:
        # On the cpu profile a plan node is a bookkeeping unit: all bundles may share one node.
        fits = sum(demand) <= sum(caps)
    else:
        want = sorted(demand, reverse=True)
        fits = len(want) <= len(caps) and all(w <= c for w, c in zip(want, caps))
    if fits:
        return
    asked = (f"{len(demand)} node(s) with {demand} {kind}s (trainer {plan.trainer_gpus}, rollout "
             f"{plan.rollout_gpus}, colocate={plan.colocate})")
    have = f"{len(nodes)} alive node(s) with {caps} {kind}s" if nodes else "no alive nodes"
    raise ResourceError(
        f"the plan does not fit the Ray cluster: it needs {asked}; the cluster has {have}. "
        f"Fix: lower train.num_nodes/train.gpus_per_node or rollout.num_gpus, set cluster.address to a "
        f"bigger cluster, or add nodes (`rlrun plan ...` shows the placement).")


def head_node_id(nodes: list[dict]) -> str | None:
    """The head node's id among ray.nodes() (it carries Ray's `node:__internal_head__` resource)."""
    return next((n["NodeID"] for n in nodes if n.get("Alive") and "node:__internal_head__" in n.get("Resources", {})),
                None)


def preflight_on_head(cfg, plan) -> None:
    """On a remote cluster (cluster.address set), run rlrun.launch.preflight as a Ray task pinned to the head
    node, where the run's paths live, before any placement group or actor exists. Raises ConfigError with
    every problem. A local cluster is checked by `rlrun run` before Ray starts: nothing to do here."""
    if cfg.cluster.address is None:
        return
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    from rlrun.config.errors import ConfigError
    from rlrun.launch.preflight import preflight

    head = head_node_id(ray.nodes())
    if head is None:
        raise ResourceError("the Ray cluster reports no alive head node; cannot run the preflight there")
    task = ray.remote(num_cpus=0)(preflight).options(
        scheduling_strategy=NodeAffinitySchedulingStrategy(node_id=head, soft=False))
    problems = ray.get(task.remote(cfg, plan))
    if problems:
        raise ConfigError(problems)
