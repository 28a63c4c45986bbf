"""Weight transport helpers: serialisation, buckets, checksums, loading, a gloo broadcast group."""

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
    with pytest.raises(ValueError, match="load_format='direct' is not supported"):
        W.deserialize_named_tensors("x", "direct")


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


def _rlrun_receiver(port: int, rank: int, out) -> None:
    group = W.new_broadcast_group("127.0.0.1", port, rank, 3, "g", "gloo", timeout_s=30)
    bufs = [torch.empty(4), torch.empty(2, dtype=torch.bfloat16)]
    W.broadcast_tensors(group, bufs)
    out.put((rank, [b.tolist() for b in bufs]))


def _sglang_style_receiver(port: int, rank: int, out) -> None:
    """An engine rank joining as SGLang 0.5.16 does (init_custom_process_group, sglang/srt/utils/common.py:
    a tcp:// rendezvous, PrefixStore(group_name), torch's _new_process_group_helper with no ranks) and
    receiving with torch.distributed.broadcast(src=0) (its weight updater), written here from that description."""
    import datetime

    from torch import distributed as dist
    from torch.distributed import distributed_c10d as c10d

    timeout = datetime.timedelta(seconds=30)
    store, _, _ = next(c10d.rendezvous(f"tcp://127.0.0.1:{port}", rank, 3, timeout=timeout))
    group, _ = c10d._new_process_group_helper(3, rank, [], c10d.Backend("gloo"), c10d.PrefixStore("g", store),
                                              group_name="g", timeout=timeout, backend_options=None)
    c10d._world.pg_group_ranks[group] = {i: i for i in range(3)}
    bufs = [torch.empty(4), torch.empty(2, dtype=torch.bfloat16)]
    for b in bufs:
        dist.broadcast(b, src=0, group=group)
    out.put((rank, [b.tolist() for b in bufs]))


def test_gloo_broadcast_group_outside_the_default_group_reaches_an_sglang_style_rank():
    """Trainer rank 0 (this process) -> an rlrun hf-engine rank and a rank that joins as SGLang's engines do,
    each its own process (one rank per process, as in a run). Before the group was built through torch's
    _new_process_group_helper, the SGLang-style rank posted under other store keys and the exchange never met
    (the disaggregated SGLang run that printed no rollout on two H100s, docs/benchmarks.md)."""
    import multiprocessing as mp

    ctx = mp.get_context("spawn")
    port, out = free_port(), ctx.Queue()
    procs = [ctx.Process(target=_rlrun_receiver, args=(port, 1, out)),
             ctx.Process(target=_sglang_style_receiver, args=(port, 2, out))]
    for proc in procs:
        proc.start()
    try:
        sender = W.new_broadcast_group("127.0.0.1", port, 0, 3, "g", "gloo", timeout_s=30)
        sent = [torch.arange(4.0), torch.tensor([0.5, -2.0], dtype=torch.bfloat16)]
        W.broadcast_tensors(sender, sent)
        got = dict(out.get(timeout=60) for _ in procs)
        W.destroy_broadcast_group(sender)
    finally:
        for proc in procs:
            proc.join(timeout=30)
            if proc.is_alive():
                proc.kill()
    assert got == {1: [t.tolist() for t in sent], 2: [t.tolist() for t in sent]}


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


# ---- fingerprint: the cheap post-sync check (bit-exact like checksum, computed on the tensors' device)

def _flip_low_bit(t: torch.Tensor, index: int) -> torch.Tensor:
    out = t.clone()
    out.view(-1).view(torch.int32)[index] ^= 1  # the lowest mantissa bit: a change of one ulp
    return out


def test_fingerprint_is_the_hand_computed_digest():
    import hashlib

    # bits [1, 2, 3]: sum 6, position-weighted sum 1*1 + 2*2 + 3*3 = 14
    want = hashlib.sha256(b"x|int64|(3,)|6|14\n").hexdigest()
    assert W.fingerprint({"x": torch.tensor([1, 2, 3])}) == want
    # a float's bits: 1.0f is 0x3f800000 = 1065353216
    one = hashlib.sha256(f"w|float32|(1,)|{0x3f800000}|{0x3f800000}\n".encode()).hexdigest()
    assert W.fingerprint({"w": torch.tensor([1.0])}) == one


