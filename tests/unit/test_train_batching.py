"""rlrun.train.batching and rlrun.train.step_metrics: shared by the torch and megatron backends."""
import pytest
import torch

from rlrun.algo import compute_loss
from rlrun.train.batching import group_samples, loss_normalizer, to_device
from rlrun.train.step_metrics import StepSums, policy_metrics
from test_algo_losses import params


def test_group_samples_first_fit_by_length():
    # longest first: 7 -> row0, 5 -> row1 (7+5 > 10), 3 -> row0 (fills it), 2 -> row1, 2 -> row1 (5+2+2=9)
    assert group_samples([3, 7, 2, 5, 2], max_tokens=10, micro_batch_size=1) == [[0, 1], [2, 3, 4]]
    assert group_samples([3, 7, 2], max_tokens=None, micro_batch_size=2) == [[0, 1], [2]]
    # a sample above the budget trains alone (slime's dp_schedule); the others still pack first-fit
    assert group_samples([3, 7, 2, 9], max_tokens=6, micro_batch_size=1) == [[3], [1], [0, 2]]


def test_loss_normalizer_counts_tokens_or_samples():
    masks = [torch.tensor([1.0, 1.0, 0.0]), torch.tensor([1.0, 0.0])]
    assert loss_normalizer(masks, per_token=True, device="cpu") == 3.0
    assert loss_normalizer(masks, per_token=False, device="cpu") == 2.0


def test_to_device_on_cpu_keeps_values_and_casts():
    t = torch.tensor([1, 2, 3])
    out = to_device(t, "cpu", torch.float32)
    assert out.dtype == torch.float32 and out.tolist() == [1.0, 2.0, 3.0]


def test_step_sums_add_up_micro_batches_like_one_batch():
    # Two micro-batches (sample-mean loss over 2 samples in all): the summed metrics equal the
    # metrics of both samples in one micro-batch, and token means are over all 5 loss tokens.
    p = params()
    logp = [torch.tensor([-1.0, -2.0]), torch.tensor([-0.5, -0.5, -3.0])]
    old = [torch.tensor([-1.2, -2.0]), torch.tensor([-0.5, -0.7, -3.0])]
    adv = [torch.tensor([1.0, 1.0]), torch.tensor([-1.0, -1.0, -1.0])]
    ent = [torch.tensor([2.0, 1.0]), torch.tensor([0.5, 0.5, 0.5])]
    rollout = [torch.tensor([-1.0, -2.5]), torch.tensor([-0.5, -0.5, -2.0])]
    sums = StepSums("cpu")
    for i in range(2):
        mask = torch.ones_like(logp[i])
        cu = torch.tensor([0, len(logp[i])])
        _, m = compute_loss(logp[i], old[i], None, rollout[i], adv[i], mask, ent[i], p, cu_seqlens=cu, normalizer=2.0)
        assert all(torch.is_tensor(v) and v.dim() == 0 for v in m.values())
        sums.add_policy(m, logp[i], ent[i], mask, rollout[i], None, response_tokens=len(logp[i]))
    cat = lambda xs: torch.cat(xs)  # noqa: E731
    _, whole = compute_loss(cat(logp), cat(old), None, cat(rollout), cat(adv), torch.ones(5), cat(ent), p,
                            cu_seqlens=torch.tensor([0, 2, 5]), normalizer=2.0)
    out = policy_metrics(sums.reduce(), grad_norm=0.5, lr=1e-6)
    for k, v in whole.items():
        assert out["train/" + k] == pytest.approx(float(v), abs=1e-6)
    assert out["train/entropy"] == pytest.approx((2.0 + 1.0 + 0.5 * 3) / 5)
    assert out["train/train_rollout_logp_abs_diff"] == pytest.approx((0.0 + 0.5 + 0 + 0 + 1.0) / 5)
    assert out["train/response_tokens"] == 5.0 and out["train/grad_norm"] == 0.5 and out["train/lr"] == 1e-6
    assert "train/kl" not in out


def test_empty_step_sums_reduce_to_nothing():
    assert StepSums("cpu").reduce() == {}
