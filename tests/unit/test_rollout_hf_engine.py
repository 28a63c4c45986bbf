"""The hf engine over HTTP (in-process uvicorn thread): SGLang endpoints, weight updates, pause/abort."""
import threading
import time

import pytest
import requests
import torch

from rlrun.rollout import api
from rlrun.rollout import weights as W
from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.hf_server import ThreadedServer
from rlrun.rollout.tiny_model import build_model, save_tiny_model


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return save_tiny_model(tmp_path_factory.mktemp("tiny"), seed=0)


@pytest.fixture(scope="module")
def server(model_dir):
    engine = HFEngine.from_dir(model_dir, seed=7, batch_wait_s=0.02)
    srv = ThreadedServer(engine)
    srv.start()
    yield engine, srv.url
    srv.stop()
    engine.shutdown()


def gen(url, **body):
    r = requests.post(f"{url}/generate", json=body, timeout=60)
    assert r.status_code == 200, r.text
    return r.json()


def test_generate_single_and_batch(server):
    engine, url = server
    out = gen(url, text="the cat sat", sampling_params={"max_new_tokens": 4, "ignore_eos": True},
              return_logprob=True, rid="abc")
    meta = out["meta_info"]
    assert meta["id"] == "abc" and meta["prompt_tokens"] == 3 and meta["completion_tokens"] == 4
    assert meta["finish_reason"] == {"type": "length", "length": 4}
    assert [t for _, t, _ in meta["output_token_logprobs"]] == out["output_ids"]
    assert all(lp <= 0 for lp, _, _ in meta["output_token_logprobs"])
    batch = gen(url, input_ids=[[3, 4], [5]], sampling_params={"max_new_tokens": 2, "ignore_eos": True})
    assert isinstance(batch, list) and [b["meta_info"]["prompt_tokens"] for b in batch] == [2, 1]
    assert "output_token_logprobs" not in batch[0]["meta_info"]


def test_input_token_logprobs_from_logprob_start_len(server):
    """SGLang's prompt scoring (a served distillation teacher's request): input_token_logprobs from logprob_start_len
    on, each log p(token_k | tokens[:k]) of the engine's own model, the first row None as in SGLang; max_new_tokens 0."""
    engine, url = server
    ids = [3, 4, 5, 6, 7]
    with torch.no_grad():
        want = torch.log_softmax(engine.model(input_ids=torch.tensor([ids])).logits[0, :-1].float(), -1)
    want = [float(want[k - 1, ids[k]]) for k in range(1, len(ids))]
    out = gen(url, input_ids=ids, sampling_params={"max_new_tokens": 0, "temperature": 1.0}, return_logprob=True,
              logprob_start_len=2)
    rows = out["meta_info"]["input_token_logprobs"]
    assert [t for _, t, _ in rows] == ids[2:] and out["output_ids"] == []
    # SGLang's rows (logprob_result_processor: [None] + logprobs[:-1]): the first, at the start itself, is None
    assert rows[0][0] is None
    assert [lp for lp, _, _ in rows[1:]] == pytest.approx(want[2:], abs=1e-5)  # float32 forward, same op order
    whole = gen(url, input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True, logprob_start_len=0)
    assert [lp for lp, _, _ in whole["meta_info"]["input_token_logprobs"]][0] is None
    none = gen(url, input_ids=ids, sampling_params={"max_new_tokens": 0}, return_logprob=True)
    assert "input_token_logprobs" not in none["meta_info"]
    r = requests.post(f"{url}/generate", json={"input_ids": ids, "return_logprob": True, "logprob_start_len": 9,
                                               "sampling_params": {"max_new_tokens": 0}})
    assert r.status_code == 400 and "logprob_start_len" in r.json()["error"]["message"]


def test_same_sampling_seed_gives_same_sample(server):
    _, url = server
    body = dict(input_ids=[3, 4, 5], sampling_params={"max_new_tokens": 8, "sampling_seed": 42, "ignore_eos": True})
    assert gen(url, **body)["output_ids"] == gen(url, **body)["output_ids"]


def test_bad_request_is_400_with_message(server):
    _, url = server
    r = requests.post(f"{url}/generate", json={"text": "a", "sampling_params": {"max_tokens": 3}})
    assert r.status_code == 400 and "max_new_tokens" in r.json()["error"]["message"]


def test_info_health_and_flush(server):
    _, url = server
    info = requests.get(f"{url}/model_info").json()
    assert info["architectures"] == ["Qwen3ForCausalLM"] and info["is_generation"] is True
    assert requests.get(f"{url}/health_generate").status_code == 200
    assert requests.post(f"{url}/flush_cache").status_code == 200


