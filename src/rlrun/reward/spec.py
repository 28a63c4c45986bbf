"""The built-in reward types (data.rm_type), registered in rlrun.config.kinds.REWARDS. Pure Python: `rlrun plan`
imports it (rlrun.config.kinds.PLUGINS) to check rm_type without importing the graders (math-verify, sympy);
each rule names its function in rlrun.reward.rules by path, resolved when a run scores."""
from __future__ import annotations

from rlrun.config.kinds import REWARDS, RewardKind

_R = "rlrun.reward.rules:"
# name -> (function, label in the response, cheap enough to score in this process)
for name, fn, label, cheap in (("deepscaler", "deepscaler", True, False), ("math", "math", True, False),
                               ("dapo", "dapo", True, False), ("f1", "f1", True, False),
                               ("gpqa", "gpqa", False, False), ("exact_match", "exact_match", True, True),
                               ("char_match", "char_match", True, True), ("random", "random_reward", False, True),
                               ("zero", "zero_reward", False, True)):
    REWARDS.register(RewardKind(name, _R + fn, label_in_response=label, in_process=cheap))
# rm_type values that post each sample to data.rm_url (slime's remote_rm as well)
for name in ("remote", "remote_rm"):
    REWARDS.register(RewardKind(name, remote=True))
# the reward engines (reward.model) judge each sample (rlrun.reward.judge)
REWARDS.register(RewardKind("reward_model", judged=True))
