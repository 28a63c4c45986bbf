"""The Sample record that travels from the dataset through rollout, reward and training."""

from __future__ import annotations

import base64
import sys
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

_INT32 = 4  # bytes per expert id on the wire (SGLang sends int32)


class Status(str, Enum):
    """Lifecycle of a sample; a str enum so that it serialises as plain text."""

    PENDING = "pending"  # not generated yet
    COMPLETED = "completed"  # the engine stopped on EOS / a stop string
    TRUNCATED = "truncated"  # hit rollout.max_response_len
    ABORTED = "aborted"  # generation was interrupted (partial rollout); may be resumed
    FAILED = "failed"  # the engine returned an error; excluded from training


@dataclass(frozen=True)
class RoutedExperts:
    """The experts the engine's MoE routers chose, per token: an int32 array of shape
    [rows, num_layers, top_k] (row-major, little-endian), as SGLang 0.5.16 returns it in
    meta_info["routed_experts"] (base64 of the int32 bytes) for return_routed_experts=true.

    Row t is the routing of sequence position t (prompt + response): rows cover positions
    [0, len(tokens) - 1) - the last token is never fed to the model, so it has none. Layers without
    experts (a dense first layer) carry zeros, as in SGLang's capture buffer."""

    data: bytes
    num_layers: int
    top_k: int

    def __post_init__(self) -> None:
        row = _INT32 * self.num_layers * self.top_k
        if self.num_layers <= 0 or self.top_k <= 0 or len(self.data) % row:
            raise ValueError(f"routed experts: {len(self.data)} bytes are not whole rows of {self.num_layers} layers "
                             f"x top-{self.top_k} int32 ids")

    @property
    def rows(self) -> int:
        return len(self.data) // (_INT32 * self.num_layers * self.top_k)

    @classmethod
    def from_base64(cls, text: str, num_layers: int, top_k: int) -> "RoutedExperts":
        return cls(base64.b64decode(text), num_layers, top_k)

    @classmethod
    def from_ids(cls, ids: list[int], num_layers: int, top_k: int) -> "RoutedExperts":
        """From a flat list of ids in [rows, num_layers, top_k] order (tests, small captures)."""
        import array

        a = array.array("i", ids)
        if sys.byteorder != "little":
            a.byteswap()
        return cls(a.tobytes(), num_layers, top_k)

    def to_base64(self) -> str:
        return base64.b64encode(self.data).decode("ascii")

    def ids(self) -> list[int]:
        """The ids as a flat list in [rows, num_layers, top_k] order."""
        import array

        a = array.array("i")
        a.frombytes(self.data)
        if sys.byteorder != "little":
            a.byteswap()
        return a.tolist()

    def prefix(self, rows: int) -> "RoutedExperts":
        return RoutedExperts(self.data[: rows * _INT32 * self.num_layers * self.top_k], self.num_layers, self.top_k)

    def extend(self, start: int, more: "RoutedExperts") -> "RoutedExperts":
        """The first `start` rows of this one followed by `more` (SGLang's routed_experts_start_len:
        an answer covers positions [start, seqlen - 1))."""
        if (more.num_layers, more.top_k) != (self.num_layers, self.top_k):
            raise ValueError(f"routed experts of shape [*, {more.num_layers}, {more.top_k}] cannot extend "
                             f"[*, {self.num_layers}, {self.top_k}]")
        if start > self.rows:
            raise ValueError(f"routed experts start at row {start} but only {self.rows} rows are known")
        return RoutedExperts(self.prefix(start).data + more.data, self.num_layers, self.top_k)


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
    routed_experts: the experts the engine routed each token to (rollout.routing_replay; RoutedExperts:
    rows for positions [0, len(prompt_tokens + response_tokens) - 1)), from the last request that made
    the sample (a multi-turn or continued partial sample: the last turn's, which covers every earlier
    position as that request's prefill saw it); None = not requested.
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
    routed_experts: RoutedExperts | None = None
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
        routed = d.get("routed_experts")
        if isinstance(routed, dict):
            routed = RoutedExperts(**routed)
        return cls(**{**d, "status": Status(d.get("status", Status.PENDING)), "routed_experts": routed})
