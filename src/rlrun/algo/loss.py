"""One call per micro-batch for every trainer backend: `compute_loss(...) -> (loss, metrics)`.

Composition follows slime/backends/megatron_utils/loss.py `policy_loss_function`:
total = pg_loss - entropy_coef * entropy + kl_loss_coef * kl (the KL term only with use_kl_loss),
where pg_loss is the PPO-clip / GSPO / CISPO loss (chosen by the advantage estimator), times the
rollout-correction weights when use_tis (rlrun.algo.offpolicy: level x mode) and the OPSM mask when
use_opsm, and every term is reduced with the same aggregation over the loss mask.

A token that the rollout correction rejects (a band, the rejection stage, the veto) leaves the pg
loss's numerator; with algo.tis_reject_scope=all it also leaves the entropy and KL terms and the
pg_clipfrac / ppo_kl / train_rollout_logprob_abs_diff metrics, as slime does when its MIS function
returns a rejection mask (loss.py rebuilds `sum_of_sample_mean` with it). Every divisor stays the
one of the loss mask.

Tokens outside the loss mask (tool output, off-policy tokens, pads) enter with neutral inputs
(old = rollout = ref = the current log-prob, advantage 0): whatever those positions hold cannot
reach the loss, and their gradient is exactly 0 (an inf there times a 0 mask would be a NaN).
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from rlrun.algo.kl import kl as kl_estimate
from rlrun.config.kinds import ESTIMATORS, resolve
from rlrun.algo.losses import aggregate
from rlrun.algo.offpolicy import Rejection, masked_max, opsm_keep, rollout_correction, rollout_kl, seq_max
from rlrun.algo.packing import seq_broadcast, seq_sum

# metrics that are maxima over the step, not means that add up over micro-batches (rlrun.train.step_metrics)
MAX_METRICS = frozenset({"tis_weight_max"})


@dataclass(frozen=True)
class AlgoParams:
    """The algo settings the loss and advantages need; built from the resolved config."""

    advantage_estimator: str
    eps_clip: float
    eps_clip_high: float
    dual_clip_c: float | None
    use_kl_loss: bool
    kl_loss_coef: float
    kl_loss_type: str
    kl_coef: float
    entropy_coef: float
    use_tis: bool
    tis_clip: float
    tis_clip_low: float
    tis_level: str
    tis_mode: str
    use_opsm: bool
    opsm_delta: float
    opsm_reference: str
    tis_reject_scope: str
    use_rs: bool
    rs_level: str
    rs_clip_low: float
    rs_clip: float
    rs_veto_threshold: float | None
    tis_batch_normalize: bool
    use_unbiased_kl: bool
    use_rollout_logprobs: bool
    calculate_per_token_loss: bool
    normalize_std: bool
    normalize_advantages: bool
    gamma: float
    lambd: float
    value_clip: float
    loss_type: str = "policy_loss"   # rlrun.config.kinds.LOSS_TYPES; LOSSES below holds each one's function

    @classmethod
    def from_config(cls, cfg) -> AlgoParams:
        """Build from a RunConfig (or anything with `.algo.<field>` and `.train.calculate_per_token_loss`).

        No defaults here: every value comes from the YAML under conf/ via the validated config.
        """
        values = {}
        for f in fields(cls):
            if f.name == "loss_type" and not hasattr(cfg.algo, "loss_type"):
                continue  # a config tree from before algo.loss_type: the policy loss
            section = cfg.train if f.name == "calculate_per_token_loss" else cfg.algo
            if not hasattr(section, f.name):
                where = "train" if section is cfg.train else "algo"
                raise ValueError(f"config has no {where}.{f.name}; AlgoParams needs it (see docs/CONTRACT.md)")
            values[f.name] = getattr(section, f.name)
        if values["eps_clip_high"] is None:  # the schema derives it; tolerate an unresolved tree
            values["eps_clip_high"] = values["eps_clip"]
        return cls(**values)

    @property
    def policy_loss(self):
        """The estimator's per-token policy loss (EstimatorKind.policy_loss, rlrun.algo.losses)."""
        return resolve(ESTIMATORS[self.advantage_estimator].policy_loss)

    @property
    def rejection(self) -> Rejection | None:
        return Rejection(self.rs_level, self.rs_clip_low, self.rs_clip, self.rs_veto_threshold) if self.use_rs else None


