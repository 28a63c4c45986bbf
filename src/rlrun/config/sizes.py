"""Sizes every layer of the config derives the same way (one definition: the plan, the rules and the memory
estimate read these). Pure Python."""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from rlrun.config.schema import RunConfig


def dp_size(cfg: "RunConfig") -> int:
    """Data-parallel ranks: trainer world / (TP * PP * CP), at least 1."""
    p = cfg.parallelism
    return max(cfg.train.num_gpus // (p.tp * p.pp * p.cp), 1)


def sample_tokens(cfg: "RunConfig") -> int:
    """Upper bound of one sample's tokens (prompt + response); the prompt bound is the context when
    data.max_prompt_len is null."""
    prompt = cfg.data.max_prompt_len
    if prompt is None:
        prompt = max(cfg.rollout.context_length - cfg.rollout.max_response_len, 0)
    return prompt + cfg.rollout.max_response_len


def known_sample_tokens(cfg: "RunConfig") -> int:
    """The tokens one sample is known to need: sample_tokens with a prompt-length filter; without one only
    the response is known (+ at least 1 prompt token)."""
    return sample_tokens(cfg) if cfg.data.max_prompt_len is not None else cfg.rollout.max_response_len + 1


def push_flushes_cache(cfg: "RunConfig") -> bool:
    """Whether a weight push can flush the engines' prefix cache: only when the engines can become idle first (the
    sync loop's rollout is over; the async loop with rollout.partial_rollout aborts its requests first): the push
    then waits until they are (EngineGroup.drain: SGLang 0.5.16 flushes only an idle engine, and its scheduler dies
    when the flush inside a weight update fails, so the update itself never asks). The async loop's pushes (requests
    paused in place) cannot flush; its engines then run without a prefix cache (rlrun.rollout.engines.sglang.args), or prompt
    prefixes cached under old weights would be reused for ever (the train/rollout log-prob gap grew to 5 nats on
    the copy task, two H200s, 2026-11-28)."""
    return not cfg.train.async_train or cfg.rollout.partial_rollout
