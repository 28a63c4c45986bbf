"""Advantage estimators: grpo, gspo, cispo, reinforce_plus_plus(_baseline), ppo (GAE).

Semantics follow slime so that a run moved from slime gets the same numbers:
- group reward normalisation: slime/ray/rollout.py `_post_process_rewards` (mean over the group of
  n, then / (unbiased std + 1e-6) for grpo/gspo/cispo unless std normalisation is off = Dr.GRPO;
  reinforce_plus_plus_baseline only subtracts the mean); groups are the samples' group ids, so
  an incomplete group is normalised over its own members (slime: one group over the whole batch);
- per-token advantages/returns: slime/backends/megatron_utils/loss.py
  `compute_advantages_and_returns` and slime/utils/ppo_utils.py (`get_grpo_returns`,
  `get_reinforce_plus_plus_returns`, `get_reinforce_plus_plus_baseline_advantages`,
  `vanilla_gae`);
- optional whitening (normalize_advantages) with stats over DP ranks (rlrun.algo.whiten).

Token inputs are padded [B, T] (right padding) or packed 1-D with `cu_seqlens`; recurrences over
time use a log-depth scan, never a Python loop over tokens.
"""

from __future__ import annotations

import torch
import torch.distributed as dist

from rlrun.algo.kl import kl as kl_estimate
from rlrun.algo.packing import packed_to_padded, padded_to_packed
from rlrun.algo.whiten import whiten
from rlrun.config.kinds import ESTIMATORS, resolve  # the estimators' specs (token rule, normalisation, critic)


def group_normalize(rewards: torch.Tensor, n_samples_per_prompt: int, normalize_std: bool, eps: float = 1e-6,
                    group_ids: torch.Tensor | None = None):
    """Subtract each group's mean reward; optionally divide by (unbiased group std + eps).

    Groups: `group_ids` (one id per sample, any order; a group is whoever shares an id), else
    consecutive runs of n (sample i in group i // n). Statistics are over each group's members
    as they are: a group that lost samples (aborted, dropped) is normalised over the ones left.
    A group of one has no spread: its advantage is 0 and no std division happens (slime turns
    std normalisation off for n == 1 too).
    """
    r = rewards.to(torch.float32).reshape(-1)
    if group_ids is None:
        if n_samples_per_prompt < 1 or r.numel() % n_samples_per_prompt != 0:
            raise ValueError(
                f"{r.numel()} rewards do not split into groups of rollout.n_samples_per_prompt="
                f"{n_samples_per_prompt}; pass whole groups, or the samples' group ids"
            )
        group_ids = torch.arange(r.numel(), device=r.device) // n_samples_per_prompt
    elif group_ids.numel() != r.numel():
        raise ValueError(f"{group_ids.numel()} group ids for {r.numel()} rewards; they must match")
    uniq, ids = torch.unique(group_ids.to(r.device), return_inverse=True)

    def per_group(x: torch.Tensor) -> torch.Tensor:  # sum over each group's members
        return torch.zeros(uniq.numel(), dtype=x.dtype, device=x.device).index_add(0, ids, x)

    count = per_group(torch.ones_like(r))
    centered = r - (per_group(r) / count)[ids]
    if normalize_std:
        std = (per_group(centered.square()) / (count - 1).clamp_min(1)).sqrt()
        centered = torch.where(count[ids] > 1, centered / (std[ids] + eps), centered)
    return centered


def discounted_cumsum(x: torch.Tensor, gamma: float) -> torch.Tensor:
    """y_t = sum_{s >= t} gamma^(s-t) x_s along the last dim, by log2(T) doubling steps.

    After step k, y_t covers x_t .. x_{t+2^k-1}; each step adds the block that starts 2^k later,
    scaled by gamma^(2^k). Exact for constant gamma, O(T log T) work and fully vectorised.
    """
    y = x.clone()
    t = x.shape[-1]
    shift, g = 1, float(gamma)
    while shift < t:
        y = torch.cat([y[..., :-shift] + g * y[..., shift:], y[..., -shift:]], dim=-1)
        shift, g = shift * 2, g * g
    return y


