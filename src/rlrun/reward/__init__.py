"""Rewards: rule-based types, remote HTTP reward models and custom functions (rlrun.reward.scoring).

    score(rm_type, response, label, metadata=None) -> float
        One response, in this process, no time limit: for the loop's cheap paths and for users'
        own evaluation scripts.
    score_batch(rm_type, responses, labels, metadatas=None, ...) -> list[float]
        Many responses with a hard per-sample time limit (worker processes); a pathological
        response scores 0 and is counted in `metrics` ("reward/timeouts", "reward/errors").

The reward types are specs in rlrun.config.kinds.REWARDS (the built-in ones: rlrun.reward.spec). The names below
import on first use, so that `rlrun plan` (which loads rlrun.reward.spec to check rm_type) does not import the
graders (math-verify) or the worker pool."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"RULES": "rules", "RewardError": "scoring", "RewardPool": "pool", "per_group": "custom",
          "score": "scoring", "score_batch": "scoring"}
__all__ = ["RULES", "RewardError", "RewardPool", "per_group", "score", "score_batch"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'rlrun.reward' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlrun.reward.{_WHERE[name]}"), name)
