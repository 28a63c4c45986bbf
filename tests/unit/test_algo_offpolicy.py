"""Rollout correction (levels x modes), OPSM, the rollout-vs-trainer KL, masked tokens, empty masks
and incomplete GRPO groups: hand-computed values (arithmetic in the comments) and properties."""
import math

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlrun.algo import AlgoParams, aggregate, compute_advantages, compute_loss, group_normalize, kl
from rlrun.algo.offpolicy import (
    LEVELS, MODES, SAFETY_LOG_BOUND, Rejection, masked_max, opsm_keep, rollout_correction, rollout_kl, seq_max,
)
from rlrun.algo.packing import padded_to_packed
from rlrun.train.base import TrainBatch
from rlrun.train.batching import loss_normalizer
from rlrun.train.step_metrics import StepSums, policy_metrics, policy_sums
from test_algo_losses import params

FAST = settings(max_examples=60, deadline=None)
LN = math.log


def _two_seqs():
    """seq 0: d = old - rollout = [ln 2, ln 1.5] (both trained); seq 1: d = [ln .8, ln 50] with the
    second token masked (its value must not count)."""
    old = torch.tensor([[LN(2.0), LN(1.5)], [LN(0.8), LN(50.0)]])
    return old, torch.zeros(2, 2), torch.tensor([[1.0, 1.0], [1.0, 0.0]])


@pytest.mark.parametrize("level,mode,weights,rejected", [
    # token: ratios [2, 1.5 | .8, (masked: 1)]; band [.5, 1.8]
    ("token", "truncate", [[1.8, 1.5], [0.8, 1.0]], [[0, 0], [0, 0]]),
    ("token", "mask", [[0.0, 1.5], [0.8, 1.0]], [[1, 0], [0, 0]]),        # icepop: 2 leaves the band
    ("token", "reject", [[0.0, 1.0], [1.0, 1.0]], [[1, 0], [0, 0]]),
    # sequence: seq 0 rho = 2 * 1.5 = 3, seq 1 rho = .8 (the masked ln 50 is left out)
    ("sequence", "truncate", [[1.8, 1.8], [0.8, 0.8]], [[0, 0], [0, 0]]),
    ("sequence", "mask", [[0.0, 0.0], [0.8, 0.8]], [[1, 1], [0, 0]]),
    ("sequence", "reject", [[0.0, 0.0], [1.0, 1.0]], [[1, 1], [0, 0]]),
    # geometric: seq 0 rho = sqrt(3) = 1.7320508, inside the band; seq 1 rho = .8
    ("geometric", "truncate", [[3 ** 0.5] * 2, [0.8, 0.8]], [[0, 0], [0, 0]]),
    ("geometric", "mask", [[3 ** 0.5] * 2, [0.8, 0.8]], [[0, 0], [0, 0]]),
    ("geometric", "reject", [[1.0, 1.0], [1.0, 1.0]], [[0, 0], [0, 0]]),
])
def test_levels_and_modes_hand_values(level, mode, weights, rejected):
    old, rollout, mask = _two_seqs()
    c = rollout_correction(old, rollout, mask, level, mode, 0.5, 1.8)
    torch.testing.assert_close(c.weights, torch.tensor(weights), rtol=1e-6, atol=0)  # fp32 exp/log: ~1 ulp
    assert c.rejected.tolist() == [[float(x) for x in row] for row in rejected]


def test_sequence_ratio_is_safety_bounded():
    # 3 tokens of log-ratio 10: the product e^30 overflows nothing because log rho is capped at 20
    c = rollout_correction(torch.full((1, 3), 10.0), torch.zeros(1, 3), torch.ones(1, 3), "sequence", "truncate", 0, 2)
    assert c.ratio[0, 0].item() == pytest.approx(math.exp(SAFETY_LOG_BOUND), rel=1e-6)
    assert c.weights.tolist() == [[2.0, 2.0, 2.0]] and c.clipped.tolist() == [[1.0, 1.0, 1.0]]


