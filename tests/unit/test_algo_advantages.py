"""Advantage estimators against hand-computed values (numbers worked out in the comments)."""

import math

import pytest
import torch

from rlrun.algo import compute_advantages, discounted_cumsum, gae, group_normalize, value_loss


def test_grpo_group_mean_and_unbiased_std():
    # group 1: mean .5, deviations +-.5, unbiased std sqrt(4*.25/3) = 0.57735; group 2: all equal -> 0.
    r = torch.tensor([1.0, 0.0, 0.0, 1.0, 1.0, 1.0, 1.0, 1.0])
    a = 0.5 / (math.sqrt(1 / 3) + 1e-6)
    assert torch.allclose(group_normalize(r, 4, True), torch.tensor([a, -a, -a, a, 0, 0, 0, 0]), atol=1e-6)


def test_dr_grpo_skips_std():
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    assert torch.allclose(group_normalize(r, 4, False), torch.tensor([0.5, -0.5, -0.5, 0.5]))


def test_single_sample_groups_turn_std_off():
    assert torch.equal(group_normalize(torch.tensor([3.0, 1.0]), 1, True), torch.zeros(2))


def test_group_size_mismatch_is_clear():
    with pytest.raises(ValueError, match="n_samples_per_prompt=4"):
        group_normalize(torch.ones(6), 4, True)


@pytest.mark.parametrize("estimator", ["grpo", "gspo", "cispo"])
def test_grpo_broadcasts_to_response_tokens_only(estimator):
    mask = torch.tensor([[1, 1, 0], [1, 1, 1]])
    adv, ret = compute_advantages(estimator, torch.tensor([1.0, 0.0]), 2, loss_mask=mask)
    a = 0.5 / (math.sqrt(0.5) + 1e-6)  # deviations +-.5, unbiased std of two = sqrt(.5)
    assert torch.allclose(adv, torch.tensor([[a, a, 0], [-a, -a, -a]]), atol=1e-6)
    assert torch.equal(adv, ret)


