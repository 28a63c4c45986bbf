"""The trainer-side phases of one loop step, each a small function, so that rlrun/loops/sync_loop.py reads as
the recipe: to_train_batch / add_advantages: samples -> TrainBatch with per-token advantages (rlrun.algo).
The sample side (prompts, seeds, scoring, dynamic sampling) is rlrun.parts.sampling, used by the parts.
"""
from __future__ import annotations

import statistics

import torch

from rlrun.algo import compute_advantages
from rlrun.config.kinds import use_critic
from rlrun.train.base import TrainBatch

def offpolicy_mask(sample) -> list[int]:
    """1 for the tokens of the sample's last policy version, 0 for those an older version
    generated before a partial rollout was continued (slime's --mask-offpolicy-in-partial-rollout);
    all 1 when versions are not tracked. None (the initial weights) counts as version 0."""
    if not sample.token_versions:
        return [1] * len(sample.response_tokens)
    num = lambda v: 0 if v is None else v  # noqa: E731
    last = max(num(v) for v in sample.token_versions)
    return [int(num(v) == last) for v in sample.token_versions]  # inserted tokens are masked already


def routed_experts_tensor(sample) -> torch.Tensor:
    """A sample's RoutedExperts as int32 [rows, num_layers, top_k] (rollout.routing_replay)."""
    r = sample.routed_experts
    if r is None:
        raise ValueError(f"rollout.routing_replay is on but the sample of group {sample.group_id} has no routed "
                         "experts (a generate function must pass Generated.routed_experts to append_tokens)")
    data = torch.frombuffer(bytearray(r.data), dtype=torch.int32) if r.data else torch.zeros(0, dtype=torch.int32)
    return data.reshape(r.rows, r.num_layers, r.top_k)


def to_train_batch(samples: list, mask_offpolicy: bool = False, routing_replay: bool = False) -> TrainBatch:
    """mask_offpolicy: tokens of an older policy version are left out of the loss through
    TrainBatch.offpolicy_mask (the trainer folds it into the loss mask and reports the share it removed,
    train/offpolicy_maskfrac). routing_replay: the samples' routed experts go to TrainBatch.routed_experts."""
    off = [torch.tensor(offpolicy_mask(s), dtype=torch.float32) for s in samples] if mask_offpolicy else None
    return TrainBatch(
        routed_experts=[routed_experts_tensor(s) for s in samples] if routing_replay else None,
        tokens=[torch.tensor(list(s.prompt_tokens) + list(s.response_tokens), dtype=torch.long) for s in samples],
        response_start=[len(s.prompt_tokens) for s in samples],
        loss_mask=[torch.tensor(s.effective_loss_mask, dtype=torch.float32) for s in samples],
        rollout_logp=None if any(s.rollout_logprobs is None for s in samples) else  # none: SFT's data samples
        [torch.tensor(s.rollout_logprobs, dtype=torch.float32) for s in samples], offpolicy_mask=off)


def _pad(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(xs, batch_first=True) if xs else torch.zeros(0, 0)


def add_advantages(cfg, batch: TrainBatch, rewards: list[float], n: int,
                   group_ids: list[int] | None = None, teacher_logp: list[torch.Tensor] | None = None,
                   final_rewards: bool = False) -> TrainBatch:
    """Per-token advantages (and, for PPO, the critic's returns) from rlrun.algo on the padded view
    of the batch. group_ids: each sample's Sample.group_id, so that a group that reaches the trainer
    incomplete is normalised over its members (None: whole consecutive groups of n). Only trained
    tokens (loss mask times TrainBatch.offpolicy_mask) enter whitening and REINFORCE++'s returns.
    teacher_logp: per sample, the distillation teacher's log-probs (algo.distill; the student's are
    batch.old_logp); with algo.distill.reward=replace the rewards do not enter the advantages. final_rewards: the
    rewards are algo.reward_post_process's (Sample.train_reward), taken as given: no group normalisation."""
    a = cfg.algo
    if teacher_logp is not None and a.distill.reward == "replace":
        rewards = [0.0] * len(rewards)  # every group's reward advantage is 0: the distillation term alone
    lengths = [int(m.numel()) for m in batch.loss_mask]
    if group_ids is not None and any(g < 0 for g in group_ids):
        raise ValueError("a sample has no group id (Sample.group_id = -1): a generate function must return its "
                         "samples with the group_id of the prompt they answer")
    pad = lambda xs: None if xs is None else _pad(xs)  # noqa: E731
    adv, ret = compute_advantages(
        a.advantage_estimator, torch.tensor(rewards, dtype=torch.float32), n, loss_mask=_pad(batch.trained_mask),
        response_mask=_pad([torch.ones(k) for k in lengths]), logp=pad(batch.old_logp), ref_logp=pad(batch.ref_logp),
        values=pad(batch.values), kl_coef=a.kl_coef, kl_type=a.kl_loss_type, normalize_std=a.normalize_std,
        normalize_advantages=a.normalize_advantages, gamma=a.gamma, lambd=a.lambd,
        group_ids=None if group_ids is None else torch.tensor(group_ids), teacher_logp=pad(teacher_logp),
        opd_kl_coef=a.distill.coef, group_normalize_rewards=not final_rewards)
    unpad = lambda x: [x[i, :k].clone() for i, k in enumerate(lengths)]  # noqa: E731
    return batch.with_(advantages=unpad(adv), returns=unpad(ret) if use_critic(cfg) else None)


def distill_metrics(batch: TrainBatch, teacher_logp: list[torch.Tensor]) -> dict[str, float]:
    """The student's reverse KL from the teacher on the trained tokens, log p_student - log p_teacher (the k1
    estimate, whose expectation under the student's samples is KL(student || teacher)): `distill/reverse_kl`,
    the mean over samples of each sample's token mean (slime's opd_reverse_kl, sum_of_sample_mean), and
    `distill/reverse_kl_token`, the mean over all trained tokens; `distill/teacher_logp` and
    `distill/student_logp`, token means."""
    if batch.old_logp is None:
        raise ValueError("distill_metrics needs the student's log-probs (batch.old_logp)")
    per_sample, tok, n, t_sum, s_sum = [], 0.0, 0.0, 0.0, 0.0
    for m, s, t in zip(batch.trained_mask, batch.old_logp, teacher_logp):
        k = float(m.sum())
        if k == 0:
            continue
        rkl = float(((s - t) * m).sum())
        per_sample.append(rkl / k)
        tok, n, t_sum, s_sum = tok + rkl, n + k, t_sum + float((t * m).sum()), s_sum + float((s * m).sum())
    n = max(n, 1.0)
    return {"distill/reverse_kl": statistics.fmean(per_sample) if per_sample else 0.0,
            "distill/reverse_kl_token": tok / n, "distill/teacher_logp": t_sum / n, "distill/student_logp": s_sum / n}


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per-key mean over the optimizer steps of one rollout (keys missing from a step are skipped)."""
    keys = {k for row in rows for k in row}
    return {k: statistics.fmean(row[k] for row in rows if k in row) for k in sorted(keys)}