def test_unknown_level_or_mode_names_the_setting():
    x = torch.zeros(1, 1)
    with pytest.raises(ValueError, match="algo.tis_level='seq' is unknown; use one of token, sequence, geometric"):
        rollout_correction(x, x, x, "seq", "truncate", 0, 2)
    with pytest.raises(ValueError, match="algo.tis_mode='clip' is unknown"):
        rollout_correction(x, x, x, "token", "clip", 0, 2)


def test_opsm_masks_negative_advantage_sequences_far_off_policy():
    # mean(behaviour - current) over trained tokens: seq 0 (.5 + .2) / 2 = .35, seq 1 the same,
    # seq 2 (.05 + .05) / 2 = .05; delta .1 -> seq 0 (A < 0) dropped, seq 1 (A > 0) and seq 2 kept.
    # seq 2's second token is masked and holds a huge gap that must not count.
    current = torch.tensor([[-1.5, -1.2], [-1.5, -1.2], [-1.05, -9.0]])
    behaviour = torch.tensor([[-1.0, -1.0], [-1.0, -1.0], [-1.0, 0.0]])
    adv = torch.tensor([[-1.0, -1.0], [1.0, 1.0], [-1.0, -1.0]])
    mask = torch.tensor([[1.0, 1.0], [1.0, 1.0], [1.0, 0.0]])
    keep = opsm_keep(current, behaviour, adv, mask, 0.1)
    assert keep.tolist() == [[0.0, 0.0], [1.0, 1.0], [1.0, 1.0]]


def test_rollout_kl_is_k3_of_the_engines_against_the_trainer():
    # r = old - rollout = .5: e^.5 - 1 - .5 = 0.1487213; r = 0: 0
    got = rollout_kl(torch.tensor([0.5, -1.0]), torch.tensor([0.0, -1.0]))
    torch.testing.assert_close(got, torch.tensor([math.exp(0.5) - 1.5, 0.0]), rtol=1e-6, atol=0)


def test_compute_loss_icepop_metrics_and_zero_gradient_of_rejected_tokens():
    # on-policy logp = old = 0 -> pg = -A = -1 per token; rollout ratios e^0 / e^-ln3 ... = [3, 1.25, .4]
    # band [.5, 2] -> weights [0, 1.25, 0]; per-token loss (one sequence of 3): (0 - 1.25 + 0) / 3
    logp = torch.zeros(1, 3, requires_grad=True)
    rollout = -torch.log(torch.tensor([[3.0, 1.25, 0.4]]))
    p = params(use_tis=True, tis_mode="mask", tis_clip_low=0.5, tis_clip=2.0)
    loss, m = compute_loss(logp, None, None, rollout, torch.ones(1, 3), torch.ones(1, 3), None, p)
    assert loss.item() == pytest.approx(-1.25 / 3)
    assert m["tis_maskfrac"].item() == pytest.approx(2 / 3)
    assert m["tis_weight_mean"].item() == pytest.approx(1.25 / 3)
    assert m["tis_weight_max"].item() == pytest.approx(1.25)
    assert m["tis"].item() == pytest.approx((3 + 1.25 + 0.4) / 3)
    # k3 per token: e^r - 1 - r with r = ln 3, ln 1.25, ln .4
    k3 = [x - 1 - math.log(x) for x in (3.0, 1.25, 0.4)]
    assert m["rollout_kl"].item() == pytest.approx(sum(k3) / 3)
    loss.backward()
    assert logp.grad[0, 0] == 0 and logp.grad[0, 2] == 0 and logp.grad[0, 1] == pytest.approx(-1.25 / 3)


def test_compute_loss_opsm_drops_the_sequence():
    # current logp -1 vs rollout 0: divergence 1 > delta; A = -1 -> the pg term is 0 (and its gradient)
    logp = torch.full((1, 2), -1.0, requires_grad=True)
    p = params(use_opsm=True, opsm_delta=0.5)
    loss, m = compute_loss(logp, None, None, torch.zeros(1, 2), -torch.ones(1, 2), torch.ones(1, 2), None, p)
    assert loss.item() == 0.0 and m["opsm_maskfrac"].item() == 1.0
    loss.backward()
    assert logp.grad.abs().sum().item() == 0.0


