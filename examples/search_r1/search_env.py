"""A Search-R1-style environment (arXiv 2503.09516; slime's examples/search-r1): the model searches a
corpus, reads the passages, and answers; the reward is exact match of the answer with the label.

    turn: "<search> query </search>"  -> the retriever's top passages, inserted as
                                         "<information>...</information>" (loss mask 0)
          "<answer> text </answer>"   -> the episode ends; reward = EM(text, label)
          anything else               -> an "invalid action" hint (Search-R1's), next turn

As a template for a real model: set checkpoint.hf to an instruct model, data.apply_chat_template=true,
rollout.max_turns and rollout.max_response_len to taste, and point `search` at a real retriever
(retriever.py). TinySearchEnv is the same environment for the CPU run with the tiny model, whose toy
tokenizer has no "<" or ">": there every turn that is not an answer is a search query.
"""
from __future__ import annotations

import re
import string

from rlrun.agent import Environment, Step, ToolCall

from retriever import search  # noqa: E402  (rlrun loads this file by path; its folder is importable)

ACTION = re.compile(r"<(search|answer)>(.*?)</\1>", re.DOTALL)
INVALID = ("\nMy previous action is invalid. If I want to search, I should put the query between <search> and "
           "</search>. If I want to give the final answer, I should put the answer between <answer> and "
           "</answer>. Let me try again.\n")


def normalize(text: str) -> str:
    text = "".join(c for c in text.lower() if c not in string.punctuation)
    return " ".join(w for w in text.split() if w not in ("a", "an", "the"))


class SearchEnv(Environment):
    tools = {"search": search}
    parser = "none"  # the actions are Search-R1's tags, read by `action`
    turn_max_new_tokens = 512

    def reset(self, sample) -> None:
        self.label, self.answer, self.searches = str(sample.label), None, 0

    def action(self, text: str) -> tuple[str | None, str]:
        m = ACTION.search(text)
        return (m.group(1), m.group(2).strip()) if m else (None, "")

    async def step(self, turn, tools) -> Step:
        kind, content = self.action(turn.text)
        if kind == "answer":
            self.answer = content
            return Step(done=True)
        if kind == "search":
            self.searches += 1
            results = await tools.run([ToolCall("search", {"query": content})])
            return Step(f"\n\n<information>{results[0].content}</information>\n\n", tool_results=results)
        return Step(INVALID)

    def reward(self, sample) -> float:
        return float(self.answer is not None and normalize(self.answer) == normalize(self.label))


class TinySearchEnv(SearchEnv):
    """For the toy tokenizer: "answer ..." answers, any other turn is a search query; plain-text passages."""

    turn_max_new_tokens = 12

    def action(self, text: str) -> tuple[str | None, str]:
        text = text.replace("<eos>", "").strip()
        if text.startswith("answer"):
            return "answer", text[len("answer"):]
        return "search", text

    async def step(self, turn, tools) -> Step:
        step = await super().step(turn, tools)
        if isinstance(step.observation, str) and step.observation:
            step.observation = " " + re.sub(r"[^a-z0-9 ]", " ", step.observation.lower()) + " "
        return step
