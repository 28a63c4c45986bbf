"""Routing replay on the megatron backend (megatron-core 0.19.2's RouterReplay, rlrun.train.megatron.routing) on one
GPU, model=tiny-moe, against the torch backend built from the same seed (tests/gpu/test_megatron_backend.py's pair):

- the same (random) experts replayed in both give the same log-probs (bf16 tol 2e-2 rel, as that file's):
  megatron-core's REPLAY_FORWARD and rlrun.rollout.routing's hook compute one function;
- other experts replayed change them (the replay takes effect), and a train step with them runs.
"""
import pytest
import torch

import parity as P

OVERRIDES = ["model=tiny-moe", "hardware=h100", "train.backend=megatron", "train.gradient_accumulation_fusion=false",
             "rollout.routing_replay=true", "rollout.max_response_len=64", "eval.max_response_len=64",
             "train.max_tokens_per_gpu=96", "train.log_probs_max_tokens_per_gpu=96", "optim.lr=1e-3",
             "parallelism.ep=1", "parallelism.tp=1"]


@pytest.fixture(scope="module")
def backends():
    from rlrun.config import load
    from rlrun.train.megatron_backend import MegatronBackend
    from rlrun.train.torch_backend import TorchBackend
    cfg = load(OVERRIDES)
    meg = MegatronBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=10)
    meg.init()
    ref = TorchBackend(cfg, rank=0, world_size=1, gpu_id=0, total_steps=10)
    ref.init()
    yield cfg, meg, ref
    meg.shutdown()


def _batch(vocab, seed=0):
    from rlrun.train.base import TrainBatch
    g = torch.Generator().manual_seed(seed)
    lens = [int(x) for x in torch.randint(12, 40, (5,), generator=g)]
    tokens = [torch.randint(0, vocab, (n,), generator=g) for n in lens]
    return TrainBatch(tokens=tokens, response_start=[4] * 5, loss_mask=[torch.ones(n - 4) for n in lens],
                      advantages=[torch.ones(n - 4) for n in lens], rollout_logp=[torch.zeros(n - 4) for n in lens])


def _random_routing(batch, layers, experts, k, seed):
    """k distinct experts per (position, layer), as an engine returns them: len(tokens) - 1 rows per sample."""
    g = torch.Generator().manual_seed(seed)
    return [torch.rand(int(t.numel()) - 1, layers, experts, generator=g).argsort(-1)[..., :k].to(torch.int32)
            for t in batch.tokens]


def test_megatron_replays_the_experts_it_is_given_as_the_torch_backend_does(backends):
    cfg, meg, ref = backends
    m = cfg.model
    b = _batch(m.vocab_size)
    x = _random_routing(b, m.num_layers, m.moe.num_experts, m.moe.top_k, seed=1)
    y = _random_routing(b, m.num_layers, m.moe.num_experts, m.moe.top_k, seed=2)
    meg_x = torch.cat(meg.compute_log_probs(b.with_(routed_experts=x)))
    ref_x = torch.cat(ref.compute_log_probs(b.with_(routed_experts=x)))
    meg_y = torch.cat(meg.compute_log_probs(b.with_(routed_experts=y)))
    same, other = P.rel_err(meg_x, ref_x), P.rel_err(meg_y, ref_x)
    print(f"R3 megatron vs torch, same replayed experts: logp rel_err={same:.3e}; other experts: {other:.3e}")
    assert same < 2e-2  # bf16 megatron vs bf16-autocast transformers (test_megatron_backend.py's tolerance)
    assert other > 2 * same  # the replay takes effect: other experts, other log-probs
    metrics = meg.train_step(b.with_(routed_experts=x))
    print("R3 megatron train step", {k: round(v, 5) for k, v in metrics.items()})
    assert torch.isfinite(torch.tensor(metrics["train/loss"])) and "train/train_rollout_logp_abs_diff" in metrics
