"""Realise Plan.placement on Ray: one placement group, bundles in hardware order, actor options.

Plan.placement names (node, gpu) slots; Ray names bundles. The mapping is:
1. one bundle per distinct (node, gpu) slot of the plan ({"GPU":1,"CPU":1}, or {"CPU":1} on
   the cpu profile); colocated trainer ranks and engines share slots, so they share bundles;
2. a probe task in each bundle reports the node and the GPU Ray gave it, as the index by which actors that see
   the node's whole device list address it (a node started with CUDA_VISIBLE_DEVICES=2,3: Ray's GPU 3 is index 1);
3. bundles are sorted by (node IP as integers, node id, GPU id) so rank order follows the hardware;
4. plan node i is matched to a Ray node holding exactly as many bundles (the plan's own order
   when it fits), plan gpu j to the j-th bundle of that node (on the cpu profile too, when Ray
   spread the bundles that way; otherwise cpu plan slots are laid over the bundles in order). An engine's TP group lies on one
   plan node, so it lies on one Ray node; an engine wider than a node lies on k whole plan nodes, hence on k
   distinct Ray nodes, and engine_parts() gives its bundles grouped per node (one SGLang process each).
Actors then ask a fraction of their bundle (trainer 0.4, engine 0.2) so both fit in colocate mode.
"""
from __future__ import annotations

import ipaddress
import os
from collections import defaultdict
from dataclasses import dataclass

import ray
from ray.util.placement_group import placement_group, remove_placement_group
from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

from rlrun.launch.cluster import ResourceError, alive_nodes
from rlrun.launch.env import NOSET_ENV, local_gpu_index, runtime_env

TRAINER_FRACTION = 0.4
ENGINE_FRACTION = 0.2


@dataclass(frozen=True)
class Bundle:
    index: int          # index inside the placement group
    node_id: str
    node_ip: str
    gpu_id: int | None  # None on the cpu profile


def _ip_key(ip: str) -> tuple:
    try:
        return (0, int(ipaddress.ip_address(ip)))
    except ValueError:  # hostnames: sort after addresses, alphabetically
        return (1, ip)


# max_calls=0: its worker is kept for the next task (Ray's default for a task with GPUs is a new worker process
# each time, to free the GPU memory it held; a probe holds none): the probes of many bundles need a few workers,
# not one each (16 bundles took ~18 s of worker start-ups on the 2-core machine)
@ray.remote(num_cpus=0, max_calls=0)
def _probe() -> tuple[str, str, list]:
    """(node id, node ip, the bundle's GPU as the actors will address it). Run with Ray's NOSET flags as every GPU
    actor is, so the visible-devices variable here is the node's own list (see local_gpu_index)."""
    ctx = ray.get_runtime_context()
    return (ctx.get_node_id(), ray.util.get_node_ip_address(),
            [local_gpu_index(g, os.environ) for g in ray.get_gpu_ids()])