def test_rejection_stage_and_veto_hand_values():
    # d = old - rollout: seq 0 [ln 2, ln .5] (geometric mean ratio 1: inside [.8, 1.25]), seq 1 [ln 1.5, ln 1.5]
    # (geometric 1.5: rejected), seq 2 [ln 1, ln 1e-5 masked, ln .9] (the masked catastrophic token cannot veto),
    # seq 3 [ln 1.1, ln 5e-5] (veto 1e-4: the whole sequence goes). Token truncate [0, 2] weights: 2, .5, ...
    old = torch.log(torch.tensor([[2.0, 0.5, 1.0], [1.5, 1.5, 1.0], [1.0, 1e-5, 0.9], [1.1, 5e-5, 1.0]]))
    mask = torch.tensor([[1.0, 1, 0], [1, 1, 0], [1, 0, 1], [1, 1, 0]])
    c = rollout_correction(old, torch.zeros(4, 3), mask, "token", "truncate", 0.0, 2.0,
                           rs=Rejection("geometric", 0.8, 1.25, 1e-4))
    assert c.rejected.tolist() == [[0, 0, 0], [1, 1, 1], [0, 0, 0], [1, 1, 1]]
    assert c.vetoed.tolist() == [[0, 0, 0], [0, 0, 0], [0, 0, 0], [1, 1, 1]]
    torch.testing.assert_close(c.weights * mask, torch.tensor([[2.0, 0.5, 0], [0, 0, 0], [1, 0, 0.9], [0, 0, 0]]))
    torch.testing.assert_close(c.bounded[1], torch.tensor([1.5, 1.5, 1.0]))  # the weight before rejection


def test_batch_normalize_token_and_sequence_levels():
    # token level, truncate [0, 3]: trained weights 2, 1 | 1.5 -> mean 4.5 / 3 = 1.5 -> 4/3, 2/3 | 1;
    # the all-masked row 2 is in no mean
    old = torch.log(torch.tensor([[2.0, 1.0], [1.5, 7.0], [9.0, 9.0]]))
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    c = rollout_correction(old, torch.zeros(3, 2), mask, "token", "truncate", 0.0, 3.0, batch_normalize=True)
    torch.testing.assert_close((c.weights * mask)[:2], torch.tensor([[4 / 3, 2 / 3], [1.0, 0.0]]))
    # sequence level: ratios 2 * 1 = 2 and 1.5 -> one weight per sequence, mean over the 2 sequences with a
    # trained token = 1.75 -> 2 / 1.75, 1.5 / 1.75 (slime's mis.py would divide by 3 sequences)
    c = rollout_correction(old, torch.zeros(3, 2), mask, "sequence", "truncate", 0.0, 3.0, batch_normalize=True)
    torch.testing.assert_close(c.weights[:2, 0], torch.tensor([2 / 1.75, 1.5 / 1.75]))
    # mask mode: the mean is over the weights before rejection (rho 2 is out of [.5, 1.8] but counts)
    c = rollout_correction(old[:1], torch.zeros(1, 2), mask[:1], "token", "mask", 0.5, 1.8, batch_normalize=True)
    torch.testing.assert_close(c.weights, torch.tensor([[0.0, 1 / 1.5]]))


