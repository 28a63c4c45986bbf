"""Environments: the user writes reset / step over chat turns; rlrun runs the loop.

    class Calculator(Environment):
        tools = {"add": lambda a, b: str(a + b)}     # name -> function(**arguments) -> str
        parser = "hermes"                            # rlrun.agent.parsers.PARSERS

    rollout.generate_fn=my_env.py:Calculator  rollout.max_turns=4

Per sample, ``multi_turn`` (the loop ``env_generate`` builds) does:
    prompt ids -> [model turn (loss mask 1) -> parse tool calls -> env.step -> observation ids
    (loss mask 0)] x at most rollout.max_turns -> reward (env.reward, or data.rm_type when None)
Token bookkeeping: the model's ids are appended as generated (never decoded and re-encoded); an
observation is rendered with the tokenizer's chat template as the text that follows the last
assistant turn, and only that text is tokenised (``observation_ids``). Limits: rollout.max_turns,
rollout.max_response_len (all turns' tokens) and rollout.context_length (prompt + response); a
sample stopped by any of them has status TRUNCATED and ``metadata["truncated_by"]`` says which.
Per-turn records go to ``sample.metadata["turns"]``.
"""
from __future__ import annotations

import dataclasses
import inspect
from dataclasses import dataclass, field
from typing import Any, Callable

from rlrun.agent.parsers import get_parser
from rlrun.agent.tools import ToolCall, ToolResult, ToolRunner
from rlrun.data.sample import Sample, Status
from rlrun.rollout.generate_api import GenerateFn, append_tokens


@dataclass(frozen=True)
class Turn:
    """One model turn: its text and ids, why it stopped, and the tool calls parsed from it."""

    text: str
    token_ids: list[int]
    finish: str
    tool_calls: list[ToolCall]


@dataclass
class Step:
    """What the environment answers to a turn: observation messages (chat messages such as
    {"role": "tool", "content": ...}) or text inserted as is; done ends the episode."""

    observation: list[dict] | str = field(default_factory=list)
    done: bool = False
    tool_results: list[ToolResult] = field(default_factory=list)


class Environment:
    """Subclass it. One instance per sample (state lives on self)."""

    tools: dict[str, Callable[..., Any]] = {}
    parser: str = "hermes"
    turn_max_new_tokens: int | None = None  # cap on one model turn (None: rollout.max_response_len)

    def reset(self, sample: Sample) -> None:
        """Called before the first turn; the sample's prompt tokens are the first input."""

    async def step(self, turn: Turn, tools: ToolRunner) -> Step:
        """Default: run the turn's tool calls and answer with one tool message each; a turn without
        tool calls ends the episode."""
        if not turn.tool_calls:
            return Step(done=True)
        results = await tools.run(turn.tool_calls)
        return Step([{"role": "tool", "name": r.call.name, "content": r.content} for r in results],
                    tool_results=results)

    def reward(self, sample: Sample) -> float | None:
        """The sample's reward, or None to score it with data.rm_type (the default)."""
        return None


ASSISTANT_MARK = "rlrun:assistant-turn-end"  # stands in for the model's turn when the template is rendered


def observation_ids(tokenizer, observation: list[dict] | str, *, after_eos: bool) -> list[int]:
    """Token ids of an observation that follows an assistant turn.

    Messages are rendered with the chat template after [user, assistant] (with the generation prompt
    for the next assistant turn); the ids are those of the text after the assistant turn's end token
    (e.g. Qwen's "\n<|im_start|>user\n<tool_response>..." after <|im_end|>), the end token included
    when the model's turn did not end with it (after_eos=False: cut by length or a stop string).
    Earlier turns are never re-rendered into ids (Qwen3's template renders the last assistant turn
    with an empty <think> block, the same turn without it once a message follows). Plain text is
    tokenised as is."""
    if isinstance(observation, str):
        text = observation
    else:
        head = [{"role": "user", "content": "u"}, {"role": "assistant", "content": ASSISTANT_MARK}]
        full = tokenizer.apply_chat_template(head + list(observation), tokenize=False, add_generation_prompt=True)
        at = full.find(ASSISTANT_MARK)
        if at < 0:
            raise ValueError("the chat template drops the assistant's content; rlrun cannot place an observation")
        rest = full[at + len(ASSISTANT_MARK):]
        eos = tokenizer.eos_token or ""
        cut = rest.find(eos) if eos else -1
        text = rest if cut < 0 else rest[cut + (len(eos) if after_eos else 0):]
    return tokenizer(text, add_special_tokens=False)["input_ids"] if text else []


