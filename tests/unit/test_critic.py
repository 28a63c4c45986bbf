"""The PPO critic of the torch backend on one rank, in-process (no Ray): where values are read,
the GAE wire-up of the loop step, the clipped value loss of a train_step, save/load."""
from __future__ import annotations

import pytest
import torch

from train_fixtures import toy_batch, torch_backend
from rlrun.config import load
from rlrun.loops import steps
from rlrun.train.base import TrainBatch
from rlrun.train.torch_backend import TorchBackend


def _backend(*overrides: str) -> TorchBackend:
    return torch_backend("algo=ppo", *overrides, total_steps=50)


def _batch() -> TrainBatch:
    return toy_batch(lens=(9, 12, 7), starts=(5, 6, 4), advantages=(0.0, 0.0, 0.0))


def test_values_are_the_head_output_at_the_positions_that_predict_each_response_token():
    b, batch = _backend(), _batch()
    got = b.compute_values(batch)  # packed: all three samples in one row
    head = b.critic.value_head
    for tokens, start, v in zip(batch.tokens, batch.response_start, got):
        with torch.no_grad():
            hidden = b.critic.backbone(input_ids=tokens[None]).last_hidden_state[0]
            want = (hidden[start - 1:-1] @ head.weight.T + head.bias)[:, 0]
        assert v.shape == (len(tokens) - start,)
        torch.testing.assert_close(v, want, atol=1e-5, rtol=0)


def test_the_critic_starts_from_the_policy_transformer_and_a_small_head():
    b = _backend()
    for name, p in b.critic.backbone.named_parameters():  # same seed, same init as the actor
        assert torch.equal(p, b.model.get_parameter(f"model.{name}")), name
    head = b.critic.value_head
    assert abs(float(head.weight.detach().std()) - 0.02) < 0.01 and float(head.bias.detach()) == 0.0


def test_gae_advantages_and_returns_from_the_critic_values():
    # gamma 0.9, lambda 0.5 (gamma*lambda = 0.45); reward on the last response token.
    # sample 0: V = [0.5, 0.2, 0.4], r = 1: delta = [0.9*0.2-0.5, 0.9*0.4-0.2, 1-0.4] = [-0.32, 0.16, 0.6]
    #   A2 = 0.6, A1 = 0.16 + 0.45*0.6 = 0.43, A0 = -0.32 + 0.45*0.43 = -0.1265; R = A + V = [0.3735, 0.63, 1.0]
    # sample 1: V = [0.1, 0.3], r = 0: delta = [0.9*0.3-0.1, -0.3] = [0.17, -0.3]
    #   A1 = -0.3, A0 = 0.17 + 0.45*(-0.3) = 0.035; R = [0.135, 0.0]
    cfg = load(["algo=ppo", "algo.gamma=0.9", "algo.lambd=0.5", "algo.normalize_advantages=false"])
    batch = TrainBatch([torch.arange(5), torch.arange(4)], [2, 2], [torch.ones(3), torch.ones(2)],
                       values=[torch.tensor([0.5, 0.2, 0.4]), torch.tensor([0.1, 0.3])])
    out = steps.add_advantages(cfg, batch, [1.0, 0.0], n=2)
    torch.testing.assert_close(out.advantages[0], torch.tensor([-0.1265, 0.43, 0.6]))
    torch.testing.assert_close(out.advantages[1], torch.tensor([0.035, -0.3]))
    torch.testing.assert_close(out.returns[0], torch.tensor([0.3735, 0.63, 1.0]))
    torch.testing.assert_close(out.returns[1], torch.tensor([0.135, 0.0]))
    # ppo's default whitens the advantages (mean 0, unbiased std 1 over the 5 tokens); returns stay
    white = steps.add_advantages(load(["algo=ppo", "algo.gamma=0.9", "algo.lambd=0.5"]), batch, [1.0, 0.0], n=2)
    flat = torch.cat(white.advantages)
    assert abs(float(flat.mean())) < 1e-6 and float(flat.std()) == pytest.approx(1.0, abs=1e-4)
    torch.testing.assert_close(white.returns[0], out.returns[0])
    # critic-free estimators carry no returns to the trainer
    assert steps.add_advantages(load([]), batch.with_(values=None), [1.0, 0.0], n=2).returns is None


