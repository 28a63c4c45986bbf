"""/release_memory_occupation and /resume_memory_occupation on the hf engine (CPU): the state
round-trips exactly, generation is refused while released, release needs an idle engine.
The GPU half (memory really freed) is tests/gpu/test_gpu_hf_engine_memory.py."""
import threading

import pytest
import requests

from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.hf_server import ThreadedServer
from rlrun.rollout.tiny_model import save_tiny_model

SEEDED = dict(input_ids=[3, 4, 5], sampling_params={"max_new_tokens": 8, "sampling_seed": 11, "ignore_eos": True,
                                                    "temperature": 1.0}, return_logprob=True)


@pytest.fixture(scope="module")
def dirs(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("a"), seed=0), save_tiny_model(tmp_path_factory.mktemp("b"), seed=1)


@pytest.fixture
def server(dirs):
    engine = HFEngine.from_dir(dirs[0], seed=7, batch_wait_s=0.01)
    srv = ThreadedServer(engine)
    srv.start()
    yield engine, srv.url
    srv.stop()
    engine.shutdown()


def post(url, path, **body):
    return requests.post(f"{url}{path}", json=body, timeout=60)


def checksum(url):
    return requests.get(f"{url}/rlrun/weights_checksum", timeout=60).json()["checksum"]


def test_release_resume_round_trips_the_state_exactly(server):
    _, url = server
    before, sum_before = post(url, "/generate", **SEEDED).json(), checksum(url)
    assert post(url, "/release_memory_occupation").status_code == 200  # no body: every tag, as SGLang
    assert requests.get(f"{url}/server_info").json()["released_memory"] == ["cuda_graph", "kv_cache", "weights"]
    assert post(url, "/resume_memory_occupation", tags=[]).status_code == 200  # [] = every tag too
    after = post(url, "/generate", **SEEDED).json()
    assert after["output_ids"] == before["output_ids"]
    assert after["meta_info"]["output_token_logprobs"] == before["meta_info"]["output_token_logprobs"]
    assert checksum(url) == sum_before


def test_generate_while_released_is_refused_with_the_fix(server):
    _, url = server
    post(url, "/release_memory_occupation", tags=["weights"])
    r = post(url, "/generate", **SEEDED)
    assert r.status_code == 400
    msg = r.json()["error"]["message"]
    assert "['weights'] is released" in msg and "/resume_memory_occupation" in msg
    post(url, "/resume_memory_occupation", tags=["weights"])
    assert post(url, "/generate", **SEEDED).status_code == 200
    # cuda_graph alone does not stop generation (the hf engine captures none)
    post(url, "/release_memory_occupation", tags=["cuda_graph"])
    assert post(url, "/generate", **SEEDED).status_code == 200


def test_release_needs_an_idle_engine(server):
    engine, url = server
    done = []
    body = dict(input_ids=[3], sampling_params={"max_new_tokens": 100000, "ignore_eos": True})
    t = threading.Thread(target=lambda: done.append(post(url, "/generate", **body)))
    t.start()
    while not engine.load()["num_reqs"]:
        t.join(0.01)
    r = post(url, "/release_memory_occupation", tags=["kv_cache"])
    assert r.status_code == 400 and "1 requests are running" in r.json()["error"]["message"]
    assert requests.get(f"{url}/server_info").json()["released_memory"] == []
    post(url, "/abort_request", abort_all=True)
    t.join(30)
    assert done[0].json()["meta_info"]["finish_reason"]["type"] == "abort"
    assert post(url, "/release_memory_occupation", tags=["kv_cache"]).status_code == 200


def test_weight_update_while_released_lands_on_resume(server, dirs):
    """The colocated order (docs/rollout.md): release, train, update weights, resume."""
    _, url = server
    first = post(url, "/generate", **SEEDED).json()["output_ids"]
    post(url, "/release_memory_occupation")
    r = post(url, "/update_weights_from_disk", model_path=str(dirs[1]), weight_version="2")
    assert r.status_code == 200 and r.json()["success"], r.text
    post(url, "/resume_memory_occupation")
    reference = HFEngine.from_dir(dirs[1], seed=7)
    try:
        assert checksum(url) == reference.checksum()
    finally:
        reference.shutdown()
    out = post(url, "/generate", **SEEDED).json()
    assert out["meta_info"]["weight_version"] == "2" and out["output_ids"] != first