def test_reject_scope_all_takes_rejected_tokens_out_of_every_term():
    # one sequence of 3 trained tokens, on-policy (logp = old = 0, A = 1): pg = -1 per token; ratios vs the
    # engines [3, 1.25, .4], band [.5, 2] -> token 1 kept. entropy [1, 2, 4]; ref -1 -> k1 kl = 1 per token.
    # scope pg: entropy 7/3, kl 1; scope all: the numerators lose tokens 0 and 2 -> entropy 2/3, kl 1/3.
    rollout = -torch.log(torch.tensor([[3.0, 1.25, 0.4]]))
    ent, ref = torch.tensor([[1.0, 2.0, 4.0]]), -torch.ones(1, 3)
    kw = dict(use_tis=True, tis_mode="mask", tis_clip_low=0.5, entropy_coef=0.1, use_kl_loss=True, kl_loss_coef=0.5,
              kl_loss_type="k1")
    _, pg = compute_loss(torch.zeros(1, 3), None, ref, rollout, torch.ones(1, 3), torch.ones(1, 3), ent, params(**kw))
    _, al = compute_loss(torch.zeros(1, 3), None, ref, rollout, torch.ones(1, 3), torch.ones(1, 3), ent,
                         params(**kw, tis_reject_scope="all"))
    assert pg["entropy_loss"].item() == pytest.approx(7 / 3) and al["entropy_loss"].item() == pytest.approx(2 / 3)
    assert pg["kl_loss"].item() == pytest.approx(1.0) and al["kl_loss"].item() == pytest.approx(1 / 3)
    assert pg["pg_loss"].item() == al["pg_loss"].item() == pytest.approx(-1.25 / 3)
    # |old - rollout| = [ln 3, ln 1.25, ln 2.5] over 3 tokens; scope all keeps ln 1.25 only
    assert al["train_rollout_logprob_abs_diff"].item() == pytest.approx(math.log(1.25) / 3)
    assert al["tis_abs"].item() == pytest.approx((2 + 0.25 + 0.6) / 3)  # |ratio - 1|, before rejection


def test_unbiased_kl_weights_each_token_by_the_current_over_old_ratio():
    # k3 at d = logp - ref = .5: e^-.5 - 1 + .5 = .1065307; ratio e^(logp - old) = e^.2
    got = kl(torch.tensor([0.5]), torch.tensor([0.0]), "k3", torch.exp(torch.tensor([0.2])))
    assert got.item() == pytest.approx(math.exp(0.2) * (math.exp(-0.5) - 0.5))
    # low_var_kl clamps after the weighting (slime compute_approx_kl): 9 * e^2 > 10
    got = kl(torch.tensor([-10.0]), torch.tensor([0.0]), "low_var_kl", torch.tensor([math.exp(2.0)]))
    assert got.item() == 10.0


def test_opsm_reference_and_slimes_clipfrac():
    # current -1; old -0.5 (divergence .5), engines -1 (divergence 0); A = -1, delta .1
    # rollout reference: kept; old reference (slime): dropped. Row of 4 positions, 2 trained:
    # slime's opsm_clipfrac counts all 4 over the 2 trained tokens: 4 / 2 = 2 (per sample, one sample)
    logp, old, roll = torch.full((1, 4), -1.0), torch.full((1, 4), -0.5), torch.full((1, 4), -1.0)
    mask = torch.tensor([[1.0, 0.0, 1.0, 0.0]])
    kw = dict(use_opsm=True, opsm_delta=0.1)
    _, m = compute_loss(logp, old, None, roll, -torch.ones(1, 4), mask, None, params(**kw))
    assert m["opsm_maskfrac"].item() == 0.0 and m["opsm_clipfrac"].item() == 0.0
    _, m = compute_loss(logp, old, None, roll, -torch.ones(1, 4), mask, None, params(**kw, opsm_reference="old"))
    assert m["opsm_maskfrac"].item() == 1.0 and m["opsm_clipfrac"].item() == 2.0
    # per token: slime divides the same 2 by the step's tokens (2 here)
    _, m = compute_loss(logp, old, None, roll, -torch.ones(1, 4), mask, None,
                        params(**kw, opsm_reference="old", calculate_per_token_loss=True))
    assert m["opsm_clipfrac"].item() == 1.0


def test_seq_max_packed_and_padded():
    x = torch.tensor([[1.0, 3.0, 2.0], [5.0, 0.5, 0.0], [7.0, 7.0, 7.0]])
    mask = torch.tensor([[1.0, 0.0, 1.0], [0.0, 1.0, 0.0], [0.0, 0.0, 0.0]])
    assert seq_max(x, mask).tolist() == [[2.0] * 3, [0.5] * 3, [0.0] * 3]
    cu = torch.tensor([0, 3, 5, 6])
    assert seq_max(padded_to_packed(x, cu), padded_to_packed(mask, cu), cu).tolist() == [2, 2, 2, .5, .5, 0]


GARBAGE = {"old": 80.0, "rollout": -90.0, "ref": float("inf"), "adv": float("nan")}


