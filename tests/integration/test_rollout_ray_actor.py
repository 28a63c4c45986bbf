"""HFEngineActor in a real (embedded) Ray cluster: starts its server, serves SGLang's API through the
real sglang-router, reports its checksum, shuts down."""
import pytest
import requests

ray = pytest.importorskip("ray")

from rlrun.rollout.hf_engine import hf_engine_actor_class  # noqa: E402
from rlrun.rollout.engines.sglang.router.router import Router  # noqa: E402
from rlrun.rollout.tiny_model import save_tiny_model  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster():
    started = not ray.is_initialized()
    if started:
        ray.init(address="local", num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield
    if started:
        ray.shutdown()


def test_hf_engine_actor_behind_the_router(ray_cluster, tmp_path):
    model_dir = save_tiny_model(tmp_path / "tiny")
    actor = hf_engine_actor_class().options(num_cpus=0.5).remote(str(model_dir), seed=3)
    try:
        url = ray.get(actor.start.remote(), timeout=120)
        assert url.startswith("http://127.0.0.1:")
        with Router(worker_urls=[url], log_dir=tmp_path) as router:
            r = requests.post(f"{router.url}/generate", json={"text": "the cat", "return_logprob": True,
                                                              "sampling_params": {"max_new_tokens": 3}}, timeout=60)
            assert r.status_code == 200
            assert len(r.json()["meta_info"]["output_token_logprobs"]) == r.json()["meta_info"]["completion_tokens"]
        checksum = ray.get(actor.checksum.remote())
        assert checksum == requests.get(f"{url}/rlrun/weights_checksum").json()["checksum"]
    finally:
        ray.get(actor.shutdown.remote(), timeout=30)
        ray.kill(actor)


# Stands in for `python -m sglang.launch_server` (which cannot run here): takes SGLang's flags,
# serves the tiny model with the hf engine on the given --host/--port.
STAND_IN = """
import argparse, sys
from rlrun.rollout.hf_engine import main
p = argparse.ArgumentParser()
p.add_argument('--model-path'); p.add_argument('--host'); p.add_argument('--port')
a, _sglang_flags = p.parse_known_args()
main(['--model-dir', a.model_path, '--host', a.host, '--port', a.port])
"""


def test_sglang_engine_actor_on_a_placement_group_bundle(ray_cluster, tmp_path):
    import sys

    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

    from rlrun.config import load
    from rlrun.rollout.engines.sglang.engine import RaySGLangEngine

    model_dir = save_tiny_model(tmp_path / "tiny")
    cfg = load(["experiment=qwen3-4b-grpo-mi300x"])
    pg = placement_group([{"CPU": 1}])
    ray.get(pg.ready(), timeout=60)
    options = {"num_cpus": 0.5, "scheduling_strategy": PlacementGroupSchedulingStrategy(
        placement_group=pg, placement_group_bundle_index=0)}
    try:
        engine = RaySGLangEngine(cfg, 0, [6, 7], options, {"env_vars": {"RLRUN_TEST_ENV": "1"}}, tmp_path,
                                 model_path=str(model_dir), launcher=(sys.executable, "-c", STAND_IN),
                                 timeout_s=120)
        assert engine.alive()
        r = requests.post(f"{engine.url}/generate", json={"input_ids": [3], "sampling_params": {"max_new_tokens": 2}},
                          timeout=60)
        assert r.status_code == 200 and r.json()["meta_info"]["completion_tokens"] >= 1
        engine.stop()
        assert not engine.alive()
    finally:
        remove_placement_group(pg)