def test_update_weights_from_tensor_changes_checksum_and_version(server, model_dir):
    engine, url = server
    before = requests.get(f"{url}/rlrun/weights_checksum").json()["checksum"]
    new_state = build_model(seed=123).state_dict()
    payload = W.serialize_named_tensors(list(new_state.items()))
    r = requests.post(f"{url}/update_weights_from_tensor",
                      json=api.update_weights_from_tensor_body([payload], "v2"))
    assert r.json()["success"], r.text
    after = requests.get(f"{url}/rlrun/weights_checksum").json()
    assert after == {"checksum": W.checksum(new_state), "kind": "sha256", "dtype": "float32",
                     "weight_version": "v2"} and after["checksum"] != before
    out = gen(url, input_ids=[3], sampling_params={"max_new_tokens": 1})
    assert out["meta_info"]["weight_version"] == "v2"
    first = requests.post(f"{url}/get_weights_by_name", json={"name": "model.norm.weight", "truncate_size": 3}).json()
    assert first == pytest.approx(new_state["model.norm.weight"][:3].tolist())
    # back to the checkpoint on disk
    r = requests.post(f"{url}/update_weights_from_disk", json=api.update_weights_from_disk_body(str(model_dir), "v3"))
    assert r.json()["success"], r.text
    assert requests.get(f"{url}/rlrun/weights_checksum").json()["checksum"] == before


def test_update_with_a_wrong_name_fails_without_500(server):
    _, url = server
    payload = W.serialize_named_tensors([("model.norm.weigth", torch.zeros(32))])
    r = requests.post(f"{url}/update_weights_from_tensor", json=api.update_weights_from_tensor_body([payload], "x"))
    assert r.status_code == 400 and r.json()["success"] is False
    assert "did you mean 'model.norm.weight'" in r.json()["message"]


def _generate_in_thread(url, results, **body):
    t = threading.Thread(target=lambda: results.append(gen(url, **body)))
    t.start()
    return t


def _start_long_request(engine, url, rid, results):
    """A request that runs until aborted (or the 2048-token context ends it, seconds later)."""
    t = _generate_in_thread(url, results, input_ids=[3], rid=rid,
                            sampling_params={"max_new_tokens": 100000, "ignore_eos": True})
    while engine.load()["num_reqs"] == 0:  # admitted into the running batch
        time.sleep(0.01)
    return t


def test_abort_request_finishes_with_abort(server):
    engine, url = server
    results = []
    t = _start_long_request(engine, url, "long", results)
    time.sleep(0.05)
    assert requests.post(f"{url}/abort_request", json=api.abort_request_body(rid="long")).status_code == 200
    t.join(timeout=30)
    assert results[0]["meta_info"]["finish_reason"]["type"] == "abort"
    assert 0 < results[0]["meta_info"]["completion_tokens"] < 100000


def test_pause_in_place_holds_requests_until_continue(server):
    engine, url = server
    assert requests.post(f"{url}/pause_generation", json={"mode": "in_place"}).json()["status"] == "ok"
    results = []
    t = _generate_in_thread(url, results, input_ids=[3], sampling_params={"max_new_tokens": 2})
    time.sleep(0.3)
    assert results == []  # held while paused
    requests.post(f"{url}/continue_generation", json={})
    t.join(timeout=30)
    assert results and results[0]["meta_info"]["finish_reason"]["type"] in ("length", "stop")


