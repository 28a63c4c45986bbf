"""The Sample record that travels from the dataset through rollout, reward and training."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any


class Status(str, Enum):
    """Lifecycle of a sample; a str enum so that it serialises as plain text."""

    PENDING = "pending"  # not generated yet
    COMPLETED = "completed"  # the engine stopped on EOS / a stop string
    TRUNCATED = "truncated"  # hit rollout.max_response_len
    ABORTED = "aborted"  # generation was interrupted (partial rollout); may be resumed
    FAILED = "failed"  # the engine returned an error; excluded from training


@dataclass
class Sample:
    """One response to one prompt. Field names are fixed by docs/CONTRACT.md.

    prompt: the prompt as given to the engine (text after the chat template, or chat messages).
    loss_mask: one entry per response token (1 = trained, 0 = e.g. tool output); None = all 1.
    rollout_logprobs: the engine's log-prob of each response token (for TIS), or None.
    group_id: the prompt's group (the n samples of a prompt share it); weight_version: the policy
    version that generated the response (the last one, for a resumed partial rollout);
    token_versions: one entry per response token, the policy version that generated it (None for
    tool/environment tokens and for the engines' initial weights); None = not tracked.
    train_reward: the reward the advantage estimator takes as given, in place of the group normalisation of
    `reward` (algo.reward_post_process: slime's custom reward post-processing); None = `reward`, normalised.
    """

    prompt: str | list[dict]
    prompt_tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_tokens: list[int] = field(default_factory=list)
    loss_mask: list[int] | None = None
    reward: float | None = None
    label: Any = None
    rollout_logprobs: list[float] | None = None
    status: Status = Status.PENDING
    metadata: dict = field(default_factory=dict)
    group_id: int = -1
    weight_version: int | None = None
    token_versions: list[int | None] | None = None
    train_reward: float | None = None

    @property
    def response_length(self) -> int:
        return len(self.response_tokens)

    @property
    def effective_loss_mask(self) -> list[int]:
        return [1] * self.response_length if self.loss_mask is None else self.loss_mask

    def to_dict(self) -> dict:
        d = asdict(self)
        d["status"] = self.status.value
        return d

    @classmethod
    def from_dict(cls, d: dict) -> Sample:
        return cls(**{**d, "status": Status(d.get("status", Status.PENDING))})
