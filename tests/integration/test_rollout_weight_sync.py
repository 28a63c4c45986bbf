"""Trainer -> engine weight sync across processes: the disaggregated broadcast path (gloo here, nccl on
GPU: same code) and the disk fallback; engines end bit-identical to the trainer's state."""
import pytest
import torch

from rlrun.rollout import weights as W
from rlrun.rollout.engines.group import broadcast_weights, local_engine_group
from rlrun.rollout.process import free_port
from rlrun.rollout.tiny_model import build_model, save_tiny_model


@pytest.fixture(scope="module")
def group(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("sync")
    model_dir = save_tiny_model(tmp / "tiny", seed=0)
    with local_engine_group(model_dir, 2, router="sglang_router", log_dir=tmp / "logs",
                            health_interval_s=5, startup_timeout_s=120) as grp:
        yield grp


def test_broadcast_from_trainer_rank0_to_two_engine_processes(group):
    state = build_model(seed=7).state_dict()
    named = [(n, t) for n, t in state.items()]
    stats = broadcast_weights(group.urls, named, "5", master_address="127.0.0.1", master_port=free_port(),
                              backend="gloo", bucket_bytes=16 << 10)
    assert stats["bytes"] == sum(t.numel() * t.element_size() for t in state.values())
    assert set(group.checksums().values()) == {W.checksum(state)}
    assert set(group.versions().values()) == {"5"}
    # the group is destroyed after the sync: a second sync builds a new one
    state2 = {n: t + 1 for n, t in state.items()}
    broadcast_weights(group.urls, list(state2.items()), "6", master_address="127.0.0.1",
                      master_port=free_port(), backend="gloo")
    assert set(group.checksums().values()) == {W.checksum(state2)}


def test_a_kept_group_serves_many_pushes_and_is_rebuilt_when_the_engines_change(group):
    """BroadcastGroup (the trainer's lead rank keeps one): one join for many pushes; a push to other engines (a
    restart, a subset) builds a new group; close() frees both ends."""
    from rlrun.rollout.engines.group import BroadcastGroup

    kept = BroadcastGroup("127.0.0.1", free_port, "gloo")
    for version, seed in (("21", 21), ("22", 22), ("23", 23)):
        state = build_model(seed=seed).state_dict()
        broadcast_weights(group.urls, list(state.items()), version, master_address="127.0.0.1", master_port=0,
                          backend="gloo", group=kept)
        assert set(group.checksums().values()) == {W.checksum(state)}
    assert kept.builds == 1
    state = build_model(seed=24).state_dict()
    broadcast_weights(group.urls[:1], list(state.items()), "24", master_address="127.0.0.1", master_port=0,
                      backend="gloo", group=kept)
    assert kept.builds == 2 and group.checksums(urls=group.urls[:1]) == {group.urls[0]: W.checksum(state)}
    kept.close()
    assert kept.group is None


def test_broadcast_one_collective_per_tensor_format(group):
    # SGLang's other format (load_format None): the engine receives every tensor separately
    state = {n: t * 2 for n, t in build_model(seed=8).state_dict().items()}
    broadcast_weights(group.urls, list(state.items()), "8", master_address="127.0.0.1", master_port=free_port(),
                      backend="gloo", bucket_bytes=16 << 10, load_format=None)
    assert set(group.checksums().values()) == {W.checksum(state)}


def test_update_from_disk_fallback(group, tmp_path):
    model = build_model(seed=9)
    model.save_pretrained(tmp_path / "step9")
    group.update_weights_from_disk(str(tmp_path / "step9"), "9")
    assert set(group.checksums().values()) == {W.checksum(model.state_dict())}
    assert set(group.versions().values()) == {"9"}


def test_bf16_broadcast_is_cast_into_the_engine_dtype(group):
    state = {n: t.to(torch.bfloat16) for n, t in build_model(seed=11).state_dict().items()}
    broadcast_weights(group.urls, list(state.items()), "11", master_address="127.0.0.1",
                      master_port=free_port(), backend="gloo")
    expected = W.checksum({n: t.float() for n, t in state.items()})  # exact: bf16 -> fp32 is lossless
    assert set(group.checksums().values()) == {expected}


def test_release_resume_around_training_then_push(group):
    """The colocated order: release -> (train) -> resume -> push weights -> generate."""
    import requests

    group.release_memory()
    for url in group.urls:
        info = requests.get(f"{url}/server_info", timeout=10).json()
        assert info["released_memory"] == ["cuda_graph", "kv_cache", "weights"]
    group.resume_memory(["weights"])
    state = build_model(seed=13).state_dict()
    group.update_weights_from_tensor(list(state.items()), "13")
    group.resume_memory(["kv_cache", "cuda_graph"])
    assert set(group.checksums().values()) == {W.checksum(state)}
    r = requests.post(f"{group.urls[0]}/generate", json={"input_ids": [3], "sampling_params": {"max_new_tokens": 1}})
    assert r.status_code == 200 and r.json()["meta_info"]["weight_version"] == "13"


def test_sglang_ipc_payload_between_processes(group):
    """SGLang's own /update_weights_from_tensor payload (ForkingPickler; CPU tensors as shared
    memory files, CUDA tensors as IPC handles) read by separate engine processes."""
    state = build_model(seed=17).state_dict()
    group.update_weights_from_tensor(list(state.items()), "17", bucket_bytes=8 << 10, transport="ipc")
    assert set(group.checksums().values()) == {W.checksum(state)}
    assert set(group.versions().values()) == {"17"}


@pytest.mark.parametrize("path", ["tensor", "broadcast"])
def test_buckets_between_pause_and_continue_and_the_version_comes_last(group, monkeypatch, path):
    """Several buckets: each is prepared (the trainer's hook) just before it is sent; only the last
    request carries the version and flush_cache, all of them between pause(in_place) and continue."""
    from rlrun.rollout.engines import group as E

    calls, prepared = [], []
    real_post = E._post
    monkeypatch.setattr(E, "_post", lambda url, p, body, timeout_s=600.0: (
        calls.append((url, p, body)), real_post(url, p, body, timeout_s))[1])
    state = build_model(seed=13).state_dict()
    named = list(state.items())
    prepare = lambda bucket: (prepared.append([n for n, _ in bucket]), bucket)[1]  # noqa: E731
    if path == "tensor":
        sent = E.push_tensors(group.urls, named, "13", transport="ipc", bucket_bytes=16 << 10, prepare=prepare)
        weight_path = "/update_weights_from_tensor"
    else:
        sent = E.broadcast_weights(group.urls, named, "13", master_address="127.0.0.1", master_port=free_port(),
                                   backend="gloo", bucket_bytes=16 << 10, prepare=prepare)["bytes"]
        weight_path = "/update_weights_from_distributed"
    assert sent == sum(t.numel() * t.element_size() for t in state.values())
    assert len(prepared) > 2 and [n for b in prepared for n in b] == [n for n, _ in named]
    for url in group.urls:
        mine = [(p, b) for u, p, b in calls if u == url]
        assert mine[0] == ("/pause_generation", {"mode": "in_place"}) and mine[-1] == ("/continue_generation", {})
        pushes = [b for p, b in mine if p == weight_path]
        assert len(pushes) == len(prepared)
        assert [b["weight_version"] for b in pushes] == [None] * (len(pushes) - 1) + ["13"]
        assert [b["flush_cache"] for b in pushes] == [False] * (len(pushes) - 1) + [True]
        if path != "tensor":  # one uint8 broadcast per bucket
            assert {b["load_format"] for b in pushes} == {"flattened_bucket"}
    assert set(group.checksums("fingerprint").values()) == {W.fingerprint(state)}
    assert set(group.versions().values()) == {"13"}


def test_flattened_ipc_push_mixed_dtypes_bucket_boundaries_and_an_oversized_tensor(group, monkeypatch):
    """load_format="flattened_bucket" into two hf engine processes: half the tensors bf16 (the engines cast into
    their fp32), buckets of 4 KiB (several tensors per bucket, and the 4,992-byte lm_head and 8 KiB MLP weights
    larger than a bucket, each alone); the engines end bit-identical to the upcast state. Every request carries
    one payload with one shared buffer; bucket i+1 is staged while the engines load bucket i, never more than
    two buckets staged."""
    import time

    from rlrun.rollout.engines import group as E

    state = build_model(seed=31).state_dict()
    named = [(n, t.to(torch.bfloat16) if i % 2 else t * 3) for i, (n, t) in enumerate(state.items())]
    events, bodies, real_post = [], [], E._post

    def post(url, path, body, timeout_s=600.0):
        if path == "/update_weights_from_tensor":
            bodies.append(body)
            time.sleep(0.2)  # a slow engine: the next bucket must be staged meanwhile
            out = real_post(url, path, body, timeout_s)
            events.append(("loaded", len(bodies)))
            return out
        return real_post(url, path, body, timeout_s)

    def prepare(bucket):
        events.append(("staged", bucket[0][0]))
        return bucket

    monkeypatch.setattr(E, "_post", post)
    bucket_bytes = 4 << 10
    parts = list(W.buckets(named, bucket_bytes))
    assert any(len(b) > 1 for b in parts) and any(b[0][1].numel() * b[0][1].element_size() > bucket_bytes
                                                    for b in parts)  # the cases this test is about
    sent = E.push_tensors(group.urls, named, "31", transport="ipc", bucket_bytes=bucket_bytes, prepare=prepare,
                          load_format=W.FLATTENED_BUCKET)
    assert sent == sum(t.numel() * t.element_size() for _, t in named)
    want = {n: t.float() for n, t in named}  # bf16 -> fp32 is exact
    assert set(group.checksums().values()) == {W.checksum(want)}
    assert set(group.versions().values()) == {"31"}
    assert len(bodies) == len(parts) * len(group.urls)
    assert {b["load_format"] for b in bodies} == {"flattened_bucket"} and {len(b["serialized_named_tensors"])
                                                                           for b in bodies} == {1}
    staged = [i for i, e in enumerate(events) if e[0] == "staged"]
    loaded = [i for i, e in enumerate(events) if e[0] == "loaded"]
    # bucket 2 was staged before bucket 1's requests came back (double buffering) ...
    assert staged[1] < loaded[0]
    # ... and never more than two buckets ahead of the engines' answers (two engines answer each bucket)
    for k, at in enumerate(staged):
        assert k - sum(1 for j in loaded if j < at) // len(group.urls) <= 1


def test_flattened_bucket_is_the_tensor_transports_default_where_the_engine_reads_it(group, monkeypatch):
    """The hf engine kind reads flattened IPC buckets (EngineKind.flattened_ipc): push_state(flattened=True) through the tensor transport
    sends that form, fingerprinted as before."""
    from rlrun.config.kinds import ENGINES, TRANSPORTS
    from rlrun.launch.train_group import push_state
    from rlrun.rollout.engines import group as E

    assert ENGINES["hf"].flattened_ipc and ENGINES["sglang"].flattened_broadcast
    formats, real_post = [], E._post
    monkeypatch.setattr(E, "_post", lambda url, p, body, timeout_s=600.0: (
        formats.append(body.get("load_format")) if p == "/update_weights_from_tensor" else None,
        real_post(url, p, body, timeout_s))[1])
    state = {n: t * 5 for n, t in build_model(seed=32).state_dict().items()}
    out = push_state(state, group.urls, transport="tensor", version="32", bucket_bytes=16 << 10,
                     engine_dtype="float32", device=torch.device("cpu"), flattened=TRANSPORTS["tensor"].flattened(ENGINES["hf"]))
    assert formats and set(formats) == {"flattened_bucket"}
    assert set(group.checksums("fingerprint").values()) == {out["fingerprint"]} == {W.fingerprint(state)}


def test_tied_lm_head_is_fingerprinted_but_not_sent(group):
    from rlrun.launch.train_group import push_state

    state = {n: t * 3 for n, t in build_model(seed=12).state_dict().items()}  # tiny Qwen3: tied embeddings
    lm_head = state["lm_head.weight"]
    assert torch.equal(lm_head, state["model.embed_tokens.weight"])
    out = push_state(state, group.urls, transport="tensor", version="12", bucket_bytes=16 << 10,
                     engine_dtype="float32", device=torch.device("cpu"), tied=("lm_head.weight",))
    assert out["bytes"] == sum(t.numel() * t.element_size() for t in state.values()) - lm_head.numel() * 4
    assert out["fingerprint"] == W.fingerprint(state, torch.float32)  # the engine's state has lm_head
    assert set(group.checksums("fingerprint").values()) == {out["fingerprint"]}
    assert set(group.checksums().values()) == {W.checksum(state)}
