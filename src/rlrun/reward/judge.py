"""A reward model served as engines judges each sample (reward.model, rm_type reward_model; docs/rewards.md "Reward
engines"). The judge speaks SGLang's /generate to the reward engines' router, so any engine kind with
EngineKind.judge (the hf engine on the CPU, SGLang on GPUs) serves it:

    discriminative  prompt_template rendered; one greedy next token with return_logprob and SGLang's
                    token_ids_logprob = [the target's token]; score = P(target) = exp(that log-prob), in [0, 1]
                    (a yes-token reward model; a target of "{response}" scores a one-token answer by its likelihood)
    generative      prompt_template rendered; the judge writes up to max_new_tokens greedily; score = float of the
                    first group of the parser's last match in the judgement (no match: an error, scored 0)

Templates are str.format templates over {prompt}, {response} and {label}. Requests are batched concurrently
(max_concurrency in flight), each with a time limit and retries with exponential backoff, as the remote reward's
(rlrun.reward.remote); a sample whose attempts are all spent scores 0 and is counted (reward/timeouts,
reward/errors) by rlrun.reward.score_batch, never crashing the run.
"""
from __future__ import annotations

import asyncio
import logging
import math
import re
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)
MODES = ("discriminative", "generative")


class JudgeError(ValueError):
    """A judgement that yields no score (a target of several tokens, a judgement the parser cannot read)."""


@dataclass(frozen=True)
class Judge:
    url: str                 # the reward engines' router
    mode: str                # MODES
    prompt_template: str
    target: str = "yes"
    parser: str = r"(-?\d+(?:\.\d+)?)"
    max_new_tokens: int = 64
    timeout_s: float = 60.0
    max_retries: int = 2
    max_concurrency: int = 64
    tokenizer: Any = None    # the reward model's tokenizer: a discriminative target -> its token id
    backoff_s: float = 0.2

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ValueError(f"judge mode {self.mode!r}: use one of {', '.join(MODES)}")
        if self.mode == "discriminative" and self.tokenizer is None:
            raise ValueError("a discriminative judge needs the reward model's tokenizer (its target's token id)")

    @classmethod
    def from_config(cls, m, url: str, tokenizer) -> "Judge":
        """reward.model (rlrun.config.schema.RewardModelSection) -> the judge of the engines at `url`."""
        return cls(url=url, mode=m.mode, prompt_template=m.prompt_template, target=m.target, parser=m.parser,
                   max_new_tokens=m.max_new_tokens, timeout_s=m.timeout_s, max_retries=m.max_retries,
                   max_concurrency=m.max_concurrency, tokenizer=tokenizer)

    def request(self, prompt, response: str, label) -> dict:
        """The /generate body (SGLang's GenerateReqInput) for one sample; greedy, so a judgement is repeatable."""
        text = render(self.prompt_template, prompt, response, label)
        if self.mode == "generative":
            return {"text": text, "sampling_params": {"max_new_tokens": self.max_new_tokens, "temperature": 0.0}}
        target = render(self.target, prompt, response, label)
        ids = self.tokenizer.encode(target, add_special_tokens=False) if target else []
        if len(ids) > 1:
            raise JudgeError(f"the target {target!r} is {len(ids)} tokens for the reward model's tokenizer; a "
                             "discriminative judge scores one next token")
        body = {"text": text, "sampling_params": {"max_new_tokens": 1, "temperature": 0.0}, "return_logprob": True}
        return {**body, "token_ids_logprob": ids} if ids else body

    def score(self, body: dict, answer: dict) -> float:
        """The score of the engine's `answer` to request `body`."""
        if self.mode == "generative":
            return parse_score(self.parser, answer.get("text") or "")
        if "token_ids_logprob" not in body:
            return 0.0  # an empty target (e.g. "{response}" of an empty response): no token to be likely
        rows = (answer.get("meta_info") or {}).get("output_token_ids_logprobs") or []
        if not rows or not rows[0]:
            raise JudgeError(f"the reward engine answered no output_token_ids_logprobs: {str(answer)[:200]}")
        return math.exp(float(rows[0][0][0]))


def render(template: str, prompt, response: str, label) -> str:
    return template.format(prompt=prompt if isinstance(prompt, str) else str(prompt), response=response,
                           label="" if label is None else label)


def parse_score(pattern: str, judgement: str) -> float:
    """The first group of the pattern's last match in `judgement`, as a float."""
    matches = list(re.finditer(pattern, judgement))
    if not matches:
        raise JudgeError(f"no score in the judgement {judgement[-200:]!r} (reward.model.parser {pattern!r})")
    try:
        return float(matches[-1].group(1))
    except (TypeError, ValueError) as e:
        raise JudgeError(f"the parser's group {matches[-1].group(1)!r} is not a number") from e


async def _ask(session, judge: Judge, body: dict) -> tuple[float, str, str]:
    import aiohttp

    last: BaseException | None = None
    for attempt in range(judge.max_retries + 1):
        try:
            async with session.post(f"{judge.url}/generate", json=body,
                                    timeout=aiohttp.ClientTimeout(total=judge.timeout_s)) as resp:
                resp.raise_for_status()
                return judge.score(body, await resp.json(content_type=None)), "ok", ""
        except JudgeError as e:  # the judge answered; its answer has no score: retrying would repeat it (greedy)
            return 0.0, "error", str(e)
        except Exception as e:  # noqa: BLE001 - a failed or slow request is retried, then counted
            last = e
            if attempt < judge.max_retries:
                await asyncio.sleep(min(judge.backoff_s * 2**attempt, 10.0))
    timeout = isinstance(last, asyncio.TimeoutError)
    why = (f"timed out after {judge.timeout_s:g} s" if timeout else f"{type(last).__name__}: {last}")
    log.warning("reward engine %s failed after %d attempts: %s", judge.url, judge.max_retries + 1, why)
    return 0.0, "timeout" if timeout else "error", f"the reward engines at {judge.url}: {why}"


async def judge_scores(judge: Judge, samples: list[tuple[Any, str, Any]]) -> list[tuple[float, str, str]]:
    """(prompt, response, label) per sample -> (score, "ok" | "timeout" | "error", why) per sample, concurrently."""
    import aiohttp

    sem = asyncio.Semaphore(judge.max_concurrency)

    async def one(session, sample):
        try:
            body = judge.request(*sample)
        except (JudgeError, KeyError, IndexError, ValueError) as e:
            return 0.0, "error", f"{type(e).__name__}: {e}"
        async with sem:
            return await _ask(session, judge, body)

    async with aiohttp.ClientSession() as session:
        return list(await asyncio.gather(*(one(session, s) for s in samples)))
