"""A train step's metrics, summed over micro-batches on the device and read back once per step.

Reading a metric with float() inside the micro-batch loop stops Python until the GPU has finished
the forward pass, before it can queue the backward: the GPU then idles while Python launches the
backward's kernels (megatron-core's per-module Python makes that launch time comparable to the
GPU time). Both backends therefore add detached device tensors here and sync once, in reduce().
"""
from __future__ import annotations

import torch
import torch.distributed as dist

from rlrun.algo.kl import kl as kl_estimate
from rlrun.algo.loss import MAX_METRICS
from rlrun.train.dist import all_reduce_sum

MAX = "max/"  # names under this prefix keep the running maximum (over micro-batches and ranks), not the sum


class StepSums:
    """name -> running float64 sum (or, for names under MAX, maximum) on the device."""

    def __init__(self, device):
        self.device = device
        self.sums: dict[str, torch.Tensor] = {}

    def add(self, name: str, value) -> None:
        v = value.detach().to(self.device, torch.float64) if torch.is_tensor(value) else \
            torch.tensor(float(value), dtype=torch.float64, device=self.device)
        if name in self.sums:
            v = torch.maximum(self.sums[name], v) if name.startswith(MAX) else self.sums[name] + v
        self.sums[name] = v

    def add_policy(self, loss_metrics: dict, logp, entropy, mask, rollout_logp, ref_logp, response_tokens: int) -> None:
        """One micro-batch of the policy loss (policy_sums) and its response-token count."""
        self.add_micro_batch(policy_sums(loss_metrics, logp, entropy, mask, rollout_logp, ref_logp), response_tokens)

    def add_micro_batch(self, policy: dict[str, torch.Tensor], response_tokens: int) -> None:
        """One micro-batch's policy_sums (computed already, e.g. by a CUDA graph) and its response-token count."""
        self.add_all(policy)
        self.add("tok/response_tokens", response_tokens)

    def add_all(self, values: dict[str, torch.Tensor]) -> None:
        for k, v in values.items():
            self.add(k, v)

    def reduce(self, group=None) -> dict[str, float]:
        """Sums (maxima for names under MAX) over the ranks of `group`: one all-reduce and one host
        copy per kind. Every rank of the group must hold the same names (the same loss terms); an
        empty StepSums returns {}."""
        out: dict[str, float] = {}
        for op, keys in ((dist.ReduceOp.SUM, sorted(k for k in self.sums if not k.startswith(MAX))),
                         (dist.ReduceOp.MAX, sorted(k for k in self.sums if k.startswith(MAX)))):
            if keys:
                out.update(zip(keys, all_reduce_sum(torch.stack([self.sums[k] for k in keys]), group, op).tolist()))
        return out


def mismatch_sum(logp, rollout_logp, mask) -> torch.Tensor:
    """Sum over the loss tokens of |logp - rollout_logp| (the numerator of train/train_rollout_logp_abs_diff)."""
    keep = mask > 0
    d = (logp.detach() - rollout_logp).abs()
    return torch.where(keep, d, torch.zeros_like(d)).sum()


def policy_sums(loss_metrics: dict, logp, entropy, mask, rollout_logp, ref_logp) -> dict[str, torch.Tensor]:
    """One micro-batch of the policy loss as device tensors: compute_loss's metrics (already
    aggregated like the loss, so they add up over micro-batches) and token sums for the means over
    loss tokens. Pure tensor ops on the device (no host values): a CUDA graph can capture it."""
    out = {(MAX if k in MAX_METRICS else "") + "train/" + k: v.detach() for k, v in loss_metrics.items()}
    d = logp.detach()
    keep = mask > 0
    masked_sum = lambda x: torch.where(keep, x, torch.zeros_like(x)).sum()  # noqa: E731 (a masked inf stays out)
    out["tok/n"] = mask.sum()
    if entropy is not None:
        out["tok/entropy"] = masked_sum(entropy.detach())
    if rollout_logp is not None:
        out["tok/mismatch"] = mismatch_sum(d, rollout_logp, mask)
    if ref_logp is not None:
        out["tok/kl"] = masked_sum(kl_estimate(d, ref_logp, "low_var_kl"))
    return out


def policy_metrics(sums: dict[str, float], grad_norm: float, lr: float) -> dict[str, float]:
    """The reduced sums of add_policy -> the step's train/* metrics (token means over loss tokens)."""
    n = max(sums.get("tok/n", 1.0), 1.0)
    out = {k.removeprefix(MAX): v for k, v in sums.items() if k.removeprefix(MAX).startswith("train/")}
    out.update({"train/grad_norm": float(grad_norm or 0.0), "train/lr": lr,
                "train/response_tokens": sums.get("tok/response_tokens", 0.0)})
    for tok, name in (("tok/entropy", "train/entropy"), ("tok/mismatch", "train/train_rollout_logp_abs_diff"),
                      ("tok/kl", "train/kl")):
        if tok in sums:
            out[name] = sums[tok] / n
    if "tok/mismatch_no_replay" in sums:  # rollout.routing_replay: the same forward routed by the trainer itself
        out["train/train_rollout_logp_abs_diff_no_replay"] = sums["tok/mismatch_no_replay"] / n
    if sums.get("routing/replayed"):  # (position, MoE layer) pairs whose replayed experts differ from its own
        out["train/routing_replay_changed_frac"] = sums.get("routing/changed", 0.0) / sums["routing/replayed"]
    if "tok/offpolicy_masked" in sums:  # TrainBatch.offpolicy_mask: share of the loss tokens it removed
        masked = sums["tok/offpolicy_masked"]
        out["train/offpolicy_maskfrac"] = masked / max(masked + sums.get("tok/n", 0.0), 1.0)
    return out