def test_release_and_resume_memory(server):
    _, url = server
    assert requests.post(f"{url}/release_memory_occupation", json={"tags": ["kv_cache"]}).status_code == 200
    r = requests.post(f"{url}/generate", json={"input_ids": [3], "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400 and "resume_memory_occupation" in r.json()["error"]["message"]
    assert requests.post(f"{url}/resume_memory_occupation", json={}).status_code == 200
    assert requests.get(f"{url}/server_info").json()["released_memory"] == []
    assert requests.post(f"{url}/release_memory_occupation", json={"tags": ["kv"]}).status_code == 400


def test_a_short_request_joins_and_leaves_while_a_long_one_runs(server):
    """Continuous batching: no waiting for the running batch to finish."""
    engine, url = server
    results = []
    t = _start_long_request(engine, url, "long2", results)
    load = requests.get(f"{url}/get_load").json()
    assert load[0]["dp_rank"] == 0 and load[0]["num_reqs"] == 1 and load[0]["num_tokens"] >= 1
    short = gen(url, input_ids=[4, 5], sampling_params={"max_new_tokens": 3, "ignore_eos": True})
    assert short["meta_info"]["completion_tokens"] == 3
    assert results == [] and "long2" in engine._running  # the long request is still generating
    requests.post(f"{url}/abort_request", json=api.abort_request_body(rid="long2"))
    t.join(timeout=30)
    assert results[0]["meta_info"]["finish_reason"]["type"] == "abort"


def test_update_weights_from_tensor_file_variant(server, tmp_path):
    """load_format="rlrun_file": the bytes stay on local disk, the body carries the path."""
    _, url = server
    state = build_model(seed=5).state_dict()
    path = tmp_path / "bucket.pt"
    torch.save(list(state.items()), path)
    r = requests.post(f"{url}/update_weights_from_tensor", json=api.update_weights_from_tensor_body(
        [str(path)], "f1", load_format=W.FILE_LOAD_FORMAT))
    assert r.json()["success"], r.text
    assert requests.get(f"{url}/rlrun/weights_checksum").json() == {"checksum": W.checksum(state), "kind": "sha256",
                                                                    "dtype": "float32", "weight_version": "f1"}
    fp = requests.get(f"{url}/rlrun/weights_checksum", params={"kind": "fingerprint"}).json()
    assert fp["checksum"] == W.fingerprint(state) and fp["kind"] == "fingerprint"
    bad = requests.get(f"{url}/rlrun/weights_checksum", params={"kind": "md5"})
    assert bad.status_code == 400 and "sha256" in bad.text


def test_out_of_vocabulary_ids_are_a_400(server):
    _, url = server
    r = requests.post(f"{url}/generate", json={"input_ids": [3, 99999], "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 400 and "outside the vocabulary" in r.json()["error"]["message"]


def _submit(engine, rid, max_new_tokens):
    item = api.GenerateItem(rid=rid, input_ids=[3], text=None, return_logprob=False,
                            sampling=api.parse_sampling_params({"max_new_tokens": max_new_tokens, "ignore_eos": True}))
    return engine.submit([item])[0]


def test_a_failing_forward_fails_its_requests_not_the_scheduler():
    from rlrun.rollout.tiny_model import build_tokenizer

    model = build_model(seed=0)
    engine = HFEngine(model, build_tokenizer())
    broken = {"on": True}

    def fault(module, args):  # fault injection: the next forward raises, like a CUDA error would
        if broken["on"]:
            broken["on"] = False
            raise RuntimeError("injected forward failure")

    handle = model.model.register_forward_pre_hook(fault)
    try:
        with pytest.raises(RuntimeError, match="injected forward failure"):
            _submit(engine, "x", 3).result(timeout=30)
        assert _submit(engine, "y", 3).result(timeout=30).finish["type"] == "length"  # still serving
    finally:
        handle.remove()
        engine.shutdown()


def test_shutdown_answers_requests_in_flight():
    from rlrun.rollout.tiny_model import build_tokenizer

    engine = HFEngine(build_model(seed=0), build_tokenizer())
    fut = _submit(engine, "long", 100000)
    while not engine.busy():
        time.sleep(0.01)
    engine.shutdown()
    assert fut.result(timeout=10).finish["type"] == "abort"


def test_bfloat16_engine_generates_and_takes_fp32_weights(model_dir):
    """The GPU setting (bf16 weights) on the CPU: generation works and fp32 updates are cast."""
    engine = HFEngine.from_dir(model_dir, dtype="bfloat16")
    try:
        assert next(engine.model.parameters()).dtype == torch.bfloat16
        res = _submit(engine, "b", 4).result(timeout=60)
        assert len(res.output_ids) == 4 and res.finish["type"] == "length"
        state = build_model(seed=3).state_dict()
        engine.load_named(list(state.items()), "3")
        assert W.checksum(engine.model.state_dict()) == W.checksum({n: t.bfloat16() for n, t in state.items()})
    finally:
        engine.shutdown()


@pytest.mark.parametrize("path,body,match", [
    ("/abort_request", ["rid"], "body must be a JSON object"),
    ("/update_weight_version", {}, "missing field 'new_version'"),
    ("/get_weights_by_name", {"name": "nope"}, "no parameter named 'nope'"),
    ("/pause_generation", {"mode": "later"}, "abort|retract|in_place"),
])
def test_malformed_admin_requests_are_400(server, path, body, match):
    _, url = server
    r = requests.post(f"{url}{path}", json=body)
    assert r.status_code == 400 and match in r.json()["error"]["message"]
    assert r.json()["error"]["message"].startswith(path)
