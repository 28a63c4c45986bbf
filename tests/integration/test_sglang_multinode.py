"""One SGLang engine spanning two nodes, launched by rlrun on a real multi-process Ray cluster: `ray start --head`
+ 2 x `ray start --address` (tests/integration/raycluster.py, default settings, token auth on), 2 logical GPUs and
2 CPUs per node. The plan: trainer on node 0 (2 GPUs), one engine of 4 GPUs (hardware.gpus_per_node=2), so the
engine takes nodes 1 and 2 (Plan.nodes_per_engine 2).

What runs for real: rlrun's plan, Placement (placement group, bundles probed and matched to Ray nodes), the
engine start (rlrun.rollout.engines.sglang.engine.start -> RaySGLangEngine: one actor per node part, ports and dist_init_addr
picked on the nodes), EngineGroup's fault path and the real sglang-router. What is a test double: the server each
part starts (tests/integration/sglang_node_standin.py): SGLang itself needs CUDA, and one engine over several
nodes needs several GPU nodes (the lent device is one GPU), so the real multi-node SGLang is not run here. The
stand-in records its argv, makes node-rank 0 wait for the other nodes at --dist-init-addr (as SGLang's TCP store
does), serves SGLang's API from node-rank 0 (rlrun's hf engine) and SGLang's health stand-in on the others.

The driver runs as its own process (multinode_engine_driver.py) and reports what it saw; the expectations below
are written by hand from the plan."""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from raycluster import LocalRayCluster, env

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]

JOB = ["hardware=h100", "hardware.gpus_per_node=2", "model=tiny", "train.gpus_per_node=2", "train.colocate=false",
       "rollout.num_gpus=4", "rollout.gpus_per_engine=4", "cluster.num_nodes=3"]
DRIVER = Path(__file__).with_name("multinode_engine_driver.py")


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


@pytest.fixture(scope="module")
def result():
    c = LocalRayCluster(Path(tempfile.mkdtemp(prefix="rlsg", dir="/tmp")))
    try:
        c.start_head(num_cpus=2, num_gpus=2)  # token auth on: Ray's default when a token is found
        c.wait_nodes(1)
        c.add_worker(num_cpus=2, num_gpus=2)
        c.add_worker(num_cpus=2, num_gpus=2)
        c.wait_nodes(3)
        # an explicit address: the driver sends the token only in token mode (docs/cluster.md)
        e = {**env(c.token_path), "RAY_AUTH_MODE": "token"}
        proc = subprocess.run([sys.executable, str(DRIVER), c.address, str(c.tmp), json.dumps(JOB)], env=e,
                              capture_output=True, text=True, timeout=540)
        lines = [x for x in proc.stdout.splitlines() if x.startswith("RESULT ")]
        assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-5000:]
        out = json.loads(lines[-1].removeprefix("RESULT "))
        # what each server process was given, as it printed it (ARGV lines in the servers' logs)
        out["logged"] = [json.loads(line.removeprefix("ARGV ")) for log in sorted((c.tmp / "logs").glob("sglang-*.log"))
                         for line in log.read_text().splitlines() if line.startswith("ARGV ")]
        yield out
    finally:
        c.stop()
        shutil.rmtree(c.tmp, ignore_errors=True)


def test_the_engine_parts_land_on_two_distinct_nodes_without_the_trainer(result):
    bundles = result["bundles"]
    assert result["nodes_per_engine"] == 2 and [len(p) for p in bundles] == [2, 2]
    nodes = [{node for node, _ in p} for p in bundles]
    assert all(len(n) == 1 for n in nodes) and nodes[0] != nodes[1]  # each part on one node, two nodes
    assert result["trainer_node"] not in nodes[0] | nodes[1]
    assert [sorted(g for _, g in p) for p in bundles] == [[0, 1], [0, 1]]  # both GPUs of each node
    # each part's actor runs on the node of its bundles
    assert [p["node_id"] for p in result["first"]] == [next(iter(n)) for n in nodes]


def test_each_node_gets_its_rank_and_node_0s_address(result):
    first = result["first"]
    addr = first[0]["dist_init_addr"]
    # node 0's address as Ray knows it on that node (ray.util.get_node_ip_address in its actor), a port picked there
    assert addr.rsplit(":", 1)[0] == first[0]["node_ip"] and all(p["dist_init_addr"] == addr for p in first)
    for rank, part in enumerate(first):
        argv = part["argv"][2:]  # after the launcher (python, stand-in)
        assert (flag(argv, "--nnodes"), flag(argv, "--node-rank"), flag(argv, "--dist-init-addr")) == ("2", str(rank), addr)
        assert (flag(argv, "--tp-size"), flag(argv, "--base-gpu-id")) == ("4", "0")
        # bound to its node's address (the router on the driver's node must reach it), not rollout.router.host
        assert part["url"] == f"http://{part['node_ip']}:{flag(argv, '--port')}" == f"http://{flag(argv, '--host')}:" \
            f"{flag(argv, '--port')}"
    # the servers received exactly what rlrun built (first engine and its restart: 4 processes)
    built = [p["argv"][2:] for p in result["first"] + result["second"]]
    assert sorted(map(json.dumps, result["logged"])) == sorted(map(json.dumps, built))
    # only node-rank 0 is the engine's url (the router's worker, the weight pushes' target)
    assert result["url"] == first[0]["url"] and result["alive"] is True


def test_a_lost_node_part_restarts_the_whole_engine_on_the_same_nodes(result):
    assert result["tokens_before"] >= 1 and result["tokens_after"] >= 1  # through the real router
    assert (result["restarts"], result["fatal"], result["first_alive_after_kill"]) == (1, None, False)
    assert result["first_pids_gone"] == [True, True]  # node-rank 0 stopped with the part that died
    second = result["second"]
    assert [p["node_id"] for p in second] == [p["node_id"] for p in result["first"]]
    assert {p["pid"] for p in second}.isdisjoint({p["pid"] for p in result["first"]})
    assert result["second_url"] == second[0]["url"]
    assert [flag(p["argv"][2:], "--node-rank") for p in second] == ["0", "1"]
    assert result["last_pids_gone_after_stop"] == [True, True]  # released together