class Placement:
    """Placement group realising a plan; gives each trainer rank and engine its Ray options."""

    def __init__(self, plan, vendor: str, *, timeout_s: float = 60.0):
        self.plan = plan
        self.gpu = vendor != "cpu"
        slots = sorted({(s.node, s.gpu) for s in plan.placement})
        self._slot_index = {slot: i for i, slot in enumerate(slots)}  # plan slot -> plan bundle no.
        bundle = {"GPU": 1, "CPU": 1} if self.gpu else {"CPU": 1}
        # One plan node: STRICT_PACK guarantees a single Ray node. Several: PACK fills nodes in
        # turn; the matching below then verifies every plan node got a whole Ray node.
        strategy = "STRICT_PACK" if len({n for n, _ in slots}) == 1 else "PACK"
        self.pg = placement_group([dict(bundle) for _ in slots], strategy=strategy)
        if not self.pg.wait(timeout_seconds=timeout_s):
            remove_placement_group(self.pg)
            nodes = [(n.ip, n.cpus, n.gpus) for n in alive_nodes()]
            raise ResourceError(
                f"placement group of {len(slots)} x {bundle} ({strategy}) was not ready after {timeout_s:.0f} s; "
                f"alive nodes (ip, CPUs, GPUs): {nodes}. Fix: free resources held by other jobs or shrink the plan.")
        self.bundles = self._probe_sorted()
        self._bundle_for_slot = self._match(slots)

    def _probe_sorted(self) -> list[Bundle]:
        n = self.pg.bundle_count
        opts = {"num_gpus": 0.01, "runtime_env": runtime_env(NOSET_ENV)} if self.gpu else {"num_cpus": 0.01}
        refs = [_probe.options(**opts, scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=self.pg, placement_group_bundle_index=i)).remote() for i in range(n)]
        found = []
        for i, (node_id, ip, gpus) in enumerate(ray.get(refs)):
            found.append(Bundle(index=i, node_id=node_id, node_ip=ip, gpu_id=gpus[0] if gpus else None))
        return sorted(found, key=lambda b: (_ip_key(b.node_ip), b.node_id,
                                            b.gpu_id if b.gpu_id is not None else b.index))

    def _match(self, slots: list[tuple[int, int]]) -> dict[tuple[int, int], Bundle]:
        by_ray_node: dict[str, list[Bundle]] = defaultdict(list)
        for b in self.bundles:  # already in hardware order
            by_ray_node[b.node_id].append(b)
        ray_nodes = list(by_ray_node)  # hardware order, since bundles are sorted
        plan_nodes: dict[int, list[int]] = defaultdict(list)
        for node, gpu in slots:
            plan_nodes[node].append(gpu)
        free = list(ray_nodes)
        assign: dict[int, str] = {}
        for pnode in sorted(plan_nodes):
            need = len(plan_nodes[pnode])
            pick = next((r for r in free if len(by_ray_node[r]) == need), None)
            if pick is None and not self.gpu:
                # cpu profile: plan nodes are bookkeeping (Ray may pack every bundle on one node);
                # lay plan slots over bundles in order. When Ray did split them as the plan's nodes
                # (a multi-node CPU cluster), the matching above placed them node by node.
                return {slot: self.bundles[i] for i, slot in enumerate(slots)}
            if pick is None:
                got = {r[:8]: len(by_ray_node[r]) for r in ray_nodes}
                remove_placement_group(self.pg)
                raise ResourceError(
                    f"Ray split the placement group as {got} bundles per node, but the plan needs "
                    f"{ {n: len(g) for n, g in sorted(plan_nodes.items())} } per plan node; an engine or "
                    f"trainer node would straddle nodes. Fix: use nodes with exactly hardware.gpus_per_node "
                    f"free GPUs, or free the GPUs other jobs hold.")
            free.remove(pick)
            assign[pnode] = pick
        return {(pnode, gpu): by_ray_node[assign[pnode]][j]
                for pnode, gpus in plan_nodes.items() for j, gpu in enumerate(sorted(gpus))}

    # -- what actors need -------------------------------------------------------------------
    def bundle_of(self, role: str, rank: int) -> list[Bundle]:
        """Bundles of a trainer rank (one) or an engine (gpus_per_engine; on one node unless it spans nodes)."""
        slots = sorted((s.node, s.gpu) for s in self.plan.placement if s.role == role and s.rank == rank)
        if not slots:
            raise KeyError(f"plan has no {role} with rank {rank}")
        return [self._bundle_for_slot[slot] for slot in slots]

    def engine_parts(self, engine: int, role: str = "engine") -> list[list[Bundle]]:
        """The engine's bundles grouped per node, node 0 of the engine first (the plan's node order): one
        group for an engine that fits a node, k for an engine spanning k nodes."""
        parts: dict[int, list[Bundle]] = defaultdict(list)
        for node, gpu in sorted((s.node, s.gpu) for s in self.plan.placement if s.role == role and s.rank == engine):
            parts[node].append(self._bundle_for_slot[(node, gpu)])
        if not parts:
            raise KeyError(f"plan has no engine with rank {engine}")
        return [parts[n] for n in sorted(parts)]

    def part_options(self, bundles: list[Bundle], role: str = "engine") -> dict:
        """`ActorClass.options(**...)` for the actor owning `bundles` (one node's part of an engine)."""
        frac = TRAINER_FRACTION if role == "trainer" else ENGINE_FRACTION
        res = {"num_cpus": frac, "num_gpus": frac if self.gpu else 0}
        return dict(res, scheduling_strategy=PlacementGroupSchedulingStrategy(
            placement_group=self.pg, placement_group_bundle_index=bundles[0].index))

    def options(self, role: str, rank: int) -> dict:
        """`ActorClass.options(**...)` for a trainer rank or an engine: bundle + resource share."""
        return self.part_options(self.bundle_of(role, rank)[:1], role)

    def gpu_ids(self, role: str, rank: int) -> list[int]:
        """Physical GPU ids (as Ray numbers them on that node) for a trainer rank or an engine."""
        return [b.gpu_id for b in self.bundle_of(role, rank) if b.gpu_id is not None]

    def roles_on(self, node_ids) -> set[str]:
        """The roles ("trainer", "engine") the plan placed on the Ray nodes `node_ids`."""
        ids = set(node_ids)
        return {s.role for s in self.plan.placement if self._bundle_for_slot[(s.node, s.gpu)].node_id in ids}

    def remove(self) -> None:
        remove_placement_group(self.pg)

    def as_role(self, role: str) -> "RoleView":
        """This placement as an engine kind's start sees it, with its engines being the plan's `role` (a reward
        engine, "reward"): the kind's own start places them, unchanged."""
        return RoleView(self, role)


class RoleView:
    """A Placement whose role "engine" means another engine role of the plan (Placement.as_role)."""

    def __init__(self, placement: Placement, role: str):
        self._placement, self._role = placement, role

    def __getattr__(self, name: str):
        return getattr(self._placement, name)

    def _as(self, role: str) -> str:
        return self._role if role == "engine" else role

    def bundle_of(self, role: str, rank: int) -> list[Bundle]:
        return self._placement.bundle_of(self._as(role), rank)

    def engine_parts(self, engine: int, role: str = "engine") -> list[list[Bundle]]:
        return self._placement.engine_parts(engine, self._as(role))

    def options(self, role: str, rank: int) -> dict:
        return self._placement.part_options(self.bundle_of(role, rank)[:1], role)

    def gpu_ids(self, role: str, rank: int) -> list[int]:
        return [b.gpu_id for b in self.bundle_of(role, rank) if b.gpu_id is not None]