@pytest.mark.parametrize("per_token", [False, True])
@pytest.mark.parametrize("level,mode,mis", [("token", "truncate", False), ("token", "mask", False),
                                            ("sequence", "reject", False), ("geometric", "truncate", False),
                                            ("token", "mask", True), ("sequence", "truncate", True)])
def test_masked_tokens_get_exactly_zero_gradient_whatever_they_hold(per_token, level, mode, mis):
    g = torch.Generator().manual_seed(0)
    b, t = 3, 5
    mask = torch.tensor([[1, 1, 0, 1, 0], [0, 0, 0, 0, 0], [1, 0, 1, 1, 1]], dtype=torch.float32)
    logp0 = -torch.rand(b, t, generator=g) - 0.1
    inputs = {"old": logp0 + 0.05 * torch.randn(b, t, generator=g),
              "rollout": logp0 + 0.05 * torch.randn(b, t, generator=g),
              "ref": logp0 + 0.05 * torch.randn(b, t, generator=g), "adv": torch.randn(b, t, generator=g)}
    entropy = torch.rand(b, t, generator=g)
    p = params(use_tis=True, tis_level=level, tis_mode=mode, tis_clip_low=0.5, use_opsm=True, opsm_delta=0.01,
               use_kl_loss=True, kl_loss_coef=0.1, entropy_coef=0.01, calculate_per_token_loss=per_token)
    if mis:  # slime MIS: a geometric rejection stage with the veto, batch-normalised weights, every term rejected
        p = AlgoParams(**{**p.__dict__, "use_rs": True, "rs_level": "geometric", "rs_clip_low": 0.9, "rs_clip": 1.1,
                          "rs_veto_threshold": 0.9, "tis_batch_normalize": True, "tis_reject_scope": "all",
                          "use_unbiased_kl": True, "opsm_reference": "old"})

    def run(values):
        logp = logp0.clone().requires_grad_(True)
        loss, m = compute_loss(logp, values["old"], values["ref"], values["rollout"], values["adv"], mask,
                               entropy, p, normalizer=4.0)
        loss.backward()
        return loss, m, logp.grad

    loss, m, grad = run(inputs)
    dirty = {k: torch.where(mask > 0, v, torch.full_like(v, GARBAGE[k])) for k, v in inputs.items()}
    loss2, m2, grad2 = run(dirty)
    assert torch.equal(grad[mask == 0], torch.zeros(int((mask == 0).sum())))
    assert torch.equal(grad, grad2) and torch.equal(loss, loss2)
    # every metric but opsm_clipfrac, which counts (as slime's) the negative advantages of loss-masked tokens too
    assert all(torch.equal(m[k], m2[k]) for k in m if k != "opsm_clipfrac")
    assert grad[mask > 0].abs().sum() > 0


def test_an_all_masked_sample_counts_in_no_divisor():
    # samples [1, 2] and [4] with a third whose every token is masked: per-sample mean (1.5 + 4) / 2
    # (not / 3, slime's clamp_min(0, 1) would count it as one); per-token 7 / 3 tokens
    loss = torch.tensor([[1.0, 2.0], [4.0, 0.0], [9.0, 9.0]])
    mask = torch.tensor([[1, 1], [1, 0], [0, 0]])
    assert aggregate(loss, mask, per_token=False).item() == pytest.approx(2.75)
    assert aggregate(loss, mask, per_token=True).item() == pytest.approx(7 / 3)
    masks = [torch.ones(2), torch.tensor([1.0, 0.0]), torch.zeros(2), torch.zeros(0)]
    assert loss_normalizer(masks, per_token=False, device="cpu") == 2.0
    assert loss_normalizer(masks, per_token=True, device="cpu") == 3.0