def _opsm_clipfrac(dropped, mask, per_token, cu, reduce):
    """slime's `opsm_clipfrac` (slime/utils/ppo_utils.py compute_opsm_mask): per sequence, the tokens OPSM drops
    (a negative advantage in a sequence past delta; loss-masked tokens too) over its trained tokens; summed over
    sequences, then rlrun's divisor. Equal to the sequence's length for GRPO-style advantages (one sign per
    sequence); fewer where KL-shaped advantages (ppo, reinforce_plus_plus) change sign along it."""
    m = mask.to(torch.float32)
    tokens = seq_sum(m, cu)
    per_seq = seq_sum(dropped.to(torch.float32), cu) / tokens.clamp_min(1)
    # aggregate sums x * mask per sequence and divides by the tokens (per sample) or not (per token)
    return reduce(seq_broadcast(per_seq if not per_token else per_seq / tokens.clamp_min(1), m, cu))


def _correction_metrics(c, old, rollout, mask, cu, reduce, veto: bool) -> dict:
    out = dict(tis=reduce(c.ratio), tis_clipfrac=reduce(c.clipped), tis_weight_mean=reduce(c.weights),
               tis_maskfrac=reduce(c.rejected), tis_weight_max=masked_max(c.weights, mask),
               tis_weight_seq_max=reduce(seq_max(c.bounded, mask, cu)),  # slime MIS's is_ratio_max_final
               tis_abs=reduce((torch.exp(old.float() - rollout.float()) - 1).abs()))  # slime's, token level
    if veto:
        out["tis_vetofrac"] = reduce(c.vetoed)
    return out


def compute_loss(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    rollout_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    entropy: torch.Tensor | None,
    params: AlgoParams,
    cu_seqlens: torch.Tensor | None = None,
    normalizer: float | torch.Tensor | None = None,
):
    """The loss of one micro-batch and its metrics, by `params.loss_type` (algo.loss_type): the policy loss
    (policy_loss, below) or the SFT loss (sft_loss). Arguments: see policy_loss_and_metrics."""
    return LOSSES[params.loss_type](logp, old_logp, ref_logp, rollout_logp, advantages, loss_mask, entropy, params,
                                    cu_seqlens, normalizer)


def sft_loss(logp, old_logp, ref_logp, rollout_logp, advantages, loss_mask, entropy, params: AlgoParams,
             cu_seqlens=None, normalizer=None):
    """Supervised fine-tuning: `-log p` of the trained response tokens, aggregated like the policy loss
    (per-sample mean, or per-token with train.calculate_per_token_loss): slime `sft_loss_function`
    (slime/backends/megatron_utils/loss.py), `loss = -sum_of_sample_mean(log_probs)`. Only `logp` and
    `loss_mask` are read; metrics: loss (the mean negative log-likelihood) and, when given, entropy_loss."""
    keep = loss_mask > 0
    nll = torch.where(keep, -logp, torch.zeros_like(logp))  # a masked position's value cannot reach the loss
    loss = aggregate(nll, loss_mask, params.calculate_per_token_loss, cu_seqlens, normalizer)
    metrics = {"loss": loss.detach()}
    if entropy is not None:
        metrics["entropy_loss"] = aggregate(torch.where(keep, entropy, torch.zeros_like(entropy)), loss_mask,
                                            params.calculate_per_token_loss, cu_seqlens, normalizer).detach()
    return loss, metrics


