"""Run a slime custom generate function (``--custom-generate-function-path``) inside rlrun.

slime's contract (slime/rollout/sglang_rollout.py, ``generate_and_rm``): ``async def generate(args,
sample, sampling_params) -> Sample`` where ``args`` is slime's argparse namespace (the function
reads e.g. ``args.sglang_router_ip`` / ``args.sglang_router_port`` to POST to ``/generate``),
``sample`` a ``slime.utils.types.Sample`` and ``sampling_params`` SGLang's sampling dict. The
function fills ``sample.tokens`` (prompt + response ids), ``response``, ``response_length``,
``loss_mask`` (response tokens), ``rollout_log_probs``, ``status`` and optionally ``reward``.

``rollout.generate_fn=slime:path/to/file.py:generate`` (what ``rlrun import slime`` writes) runs it
through ``slime_generate``: rlrun's Sample -> ``SlimeSample`` (slime's field names, its ``Status``
enum and ``append_response_tokens``) -> the function -> rlrun's Sample. ``args`` carries the
router's address and the rollout settings slime's examples read (``SLIME_ARGS``). A function that
imports slime's own helpers (``slime.utils.http_utils.post``, ``GenerateState``) needs slime
importable; the ones written against the plain HTTP API need nothing else.
"""
from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from enum import Enum
from typing import Any
from urllib.parse import urlsplit

from rlrun.data.sample import Sample, Status
from rlrun.rollout.generate_api import GenerateFn

PREFIX = "slime:"


@dataclass
class SlimeSample:
    """The fields of slime's Sample that custom generate functions use, with slime's names."""

    class Status(Enum):
        PENDING = "pending"
        COMPLETED = "completed"
        TRUNCATED = "truncated"
        ABORTED = "aborted"
        FAILED = "failed"

    prompt: Any = ""
    tokens: list[int] = field(default_factory=list)
    response: str = ""
    response_length: int = 0
    label: Any = None
    reward: Any = None
    loss_mask: list[int] | None = None
    rollout_log_probs: list[float] | None = None
    weight_versions: list[str] = field(default_factory=list)
    status: "SlimeSample.Status" = None  # type: ignore[assignment]
    metadata: dict = field(default_factory=dict)
    index: int | None = None
    group_index: int | None = None

    def __post_init__(self):
        if self.status is None:
            self.status = SlimeSample.Status.PENDING

    def append_response_tokens(self, args=None, *, tokens: list[int], log_probs: list[float] | None = None,
                               trainable: bool = True, meta_info: dict | None = None) -> None:
        """Extend the response by `tokens` (model tokens: trainable, with log-probs; tool tokens: not)."""
        self.tokens = list(self.tokens) + list(tokens)
        self.response_length += len(tokens)
        self.loss_mask = list(self.loss_mask or []) + [int(trainable)] * len(tokens)
        self.rollout_log_probs = list(self.rollout_log_probs or []) + list(log_probs or [0.0] * len(tokens))
        if meta_info and "weight_version" in meta_info:
            self.weight_versions.append(str(meta_info["weight_version"]))


def slime_args(handle) -> argparse.Namespace:
    """The slime argument names a custom generate function reads, from rlrun's handle."""
    url = urlsplit(handle.client.url)
    return argparse.Namespace(
        sglang_router_ip=url.hostname, sglang_router_port=url.port, hf_checkpoint=handle.model_path,
        rollout_max_response_len=handle.max_response_len, rollout_max_context_len=handle.context_length,
        max_turns=handle.max_turns, partial_rollout=False, use_rollout_logprobs=True)


def sampling_params(sampling) -> dict:
    """SGLang's sampling dict as slime builds it (its `sampling_params` argument)."""
    return sampling.to_json()


def to_slime(sample: Sample) -> SlimeSample:
    return SlimeSample(prompt=sample.prompt, tokens=list(sample.prompt_tokens), label=sample.label,
                       metadata=sample.metadata, group_index=sample.group_id)


def from_slime(out: SlimeSample, sample: Sample) -> Sample:
    """Copy a slime function's result into rlrun's sample; the prompt is `tokens` minus the response."""
    n = int(out.response_length)
    tokens = list(out.tokens)
    if n > len(tokens):
        raise ValueError(f"slime generate function returned response_length {n} but only {len(tokens)} tokens")
    sample.prompt_tokens, sample.response_tokens = tokens[:len(tokens) - n], tokens[len(tokens) - n:]
    mask = list(out.loss_mask) if out.loss_mask is not None else [1] * n
    logprobs = list(out.rollout_log_probs) if out.rollout_log_probs is not None else None
    if len(mask) != n or (logprobs is not None and len(logprobs) != n):
        raise ValueError(f"slime generate function: {n} response tokens but {len(mask)} loss-mask entries and "
                         f"{len(logprobs) if logprobs is not None else 'no'} log-probs; they must match")
    if logprobs is None:
        sample.metadata["rollout_logprobs_missing"] = True
    sample.loss_mask, sample.rollout_logprobs = mask, logprobs or [0.0] * n
    version = _version(out.weight_versions[-1]) if out.weight_versions else None
    sample.weight_version = version
    sample.token_versions = [version if m else None for m in mask]
    sample.response = out.response
    status = out.status.value if isinstance(out.status, Enum) else str(out.status)
    sample.status = Status(status)
    if out.reward is not None:
        sample.reward = float(out.reward["score"] if isinstance(out.reward, dict) else out.reward)
    return sample


def _version(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def slime_generate(fn) -> GenerateFn:
    """rlrun's generate-function form of a slime one."""

    async def adapted(handle, sample: Sample, sampling) -> Sample:
        out = await fn(slime_args(handle), to_slime(sample), sampling_params(sampling))
        return from_slime(out, sample)

    adapted.__name__ = f"slime[{getattr(fn, '__name__', fn)}]"
    return adapted
