"""Groups of n samples per prompt and the dynamic-sampling filter with over-sampling bookkeeping.

Dynamic sampling (DAPO, arXiv 2503.14476; slime's `--dynamic-sampling-filter-path` with
`check_reward_nonzero_std`): a group whose rewards are all equal has zero GRPO advantage and
teaches nothing, so it is dropped, and the rollout keeps asking for over_sampling_batch_size
prompts at a time until rollout_batch_size useful groups are collected.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable

from rlrun.data.dataset import PromptItem
from rlrun.data.sample import Sample


def make_group(item: PromptItem, n: int, group_id: int) -> list[Sample]:
    """n fresh samples of one prompt, sharing a group id."""
    return [Sample(prompt=item.text, prompt_tokens=list(item.tokens), label=item.label,
                   metadata=dict(item.metadata), group_id=group_id) for _ in range(n)]


def groups_of(samples: list[Sample]) -> list[list[Sample]]:
    """Consecutive samples sharing a group_id -> one group each (a generate function may return
    several samples per prompt, so a group need not have exactly n members)."""
    groups: list[list[Sample]] = []
    for s in samples:
        if groups and groups[-1][0].group_id == s.group_id:
            groups[-1].append(s)
        else:
            groups.append([s])
    return groups


def reward_std_nonzero(group: list[Sample]) -> bool:
    """True when the group's rewards differ (GRPO gets a non-zero advantage from it)."""
    rewards = [float(s.reward) for s in group if s.reward is not None]
    return len(rewards) > 1 and statistics.pstdev(rewards) > 0


class GroupCollector:
    """Collects groups until `target` pass the filter; counts what was generated and dropped.

    Usage in the loop: while not collector.done: ask for `collector.prompts_to_request(over)`
    prompts, generate, reward, collector.add(groups). Then collector.take() returns exactly
    `target` groups; surplus groups (over-sampling overshoot) are returned by take() too, in
    `surplus`, so the caller can keep or drop them.
    """

    def __init__(self, target: int, keep: Callable[[list[Sample]], bool] | None = reward_std_nonzero):
        if target < 1:
            raise ValueError(f"rollout.rollout_batch_size={target} must be >= 1")
        self.target, self.keep = target, keep
        self.kept: list[list[Sample]] = []
        self.generated = self.dropped = self.rounds = 0

    @property
    def done(self) -> bool:
        return len(self.kept) >= self.target

    def prompts_to_request(self, over_sampling_batch_size: int) -> int:
        """How many prompts the next round asks for (never fewer than the groups still missing)."""
        return max(over_sampling_batch_size, self.target - len(self.kept))

    def add(self, groups: list[list[Sample]]) -> None:
        self.rounds += 1
        for g in groups:
            self.generated += 1
            if self.keep is None or self.keep(g):
                self.kept.append(g)
            else:
                self.dropped += 1

    def take(self) -> tuple[list[list[Sample]], list[list[Sample]]]:
        """(exactly `target` groups, surplus groups). Raises when fewer than target were kept."""
        if not self.done:
            raise RuntimeError(f"only {len(self.kept)} of {self.target} groups passed the filter so far")
        return self.kept[:self.target], self.kept[self.target:]

    def metrics(self) -> dict[str, float]:
        return {"dynamic_sampling/generated_groups": self.generated, "dynamic_sampling/dropped_groups": self.dropped,
                "dynamic_sampling/rounds": self.rounds,
                "dynamic_sampling/drop_rate": self.dropped / self.generated if self.generated else 0.0}
