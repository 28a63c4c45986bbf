"""The tiny tool task (experiment=tiny-tool-cpu): answer a key's value, which only a tool knows.

The prompt is a key and "?", e.g. "qzx?"; the answer is one digit from a lookup table the model
never sees (table.json, 2000 keys; a key comes up about once per run, so it cannot be memorised).
The model's action language fits the toy tokenizer (one character per token):

    turn 1: "?"        -> call lookup(key) -> the observation "=7" is inserted (loss mask 0)
            any other  -> that character is the final answer
    turn 2: one token  -> the final answer

Reward: 1 for the right answer; a tool call followed by a wrong answer earns 0.2 (a format score, as
Search-R1's format_score), so the call is discovered before the answer is reliable. Two measured
failure modes shaped this rule: with any wrong answer earning 0.2, the policy collapsed onto "?" at
both turns (reward stuck at exactly 0.2); with only a wrong *digit* earning it, GRPO's std
normalisation turned 0.2-vs-0 into full advantages that collapsed the answer onto a few digits before
copying was learned. So a wrong answer earns 0.2 unless it is "?" again: wrong answers are not
ranked against each other, and only the right digit stands out.
A 2-layer model learns "call, then copy the tool's digit"; without the tool the expected reward
is 0.1 at best (a guessed digit).
"""
from __future__ import annotations

import json
from pathlib import Path

from rlrun.agent import Environment, Step, ToolCall

TABLE = json.loads((Path(__file__).parent / "table.json").read_text())
CALL = "?"
FORMAT_SCORE = 0.2


def lookup(key: str) -> str:
    """The tool: the table's value of `key` (KeyError for an unknown key: an error observation)."""
    return TABLE[key]


class LookupEnv(Environment):
    tools = {"lookup": lookup}
    parser = "none"  # the action is one character; step reads it
    turn_max_new_tokens = 1

    def reset(self, sample) -> None:
        self.key = str(sample.prompt).rstrip(CALL)[-3:]
        self.called = False
        self.answer = ""
        self.label = str(sample.label)

    async def step(self, turn, tools) -> Step:
        if turn.text == CALL and not self.called:
            self.called = True
            results = await tools.run([ToolCall("lookup", {"key": self.key})])
            return Step(observation="=" + results[0].content, tool_results=results)
        self.answer = turn.text.strip()
        return Step(done=True)

    def reward(self, sample) -> float:
        if self.answer == self.label:
            return 1.0
        return FORMAT_SCORE if self.called and self.answer != CALL else 0.0
