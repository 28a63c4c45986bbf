"""Offload.training's offload order against a real hf engine process behind the real sglang-router.

Every engine endpoint the runner hits is recorded (the real HTTP calls still go out), and the
engine's /server_info is read at each trainer call: released (all tags) while the trainer works,
weights back before the push, everything back and generation working after the block. The
trainer is a stand-in (Ray and a TrainGroup are not needed to check the order) that exports the
tiny model's weights the way TrainGroup.export_weights does (disk) or pushes them with the lead
rank's own push_state (tensor: shared-memory payloads on the CPU).
"""
from __future__ import annotations

import pytest
import requests
import torch

from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.launch.train_group import push_state
from rlrun.metrics import Timer
from rlrun.rollout import api
from rlrun.rollout.engines import group as engines_mod
from rlrun.rollout.engines import http as http_mod
from rlrun.rollout.tiny_model import build_model
from rlrun.rollout.weights import checksum, fingerprint
from rlrun.parts.offload import Offload
from rlrun.parts.weight_sync import WeightSync
from rlrun.rollout.handle import PolicyVersion

pytestmark = pytest.mark.timeout(120)

ALL = ["cuda_graph", "kv_cache", "weights"]


@pytest.fixture(scope="module")
def group(hf_engine_group):
    return hf_engine_group


def _released(group) -> list[str]:
    return requests.get(f"{group.urls[0]}/server_info", timeout=10).json()["released_memory"]


