"""train.offload on the torch backend (in-process, one rank) and the shared process-group join.

The move copies even on the CPU (rlrun/train/offload.py), so the round trip is checked tensor by
tensor here: every parameter, buffer and optimizer-state tensor comes back bit-identical, and a
run that offloads between its steps trains exactly like one that never does.
"""
from __future__ import annotations

import os

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from train_fixtures import toy_batch, torch_backend
from rlrun.rollout.process import free_port
from rlrun.train import offload as off
from rlrun.train.base import TrainBatch
from rlrun.train.dist import join_process_group
from rlrun.train.torch_backend import TorchBackend

# PPO (critic + its AdamW) with a KL loss (reference model): every kind of state the backend moves.
_PPO_KL = ("algo=ppo", "algo.use_kl_loss=true", "algo.kl_loss_coef=0.01", "optim.lr=1e-3")


def _backend() -> TorchBackend:
    return torch_backend(*_PPO_KL)


def _batch(b: TorchBackend) -> TrainBatch:
    batch = toy_batch(returns=(1.0, 0.0, 1.0, 0.0))
    return batch.with_(ref_logp=b.compute_log_probs(batch, "ref"), values=b.compute_values(batch))


def _tensors(b: TorchBackend) -> dict[str, torch.Tensor]:
    """Every tensor offload moves, by a stable name."""
    out = {}
    for tag, m in (("model", b.model), ("ref", b.ref), ("critic", b.critic)):
        out.update({f"{tag}.{k}": v for k, v in m.state_dict(keep_vars=True).items()})
    for tag, o in (("opt", b.opt), ("critic_opt", b.critic_opt)):
        params = [p for g in o.param_groups for p in g["params"]]
        for i, p in enumerate(params):
            out.update({f"{tag}.{i}.{k}": v for k, v in o.state[p].items() if v.dim() > 0})
    return out


def test_offload_onload_round_trips_every_tensor_exactly():
    b = _backend()
    b.train_step(_batch(b))  # creates the Adam moments of actor and critic
    before = {k: v.detach().clone() for k, v in _tensors(b).items()}
    ptrs = {k: v.data_ptr() for k, v in _tensors(b).items()}
    assert sum(k.startswith("opt.") for k in before) == 2 * len(list(b.model.parameters()))  # exp_avg, exp_avg_sq
    b.offload()
    moved = _tensors(b)
    assert b.offloaded and set(moved) == set(before)
    for k, v in moved.items():  # fresh host copies (the device is the host here), same bits
        assert v.data_ptr() != ptrs[k] and v.device == off.HOST and torch.equal(v, before[k]), k
    b.offload()  # idempotent: nothing moves twice
    assert all(v.data_ptr() == moved[k].data_ptr() for k, v in _tensors(b).items())
    b.onload()
    assert not b.offloaded
    for k, v in _tensors(b).items():
        assert torch.equal(v, before[k]), k
    # the tied LM head (the cpu job's model ties it) is still the embedding: one parameter, moved once
    assert b.model.config.tie_word_embeddings
    assert b.model.lm_head.weight is b.model.model.embed_tokens.weight


def test_training_with_offload_between_steps_is_bit_identical():
    plain, swapped = _backend(), _backend()
    batch = _batch(plain)
    for step in range(3):
        m1 = plain.train_step(batch)
        m2 = swapped.train_step(batch)  # onloads by itself after the offload below
        assert m1 == m2, step
        swapped.offload()
        # log-probs onload too (the loop's old/ref log-probs come before the train step)
        for x, y in zip(swapped.compute_log_probs(batch), plain.compute_log_probs(batch)):
            assert torch.equal(x, y), step
        assert not swapped.offloaded
        swapped.offload()
    swapped.onload()
    for k, v in _tensors(plain).items():
        assert torch.equal(v, _tensors(swapped)[k]), k


def test_move_module_carries_grads_and_keeps_parameter_identity():
    m = torch.nn.Linear(3, 2)
    m(torch.ones(1, 3)).sum().backward()
    weight, grad = m.weight, m.weight.grad.clone()
    off.move_module(m, off.HOST)
    assert m.weight is weight and torch.equal(m.weight.grad, grad)


def _join(rank: int, port: int, out) -> None:
    # torchrun's environment: with it a tcp:// init_method makes every rank a store client
    os.environ["TORCHELASTIC_USE_AGENT_STORE"] = "True"
    join_process_group("127.0.0.1", port, rank, 2, torch.device("cpu"))
    t = torch.tensor([rank + 1.0])
    dist.all_reduce(t)
    out.put((rank, float(t)))
    dist.destroy_process_group()


def test_two_ranks_join_under_torchrun_environment():
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    port = free_port("127.0.0.1")
    procs = [ctx.Process(target=_join, args=(r, port, out)) for r in range(2)]
    for p in procs:
        p.start()
    try:
        got = sorted(out.get(timeout=60) for _ in procs)
    finally:
        for p in procs:
            p.join(timeout=30)
            if p.is_alive():
                p.kill()
    assert got == [(0, 3.0), (1, 3.0)]
