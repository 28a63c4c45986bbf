"""A push from a stream of buckets (rlrun.rollout.weights.Buckets: TrainerBackend.sync_buckets, each bucket made on
the trainer's GPU when the push asks for it, no host round trip) into a real hf engine behind the real sglang-router:
buckets are made as the push goes, at most two ahead of the one the engines are loading, the version rides on the last
one only, and the engine ends with the state's exact bytes. And the trainer rank's side: every rank iterates the
stream to its end, the lead too when its push fails (a rank that stopped early would leave the others in the next
bucket's TP gather)."""
from __future__ import annotations

import pytest
import torch

from rlrun.config.kinds import TransportKind
from rlrun.launch.train_group import _Rank
from rlrun.rollout import weights as W
from rlrun.rollout.engines import group as engines_mod
from rlrun.rollout.engines.group import push_tensors
from rlrun.rollout.tiny_model import build_model

pytestmark = pytest.mark.timeout(120)


@pytest.fixture(scope="module")
def group(hf_engine_group):
    return hf_engine_group


def test_a_stream_is_pushed_as_it_comes_and_lands_exactly(group, monkeypatch):
    state = build_model(seed=11).state_dict()
    parts = list(W.buckets(list(state.items()), 16 << 10))
    assert len(parts) >= 4  # the tiny model (84 KB) in 16 KiB buckets: enough to see the interleaving
    log, real_post = [], engines_mod._post

    def stream():
        for i, bucket in enumerate(parts):
            log.append(("made", i))
            yield bucket

    def post(url, path, body, timeout_s=600.0):
        if path == "/update_weights_from_tensor":
            log.append(("posted", body["weight_version"]))
        return real_post(url, path, body, timeout_s)

    monkeypatch.setattr(engines_mod, "_post", post)
    nbytes = push_tensors(group.urls, W.Buckets(stream()), "5", transport="serialized", bucket_bytes=1)
    assert nbytes == sum(t.numel() * t.element_size() for t in state.values())
    posts = [i for i, e in enumerate(log) if e[0] == "posted"]
    assert [log[i][1] for i in posts] == [None] * (len(parts) - 1) + ["5"]  # the version on the last bucket only
    for k, i in enumerate(posts):
        # bucket k is sent once bucket k+1 is made (so it is known not to be the last); bucket k+2 may be made while
        # bucket k is on its way (the thread that sends it logs concurrently), k+3 only after the engines loaded k:
        # the stream runs at most two buckets ahead of the engines
        made = [e[1] for e in log[:i] if e[0] == "made"]
        assert made == list(range(len(made))) and min(k + 2, len(parts)) <= len(made) <= min(k + 3, len(parts))
    assert group.checksums() == {group.urls[0]: W.checksum(state)}
    assert set(group.versions().values()) == {"5"}


def test_an_ipc_push_collects_each_bucket_once_every_engine_has_answered(group, monkeypatch):
    """The sender's CUDA blocks of a payload stay out of torch's allocator until collected (W.release_sent, a no-op
    without CUDA: verified on the GPUs by the Qwen3-4B colocated layout, tests/gpu/test_gpu_multi_layouts.py); the push
    collects after each bucket, once every engine answered for it, so at most two staged buckets ever hold memory."""
    state = build_model(seed=12).state_dict()
    parts = list(W.buckets(list(state.items()), 16 << 10))
    log, real_post = [], engines_mod._post

    def post(url, path, body, timeout_s=600.0):
        out = real_post(url, path, body, timeout_s)
        if path == "/update_weights_from_tensor":
            log.append("answered")
        return out

    monkeypatch.setattr(engines_mod, "_post", post)
    monkeypatch.setattr(W, "release_sent", lambda: log.append("collected"))
    push_tensors(group.urls, list(state.items()), "6", transport="ipc", bucket_bytes=16 << 10)
    assert log == ["answered", "collected"] * len(parts)  # one engine: its answer, then the collection, per bucket
    assert group.checksums() == {group.urls[0]: W.checksum(state)}


