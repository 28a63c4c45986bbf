"""Policy-loss building blocks (per token) and loss aggregation.

Sources (semantics, not code): slime/utils/ppo_utils.py `compute_policy_loss` (PPO clip with
clip-higher and dual clip), `compute_gspo_kl` (GSPO, arXiv 2507.18071), `compute_cispo_loss`
(CISPO, MiniMax-M1 arXiv 2506.13585 eq. 4-5); slime/backends/megatron_utils/loss.py
`vanilla_tis_function` (truncated importance sampling) and `get_sum_of_sample_mean`
(aggregation). Every function returns per-token tensors in the input layout; `aggregate` reduces.
"""

from __future__ import annotations

import torch

from rlrun.algo.offpolicy import rollout_correction
from rlrun.algo.packing import seq_broadcast, seq_sum

def ppo_clip_loss(
    ratio: torch.Tensor,
    advantages: torch.Tensor,
    eps_clip: float,
    eps_clip_high: float,
    dual_clip_c: float | None = None,
):
    """max(-r*A, -clip(r, 1-eps_clip, 1+eps_clip_high)*A); for A < 0 with dual clip, min(-c*A, that).

    Returns (loss per token, clipfrac per token) where clipfrac marks tokens whose clipped term won.
    """
    loss1 = -ratio * advantages
    loss2 = -ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip_high) * advantages
    clipped = torch.maximum(loss1, loss2)
    clipfrac = (loss2 > loss1).to(ratio.dtype)
    if dual_clip_c is not None:
        if dual_clip_c <= 1.0:
            raise ValueError(f"algo.dual_clip_c={dual_clip_c} must be > 1 (or null to turn dual clip off)")
        clipped = torch.where(advantages < 0, torch.minimum(-dual_clip_c * advantages, clipped), clipped)
    return clipped, clipfrac


def gspo_log_ratio(
    logp: torch.Tensor, old_logp: torch.Tensor, mask: torch.Tensor, cu_seqlens: torch.Tensor | None = None
) -> torch.Tensor:
    """Sequence-mean log importance ratio, broadcast to every token (gradient flows through the mean)."""
    m = mask.to(logp.dtype)
    per_seq = seq_sum((logp - old_logp) * m, cu_seqlens) / seq_sum(m, cu_seqlens).clamp_min(1)
    return seq_broadcast(per_seq, logp, cu_seqlens)


def cispo_loss(
    logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, eps_clip: float, eps_clip_high: float
):
    """-stopgrad(clip(r, 1-eps_clip, 1+eps_clip_high)) * A * logp: clipped tokens keep their gradient."""
    ratio = torch.exp(logp - old_logp)
    truncated = ratio.clamp(1.0 - eps_clip, 1.0 + eps_clip_high)
    return -truncated.detach() * advantages * logp, (truncated != ratio).to(logp.dtype)


# The per-token policy losses the estimators name (rlrun.config.kinds.EstimatorKind.policy_loss): each
# (logp, old_logp, advantages, mask, eps_clip, eps_clip_high, dual_clip_c, cu_seqlens) -> (loss, clipfrac, ppo_kl);
# ppo_kl is old_logp - logp per token (the sequence mean for gspo), reported as a metric.

def ppo_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                    eps_clip: float, eps_clip_high: float, dual_clip_c: float | None = None,
                    cu_seqlens: torch.Tensor | None = None):
    log_ratio = logp - old_logp
    loss, clipfrac = ppo_clip_loss(torch.exp(log_ratio), advantages, eps_clip, eps_clip_high, dual_clip_c)
    return loss, clipfrac, -log_ratio.detach()


def gspo_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                     eps_clip: float, eps_clip_high: float, dual_clip_c: float | None = None,
                     cu_seqlens: torch.Tensor | None = None):
    log_ratio = gspo_log_ratio(logp, old_logp, mask, cu_seqlens)
    loss, clipfrac = ppo_clip_loss(torch.exp(log_ratio), advantages, eps_clip, eps_clip_high, dual_clip_c)
    return loss, clipfrac, -log_ratio.detach()


def cispo_policy_loss(logp: torch.Tensor, old_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
                      eps_clip: float, eps_clip_high: float, dual_clip_c: float | None = None,
                      cu_seqlens: torch.Tensor | None = None):
    loss, clipfrac = cispo_loss(logp, old_logp, advantages, eps_clip, eps_clip_high)
    return loss, clipfrac, -(logp - old_logp).detach()


def tis_weights(old_logp: torch.Tensor, rollout_logp: torch.Tensor, tis_clip: float, tis_clip_low: float):
    """Token-level truncated importance weights between the trainer's and the engine's log-probs:
    w = clamp(exp(old_logp - rollout_logp), tis_clip_low, tis_clip), detached (slime
    `vanilla_tis_function`; the other levels and modes: rlrun.algo.offpolicy). Returns
    (weights, raw ratio, clipfrac)."""
    c = rollout_correction(old_logp, rollout_logp, torch.ones_like(old_logp), "token", "truncate", tis_clip_low,
                           tis_clip)
    return c.weights, c.ratio, c.clipped


def entropy_from_logits(logits: torch.Tensor) -> torch.Tensor:
    """Entropy of the softmax over the last dim, in float32: logsumexp(z) - sum(softmax(z) * z)."""
    z = logits.float()
    return torch.logsumexp(z, dim=-1) - (torch.softmax(z, dim=-1) * z).sum(dim=-1)


def aggregate(
    loss_tok: torch.Tensor,
    mask: torch.Tensor,
    per_token: bool,
    cu_seqlens: torch.Tensor | None = None,
    normalizer: float | torch.Tensor | None = None,
) -> torch.Tensor:
    """Reduce a per-token loss to a scalar.

    per_token=False (slime default): sum over sequences of the masked token mean of each sequence,
    divided by the number of sequences. per_token=True (calculate_per_token_loss): masked token
    sum divided by the number of masked tokens. A sequence with no masked-in token counts in
    neither divisor (docs/algorithms.md, "Empty loss masks"). `normalizer` replaces the local
    divisor (sequences or tokens) so that micro-batches of one global batch add up to its mean.
    """
    m = mask.to(loss_tok.dtype)
    if per_token:
        total, count = (loss_tok * m).sum(), m.sum()
    else:
        tokens = seq_sum(m, cu_seqlens)
        per_seq = seq_sum(loss_tok * m, cu_seqlens) / tokens.clamp_min(1)
        total, count = per_seq.sum(), (tokens > 0).sum()
    if normalizer is None:
        normalizer = count
    return total / (normalizer.clamp_min(1) if torch.is_tensor(normalizer) else max(normalizer, 1))
