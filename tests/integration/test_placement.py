"""Placement on a real Ray cluster of 2 nodes x 8 logical GPUs (ray.cluster_utils.Cluster).

Each slot's options (bundle, GPU/CPU share) are exactly what the runner gives the trainer and
engine actors; the check runs them as tasks rather than actors because a task reuses a worker
process, and starting ~40 actor processes would take minutes on the 2-core CI machine. Ray
places a task and an actor with the same options on the same bundle.
"""
from __future__ import annotations

import time
import pytest
import ray
from ray.cluster_utils import Cluster

from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.launch.cluster import ResourceError, alive_nodes, check_resources
from rlrun.launch.placement import Placement

pytestmark = pytest.mark.timeout(180)


def _plan(trainer: int, rollout: int, per_engine: int, colocate: bool):
    """The real Plan for 8-GPU nodes (hardware=h100), laid out by rlrun.config.plan.make_plan."""
    nodes = -(-(trainer if colocate else trainer + rollout) // 8)
    ov = ["hardware=h100", f"cluster.num_nodes={nodes}", f"train.num_nodes={-(-trainer // 8)}",
          f"train.gpus_per_node={min(trainer, 8)}", f"train.colocate={str(colocate).lower()}",
          f"rollout.gpus_per_engine={per_engine}",
          "rollout.rollout_batch_size=24"]  # 24 x 8 samples split over 6 or 16 DP ranks
    if not colocate:
        ov.append(f"rollout.num_gpus={rollout}")
    return make_plan(load(ov))


@pytest.fixture(scope="module")
def two_nodes():
    cluster = Cluster(initialize_head=True, head_node_args={"num_cpus": 8, "num_gpus": 8})
    cluster.add_node(num_cpus=8, num_gpus=8)
    ray.init(address=cluster.address, include_dashboard=False, log_to_driver=False)
    cluster.wait_for_nodes()
    yield cluster
    ray.shutdown()
    cluster.shutdown()


@ray.remote(max_calls=0)  # as rlrun.launch.placement._probe: the worker is kept for the next task
def _where() -> tuple[str, list[int]]:
    return ray.get_runtime_context().get_node_id(), [int(g) for g in ray.get_gpu_ids()]


def _node_order() -> list[str]:
    # Both nodes of cluster_utils share 127.0.0.1: hardware order falls back to the node id.
    return [n.node_id for n in sorted(alive_nodes(), key=lambda n: (n.ip, n.node_id))]


def _check_lands_as_planned(plan) -> None:
    check_resources(plan, "cuda", alive_nodes())
    placement = Placement(plan, "cuda", timeout_s=30)
    try:
        order = _node_order()
        roles = [("trainer", r) for r in range(plan.trainer_gpus)] + [("engine", e) for e in range(plan.num_engines)]
        # one task at a time, each worker kept for the next (_where's max_calls=0): a few worker processes instead of
        # one per role (24 of them here, most of this test's time)
        got = [ray.get(_where.options(**placement.options(role, rank)).remote()) for role, rank in roles]
        for (role, rank), (node_id, gpus) in zip(roles, got):
            want = sorted((s.node, s.gpu) for s in plan.placement if s.role == role and s.rank == rank)
            assert node_id == order[want[0][0]], f"{role} {rank} on the wrong node"
            assert gpus == [want[0][1]], f"{role} {rank} got GPU {gpus}, plan says {want[0]}"
            # the whole TP group: same node, the GPU ids the plan lists
            assert {b.node_id for b in placement.bundle_of(role, rank)} == {node_id}
            assert placement.gpu_ids(role, rank) == [g for _, g in want]
    finally:
        placement.remove()


def test_colocated_placement_matches_plan(two_nodes):
    # 16 trainer ranks and 8 engines of TP 2 share the 16 bundles of both nodes.
    _check_lands_as_planned(_plan(trainer=16, rollout=16, per_engine=2, colocate=True))


def test_disaggregated_placement_matches_plan(two_nodes):
    # trainer on node 0 GPUs 0-5; engines of TP 2 after it: 6-7 on node 0, then node 1 0-7.
    # The plan is not node-aligned, so node 0 holds 8 bundles and node 1 holds 8.
    _check_lands_as_planned(_plan(trainer=6, rollout=10, per_engine=2, colocate=False))


def test_too_big_plan_fails_fast_with_what_was_asked(two_nodes):
    plan = _plan(trainer=16, rollout=8, per_engine=4, colocate=False)  # 24 GPUs on 3 nodes
    start = time.monotonic()
    with pytest.raises(ResourceError) as err:
        check_resources(plan, "cuda", alive_nodes())
    assert time.monotonic() - start < 2
    msg = str(err.value)
    assert "3 node(s) with [8, 8, 8] GPUs" in msg and "2 alive node(s) with [8, 8] GPUs" in msg


def test_actor_env_layers_vendor_flags_profile_and_plan():
    from rlrun.launch.env import actor_env

    rocm = load(["hardware=mi300x"]).hardware
    env = actor_env(rocm.vendor, rocm.env, {"EXTRA": 1})
    assert env["RAY_EXPERIMENTAL_NOSET_HIP_VISIBLE_DEVICES"] == "1" and env["NCCL_CUMEM_ENABLE"] == "0"
    assert env["HIP_VISIBLE_DEVICES"] == rocm.env["HIP_VISIBLE_DEVICES"] and env["EXTRA"] == "1"
    cpu = actor_env("cpu", {"OMP_NUM_THREADS": "1"})
    assert cpu == {"TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}  # no GPU flags on the CPU
    assert actor_env("cuda", {"NCCL_CUMEM_ENABLE": "1"})["NCCL_CUMEM_ENABLE"] == "1"  # the profile wins
    with pytest.raises(ValueError, match="hardware.vendor='tpu'"):
        actor_env("tpu", {})


def test_cluster_address_joins_without_owning(two_nodes):
    from rlrun.launch.cluster import start

    ray.shutdown()  # leave the fixture's connection; join as rlrun does with cluster.address
    joined = start(two_nodes.address, "cuda", _plan(trainer=8, rollout=8, per_engine=1, colocate=True))
    try:
        assert not joined.owned and joined.reaper is None
        assert sorted(n.gpus for n in alive_nodes()) == [8.0, 8.0]
    finally:
        joined.shutdown()  # disconnects only: the cluster keeps running
    ray.init(address=two_nodes.address, include_dashboard=False, log_to_driver=False)
    assert len(alive_nodes()) == 2


def test_preflight_runs_on_the_head_of_two_nodes(two_nodes, tmp_path):
    """Of two nodes, the head (where `ray start --head` ran and the run's paths live) gets the preflight task."""
    from rlrun.config.errors import ConfigError
    from rlrun.launch.cluster import head_node_id, preflight_on_head

    assert head_node_id(ray.nodes()) == two_nodes.head_node.node_id
    cfg = load(["cluster.address=auto", f"run.output_dir={tmp_path}", f"data.prompt_data={tmp_path}/missing.jsonl"])
    with pytest.raises(ConfigError) as exc:
        preflight_on_head(cfg, make_plan(cfg))
    assert exc.value.paths == ["data.prompt_data"]