def last_token_mask(mask: torch.Tensor) -> torch.Tensor:
    """[B, T] bool with True at the last set position of each row (none for empty rows)."""
    m = mask.bool()
    t = m.shape[-1]
    pos = torch.arange(t, device=m.device).expand_as(m)
    last = torch.where(m, pos, torch.full_like(pos, -1)).max(dim=-1, keepdim=True).values
    return (pos == last) & m


def gae(rewards: torch.Tensor, values: torch.Tensor, mask: torch.Tensor, gamma: float, lambd: float):
    """GAE over padded [B, T]; positions outside `mask` count as zero value and reward.

    delta_t = r_t + gamma * V_{t+1} - V_t (V past the response = 0); A = discounted sum of delta
    with gamma*lambd; returns = A + V (slime `vanilla_gae`).
    """
    m = mask.to(torch.float32)
    v = values.to(torch.float32) * m
    r = rewards.to(torch.float32) * m
    next_v = torch.cat([v[:, 1:], torch.zeros_like(v[:, :1])], dim=1)
    delta = (r + gamma * next_v - v) * m
    adv = discounted_cumsum(delta, gamma * lambd) * m
    return adv, (adv + v) * m


def compute_advantages(
    estimator: str,
    rewards: torch.Tensor,
    n_samples_per_prompt: int,
    *,
    loss_mask: torch.Tensor,
    response_mask: torch.Tensor | None = None,
    logp: torch.Tensor | None = None,
    ref_logp: torch.Tensor | None = None,
    values: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    kl_type: str = "low_var_kl",
    normalize_std: bool = True,
    normalize_advantages: bool = False,
    gamma: float = 1.0,
    lambd: float = 1.0,
    cu_seqlens: torch.Tensor | None = None,
    group: dist.ProcessGroup | None = None,
    group_ids: torch.Tensor | None = None,
    teacher_logp: torch.Tensor | None = None,
    opd_kl_coef: float = 0.0,
    group_normalize_rewards: bool = True,
):
    """Token-level (advantages, returns) for one rollout batch, laid out like `loss_mask`.

    rewards: raw scalar rewards [B], group after group. loss_mask: tokens that train (may have
    holes, e.g. tool output). response_mask: every response token (None = loss_mask); pads are 0.
    logp/ref_logp: log-probs of the response tokens (needed when kl_coef != 0). values: critic
    values (ppo only). The keyword values mirror the `algo` config section (see docs/algorithms.md).
    teacher_logp (on-policy distillation, algo.distill): the teacher's log-probs of the response tokens; the
    advantage of every response token then gets `- opd_kl_coef * (logp - teacher_logp)`, the per-token reverse
    KL of the student (`logp`: the trainer's log-probs of the samples) from the teacher, after the estimator and
    before whitening (slime `apply_opd_kl_to_advantages` in slime/backends/megatron_utils/loss.py); the
    returns (PPO's value targets) are left as they are, as slime does.
    group_normalize_rewards=False: `rewards` are final (slime's --custom-reward-post-process-path returns them in
    place of its group normalisation, slime/ray/rollout.py _post_process_rewards): no group mean/std is applied.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"algo.advantage_estimator={estimator!r} is unknown; use one of {', '.join(ESTIMATORS)}")
    spec = ESTIMATORS[estimator]
    if cu_seqlens is not None:  # packed: compute on a padded view, then pack back
        pad = lambda t: None if t is None else packed_to_padded(t, cu_seqlens)[0]  # noqa: E731
        adv, ret = compute_advantages(
            estimator, rewards, n_samples_per_prompt, loss_mask=pad(loss_mask), response_mask=pad(response_mask),
            logp=pad(logp), ref_logp=pad(ref_logp), values=pad(values), kl_coef=kl_coef, kl_type=kl_type,
            normalize_std=normalize_std, normalize_advantages=normalize_advantages, gamma=gamma, lambd=lambd,
            group=group, group_ids=group_ids, teacher_logp=pad(teacher_logp), opd_kl_coef=opd_kl_coef,
            group_normalize_rewards=group_normalize_rewards,
        )
        return padded_to_packed(adv, cu_seqlens), padded_to_packed(ret, cu_seqlens)

    lmask = loss_mask.to(torch.float32)
    rmask = lmask if response_mask is None else response_mask.to(torch.float32)
    if rewards.numel() != lmask.shape[0]:
        raise ValueError(f"{rewards.numel()} rewards for {lmask.shape[0]} sequences; they must match")
    r = rewards.to(torch.float32).reshape(-1).to(lmask.device)
    if spec.needs_critic and values is None:
        raise ValueError(f"advantage_estimator={estimator} needs critic `values` (a critic runs with algo={estimator})")
    if kl_coef != 0 and (logp is None or ref_logp is None):
        raise ValueError(f"algo.kl_coef={kl_coef} needs logp and ref_logp (a reference model: checkpoint.ref)")
    tok_kl = kl_estimate(logp, ref_logp, kl_type) * rmask if kl_coef != 0 else torch.zeros_like(rmask)

    if spec.group_normalised and group_normalize_rewards:
        r = group_normalize(r, n_samples_per_prompt, normalize_std and spec.std_normalised, group_ids=group_ids)
    adv, ret = resolve(spec.token_rule)(r, lmask, rmask, tok_kl, values, kl_coef=kl_coef, gamma=gamma, lambd=lambd)
    if teacher_logp is not None:
        if logp is None:
            raise ValueError("on-policy distillation (teacher_logp) needs the student's log-probs `logp`")
        adv = adv - opd_kl_coef * (logp - teacher_logp) * rmask

    if normalize_advantages:
        adv = whiten(adv, lmask, group=group) * rmask
    return adv, ret


# The token rules the built-in estimators name (rlrun.config.kinds.ESTIMATORS: EstimatorKind.token_rule)

def group_reward(r, lmask, rmask, tok_kl, values, *, kl_coef, gamma, lambd):
    adv = r[:, None] * rmask
    return adv, adv


def reinforce_baseline(r, lmask, rmask, tok_kl, values, *, kl_coef, gamma, lambd):
    adv = (r[:, None] - kl_coef * tok_kl) * rmask
    return adv, adv


def reinforce(r, lmask, rmask, tok_kl, values, *, kl_coef, gamma, lambd):
    # KL-shaped token rewards on trained tokens, scalar reward at the last trained token.
    tok_r = -kl_coef * tok_kl * lmask + last_token_mask(lmask) * r[:, None]
    adv = discounted_cumsum(tok_r, gamma) * rmask
    return adv, adv


def gae_rule(r, lmask, rmask, tok_kl, values, *, kl_coef, gamma, lambd):
    # scalar reward at the last response token, GAE with the critic
    tok_r = -kl_coef * tok_kl + last_token_mask(rmask) * r[:, None]
    return gae(tok_r, values, rmask, gamma, lambd)


def value_loss(values: torch.Tensor, old_values: torch.Tensor, returns: torch.Tensor, value_clip: float):
    """Clipped value loss per token: max((clip(v, v_old +- value_clip) - R)^2, (v - R)^2).

    Source: slime/backends/megatron_utils/loss.py `value_loss_function`. Returns (loss, clipfrac).
    """
    clipped = old_values + (values - old_values).clamp(-value_clip, value_clip)
    loss = torch.maximum((clipped - returns).pow(2), (values - returns).pow(2))
    clipfrac = ((values - old_values).abs() > value_clip).to(values.dtype)
    return loss, clipfrac
