"""Pure-torch RL algorithms shared by every trainer backend (advantages, losses, KL, whitening)."""

from rlrun.algo.advantages import (
    ESTIMATORS,
    compute_advantages,
    discounted_cumsum,
    gae,
    group_normalize,
    value_loss,
)
from rlrun.algo.kl import KL_KINDS, kl
from rlrun.algo.loss import AlgoParams, compute_loss
from rlrun.algo.losses import (
    aggregate,
    cispo_loss,
    entropy_from_logits,
    cispo_policy_loss,
    gspo_log_ratio,
    gspo_policy_loss,
    ppo_clip_loss,
    ppo_policy_loss,
    tis_weights,
)
from rlrun.algo.packing import packed_to_padded, padded_to_packed
from rlrun.algo.whiten import whiten

__all__ = [
    "ESTIMATORS", "KL_KINDS", "AlgoParams", "aggregate", "cispo_loss", "compute_advantages", "compute_loss",
    "discounted_cumsum", "entropy_from_logits", "gae", "group_normalize", "gspo_log_ratio", "kl",
    "packed_to_padded", "padded_to_packed", "ppo_policy_loss", "gspo_policy_loss", "cispo_policy_loss", "ppo_clip_loss", "tis_weights", "value_loss", "whiten",
]