def test_fingerprint_sees_a_flipped_bit_swapped_or_missing_tensors_and_moved_elements():
    state = {k: v for k, v in build_model(seed=0).state_dict().items()}
    base = W.fingerprint(state)
    assert W.fingerprint(dict(reversed(list(state.items())))) == base  # order of the dict does not matter
    name = "model.layers.0.mlp.up_proj.weight"
    assert W.fingerprint({**state, name: _flip_low_bit(state[name], 7)}) != base
    a, b = "model.layers.0.self_attn.q_proj.weight", "model.layers.0.self_attn.o_proj.weight"
    assert state[a].shape == state[b].shape
    assert W.fingerprint({**state, a: state[b], b: state[a]}) != base  # swapped pair of tensors
    assert W.fingerprint({k: v for k, v in state.items() if k != name}) != base  # missing tensor
    moved = state[name].clone().view(-1)
    moved[[0, 1]] = moved[[1, 0]]  # same values, two positions swapped: only the weighted sum sees it
    assert W.fingerprint({**state, name: moved.view_as(state[name])}) != base
    assert W.fingerprint({"z": torch.tensor([0.0])}) != W.fingerprint({"z": torch.tensor([-0.0])})  # bits, not values


def test_fingerprint_does_not_depend_on_chunking(monkeypatch):
    state = build_model(seed=1).state_dict()
    base = W.fingerprint(state)
    monkeypatch.setattr(W, "FINGERPRINT_CHUNK", 37)  # chunk edges everywhere, int64 sums wrap the same
    assert W.fingerprint(state) == base


def test_fingerprint_in_the_engines_dtype():
    """A bf16 trainer state loaded into an fp32 engine: equal when the trainer fingerprints in the
    engine's dtype; an fp32 state loaded into a bf16 engine: equal after the same rounding."""
    fp32 = build_model(seed=2).state_dict()
    bf16 = {k: v.to(torch.bfloat16) for k, v in fp32.items()}
    engine = build_model(seed=3)  # fp32, other weights
    W.load_into(engine, bf16.items())
    assert W.fingerprint(engine.state_dict()) == W.fingerprint(bf16, dtype=torch.float32)
    assert W.fingerprint(engine.state_dict()) != W.fingerprint(bf16)  # 16-bit patterns are not the engine's
    engine16 = build_model(seed=3).to(torch.bfloat16)
    W.load_into(engine16, fp32.items())
    assert W.fingerprint(engine16.state_dict()) == W.fingerprint(fp32, dtype=torch.bfloat16)
    assert W.fingerprint(engine16.state_dict()) != W.fingerprint(fp32, dtype=torch.float32)


def test_fingerprint_fed_bucket_by_bucket_equals_the_whole():
    state = build_model(seed=4).state_dict()
    fp = W.Fingerprint()
    for bucket in W.buckets(state.items(), bucket_bytes=4096):
        fp.add(bucket)
    assert fp.hexdigest() == W.fingerprint(state)


def test_cuda_payload_device_is_mapped_by_uuid():
    """Senders name the GPU by UUID (as SGLang's patched reductions do); an index passes through,
    a GPU the engine cannot see is an error that says so."""
    import pickle

    assert W.local_cuda_index(3) == 3
    with pytest.raises(ValueError, match="does not see"):
        W.local_cuda_index("GPU-00000000-0000-0000-0000-000000000000")
    unpickler = W._WeightsUnpickler(__import__("io").BytesIO(pickle.dumps(None)))
    assert unpickler.find_class("torch.multiprocessing.reductions", "rebuild_cuda_tensor") \
        is W._rebuild_cuda_tensor_by_uuid


def test_fingerprint_grid_sums_equal_the_direct_definition(monkeypatch):
    """The [rows, ROW] grid reduction == sum b_i and sum b_i * (i+1) written out, tail included."""
    x = torch.randn(5000)
    b = x.view(torch.int32).to(torch.int64)
    pos = torch.arange(1, 5001, dtype=torch.int64)
    want = [int(b.sum()), int((b * pos).sum())]
    for row in (1024, 7, 5000, 6000):  # a tail, many rows, one row, no full row
        monkeypatch.setattr(W, "FINGERPRINT_ROW", row)
        assert W._tensor_sums(x, None).tolist() == want


def test_flattened_bucket_round_trip_with_mixed_dtypes():
    tensors = [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.tensor([1.5, -2.0], dtype=torch.bfloat16),
               torch.tensor([[7]], dtype=torch.int64)]
    flat = W.flatten_bucket(tensors)
    assert flat.dtype == torch.uint8 and flat.numel() == 24 + 4 + 8 == sum(W.tensor_bytes(
        [t.dtype for t in tensors], [list(t.shape) for t in tensors]))
    back = W.unflatten_bucket(flat, [t.dtype for t in tensors], [list(t.shape) for t in tensors])
    for a, b in zip(tensors, back):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    with pytest.raises(ValueError, match="does not match its 1 tensors"):
        W.unflatten_bucket(flat, [torch.float32], [[2, 3]])


# ---- the flattened IPC bucket: SGLang's load_format="flattened_bucket" for /update_weights_from_tensor