def _limit(sample: Sample, why: str) -> Sample:
    sample.status = Status.TRUNCATED
    sample.metadata["truncated_by"] = why
    return sample


def env_generate(env_cls: type[Environment]) -> GenerateFn:
    """The multi-turn generate function of an Environment class (rollout.generate_fn may name the
    class itself; rlrun calls this)."""
    parse = get_parser(env_cls.parser)

    async def multi_turn(handle, sample: Sample, sampling) -> Sample:
        runner = ToolRunner(env_cls.tools, handle.tool_timeout_s, metrics=handle.metrics)
        env = env_cls()
        env.reset(sample)
        turns = sample.metadata.setdefault("turns", [])
        await _episode(env, handle, sample, sampling, runner, parse, handle.tokenizer, turns)
        reward = env.reward(sample)
        if reward is not None:
            sample.reward = float(reward)
        handle.count("rollout/turns", sum(t["role"] == "assistant" for t in turns))
        return sample

    multi_turn.__name__ = f"multi_turn[{env_cls.__name__}]"
    return multi_turn


async def _episode(env, handle, sample, sampling, runner, parse, tok, turns) -> None:
    for _ in range(handle.max_turns):
        left = handle.max_response_len - len(sample.response_tokens)
        if left <= 0:
            _limit(sample, "max_response_len")
            return
        ids = list(sample.prompt_tokens) + list(sample.response_tokens)
        cap = min(sampling.max_new_tokens, left, env.turn_max_new_tokens or left)
        out = await handle.generate(ids, dataclasses.replace(sampling, max_new_tokens=cap))
        start = len(sample.response_tokens)
        append_tokens(sample, out.token_ids, logprobs=out.logprobs, trained=True, version=out.versions,
                      routed=out.routed_experts)
        sample.weight_version = out.weight_version
        text = out.text or tok.decode(out.token_ids)
        sample.response += text
        if out.finish == "abort":
            sample.status = Status.ABORTED
            return
        if not out.token_ids and out.finish == "length":
            _limit(sample, "context_length")
            return
        turn = Turn(text, list(out.token_ids), out.finish, parse(text))
        step = env.step(turn, runner)
        step = await step if inspect.isawaitable(step) else step
        record = {"role": "assistant", "token_start": start, "token_end": len(sample.response_tokens),
                  "tool_calls": [dataclasses.asdict(c) for c in turn.tool_calls],
                  "tool_results": [r.to_dict() for r in step.tool_results], "error": None}
        errors = [r.error for r in step.tool_results if r.error]
        record["error"] = "; ".join(errors) if errors else None
        turns.append(record)
        if step.done:
            sample.status = Status.COMPLETED
            return
        obs = observation_ids(tok, step.observation, after_eos=bool(out.token_ids) and
                              out.token_ids[-1] == tok.eos_token_id)
        if len(sample.response_tokens) + len(obs) > handle.max_response_len:
            _limit(sample, "max_response_len")
            return
        if len(sample.prompt_tokens) + len(sample.response_tokens) + len(obs) >= handle.context_length:
            _limit(sample, "context_length")
            return
        start = len(sample.response_tokens)
        append_tokens(sample, obs, trained=False)
        sample.response += tok.decode(obs)
        turns.append({"role": "observation", "token_start": start, "token_end": len(sample.response_tokens),
                      "tool_calls": [], "tool_results": [], "error": None})
    _limit(sample, "max_turns")
