"""Policy losses, KL estimators, TIS, aggregation and compute_loss against hand-computed values."""

import math

import pytest
import torch

from rlrun.algo import (
    AlgoParams,
    aggregate,
    cispo_loss,
    compute_loss,
    entropy_from_logits,
    kl,
    gspo_policy_loss,
    ppo_clip_loss,
    tis_weights,
)

EPS, EPS_HIGH = 0.2, 0.28


def test_ppo_clip_positive_advantage_uses_clip_higher():
    # r = [.5, 1, 1.5], A = 1: -r = [-.5, -1, -1.5], -clip = [-.8, -1, -1.28] -> max = [-.5, -1, -1.28]
    loss, frac = ppo_clip_loss(torch.tensor([0.5, 1.0, 1.5]), torch.ones(3), EPS, EPS_HIGH)
    assert torch.allclose(loss, torch.tensor([-0.5, -1.0, -1.28]))
    assert torch.equal(frac, torch.tensor([0.0, 0.0, 1.0]))


def test_ppo_clip_negative_advantage():
    # A = -1: r = [.5, 1, 1.5] -> [.5, 1, 1.5] vs clipped [.8, 1, 1.28] -> max = [.8, 1, 1.5]
    loss, frac = ppo_clip_loss(torch.tensor([0.5, 1.0, 1.5]), -torch.ones(3), EPS, EPS_HIGH)
    assert torch.allclose(loss, torch.tensor([0.8, 1.0, 1.5]))
    assert torch.equal(frac, torch.tensor([1.0, 0.0, 0.0]))


def test_dual_clip_caps_negative_advantage_loss():
    # r = 4, A = -1: max(4, 1.28) = 4, dual clip c = 3 -> min(3, 4) = 3; A = +1 is untouched (-1.28).
    loss, _ = ppo_clip_loss(torch.tensor([4.0, 4.0]), torch.tensor([-1.0, 1.0]), EPS, EPS_HIGH, dual_clip_c=3.0)
    assert torch.allclose(loss, torch.tensor([3.0, -1.28]))
    with pytest.raises(ValueError, match="dual_clip_c=1.0 must be > 1"):
        ppo_clip_loss(torch.ones(1), torch.ones(1), EPS, EPS_HIGH, dual_clip_c=1.0)


def test_gspo_uses_sequence_mean_ratio():
    # seq 0: log-ratios .1, .3 (mean .2, r = e^.2 = 1.2214 -> clipped to 1.2, loss -1.2 on both tokens);
    # seq 1: log-ratio 0 on the trained token, pad ignored in the mean -> r = 1, loss -1.
    logp = torch.tensor([[0.1, 0.3], [0.0, 5.0]], requires_grad=True)
    mask = torch.tensor([[1, 1], [1, 0]])
    loss, frac, ppo_kl = gspo_policy_loss(logp, torch.zeros(2, 2), torch.ones(2, 2), mask, 0.2, 0.2)
    assert torch.allclose(loss, torch.tensor([[-1.2, -1.2], [-1.0, -1.0]]))
    assert torch.allclose(ppo_kl[0], torch.tensor([-0.2, -0.2]))
    assert frac[0].tolist() == [1.0, 1.0] and frac[1, 0] == 0.0


def test_cispo_keeps_gradient_of_clipped_tokens():
    # logp = -1, old = -1.5 -> r = e^.5 = 1.6487 clipped to 1.28; loss = -1.28 * A * logp = 1.28;
    # d loss / d logp = -1.28 * A (the stop-gradient ratio), unlike PPO where a clipped token has 0.
    logp = torch.tensor([-1.0], requires_grad=True)
    loss, frac = cispo_loss(logp, torch.tensor([-1.5]), torch.ones(1), EPS, EPS_HIGH)
    loss.sum().backward()
    assert torch.allclose(loss, torch.tensor([1.28]))
    assert torch.allclose(logp.grad, torch.tensor([-1.28]))
    assert frac.item() == 1.0


