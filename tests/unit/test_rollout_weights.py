"""Weight transport helpers: serialisation, buckets, checksums, loading, a gloo broadcast group."""
import threading

import pytest
import torch

from rlrun.rollout import weights as W
from rlrun.rollout.process import free_port
from rlrun.rollout.tiny_model import build_model


def test_serialize_roundtrip_and_file_variant(tmp_path):
    named = [("a", torch.arange(6.0).reshape(2, 3)), ("b", torch.tensor([1, 2], dtype=torch.int32))]
    back = W.deserialize_named_tensors(W.serialize_named_tensors(named), None)
    assert [n for n, _ in back] == ["a", "b"] and all(torch.equal(x, y) for (_, x), (_, y) in zip(named, back))
    path = tmp_path / "bucket.pt"
    torch.save(named, path)
    assert torch.equal(W.deserialize_named_tensors(str(path), W.FILE_LOAD_FORMAT)[0][1], named[0][1])
    with pytest.raises(ValueError, match="load_format='flattened_bucket' is not supported"):
        W.deserialize_named_tensors("x", "flattened_bucket")


def test_buckets_respect_the_byte_budget():
    named = [(f"t{i}", torch.zeros(n)) for i, n in enumerate([10, 10, 30, 5])]  # float32: 40, 40, 120, 20 B
    sizes = [[n for n, _ in b] for b in W.buckets(named, bucket_bytes=80)]
    assert sizes == [["t0", "t1"], ["t2"], ["t3"]]  # an oversized tensor travels alone


def test_checksum_sees_any_change():
    state = {"w": torch.ones(3), "b": torch.zeros(2)}
    ref = W.checksum(state)
    assert W.checksum(dict(reversed(list(state.items())))) == ref  # order-independent
    state["w"][1] = 1.0000001
    assert W.checksum(state) != ref


def test_load_into_updates_tied_weights_and_reports_bad_names():
    model, other = build_model(seed=0), build_model(seed=1)
    n = W.load_into(model, other.state_dict().items())
    assert n == len(other.state_dict())
    assert W.checksum(model.state_dict()) == W.checksum(other.state_dict())
    assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr()  # still tied
    with pytest.raises(KeyError, match="did you mean 'lm_head.weight'"):
        W.load_into(model, [("lm_head.weigh", torch.zeros(1))])
    with pytest.raises(ValueError, match="engine shape"):
        W.load_into(model, [("model.norm.weight", torch.zeros(3))])


def test_dtype_names_are_sglangs():
    assert W.dtype_name(torch.bfloat16) == "bfloat16" and W.dtype_from_name("bfloat16") is torch.bfloat16
    with pytest.raises(ValueError):
        W.dtype_from_name("float128")


def test_gloo_broadcast_group_outside_the_default_group():
    port, got = free_port(), {}

    def receiver(rank):
        group = W.new_broadcast_group("127.0.0.1", port, rank, 3, "g", "gloo", timeout_s=30)
        bufs = [torch.empty(4), torch.empty(2, dtype=torch.bfloat16)]
        W.broadcast_tensors(group, bufs)
        got[rank] = bufs

    threads = [threading.Thread(target=receiver, args=(r,)) for r in (1, 2)]
    for t in threads:
        t.start()
    sender = W.new_broadcast_group("127.0.0.1", port, 0, 3, "g", "gloo", timeout_s=30)
    sent = [torch.arange(4.0), torch.tensor([0.5, -2.0], dtype=torch.bfloat16)]
    W.broadcast_tensors(sender, sent)
    for t in threads:
        t.join(timeout=30)
    for rank in (1, 2):
        assert all(torch.equal(a, b) for a, b in zip(got[rank], sent))


def test_ipc_payload_roundtrip_keeps_the_callers_storage_private():
    t = torch.arange(6.0)
    payload, keepalive = W.serialize_ipc([("w", t)])
    assert not t.is_shared()  # the caller's tensor was copied, not moved into shared memory
    (name, back), = W.deserialize_named_tensors(payload, None)
    assert name == "w" and torch.equal(back, t) and keepalive[0].is_shared()


def test_payload_unpickler_refuses_arbitrary_callables():
    import base64
    import os
    import pickle

    class Evil:
        def __reduce__(self):
            return (os.system, ("echo pwned",))

    payload = base64.b64encode(pickle.dumps(Evil())).decode()
    with pytest.raises(pickle.UnpicklingError, match="not allowed"):
        W.deserialize_named_tensors(payload, None)


def test_ipc_serialisation_leaves_the_sharing_strategy_alone():
    import torch.multiprocessing as tmp

    before = tmp.get_sharing_strategy()
    W.serialize_ipc([("w", torch.ones(2))])
    assert tmp.get_sharing_strategy() == before
