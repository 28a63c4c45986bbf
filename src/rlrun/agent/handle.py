"""The GenerationHandle the runner gives a generate function: token ids in, token ids out, through
sglang-router to the engines (SGLang's /generate with ``input_ids`` and ``return_logprob``).

The context budget is enforced here: a request never asks for more new tokens than
``context_length - len(input_ids)``; a request with no room left returns an empty "length" answer
without reaching an engine, so the caller marks its sample truncated.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from rlrun.rollout.client import RolloutClient, RolloutError, Sampling, weight_version_number
from rlrun.rollout.generate_api import Generated


@dataclass
class HTTPHandle:
    """rollout.* limits for one rollout plus the client. ``metrics`` collects counters a generate
    function adds (tool calls, turns); the runner adds them to the rollout's metrics row."""

    client: RolloutClient
    tokenizer: Any
    context_length: int
    max_response_len: int
    max_turns: int = 1
    tool_timeout_s: float = 30.0
    model_path: str | None = None  # the engines' HF dir (slime adapter: args.hf_checkpoint)
    metrics: dict[str, float] = field(default_factory=dict)
    seed: int | None = None  # the sample's sampling seed: request k of the sample uses seed + k
    _requests: int = field(default=0, repr=False)

    def for_sample(self, seed: int | None) -> "HTTPHandle":
        """A view for one sample: the same client, limits and metrics dict, its own seed sequence."""
        return dataclasses.replace(self, seed=seed, _requests=0)

    @classmethod
    def from_config(cls, client: RolloutClient, tokenizer, rollout_cfg, model_path: str | None = None) -> "HTTPHandle":
        return cls(client, tokenizer, rollout_cfg.context_length, rollout_cfg.max_response_len,
                   rollout_cfg.max_turns, rollout_cfg.tool_timeout_s, model_path=model_path)

    def count(self, key: str, value: float = 1.0) -> None:
        self.metrics[key] = self.metrics.get(key, 0.0) + value

    async def generate(self, input_ids: list[int], sampling: Sampling, *, seed: int | None = None) -> Generated:
        room = self.context_length - len(input_ids)
        if room <= 0:
            self.count("rollout/context_truncations")
            return Generated([], [], "length", None)
        if sampling.max_new_tokens > room:
            sampling = dataclasses.replace(sampling, max_new_tokens=room)
        if seed is None and self.seed is not None:
            seed = (self.seed + self._requests * 7919) % (2**31 - 1)  # a prime stride: turns draw apart
        self._requests += 1
        out = await self.client.generate(input_ids=list(input_ids), sampling=sampling, seed=seed)
        meta = out["meta_info"]
        ids = list(out["output_ids"])
        logprobs = [lp for lp, _tok, _txt in meta.get("output_token_logprobs", [])]
        if len(logprobs) != len(ids):
            raise RolloutError(f"request {meta.get('id')}: {len(ids)} output ids but {len(logprobs)} log-probs")
        return Generated(ids, logprobs, meta["finish_reason"]["type"], weight_version_number(meta["weight_version"]),
                         out.get("text", ""))