def test_kl_estimators():
    d = torch.tensor([0.5])
    assert kl(d, torch.zeros(1), "k1").item() == pytest.approx(0.5)
    assert kl(d, torch.zeros(1), "k2").item() == pytest.approx(0.125)
    assert kl(d, torch.zeros(1), "k3").item() == pytest.approx(math.exp(-0.5) - 0.5, abs=1e-7)
    # low_var_kl = k3 clamped to [-10, 10]: d = -20 -> e^20 - 21 -> 10
    assert kl(torch.tensor([-20.0]), torch.zeros(1), "low_var_kl").item() == 10.0
    assert kl(torch.tensor([-20.0]), torch.zeros(1), "k3").item() > 1e8
    with pytest.raises(ValueError, match="kl_loss_type='k4'"):
        kl(d, d, "k4")


def test_tis_weights_truncate_both_sides():
    old = torch.log(torch.tensor([3.0, 0.1, 1.2]))
    w, ratio, frac = tis_weights(old, torch.zeros(3), tis_clip=2.0, tis_clip_low=0.5)
    assert torch.allclose(w, torch.tensor([2.0, 0.5, 1.2]))
    assert torch.allclose(ratio, torch.tensor([3.0, 0.1, 1.2]))
    assert frac.tolist() == [1.0, 1.0, 0.0]


def test_aggregate_per_sample_vs_per_token():
    loss = torch.tensor([[1.0, 2.0, 3.0], [4.0, 0.0, 0.0]])
    mask = torch.tensor([[1, 1, 1], [1, 0, 0]])
    assert aggregate(loss, mask, per_token=False).item() == pytest.approx(3.0)  # (2 + 4) / 2
    assert aggregate(loss, mask, per_token=True).item() == pytest.approx(2.5)  # 10 / 4
    assert aggregate(loss, mask, per_token=True, normalizer=8).item() == pytest.approx(1.25)


def test_entropy_of_uniform_and_peaked():
    logits = torch.tensor([[0.0, 0.0, 0.0, 0.0], [100.0, 0.0, 0.0, 0.0]])
    assert torch.allclose(entropy_from_logits(logits), torch.tensor([math.log(4), 0.0]), atol=1e-5)


def params(**kw):
    base = dict(
        advantage_estimator="grpo", eps_clip=0.2, eps_clip_high=0.28, dual_clip_c=None, use_kl_loss=False,
        kl_loss_coef=0.0, kl_loss_type="low_var_kl", kl_coef=0.0, entropy_coef=0.0, use_tis=False, tis_clip=2.0,
        tis_clip_low=0.0, tis_level="token", tis_mode="truncate", use_opsm=False, opsm_delta=1e-4,
        opsm_reference="rollout", tis_reject_scope="pg", use_rs=False, rs_level="token", rs_clip_low=0.0, rs_clip=2.0,
        rs_veto_threshold=None, tis_batch_normalize=False, use_unbiased_kl=False, use_rollout_logprobs=False,
        calculate_per_token_loss=False, normalize_std=True, normalize_advantages=False,
        gamma=1.0, lambd=1.0, value_clip=0.2,
    )
    base.update(kw)
    return AlgoParams(**base)


