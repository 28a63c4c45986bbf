"""Property tests (hypothesis) for the algorithm invariants listed in issue 3."""

import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from rlrun.algo import (
    aggregate,
    compute_advantages,
    compute_loss,
    group_normalize,
    kl,
    ppo_clip_loss,
)
from test_algo_losses import params

floats = st.floats(-5, 5, allow_nan=False, width=32)
FAST = settings(max_examples=60, deadline=None)


@FAST
@given(st.integers(2, 8), st.integers(1, 5), st.data(), st.booleans())
def test_grpo_advantages_zero_mean_per_group(n, groups, data, normalize_std):
    r = torch.tensor(data.draw(st.lists(floats, min_size=n * groups, max_size=n * groups)))
    adv = group_normalize(r, n, normalize_std).view(groups, n)
    # Exactly zero in exact arithmetic. In float32 the group mean and the n subtractions round by at
    # most ~2n ulps of max|r| (2^-24 relative each), and the sum of the centred values adds n more;
    # std normalisation divides that error by (std + 1e-6), so near-equal rewards (std ~1e-4)
    # magnify it: e.g. [2.9765625, 2.9765625, 2.9764361] gives a mean of -2.1e-3 after dividing.
    g = r.view(groups, n)
    scale = (g.std(dim=1) + 1e-6) if normalize_std and n > 1 else torch.ones(groups)
    tol = 4 * n * 2.0**-24 * g.abs().amax(dim=1) / scale + 1e-7
    assert bool((adv.mean(dim=1).abs() <= tol).all()), (adv.mean(dim=1), tol)


@FAST
@given(st.lists(st.floats(0.01, 10), min_size=1, max_size=20), st.floats(0.01, 0.5), st.floats(0.01, 0.5),
       st.floats(0.1, 3.0), st.booleans())
def test_clipping_bounds_the_effective_ratio(ratios, eps, eps_high, a, negative):
    # effective ratio = -loss / A: for A > 0 it never exceeds 1 + eps_high; for A < 0 it never
    # drops below 1 - eps, and with dual clip c it never exceeds c.
    r = torch.tensor(ratios)
    adv = torch.full_like(r, -a if negative else a)
    loss, _ = ppo_clip_loss(r, adv, eps, eps_high, dual_clip_c=3.0)
    eff = -loss / adv
    if negative:
        assert bool((eff >= 1 - eps - 1e-5).all()) and bool((eff <= 3.0 + 1e-5).all())
    else:
        assert bool((eff <= 1 + eps_high + 1e-5).all())


@FAST
@given(st.lists(st.tuples(floats, floats), min_size=1, max_size=30))
def test_k3_is_non_negative(pairs):
    logp, ref = torch.tensor(pairs).unbind(-1)
    assert bool((kl(logp, ref, "k3") >= 0).all())
    assert bool((kl(logp, ref, "low_var_kl") >= 0).all())


@FAST
@given(st.integers(1, 6), st.integers(1, 10), st.data())
def test_per_token_equals_per_sample_when_lengths_equal(b, t, data):
    x = torch.tensor(data.draw(st.lists(floats, min_size=b * t, max_size=b * t))).view(b, t)
    mask = torch.ones(b, t)
    assert torch.allclose(aggregate(x, mask, True), aggregate(x, mask, False), atol=1e-5)


def _params(estimator):
    return params(advantage_estimator=estimator, dual_clip_c=3.0, use_kl_loss=True, kl_loss_coef=0.1, kl_coef=0.05,
                  entropy_coef=0.01, use_tis=True, tis_clip_low=0.5, normalize_advantages=True, gamma=0.9,
                  lambd=0.8, use_rs=True, rs_level="geometric", rs_clip_low=0.5, rs_clip=1.5, rs_veto_threshold=0.05,
                  tis_batch_normalize=True, tis_reject_scope="all", use_unbiased_kl=True)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(1, 7), min_size=2, max_size=6).filter(lambda x: len(x) % 2 == 0),
       st.sampled_from(["grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline", "ppo"]),
       st.integers(0, 10_000))
def test_packed_and_padded_agree(lengths, estimator, seed):
    g = torch.Generator().manual_seed(seed)
    b, t = len(lengths), max(lengths)
    mask = (torch.arange(t)[None, :] < torch.tensor(lengths)[:, None]).float()
    rand = lambda: torch.randn(b, t, generator=g) * mask  # noqa: E731
    logp, old, ref, roll, values, ent = (rand() - 1, rand() - 1, rand() - 1, rand() - 1, rand(), rand().abs())
    rewards = torch.randn(b, generator=g)
    cu = torch.tensor([0] + list(torch.tensor(lengths).cumsum(0)))
    sel = mask.bool()
    pk = lambda x: x[sel]  # row-major boolean select = packing of right-padded rows  # noqa: E731
    p = _params(estimator)
    kw = dict(kl_coef=p.kl_coef, kl_type=p.kl_loss_type, normalize_advantages=True, gamma=p.gamma, lambd=p.lambd)
    adv_pad, ret_pad = compute_advantages(estimator, rewards, 2, loss_mask=mask, logp=old, ref_logp=ref,
                                          values=values, **kw)
    adv_pk, ret_pk = compute_advantages(estimator, rewards, 2, loss_mask=pk(mask), logp=pk(old), ref_logp=pk(ref),
                                        values=pk(values), cu_seqlens=cu, **kw)
    assert torch.allclose(adv_pad[sel], adv_pk, atol=1e-5) and torch.allclose(ret_pad[sel], ret_pk, atol=1e-5)
    loss_pad, m_pad = compute_loss(logp, old, ref, roll, adv_pad, mask, ent, p)
    loss_pk, m_pk = compute_loss(pk(logp), pk(old), pk(ref), pk(roll), adv_pk, pk(mask), pk(ent), p, cu_seqlens=cu)
    assert torch.allclose(loss_pad, loss_pk, atol=1e-5)
    assert all(abs(m_pad[k] - m_pk[k]) < 1e-4 for k in m_pad)