def policy_loss_and_metrics(
    logp: torch.Tensor,
    old_logp: torch.Tensor | None,
    ref_logp: torch.Tensor | None,
    rollout_logp: torch.Tensor | None,
    advantages: torch.Tensor,
    loss_mask: torch.Tensor,
    entropy: torch.Tensor | None,
    params: AlgoParams,
    cu_seqlens: torch.Tensor | None = None,
    normalizer: float | torch.Tensor | None = None,
):
    """Policy loss of one micro-batch and its metrics (detached 0-dim tensors on the loss's device:
    a trainer sums them over micro-batches and reads them once per step, rlrun.train.step_metrics).

    logp: current log-probs (with grad). old_logp: log-probs of the policy that the advantages
    were computed for (None = logp.detach(), the on-policy case). ref_logp: needed with use_kl_loss.
    rollout_logp: the engine's log-probs, needed with use_tis (and OPSM's behaviour policy when
    given). entropy: per-token entropy (needed when entropy_coef != 0, reported when given).
    `normalizer`: see rlrun.algo.losses.aggregate.
    """
    p = params
    keep = loss_mask > 0
    cur = logp.detach()
    neutral = lambda x, fill: None if x is None else torch.where(keep, x, fill)  # noqa: E731
    old = cur if old_logp is None else neutral(old_logp, cur)
    rollout, ref = neutral(rollout_logp, old), neutral(ref_logp, cur)
    given_advantages = advantages  # slime's opsm_clipfrac counts them on loss-masked tokens too
    advantages = neutral(advantages, torch.zeros_like(cur))
    reduce = lambda x: aggregate(x, loss_mask, p.calculate_per_token_loss, cu_seqlens, normalizer)  # noqa: E731
    reduce_kept = reduce  # the terms a rejected token leaves (tis_reject_scope=all): numerators only
    pg_tok, clipfrac, ppo_kl = p.policy_loss(
        logp, old, advantages, loss_mask, p.eps_clip, p.eps_clip_high, p.dual_clip_c, cu_seqlens
    )
    metrics = {"ois": reduce(torch.exp(-ppo_kl))}  # mean pi_theta / pi_old (slime's `ois`)
    if rollout is not None:  # the engines' log-probs vs the trainer's: always reported when known
        metrics["rollout_kl"] = reduce(rollout_kl(old, rollout))
    if p.use_tis:
        if rollout is None:
            raise ValueError("algo.use_tis=true needs rollout_logp (the engine's log-probs of the response)")
        c = rollout_correction(old, rollout, loss_mask, p.tis_level, p.tis_mode, p.tis_clip_low, p.tis_clip,
                               cu_seqlens, rs=p.rejection, batch_normalize=p.tis_batch_normalize)
        pg_tok = pg_tok * c.weights
        if p.tis_reject_scope == "all":
            kept = c.rejected == 0
            reduce_kept = lambda x: reduce(torch.where(kept, x, torch.zeros_like(x)))  # noqa: E731
        metrics.update(_correction_metrics(c, old, rollout, loss_mask, cu_seqlens, reduce,
                                           p.use_rs and p.rs_veto_threshold is not None))
    if p.use_opsm:  # rlrun: against the policy that sampled (the engines' log-probs when known); slime: old
        behaviour = rollout if p.opsm_reference == "rollout" and rollout is not None else old
        keep_seq = opsm_keep(logp, behaviour, advantages, loss_mask, p.opsm_delta, cu_seqlens)
        pg_tok = pg_tok * keep_seq
        metrics["opsm_maskfrac"] = reduce(1.0 - keep_seq)
        dropped = 1.0 - opsm_keep(logp, behaviour, given_advantages, loss_mask, p.opsm_delta, cu_seqlens)
        metrics["opsm_clipfrac"] = _opsm_clipfrac(dropped, loss_mask, p.calculate_per_token_loss, cu_seqlens, reduce)
    pg_loss = reduce(pg_tok)
    loss = pg_loss
    metrics.update(pg_loss=pg_loss, pg_clipfrac=reduce_kept(clipfrac), ppo_kl=reduce_kept(ppo_kl))
    if rollout is not None:  # slime: |old - rollout|, or |current - rollout| when old is the rollout's
        compare = cur if p.use_rollout_logprobs else old
        metrics["train_rollout_logprob_abs_diff"] = reduce_kept((compare - rollout).abs())
    if entropy is not None:
        entropy_loss = reduce_kept(entropy)
        loss = loss - p.entropy_coef * entropy_loss
        metrics["entropy_loss"] = entropy_loss
    elif p.entropy_coef != 0:
        raise ValueError(f"algo.entropy_coef={p.entropy_coef} needs the per-token entropy; pass `entropy`")
    if p.use_kl_loss:
        if ref is None:
            raise ValueError("algo.use_kl_loss=true needs ref_logp (a reference model: checkpoint.ref)")
        # use_unbiased_kl (DeepSeek-V3.2): each token's estimate weighted by pi_theta / pi_old, with gradient
        ratio = torch.exp(logp.float() - old.float()) if p.use_unbiased_kl else None
        kl_loss = reduce_kept(kl_estimate(logp, ref, p.kl_loss_type, ratio))
        loss = loss + p.kl_loss_coef * kl_loss
        metrics["kl_loss"] = kl_loss
    metrics["loss"] = loss
    return loss, {k: v.detach() for k, v in metrics.items()}


# algo.loss_type -> its loss function (rlrun.config.kinds.LOSS_TYPES names the same kinds; a test keeps them equal)
LOSSES = {"policy_loss": policy_loss_and_metrics, "sft_loss": sft_loss}
