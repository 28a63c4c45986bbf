"""Off-policy correction between the rollout engine's policy and the trainer's (per token).

The samples were drawn by the engines (pi_rollout: other kernels and precision, and in async mode
older weights); the loss is computed for the trainer's pi_old. The importance ratio
rho = pi_old / pi_rollout is formed at a *level* and turned into a weight by a *mode*; the pg loss
is multiplied by the weight (detached). Both are chosen by name from a registry:

level (algo.tis_level), log rho per token from d_t = old_logp_t - rollout_logp_t over trained tokens:
    token      d_t                                 (slime `vanilla_tis_function`; verl rollout_is=token)
    sequence   sum_t d_t, the same for every token (verl rollout_is=sequence; slime MIS tis_level=sequence)
    geometric  mean_t d_t                          (verl geometric RS; slime MIS tis_level=geometric)
mode (algo.tis_mode), with bounds [lo, hi] = [algo.tis_clip_low, algo.tis_clip]:
    truncate   w = clamp(rho, lo, hi)              (TIS; slime `vanilla_tis_function`)
    mask       w = rho inside [lo, hi], else 0     (slime `icepop_function` at token level; MIS mask mode)
    reject     w = 1 inside [lo, hi], else 0       (verl rejection sampling, e.g. Geo-RS: no reweighting)

log rho is clamped to [-20, 20] before exp (verl's and slime MIS's safety bound: a sequence's sum
of log-ratios overflows fp32 otherwise). A rejected token (w = 0) keeps its place in the loss's
divisor (slime's "decouple IS and rejection": only the numerator loses it).

slime's MIS example (examples/train_infer_mismatch_helper/mis.py `compute_mis_weights`) adds, all here:
a second, rejecting stage at its own level and band (`Rejection`: algo.use_rs, rs_level, rs_clip_low,
rs_clip), a veto that rejects every token of a sequence holding a trained token with ratio below
algo.rs_veto_threshold, and tis_batch_normalize: the weights (before rejection) divided by their mean
over the micro-batch's trained tokens (token level) or sequences (other levels).

OPSM (off-policy sequence masking, DeepSeek-V3.2, arXiv 2512.02556; slime `compute_opsm_mask`):
a sequence is dropped from the pg loss where A_t < 0 and its mean divergence from the behaviour
policy, mean_t (behaviour_logp_t - logp_t), exceeds delta.

Every function takes padded [B, T] tensors, or packed 1-D tensors with `cu_seqlens`, like the rest
of rlrun.algo, and does no host sync (a CUDA graph can capture it).
"""
from __future__ import annotations

import math
from typing import Callable, NamedTuple

import torch

from rlrun.algo.kl import kl as kl_estimate
from rlrun.algo.packing import segment_ids, seq_broadcast, seq_sum

SAFETY_LOG_BOUND = 20.0  # |log rho| cap before exp: e^20 ~ 4.9e8 (verl, slime MIS)


def _seq_total(d, m, cu):
    return seq_broadcast(seq_sum(d * m, cu), d, cu)


def _seq_mean(d, m, cu):
    return seq_broadcast(seq_sum(d * m, cu) / seq_sum(m, cu).clamp_min(1), d, cu)


# name -> f(log-ratio per token, mask, cu_seqlens) -> log rho per token
LEVELS: dict[str, Callable] = {
    "token": lambda d, m, cu: d,
    "sequence": _seq_total,
    "geometric": _seq_mean,
}


def _in_band(rho, lo, hi):
    return (rho >= lo) & (rho <= hi)


# name -> f(rho, lo, hi) -> (weight before any rejection, 1 where the mode keeps the token): the weight a
# rejected token would carry is kept apart so that tis_batch_normalize averages what slime's MIS averages
MODES: dict[str, Callable] = {
    "truncate": lambda rho, lo, hi: (rho.clamp(min=lo, max=hi), torch.ones_like(rho)),
    "mask": lambda rho, lo, hi: (rho, _in_band(rho, lo, hi).to(rho.dtype)),
    "reject": lambda rho, lo, hi: (torch.ones_like(rho), _in_band(rho, lo, hi).to(rho.dtype)),
}


class Correction(NamedTuple):
    """Per-token results of rollout_correction (all detached, float32)."""

    weights: torch.Tensor  # what the pg loss is multiplied by (0 on rejected tokens)
    bounded: torch.Tensor  # the weight before rejection (after batch normalisation)
    ratio: torch.Tensor    # rho at the chosen level, before the mode
    clipped: torch.Tensor  # 1 where the weight differs from rho (truncated, masked or rejected)
    rejected: torch.Tensor  # 1 where a stage rejected the token (the mode's band, the rs band, the veto)
    vetoed: torch.Tensor   # 1 on every token of a sequence the veto rejected


