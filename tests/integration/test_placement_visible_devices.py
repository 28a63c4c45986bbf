"""A node started with a subset of its GPUs (`CUDA_VISIBLE_DEVICES=2,3 ray start ...`, or `CUDA_VISIBLE_DEVICES=2,3
rlrun ...` on a shared machine): Ray names the GPUs "2" and "3", while every rlrun GPU actor sees the node's list
(Ray's NOSET flags) and must address them as cuda:0 / cuda:1 (SGLang's --base-gpu-id 0 / 1). Before the fix the
trainer asked torch for cuda:2 of two visible devices (found 2026-11-28 planning two runs side by side on a 4-GPU
machine). A real multi-process cluster (`ray start --head` with logical GPUs), as users start it."""
from __future__ import annotations

import json
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from raycluster import LocalRayCluster, env
from rlrun.launch.env import local_gpu_index

pytestmark = pytest.mark.timeout(180)


def test_local_gpu_index_is_the_position_in_the_visible_list():
    assert local_gpu_index("3", {"CUDA_VISIBLE_DEVICES": "2,3"}) == 1
    assert local_gpu_index(2, {"CUDA_VISIBLE_DEVICES": " 2, 3"}) == 0
    assert local_gpu_index("5", {}) == 5                                   # nothing hidden: Ray's id is the index
    assert local_gpu_index("1", {"CUDA_VISIBLE_DEVICES": "", "HIP_VISIBLE_DEVICES": "4,1"}) == 1  # ROCm's list
    with pytest.raises(ValueError, match="not in CUDA_VISIBLE_DEVICES=2,3"):
        local_gpu_index("0", {"CUDA_VISIBLE_DEVICES": "2,3"})


DRIVER = """
import json, sys, ray
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.launch.placement import Placement

@ray.remote
def ray_ids():
    return [int(g) for g in ray.get_gpu_ids()]

ray.init(address=sys.argv[1], log_to_driver=False)
plan = make_plan(load(["hardware=h100", "hardware.gpus_per_node=2", "train.gpus_per_node=2", "rollout.gpus_per_engine=2"]))
placement = Placement(plan, "cuda", timeout_s=60)
print(json.dumps({"trainer": [placement.gpu_ids("trainer", r) for r in (0, 1)],
                  "engine": placement.gpu_ids("engine", 0),
                  "ray": sorted(ray.get([ray_ids.options(**placement.options("trainer", r)).remote() for r in (0, 1)]))}))
placement.remove()
"""


def test_actors_get_the_index_of_their_gpu_on_a_node_started_with_a_subset(monkeypatch):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "2,3")  # the node's environment (raycluster.env copies this one)
    cluster = LocalRayCluster(Path(tempfile.mkdtemp(prefix="rlvd", dir="/tmp")))
    try:
        cluster.start_head(num_cpus=2, num_gpus=2)  # token auth on: Ray's default when a token is found
        cluster.wait_nodes(1)
        # the driver: another process without the node's list, joining with the cluster's token (raycluster.py)
        e = {**env(cluster.token_path), "RAY_AUTH_MODE": "token"}
        e.pop("CUDA_VISIBLE_DEVICES")
        out = subprocess.run([sys.executable, "-c", DRIVER, cluster.address], env=e, capture_output=True, text=True,
                             timeout=150)
        assert out.returncode == 0, out.stderr[-3000:]
        got = json.loads(out.stdout.strip().splitlines()[-1])
        assert got["ray"] == [[2], [3]]            # what Ray calls them: the node's CUDA_VISIBLE_DEVICES entries
        assert got["trainer"] == [[0], [1]]        # what the actors (which see "2,3") must use
        assert got["engine"] == [0, 1]             # SGLang: --base-gpu-id 0 --tp-size 2
    finally:
        cluster.stop()
