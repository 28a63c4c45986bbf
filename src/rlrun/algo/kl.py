"""KL estimators between the policy and a reference policy, per token.

Source: Schulman, "Approximating KL divergence" (http://joschu.net/blog/kl-approx.html), with
slime's conventions (slime/utils/ppo_utils.py `compute_approx_kl`): d = logp - ref_logp;
k1 = d, k2 = d^2 / 2, k3 = low_var_kl = exp(-d) - 1 + d, and only low_var_kl is clamped to
[-10, 10] for numerical safety. Computed in float32 whatever the input dtype.
"""

from __future__ import annotations

import torch

KL_KINDS = ("k1", "k2", "k3", "low_var_kl")


def kl(logp: torch.Tensor, ref_logp: torch.Tensor, kind: str, ratio: torch.Tensor | None = None) -> torch.Tensor:
    """Per-token KL estimate of KL(pi || pi_ref) from sampled-token log-probs. `ratio`: an importance
    weight per token multiplied in before low_var_kl's clamp (slime's `--use-unbiased-kl`)."""
    d = logp.float() - ref_logp.float()
    if kind == "k1":
        out = d
    elif kind == "k2":
        out = d.pow(2) / 2.0
    elif kind in ("k3", "low_var_kl"):
        out = torch.expm1(-d) + d  # exp(-d) - 1 + d, expm1 keeps precision for small d
    else:
        raise ValueError(f"algo.kl_loss_type={kind!r} is unknown; use one of {', '.join(KL_KINDS)}")
    if ratio is not None:
        out = ratio * out
    return out.clamp(-10.0, 10.0) if kind == "low_var_kl" else out