class Rejection(NamedTuple):
    """The second stage of slime's MIS (`use_rs`): reject where the ratio at `level` leaves [lo, hi], and
    (veto, optional) reject a whole sequence holding a trained token with ratio < veto."""

    level: str
    lo: float
    hi: float
    veto: float | None = None


def _pick(registry: dict, name: str, key: str):
    if name not in registry:
        raise ValueError(f"algo.{key}={name!r} is unknown; use one of {', '.join(registry)}")
    return registry[name]


def _log_rho(d, m, level, key, cu):
    return _pick(LEVELS, level, key)(d, m, cu).clamp(-SAFETY_LOG_BOUND, SAFETY_LOG_BOUND)


def _batch_mean(w, m, level, cu):
    """The mean weight over the micro-batch's trained tokens (token level) or over its sequences with a
    trained token (other levels: one weight per sequence)."""
    if level == "token":
        return (w * m).sum() / m.sum().clamp_min(1)
    tokens = seq_sum(m, cu)
    per_seq = seq_sum(w * m, cu) / tokens.clamp_min(1)
    return per_seq.sum() / (tokens > 0).sum().clamp_min(1)


def rollout_correction(old_logp: torch.Tensor, rollout_logp: torch.Tensor, mask: torch.Tensor, level: str,
                       mode: str, lo: float, hi: float, cu_seqlens: torch.Tensor | None = None, *,
                       rs: Rejection | None = None, batch_normalize: bool = False) -> Correction:
    """Importance weights pi_old / pi_rollout at `level`, made bounded by `mode` (module docstring);
    `rs`: a second, rejecting stage; `batch_normalize`: weights divided by their micro-batch mean."""
    m = mask.to(torch.float32)
    d = (old_logp.detach().float() - rollout_logp.detach().float()) * m  # untrained tokens: ratio 1
    rho = torch.exp(_log_rho(d, m, level, "tis_level", cu_seqlens))
    w, keep = _pick(MODES, mode, "tis_mode")(rho, lo, hi)
    clipped = (w * keep != rho).to(rho.dtype)
    vetoed = torch.zeros_like(rho)
    if rs is not None:
        keep = keep * _in_band(torch.exp(_log_rho(d, m, rs.level, "rs_level", cu_seqlens)), rs.lo, rs.hi)
        if rs.veto is not None:
            bad = ((d < math.log(rs.veto)) & (m > 0)).to(rho.dtype)
            vetoed = (seq_broadcast(seq_sum(bad, cu_seqlens), bad, cu_seqlens) > 0).to(rho.dtype)
            keep = keep * (1.0 - vetoed)
    if batch_normalize:  # slime MIS: over the weights before rejection; left alone when the mean is ~0
        mean = _batch_mean(w, m, level, cu_seqlens)
        w = w / torch.where(mean > 1e-8, mean, torch.ones_like(mean))
    return Correction(w * keep, w, rho, clipped, 1.0 - keep, vetoed)


def opsm_keep(logp: torch.Tensor, behaviour_logp: torch.Tensor, advantages: torch.Tensor, mask: torch.Tensor,
              delta: float, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """OPSM: 0 on the tokens of a sequence whose mean log-ratio behaviour/current over its trained
    tokens exceeds `delta` and whose advantage is negative there, else 1 (float, detached)."""
    m = mask.to(torch.float32)
    divergence = _seq_mean((behaviour_logp.detach().float() - logp.detach().float()) * m, m, cu_seqlens)
    return 1.0 - ((advantages < 0) & (divergence > delta)).to(torch.float32)


def rollout_kl(old_logp: torch.Tensor, rollout_logp: torch.Tensor) -> torch.Tensor:
    """k3 estimate of KL(pi_rollout || pi_old) per token: exp(r) - 1 - r with r = old - rollout
    (slime's `mismatch_k3_kl`, verl's `rollout_corr/k3_kl`): >= 0, 0 when the engines agree."""
    return kl_estimate(rollout_logp.detach(), old_logp.detach(), "k3")


def seq_max(x: torch.Tensor, mask: torch.Tensor, cu_seqlens: torch.Tensor | None = None) -> torch.Tensor:
    """Each sequence's largest x >= 0 over its trained tokens (0 with none), broadcast to its tokens."""
    x = torch.where(mask > 0, x, torch.zeros_like(x))
    if cu_seqlens is None:
        return x.amax(dim=-1, keepdim=True).expand_as(x) if x.numel() else x
    ids = segment_ids(cu_seqlens, x.numel())
    per_seq = x.new_zeros(cu_seqlens.numel() - 1).scatter_reduce(0, ids, x, "amax", include_self=False)
    return per_seq[ids]


def masked_max(x: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Largest x over the trained tokens (0 with none; x >= 0 here), as a 0-dim tensor, no host sync."""
    if x.numel() == 0:
        return x.new_zeros(())
    return torch.where(mask > 0, x, torch.zeros_like(x)).amax()