def test_compute_loss_composes_terms():
    # on-policy (ratio 1): pg = -A per token = [-1, -1 | 2]; per-sample mean -> (-1 + 2) / 2 = .5
    # entropy [1, 3 | 2] -> (2 + 2) / 2 = 2; k1 kl vs ref 0: logp [-1, -1 | -2] -> (-1 + -2) / 2 = -1.5
    # total = .5 - .1 * 2 + .5 * -1.5 = -.45
    logp = torch.tensor([[-1.0, -1.0], [-2.0, 0.0]], requires_grad=True)
    adv = torch.tensor([[1.0, 1.0], [-2.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    ent = torch.tensor([[1.0, 3.0], [2.0, 0.0]])
    p = params(entropy_coef=0.1, use_kl_loss=True, kl_loss_coef=0.5, kl_loss_type="k1")
    loss, m = compute_loss(logp, None, torch.zeros(2, 2), None, adv, mask, ent, p)
    assert loss.item() == pytest.approx(-0.45)
    assert m["pg_loss"] == pytest.approx(0.5) and m["entropy_loss"] == pytest.approx(2.0)
    assert m["kl_loss"] == pytest.approx(-1.5) and m["pg_clipfrac"] == 0.0
    loss.backward()
    assert logp.grad is not None


def test_compute_loss_tis_scales_pg():
    # rollout logp differs: old - rollout = ln 3 -> weight clipped to 2; pg = -1 * 2 = -2
    logp = torch.zeros(1, 1, requires_grad=True)
    loss, m = compute_loss(logp, None, None, -torch.log(torch.tensor([[3.0]])), torch.ones(1, 1),
                           torch.ones(1, 1), None, params(use_tis=True))
    assert loss.item() == pytest.approx(-2.0)
    assert m["tis"] == pytest.approx(3.0) and m["tis_clipfrac"] == 1.0


def test_compute_loss_missing_inputs_name_the_setting():
    with pytest.raises(ValueError, match="use_kl_loss=true needs ref_logp"):
        compute_loss(torch.zeros(1, 1), None, None, None, torch.ones(1, 1), torch.ones(1, 1), None,
                     params(use_kl_loss=True))
    with pytest.raises(ValueError, match="use_tis=true needs rollout_logp"):
        compute_loss(torch.zeros(1, 1), None, None, None, torch.ones(1, 1), torch.ones(1, 1), None,
                     params(use_tis=True))


def test_params_from_config_reads_sections():
    from types import SimpleNamespace

    p = params()
    algo = SimpleNamespace(**{k: getattr(p, k) for k in p.__dataclass_fields__ if k != "calculate_per_token_loss"})
    algo.eps_clip_high = None
    cfg = SimpleNamespace(algo=algo, train=SimpleNamespace(calculate_per_token_loss=True))
    built = AlgoParams.from_config(cfg)
    assert built.eps_clip_high == 0.2 and built.calculate_per_token_loss is True
    del algo.gamma
    with pytest.raises(ValueError, match="config has no algo.gamma"):
        AlgoParams.from_config(cfg)


@pytest.mark.parametrize("estimator,expected", [
    # logp -1 vs old -1.5: r = e^.5 = 1.6487, A = 1
    ("grpo", -1.28),  # PPO clip at 1 + .28
    ("cispo", 1.28),  # -1.28 * A * logp(-1)
    ("gspo", -1.28),  # one token: sequence ratio = token ratio
])
def test_compute_loss_picks_the_policy_loss_from_the_estimator(estimator, expected):
    p = params(advantage_estimator=estimator)
    loss, m = compute_loss(torch.tensor([[-1.0]]), torch.tensor([[-1.5]]), None, None, torch.ones(1, 1),
                           torch.ones(1, 1), None, p)
    assert loss.item() == pytest.approx(expected, abs=1e-6) and m["pg_clipfrac"] == 1.0
    assert m["ppo_kl"] == pytest.approx(-0.5)


def test_compute_loss_per_token_uses_token_mean():
    # A = [1, 1 | 3], on-policy pg = -A; per-token: (-1 - 1 - 3) / 3; per-sample: (-1 + -3) / 2
    adv = torch.tensor([[1.0, 1.0], [3.0, 0.0]])
    mask = torch.tensor([[1, 1], [1, 0]])
    per_tok, _ = compute_loss(torch.zeros(2, 2), None, None, None, adv, mask, None, params(calculate_per_token_loss=True))
    per_seq, _ = compute_loss(torch.zeros(2, 2), None, None, None, adv, mask, None, params())
    assert per_tok.item() == pytest.approx(-5 / 3) and per_seq.item() == pytest.approx(-2.0)