class _Impl:
    def __init__(self, n):
        self.n, self.made = n, 0

    def sync_buckets(self, bucket_bytes):
        for i in range(self.n):
            self.made += 1
            yield [(f"w{i}", torch.full((4,), float(i)))]


def _rank(impl) -> _Rank:
    rank = object.__new__(_Rank)  # the actor body without a backend: push_weights reads impl, device, transport_state
    rank.impl, rank.device, rank.transport_state = impl, torch.device("cpu"), {}
    return rank


def test_every_rank_reads_the_stream_to_its_end_even_when_the_lead_rank_s_push_fails():
    def failing_push(named, urls, **how):
        next(W.as_buckets(named, how["bucket_bytes"]))
        raise RuntimeError("engine gone")

    how = dict(transport=TransportKind("failing", auto=lambda cfg: False, rules=lambda cfg: iter(()),
                                       push=failing_push),
               version=1, bucket_bytes=1, engine_dtype=None, backend="gloo")
    lead, other = _Impl(5), _Impl(5)
    with pytest.raises(RuntimeError, match="engine gone"):
        _rank(lead).push_weights(["http://engine"], True, how)
    assert lead.made == 5  # the rest of the stream was read after the failure: the other ranks' gathers complete
    assert _rank(other).push_weights(["http://engine"], False, how) is None and other.made == 5


def test_a_fingerprint_only_push_reads_the_whole_stream():
    impl = _Impl(3)
    how = dict(transport=TransportKind("unused", auto=lambda cfg: False, rules=lambda cfg: iter(()),
                                       push=lambda named, urls, **how: 0),  # no urls: never called
               version=0, bucket_bytes=1, engine_dtype=None, backend="gloo")
    out = _rank(impl).push_weights([], True, how)
    assert impl.made == 3
    assert out["fingerprint"] == W.fingerprint({f"w{i}": torch.full((4,), float(i)) for i in range(3)})


def test_a_push_to_engines_without_checksums_computes_no_fingerprint(monkeypatch):
    """fingerprint=False (WeightSync: engines whose kind has no checksum endpoint, SGLang's) pushes the same bytes and
    never fingerprints: its per-tensor reductions were most of a push's staging on the GPU."""
    sent = []

    def record(named, urls, *, bucket_bytes, prepare, **how):
        for bucket in W.as_buckets(named, bucket_bytes):
            sent.append([(n, t.clone()) for n, t in prepare(bucket)])
        return sum(t.numel() * t.element_size() for b in sent for _, t in b)

    def no_fingerprint(*a, **k):
        raise AssertionError("fingerprinted")

    how = dict(transport=TransportKind("recording", auto=lambda cfg: False, rules=lambda cfg: iter(()), push=record),
               version=1, bucket_bytes=1, engine_dtype=None, backend="gloo")
    with _Ops() as with_ops:
        out = _rank(_Impl(3)).push_weights(["http://engine"], True, how)
    with_fp = [b for b in sent]
    sent.clear()
    monkeypatch.setattr(W.Fingerprint, "add", no_fingerprint)
    with _Ops() as without_ops:
        out_none = _rank(_Impl(3)).push_weights(["http://engine"], True, {**how, "fingerprint": False})
    # the fingerprint's ~30 torch ops a tensor were the staging's cost on the GPU: without it far fewer are dispatched
    assert without_ops.n * 3 < with_ops.n, (without_ops.n, with_ops.n)
    assert out_none["fingerprint"] is None and out["fingerprint"] is not None
    assert out_none["bytes"] == out["bytes"] == 3 * 4 * 4
    assert [[(n, t.tolist()) for n, t in b] for b in sent] == [[(n, t.tolist()) for n, t in b] for b in with_fp]


class _Ops:
    """Counts the torch ops dispatched inside the block."""

    def __enter__(self):
        from torch.utils._python_dispatch import TorchDispatchMode

        outer = self
        self.n = 0

        class _Mode(TorchDispatchMode):
            def __torch_dispatch__(self, func, types, args=(), kwargs=None):
                outer.n += 1
                return func(*args, **(kwargs or {}))

        self.mode = _Mode()
        self.mode.__enter__()
        return self

    def __exit__(self, *exc):
        self.mode.__exit__(*exc)