@FAST
@given(st.lists(st.integers(1, 6), min_size=1, max_size=5), st.integers(1, 3), st.booleans(), st.data())
def test_appending_all_masked_samples_changes_nothing(lens, extra, per_token, data):
    loss = [torch.tensor(data.draw(st.lists(st.floats(-3, 3, width=32), min_size=n, max_size=n))) for n in lens]
    mask = [torch.ones(n) for n in lens]
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)))
    base = aggregate(torch.cat(loss), torch.cat(mask), per_token, cu)
    more = loss + [torch.full((2,), 7.0)] * extra
    cu2 = torch.tensor([0] + list(torch.tensor(lens + [2] * extra).cumsum(0)))
    got = aggregate(torch.cat(more), torch.cat(mask + [torch.zeros(2)] * extra), per_token, cu2)
    torch.testing.assert_close(got, base, rtol=1e-6, atol=1e-7)  # longer reductions may group the fp32 sum differently


@FAST
@given(st.lists(st.floats(-3, 3, width=32), min_size=1, max_size=8), st.sampled_from(list(LEVELS)),
       st.floats(0.1, 1.0), st.floats(1.0, 4.0))
def test_weight_bounds_of_each_mode(d, level, lo, hi):
    old = torch.tensor([d])
    c = {mode: rollout_correction(old, torch.zeros_like(old), torch.ones_like(old), level, mode, lo, hi)
         for mode in MODES}
    w = c["truncate"].weights
    assert bool(((w >= lo) & (w <= hi)).all())
    assert set(c["reject"].weights.unique().tolist()) <= {0.0, 1.0}
    masked = c["mask"].weights
    assert bool(((masked == 0) | ((masked >= lo) & (masked <= hi))).all())
    # the three modes agree on which tokens are in the band
    assert torch.equal(c["mask"].rejected, c["reject"].rejected)


@FAST
@given(st.lists(st.floats(-3, 3, width=32), min_size=1, max_size=8), st.sampled_from(list(MODES)))
def test_one_token_sequences_make_every_level_the_token_level(d, mode):
    old = torch.tensor(d)[:, None]  # B sequences of one token each
    got = {lvl: rollout_correction(old, torch.zeros_like(old), torch.ones_like(old), lvl, mode, 0.5, 2).weights
           for lvl in LEVELS}
    assert torch.equal(got["sequence"], got["token"]) and torch.equal(got["geometric"], got["token"])


@FAST
@given(st.floats(-0.5, 0.5, width=32), st.integers(1, 30))
def test_geometric_level_is_length_invariant(d, n):
    # every token with the same log-ratio d: the geometric ratio is e^d whatever the length
    c = rollout_correction(torch.full((1, n), d), torch.zeros(1, n), torch.ones(1, n), "geometric", "truncate", 0, 9)
    torch.testing.assert_close(c.ratio, torch.full((1, n), math.exp(d)), rtol=1e-5, atol=0)  # fp32 sum of n terms


@FAST
@given(st.lists(st.integers(1, 5), min_size=1, max_size=4), st.sampled_from(list(LEVELS)),
       st.sampled_from(list(MODES)), st.integers(0, 2 ** 16))
def test_packed_equals_padded(lens, level, mode, seed):
    g = torch.Generator().manual_seed(seed)
    t = max(lens)
    mask = torch.tensor([[1.0] * n + [0.0] * (t - n) for n in lens]) * (torch.rand(len(lens), t, generator=g) > 0.2)
    old, rollout = 0.3 * torch.randn(len(lens), t, generator=g), 0.3 * torch.randn(len(lens), t, generator=g)
    cu = torch.tensor([0] + list(torch.tensor(lens).cumsum(0)))
    padded = rollout_correction(old, rollout, mask, level, mode, 0.8, 1.25)
    packed = rollout_correction(*(padded_to_packed(x, cu) for x in (old, rollout, mask)), level, mode, 0.8, 1.25, cu)
    for a, b in zip(packed, padded):
        torch.testing.assert_close(a, padded_to_packed(b, cu), rtol=1e-6, atol=1e-7)  # sum order differs


def test_masked_max_ignores_masked_tokens_and_empty_input():
    assert masked_max(torch.tensor([5.0, 2.0]), torch.tensor([0.0, 1.0])).item() == 2.0
    assert masked_max(torch.zeros(0), torch.zeros(0)).item() == 0.0


