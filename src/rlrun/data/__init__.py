"""Data: the Sample record, prompt datasets, groups, dynamic sampling and the partial-rollout buffer."""

from rlrun.data.buffer import PartialRolloutBuffer
from rlrun.data.dataset import DataError, PromptDataset, PromptItem
from rlrun.data.groups import GroupCollector, groups_of, make_group, reward_std_nonzero
from rlrun.data.sample import Sample, Status

__all__ = [
    "DataError", "GroupCollector", "PartialRolloutBuffer", "PromptDataset", "PromptItem", "Sample", "Status",
    "groups_of", "make_group", "reward_std_nonzero",
]