def test_reinforce_plus_plus_kl_shaped_discounted_returns():
    # d = logp - ref = [.2, -.4, .6]; k1 kl; token rewards -0.1*d = [-.02, .04, -.06], +1 at the last
    # trained token -> [-.02, .04, .94]; gamma .5: G2 = .94, G1 = .04 + .47 = .51, G0 = -.02 + .255 = .235.
    logp = torch.tensor([[0.2, -0.4, 0.6, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, ret = compute_advantages(
        "reinforce_plus_plus", torch.tensor([1.0]), 1, loss_mask=mask, logp=logp, ref_logp=torch.zeros(1, 4),
        kl_coef=0.1, kl_type="k1", gamma=0.5,
    )
    assert torch.allclose(adv, torch.tensor([[0.235, 0.51, 0.94, 0.0]]), atol=1e-6)
    assert torch.equal(adv, ret)


def test_reinforce_plus_plus_reward_sits_on_last_trained_token():
    # a hole in the loss mask at the end (e.g. a tool answer): reward at index 1, return flows back.
    mask = torch.tensor([[1, 1, 0]])
    resp = torch.tensor([[1, 1, 1]])
    adv, _ = compute_advantages("reinforce_plus_plus", torch.tensor([2.0]), 1, loss_mask=mask, response_mask=resp)
    assert torch.allclose(adv, torch.tensor([[2.0, 2.0, 0.0]]))


def test_reinforce_plus_plus_baseline_mean_only_minus_kl():
    # rewards [1, 0] -> [.5, -.5] (no std division); k1 kl d = .2 / .4, kl_coef .1.
    logp = torch.tensor([[0.2, 0.2], [0.4, 0.4]])
    adv, _ = compute_advantages(
        "reinforce_plus_plus_baseline", torch.tensor([1.0, 0.0]), 2, loss_mask=torch.ones(2, 2),
        logp=logp, ref_logp=torch.zeros(2, 2), kl_coef=0.1, kl_type="k1",
    )
    assert torch.allclose(adv, torch.tensor([[0.48, 0.48], [-0.54, -0.54]]), atol=1e-6)


def test_ppo_gae_hand_computed():
    # V = [.5, .6, .7], reward 1 at the end, gamma 1, lambda .5:
    # delta = [.6-.5, .7-.6, 1-.7] = [.1, .1, .3]; A2 = .3, A1 = .1 + .15 = .25, A0 = .1 + .125 = .225
    values = torch.tensor([[0.5, 0.6, 0.7, 9.0]])  # 9.0 sits on a pad and must be ignored
    mask = torch.tensor([[1, 1, 1, 0]])
    adv, ret = compute_advantages("ppo", torch.tensor([1.0]), 1, loss_mask=mask, values=values, gamma=1.0, lambd=0.5)
    assert torch.allclose(adv, torch.tensor([[0.225, 0.25, 0.3, 0.0]]), atol=1e-6)
    assert torch.allclose(ret, torch.tensor([[0.725, 0.85, 1.0, 0.0]]), atol=1e-6)


def test_gae_with_gamma_below_one():
    # V = [1, 2], r = [0, 3], gamma .9, lambda 1: delta1 = 3 - 2 = 1; delta0 = .9*2 - 1 = .8; A0 = .8 + .9 = 1.7
    adv, ret = gae(torch.tensor([[0.0, 3.0]]), torch.tensor([[1.0, 2.0]]), torch.ones(1, 2), 0.9, 1.0)
    assert torch.allclose(adv, torch.tensor([[1.7, 1.0]]))
    assert torch.allclose(ret, torch.tensor([[2.7, 3.0]]))


def test_ppo_needs_values():
    with pytest.raises(ValueError, match="needs critic"):
        compute_advantages("ppo", torch.ones(1), 1, loss_mask=torch.ones(1, 2))


def test_kl_coef_needs_ref():
    with pytest.raises(ValueError, match="reference model"):
        compute_advantages("reinforce_plus_plus", torch.ones(1), 1, loss_mask=torch.ones(1, 2), kl_coef=0.1)


def test_unknown_estimator_lists_choices():
    with pytest.raises(ValueError, match="grpo, gspo"):
        compute_advantages("grpoo", torch.ones(1), 1, loss_mask=torch.ones(1, 2))


def test_discounted_cumsum_matches_loop():
    x = torch.randn(3, 37)
    ref = torch.zeros_like(x)
    running = torch.zeros(3)
    for t in reversed(range(37)):
        running = x[:, t] + 0.93 * running
        ref[:, t] = running
    assert torch.allclose(discounted_cumsum(x, 0.93), ref, atol=1e-5)


def test_normalize_advantages_whitens_over_trained_tokens():
    # grpo with normalize_advantages: the 4 trained tokens hold a, a, -a, -a -> mean 0, unbiased var
    # 4a^2/3 -> whitened +-sqrt(3)/2 (for any a).
    mask = torch.tensor([[1, 1, 0], [1, 1, 0]])
    adv, _ = compute_advantages("grpo", torch.tensor([1.0, 0.0]), 2, loss_mask=mask, normalize_advantages=True)
    s = math.sqrt(3) / 2
    assert torch.allclose(adv, torch.tensor([[s, s, 0], [-s, -s, 0]]), atol=1e-5)


def test_value_loss_clipped():
    # v = 2, v_old = 1, clip .5 -> clipped 1.5; R = 3: max((1.5-3)^2, (2-3)^2) = 2.25, clipfrac 1
    loss, frac = value_loss(torch.tensor([2.0, 1.1]), torch.tensor([1.0, 1.0]), torch.tensor([3.0, 1.0]), 0.5)
    assert torch.allclose(loss, torch.tensor([2.25, 0.01]), atol=1e-6)
    assert torch.equal(frac, torch.tensor([1.0, 0.0]))