def test_step_sums_keep_maxima_and_means():
    # two micro-batches: the max metric keeps 3, the mean metric adds up; the prefix is stripped
    sums = StepSums("cpu")
    for w_max, mean in ((2.0, 0.25), (3.0, 0.5)):
        sums.add_all(policy_sums({"tis_weight_max": torch.tensor(w_max), "tis_weight_mean": torch.tensor(mean)},
                                 torch.zeros(2), None, torch.ones(2), None, None))
    out = policy_metrics(sums.reduce(), 0.0, 1e-6)
    assert out["train/tis_weight_max"] == 3.0 and out["train/tis_weight_mean"] == 0.75


# ---- incomplete groups ----------------------------------------------------------------------------------

def test_groups_by_id_hand_values():
    # ids 5: rewards [1, 0, 1] -> mean 2/3, centered [1/3, -2/3, 1/3], unbiased std sqrt((1/9+4/9+1/9)/2) = sqrt(1/3)
    # ids 2: [1, 0] -> centered [.5, -.5], std sqrt(.5) ; id 9 alone -> 0 (no spread, no division)
    r = torch.tensor([1.0, 1.0, 0.0, 0.0, 1.0, 1.0])
    ids = torch.tensor([5, 2, 5, 2, 5, 9])
    got = group_normalize(r, 3, True, group_ids=ids)
    s3, s2 = math.sqrt(1 / 3), math.sqrt(0.5)
    want = [(1 / 3) / s3, 0.5 / s2, (-2 / 3) / s3, -0.5 / s2, (1 / 3) / s3, 0.0]
    torch.testing.assert_close(got, torch.tensor(want), rtol=1e-5, atol=1e-6)  # eps 1e-6 in the divisor
    assert group_normalize(r, 3, False, group_ids=ids).tolist() == pytest.approx([1 / 3, .5, -2 / 3, -.5, 1 / 3, 0])