def test_value_loss_is_the_clipped_squared_error_per_sample_mean():
    b, batch = _backend(), _batch()
    v = b.compute_values(batch)
    # unclipped: old values = current values, returns = v + d_i per sample (d = 0.5, 1, 2):
    # loss = mean over samples of mean over tokens of d_i^2 = (0.25 + 1 + 4) / 3 = 1.75
    offsets = (0.5, 1.0, 2.0)
    m = b.train_step(batch.with_(values=v, returns=[x + d for x, d in zip(v, offsets)]))
    assert m["critic/value_loss"] == pytest.approx(1.75, rel=1e-5) and m["critic/clipfrac"] == 0.0
    assert m["critic/values_mean"] == pytest.approx(float(torch.cat(v).mean()), rel=1e-5)
    assert m["critic/lr"] == b.cfg.optim.critic_lr == b.cfg.optim.lr
    assert m["critic/grad_norm"] > 0 and "train/pg_loss" in m

    # clipped: old values 1 below the current ones (value_clip 0.2), returns = current values:
    # clip(v, old +- 0.2) = v - 0.8 -> loss max(0.8^2, 0^2) = 0.64 on every token, clipfrac 1
    c, batch = _backend(), _batch()
    v = c.compute_values(batch)
    m = c.train_step(batch.with_(values=[x - 1.0 for x in v], returns=v))
    assert m["critic/value_loss"] == pytest.approx(0.64, rel=1e-5) and m["critic/clipfrac"] == 1.0


def test_the_critic_has_its_own_learning_rate():
    b, batch = _backend("optim.critic_lr=1e-4"), _batch()
    v = b.compute_values(batch)
    m = b.train_step(batch.with_(values=v, returns=v))
    assert (m["critic/lr"], m["train/lr"]) == (1e-4, b.cfg.optim.lr)


def test_the_critic_fits_fixed_returns():
    b, batch = _backend("optim.lr=1e-2"), _batch()
    returns = [torch.full((int(m.numel()),), r) for m, r in zip(batch.loss_mask, (1.0, 0.0, 0.5))]
    losses = []
    for _ in range(15):
        v = b.compute_values(batch)
        losses.append(b.train_step(batch.with_(values=v, returns=returns))["critic/value_loss"])
    assert losses[-1] < 0.2 * losses[0], losses


def test_save_then_load_restores_the_critic_and_its_optimizer(tmp_path):
    batch = _batch()
    a = _backend()
    v = a.compute_values(batch)
    a.train_step(batch.with_(values=v, returns=[x + 1 for x in v]))
    a.save(str(tmp_path / "ck"))
    assert (tmp_path / "ck" / "critic.safetensors").is_file()
    b = _backend()
    b.load(str(tmp_path / "ck"))
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters()):
        assert torch.equal(pa, pb)
    v = a.compute_values(batch)
    step = batch.with_(values=v, returns=[x + 1 for x in v])
    assert a.train_step(step) == b.train_step(step)  # restored Adam moments: the same second step
    for pa, pb in zip(a.critic.parameters(), b.critic.parameters()):
        assert torch.equal(pa, pb)


def test_a_checkpoint_without_critic_is_refused_by_ppo(tmp_path):
    g = TorchBackend(load([]), rank=0, world_size=1, gpu_id=None, total_steps=5)
    g.init()
    g.save(str(tmp_path / "grpo"))
    with pytest.raises(RuntimeError, match="no critic in this checkpoint"):
        _backend().load(str(tmp_path / "grpo"))