def test_flatten_named_aligns_every_tensor_and_records_sglangs_metadata():
    named = [("a", torch.tensor([1.0, 2.0, 3.0], dtype=torch.bfloat16)),  # 6 bytes
             ("b", torch.tensor([4.0, 5.0])),                                # 8 bytes: starts at 16, not 6
             ("c", torch.tensor(9, dtype=torch.int64)),                      # 0-dim, 8 bytes at 32
             ("d", torch.zeros(0))]                                          # empty, at 48
    flat, meta = W.flatten_named(named)
    assert flat.dtype == torch.uint8 and flat.numel() == 48
    assert [(m.name, m.start_idx, m.end_idx, m.numel) for m in meta] == [
        ("a", 0, 6, 6), ("b", 16, 24, 8), ("c", 32, 40, 8), ("d", 48, 48, 0)]
    assert [(m.dtype, tuple(m.shape)) for m in meta] == [(torch.bfloat16, (3,)), (torch.float32, (2,)),
                                                          (torch.int64, ()), (torch.float32, (0,))]
    # what SGLang 0.5.16's FlattenedTensorBucket.reconstruct_tensors does with them
    for m, (_, t) in zip(meta, named):
        assert torch.equal(flat[m.start_idx:m.end_idx].view(m.dtype).reshape(m.shape), t)


def test_flattened_ipc_payload_round_trip_keeps_the_callers_storage_private():
    named = [("w", torch.arange(6.0).reshape(2, 3)), ("h", torch.tensor([1.5, -2.0, 3.0], dtype=torch.bfloat16)),
             ("i", torch.tensor([[7, 8]], dtype=torch.int32)), ("m", torch.tensor([True, False]))]
    payload, keepalive = W.serialize_ipc_flattened(named)
    assert not any(t.is_shared() for _, t in named) and len(keepalive) == 1 and keepalive[0].is_shared()
    back = W.deserialize_named_tensors(payload, W.FLATTENED_BUCKET)
    assert [n for n, _ in back] == ["w", "h", "i", "m"]
    for (_, a), (_, b) in zip(named, back):
        assert a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)


def test_flattened_payload_is_one_shared_storage_not_one_per_tensor():
    import base64
    import pickletools

    named = [(f"t{i}", torch.full((5,), float(i))) for i in range(20)]
    count = lambda payload: sum(1 for op, arg, _ in pickletools.genops(base64.b64decode(payload))  # noqa: E731
                                if op.name.endswith("BYTES") and arg.startswith(b"/torch_"))  # a shm file's name
    assert count(W.serialize_ipc_flattened(named)[0]) == 1  # one shm file for the bucket
    assert count(W.serialize_ipc(named)[0]) == 20  # the per-tensor form: one per tensor


def test_flattened_metadata_that_does_not_fit_the_buffer_is_refused():
    from types import SimpleNamespace

    flat = torch.zeros(8, dtype=torch.uint8)
    bad = SimpleNamespace(name="w", shape=torch.Size([4]), dtype=torch.float32, start_idx=0, end_idx=16, numel=16)
    with pytest.raises(ValueError, match="'w'.*claims bytes \\[0, 16\\) of a 8-byte buffer"):
        W.unflatten_named(flat, [bad])


def test_flattened_payload_unpickler_admits_simplenamespace_only():
    import base64
    import pickle

    evil = base64.b64encode(b"ctypes\nFunctionType\n.").decode()  # a pickle naming types.FunctionType
    with pytest.raises(pickle.UnpicklingError, match="types.FunctionType, which is not allowed"):
        W.deserialize_named_tensors(evil, W.FLATTENED_BUCKET)
    with pytest.raises(ValueError, match="is a dict with flattened_tensor and metadata"):
        W.deserialize_named_tensors(W.serialize_ipc([("w", torch.ones(1))])[0], W.FLATTENED_BUCKET)


def test_flattening_a_bucket_costs_a_few_torch_ops_per_tensor():
    """A push's staging on the GPU is bound by torch's per-op cost, not bandwidth (2026-11-28, the 0.6B shape: ~36 ops
    a tensor, stage 100-128 ms of a 130-150 ms push; docs/benchmarks.md). flatten_named makes a bucket with one
    concatenation: 5 dispatched ops a tensor (detach, reshape, view, the pad's slice and its share of the cat) plus a
    constant, counted here (the copy per tensor it replaced: 6)."""
    from torch.utils._python_dispatch import TorchDispatchMode

    class Count(TorchDispatchMode):
        n = 0

        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            Count.n += 1
            return func(*args, **(kwargs or {}))

    named = [(f"w{i}", torch.randn(3 + i % 5, 7).to(torch.bfloat16)) for i in range(300)]  # odd sizes: pads too
    with Count():
        flat, meta = W.flatten_named(named)
    assert Count.n <= 5 * len(named) + 4, Count.n
    assert [W.unflatten_named(flat, meta)[i][1].tolist() for i in (0, 299)] == [named[0][1].tolist(), named[299][1].tolist()]