@FAST
@given(st.integers(2, 6), st.integers(1, 4), st.integers(0, 2 ** 16))
def test_complete_groups_by_id_equal_groups_of_n_in_any_order(n, groups, seed):
    g = torch.Generator().manual_seed(seed)
    r = torch.randint(0, 3, (n * groups,), generator=g).float()
    want = group_normalize(r, n, True)
    perm = torch.randperm(n * groups, generator=g)
    got = group_normalize(r[perm], 1, True, group_ids=(torch.arange(n * groups) // n)[perm])
    torch.testing.assert_close(got, want[perm], rtol=1e-5, atol=1e-5)  # summation order differs


def test_compute_advantages_with_incomplete_groups_and_ids():
    # 3 samples of group 0 ([1, 0, 0]) and 1 of group 1: slime would treat all 4 as one group
    r = torch.tensor([1.0, 0.0, 0.0, 1.0])
    adv, _ = compute_advantages("grpo", r, 4, loss_mask=torch.ones(4, 2), group_ids=torch.tensor([0, 0, 0, 1]))
    # group 0: mean 1/3, centered [2/3, -1/3, -1/3], std sqrt((4/9 + 1/9 + 1/9) / 2) = sqrt(1/3)
    s = math.sqrt(1 / 3)
    torch.testing.assert_close(adv[:, 0], torch.tensor([2 / 3 / s, -1 / 3 / s, -1 / 3 / s, 0.0]), rtol=1e-5, atol=1e-6)


def test_add_advantages_takes_group_ids_and_the_offpolicy_mask():
    from rlrun.config import load
    from rlrun.loops import steps

    cfg = load(["algo=reinforce_plus_plus", "algo.kl_coef=0"])  # whitening over trained tokens and the last trained token's reward
    batch = TrainBatch(tokens=[torch.arange(5), torch.arange(4)], response_start=[2, 2],
                       loss_mask=[torch.ones(3), torch.ones(2)], offpolicy_mask=[torch.tensor([1.0, 1.0, 0.0]), torch.ones(2)])
    out = steps.add_advantages(cfg, batch, [1.0, 0.0], 2, [4, 4])
    # REINFORCE++ (gamma 1, no KL): the reward sits on the last *trained* token: sample 0 returns [1, 1, 0]
    # (its third token is off-policy), sample 1 [0, 0]; whitened over the 4 trained tokens: mean .5,
    # var (4 * .25) / 3 -> (x - .5) / sqrt(1/3)
    z = 0.5 / math.sqrt(1 / 3)
    torch.testing.assert_close(out.advantages[0][:2], torch.tensor([z, z]), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(out.advantages[1], torch.tensor([-z, -z]), rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="Sample.group_id = -1"):
        steps.add_advantages(cfg, batch, [1.0, 0.0], 2, [4, -1])


def test_fold_offpolicy_mask():
    b = TrainBatch(tokens=[torch.arange(4)], response_start=[1], loss_mask=[torch.tensor([1.0, 0.0, 1.0])],
                   offpolicy_mask=[torch.tensor([0.0, 0.0, 1.0])])
    folded, removed = b.fold_offpolicy_mask()
    assert folded.loss_mask[0].tolist() == [0.0, 0.0, 1.0] and folded.offpolicy_mask is None and removed == 1.0
    assert TrainBatch([torch.arange(2)], [1], [torch.ones(1)]).fold_offpolicy_mask()[1] is None


def _step_sums_worker(rank, out):
    # rank 0 holds weights max 2 (mean part .25), rank 1 max 5 (.5): sums add, maxima take the max
    sums = StepSums("cpu")
    sums.add("max/train/tis_weight_max", [2.0, 5.0][rank])
    sums.add("train/tis_weight_mean", [0.25, 0.5][rank])
    out[rank] = sums.reduce()


def test_step_sums_reduce_maxima_with_max_over_two_gloo_ranks():
    from gloo_ranks import run_on_gloo_ranks

    out = run_on_gloo_ranks(_step_sums_worker)
    assert out[0] == out[1] == {"max/train/tis_weight_max": 5.0, "train/tis_weight_mean": 0.75}


def test_opsm_clipfrac_counts_the_dropped_tokens_as_slime_does_for_kl_shaped_advantages():
    """ppo / reinforce_plus_plus with KL shaping give per-token advantages whose sign changes along a sequence.
    slime (slime/utils/ppo_utils.py compute_opsm_mask) drops the tokens with a negative advantage in a sequence
    past delta and counts exactly those (loss-masked ones too) over the sequence's trained tokens."""
    # one sequence, 4 positions, 3 trained; current -1, old -0.5: divergence .5 > delta .1 (old reference)
    logp, old = torch.full((1, 4), -1.0), torch.full((1, 4), -0.5)
    mask = torch.tensor([[1.0, 1.0, 1.0, 0.0]])
    adv = torch.tensor([[-1.0, 0.5, -2.0, -3.0]])  # negative at 0, 2 and the loss-masked 3; positive at 1
    kw = dict(use_opsm=True, opsm_delta=0.1, opsm_reference="old")
    _, m = compute_loss(logp, old, None, None, adv, mask, None, params(**kw))
    # slime: 3 dropped (positions 0, 2, 3) / 3 trained = 1.0 (counting the whole sequence gave 4 / 3)
    assert m["opsm_clipfrac"].item() == pytest.approx(1.0)
    assert m["opsm_maskfrac"].item() == pytest.approx(2 / 3)  # of the 3 trained tokens, 0 and 2 are dropped
    _, m = compute_loss(logp, old, None, None, adv, mask, None, params(**kw, calculate_per_token_loss=True))
    assert m["opsm_clipfrac"].item() == pytest.approx(1 / 3)  # per token: the same 1.0 over the 3 tokens
    # packed, with a second sequence of positive advantages (nothing dropped there): (3/3 + 0/2) / 2 sequences
    cu = torch.tensor([0, 4, 6])
    packed = lambda first, second: torch.cat([first[0], torch.tensor(second)])  # noqa: E731
    _, m = compute_loss(packed(logp, [-1.0, -1.0]), packed(old, [-0.5, -0.5]), None, None,
                        packed(adv, [0.25, 1.0]), packed(mask, [1.0, 1.0]), None, params(**kw), cu_seqlens=cu)
    assert m["opsm_clipfrac"].item() == pytest.approx(1.0 / 2)