def _generate(group) -> requests.Response:
    return requests.post(f"{group.urls[0]}/generate", timeout=30, json={
        "input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 3, "temperature": 0.0}})


class _Trainer:
    """Records its calls with the engine's released memory at that moment."""

    def __init__(self, group, calls, seed):
        self.group, self.calls, self.model = group, calls, build_model(seed)

    def onload(self):
        self.calls.append(("trainer.onload", _released(self.group)))

    def offload(self):
        self.calls.append(("trainer.offload", _released(self.group)))

    def export_weights(self, path, transport=None, args=None):
        self.calls.append(("trainer.export", _released(self.group)))
        self.model.save_pretrained(path)
        return checksum(self.model.state_dict())

    def push_weights(self, urls, engines=None, **how):  # engines: each url's engine id (one engine here)
        self.calls.append(("trainer.push", _released(self.group)))
        return push_state(self.model.state_dict(), urls, device=torch.device("cpu"), **how)


def _run(tmp_path, group, monkeypatch, overrides, seed):
    calls = []
    real_post = engines_mod._post

    def post(url, path, body, timeout_s=600.0):
        calls.append((path, body))
        return real_post(url, path, body, timeout_s)

    real_flush = http_mod.flush

    def flush(url):
        calls.append(("/flush_cache", None))
        return real_flush(url)

    monkeypatch.setattr(http_mod, "flush", flush)  # EngineGroup.drain: idle and flushed before release and pushes
    monkeypatch.setattr(engines_mod, "_post", post)  # the pushes from the trainer's memory
    monkeypatch.setattr(http_mod, "post", post)  # each engine's control plane (pause, memory, disk loads)
    cfg = load(overrides)
    plan = make_plan(cfg)
    trainer = _Trainer(group, calls, seed)
    weights = WeightSync(cfg, plan, tmp_path, trainer, group, PolicyVersion())
    r = Offload(cfg, plan, trainer, group, weights)
    return r, calls


PUSH = [("/pause_generation", {"mode": "in_place"}), "/update_weights_from_tensor", ("/continue_generation", {})]
# lending starts with the engines idle: stragglers aborted and waited out (EngineGroup.drain), then the pause (SGLang
# re-checks in-flight requests only once a second in it), then one more drain for a request that came in between
LEND = [("/abort_request", {"rid": None, "abort_all": True}), ("/flush_cache", None),
        ("/pause_generation", {"mode": "abort"}), ("/flush_cache", None)]


def _paths(calls):
    """Calls with the weight payload itself left out (shared-memory file names differ per run)."""
    return [c[0] if c[0] == "/update_weights_from_tensor" else c for c in calls]


def test_colocated_offload_with_the_tensor_push(tmp_path, group, monkeypatch):
    """The trainer pushes from its own memory (CUDA IPC on a GPU), so it offloads after the push."""
    r, calls = _run(tmp_path, group, monkeypatch, ["train.offload=true", "rollout.offload=true"], seed=6)
    assert r.cfg.train.colocate and r.plan.weight_sync == "tensor"  # auto, colocated
    t = Timer()
    with r.training(version=7, timer=t):
        calls.append(("block", _released(group)))
    assert _paths(calls) == [
        *LEND,
        ("/release_memory_occupation", {"tags": None}),
        ("trainer.onload", ALL),
        ("block", ALL),
        ("/resume_memory_occupation", {"tags": ["weights"]}),
        ("trainer.push", ["cuda_graph", "kv_cache"]),  # the engine's weights are back to load into
        # no /continue_generation yet: a request scheduled before the KV cache is back would prefill
        # into released memory (SGLang 0.5.16's scheduler died so, on the lent H100, 2026-11-25)
        *PUSH[:-1],
        ("trainer.offload", ["cuda_graph", "kv_cache"]),
        ("/resume_memory_occupation", {"tags": ["kv_cache", "cuda_graph"]}),
        ("/continue_generation", {}),
    ]
    # flushed twice, both in LEND: the lent engines stay paused from there to the push, which does not drain again
    assert [c[0] for c in calls].count("/flush_cache") == 2
    last = [c[1] for c in calls if c[0] == "/update_weights_from_tensor"][-1]
    # the last bucket sets the version; the engines were drained and flushed before the push (EngineGroup.drain),
    # never inside the update (SGLang asserts an idle engine there and its scheduler dies on a busy one)
    assert last["weight_version"] == "7" and not last["flush_cache"]
    state = r.trainer.model.state_dict()
    assert group.checksums("fingerprint") == {group.urls[0]: fingerprint(state)}
    assert group.checksums() == {group.urls[0]: checksum(state)}  # the byte-wise check agrees
    assert set(group.versions().values()) == {"7"} and _released(group) == []
    assert _generate(group).status_code == 200
    assert t.seconds["offload"] > 0 and t.seconds["weight_sync"] > 0
    # each call of the offload phase timed on its own, inside the phase: the parts sum to at most the phase
    assert set(t.parts) == {f"offload/{p}" for p in ("pause", "drain", "release", "trainer", "resume", "continue")}
    assert all(v > 0 for v in t.parts.values()) and sum(t.parts.values()) <= t.seconds["offload"]
    m = t.metrics({})
    assert m["offload/resume_s"] == t.parts["offload/resume"] and "time/offload/resume_s" not in m
    assert r.weights.synced[0] == 7 and r.weights.last_metrics["perf/weight_sync_gb_per_s"] > 0
    assert r.weights.versions.version == 7  # the rollout side's requests are attributed to it from now


def test_colocated_offload_releases_engines_for_training_and_resumes_around_the_disk_push(tmp_path, group,
                                                                                          monkeypatch):
    r, calls = _run(tmp_path, group, monkeypatch, ["train.offload=true", "rollout.offload=true",
                                                   "rollout.weight_sync=disk"], seed=3)
    assert r.cfg.train.colocate
    t = Timer()
    with r.training(version=7, timer=t):
        calls.append(("block", _released(group)))
        gen = _generate(group)
        assert gen.status_code == 400 and "resume_memory_occupation" in gen.text  # really released
    assert calls == [
        *LEND,
        ("/release_memory_occupation", {"tags": None}),  # None = every tag (SGLang)
        ("trainer.onload", ALL),
        ("block", ALL),
        ("trainer.export", ALL),
        ("trainer.offload", ALL),
        ("/resume_memory_occupation", {"tags": ["weights"]}),
        ("/update_weights_from_disk", api.update_weights_from_disk_body(str(tmp_path / "weight_sync"), "7")),
        ("/resume_memory_occupation", {"tags": ["kv_cache", "cuda_graph"]}),
        ("/continue_generation", {}),
    ]
    assert _released(group) == []
    assert group.checksums() == {group.urls[0]: checksum(r.trainer.model.state_dict())}  # the push landed
    assert set(group.versions().values()) == {"7"}
    out = _generate(group)
    assert out.status_code == 200 and len(out.json()["output_ids"]) == 3
    assert t.seconds["offload"] > 0 and t.seconds["weight_sync"] > 0


def test_a_resident_trainer_stays_and_the_engines_release_only_their_kv_cache(tmp_path, group, monkeypatch):
    """train.offload=false beside lending engines (what auto picks when both fit): the trainer never moves, the
    engine keeps its weights and graphs and takes the push where they are; only its KV cache makes room."""
    r, calls = _run(tmp_path, group, monkeypatch, ["train.offload=false", "rollout.offload=true"], seed=7)
    assert not r.plan.offload_train and r.plan.weight_sync == "tensor"
    t = Timer()
    with r.training(version=10, timer=t):
        calls.append(("block", _released(group)))
    assert _paths(calls) == [
        *LEND,
        ("/release_memory_occupation", {"tags": ["kv_cache"]}),
        ("block", ["kv_cache"]),
        ("trainer.push", ["kv_cache"]),  # into the weights the engine kept
        *PUSH[:-1],  # paused until the KV cache is back, as above
        ("/resume_memory_occupation", {"tags": ["kv_cache"]}),
        ("/continue_generation", {}),
    ]
    assert [c[0] for c in calls].count("/flush_cache") == 2  # in LEND only (above)
    state = r.trainer.model.state_dict()
    assert group.checksums() == {group.urls[0]: checksum(state)} and set(group.versions().values()) == {"10"}
    assert _released(group) == [] and _generate(group).status_code == 200
    assert t.seconds["offload"] > 0


def test_without_offload_only_the_weights_are_pushed(tmp_path, group, monkeypatch):
    r, calls = _run(tmp_path, group, monkeypatch, [], seed=4)  # the cpu profile: both flags false
    t = Timer()
    with r.training(version=8, timer=t):
        assert _released(group) == []
    assert _paths(calls) == [("/flush_cache", None), ("trainer.push", []), *PUSH]
    assert "offload" not in t.seconds and _generate(group).status_code == 200


@pytest.mark.parametrize("transport, order", [
    ("tensor", ["trainer.onload", "/flush_cache", "trainer.push", "/pause_generation", "/update_weights_from_tensor",
                "/continue_generation", "trainer.offload"]),
    ("disk", ["trainer.onload", "trainer.export", "trainer.offload", "/flush_cache", "/update_weights_from_disk"])])
def test_trainer_offload_alone_leaves_the_engines_alone(tmp_path, group, monkeypatch, transport, order):
    r, calls = _run(tmp_path, group, monkeypatch, ["train.offload=true", f"rollout.weight_sync={transport}"], seed=5)
    with r.training(version=9, timer=Timer()):
        pass
    assert [c[0] for c in calls] == order
