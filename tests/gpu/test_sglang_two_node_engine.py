"""The real SGLang 0.5.16 run as an engine spanning two "nodes", by rlrun's own launch code: RaySGLangEngine with
two node parts (one actor and one `sglang.launch_server` each, `--nnodes 2 --node-rank 0/1 --dist-init-addr
<node 0>:<port>`, TP 2, one GPU per part). Both "nodes" are one host with two GPUs (the parts see every GPU,
NOSET_CUDA_VISIBLE_DEVICES, and pick theirs with --base-gpu-id 0 / 1): SGLang's multi-node path (TCP store at
dist_init_addr, ZMQ pub/sub from node-rank 0, TP group over both processes) runs as it would across machines,
but over one host's interconnect. Not verified here: two physical nodes (a multi-node GPU cluster).

Needs 2 CUDA GPUs and SGLang (skips otherwise): on the lent device, `run` with kind nvidia-h100-x2, the kit staged
as for tests/gpu/test_sglang_engine.py, then `pytest -q -s tests/gpu/test_sglang_two_node_engine.py`.

Checked: node-rank 0 alone is the url and answers /generate with the model's log-probs (tolerance: 0.1, as
tests/gpu/test_sglang_engine.py argues for bf16 SGLang vs transformers; TP 2 only reorders a reduction); the
other node serves only SGLang's health stand-in; /update_weights_from_disk sent to node-rank 0 reaches the TP
rank of the other node (the log-probs then match the new model, which they could not with half the ranks
stale); killing node-rank 1's server makes the engine not alive; stop() ends both.
"""
import importlib.util
import os
import signal
import time

import pytest
import requests
import torch

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None or torch.cuda.device_count() < 2,
                                reason="needs SGLang 0.5.16 and 2 CUDA GPUs (nvidia-h100-x2)")

from test_sglang_engine import TEST_ARGS, SHAPE, _check_matches, _save  # noqa: E402


def _cfg(tmp):
    from rlrun.config import load

    # two nodes of one GPU: an engine of 2 GPUs spans both (Plan.nodes_per_engine 2)
    return load(["hardware=h100", "hardware.gpus_per_node=1", *SHAPE, "rollout.engine=sglang",
                 "train.gpus_per_node=1", "train.colocate=false", "rollout.num_gpus=2", "rollout.gpus_per_engine=2",
                 "cluster.num_nodes=3", "rollout.offload=false", "rollout.mem_fraction_static=0.3",
                 f"run.output_dir={tmp}", *TEST_ARGS])


def test_an_engine_over_two_nodes_serves_from_node_rank_0_and_updates_every_tp_rank(tmp_path):
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlrun.config.plan import make_plan
    from rlrun.launch.env import actor_env
    from rlrun.rollout.engines.sglang.engine import RaySGLangEngine

    cfg = _cfg(tmp_path)
    assert make_plan(cfg).nodes_per_engine == 2
    m0 = _save(cfg, 0, tmp_path / "m0")
    ray.init(address="local", num_gpus=2, include_dashboard=False, log_to_driver=False)
    pg = placement_group([{"GPU": 1, "CPU": 1}, {"GPU": 1, "CPU": 1}], strategy="STRICT_PACK")
    ray.get(pg.ready(), timeout=60)
    opts = [{"num_cpus": 0.2, "num_gpus": 0.2, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=i)} for i in range(2)]
    engine = None
    try:
        t0 = time.perf_counter()
        engine = RaySGLangEngine(cfg, 0, [[0], [1]], opts, {"env_vars": actor_env("cuda", {})}, tmp_path,
                                 model_path=str(tmp_path / "m0"), timeout_s=600)
        print(f"SGLANG 2-node engine healthy after {time.perf_counter() - t0:.1f} s")
        for p in engine.parts:
            print("SGLANG part:", " ".join(p["argv"][3:]))
        argv1 = engine.parts[1]["argv"]
        assert argv1[argv1.index("--node-rank") + 1] == "1" and argv1[argv1.index("--base-gpu-id") + 1] == "1"
        assert engine.url == engine.parts[0]["url"]
        gap, _ = _check_matches(engine.url, m0)
        print(f"SGLANG 2-node generate: max |logprob - transformers| = {gap:.4f}")
        # node-rank 1 runs no API: SGLang's health stand-in only
        assert requests.get(f"{engine.parts[1]['url']}/health", timeout=10).status_code == 200
        assert requests.post(f"{engine.parts[1]['url']}/generate", json={"input_ids": [5]}, timeout=10).status_code != 200
        m1 = _save(cfg, 1, tmp_path / "m1")
        r = requests.post(f"{engine.url}/update_weights_from_disk",
                          json={"model_path": str(tmp_path / "m1"), "weight_version": "2"}, timeout=300)
        assert r.status_code == 200 and r.json().get("success", True), r.text[:500]
        gap, _ = _check_matches(engine.url, m1)
        print(f"SGLANG 2-node after update_weights_from_disk: max gap {gap:.4f}")
        os.kill(engine.parts[1]["pid"], signal.SIGKILL)
        deadline = time.monotonic() + 60
        while engine.alive() and time.monotonic() < deadline:
            time.sleep(0.5)
        assert not engine.alive()
    finally:
        if engine is not None:
            engine.stop()
        remove_placement_group(pg)
        ray.shutdown()
