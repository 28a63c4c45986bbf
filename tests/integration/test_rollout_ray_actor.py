"""HFEngineActor in a real (embedded) Ray cluster: starts its server, serves SGLang's API through the
real sglang-router, reports its checksum, shuts down."""
import pytest
import requests

ray = pytest.importorskip("ray")

from rlrun.rollout.hf_engine import hf_engine_actor_class  # noqa: E402
from rlrun.rollout.router import Router  # noqa: E402
from rlrun.rollout.tiny_model import save_tiny_model  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_cluster():
    started = not ray.is_initialized()
    if started:
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
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
