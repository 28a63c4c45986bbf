"""Tools and tool-call parsing: time limits, exceptions and unknown tools become observations and counts."""
import asyncio
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from rlrun.agent.parsers import get_parser, parse_hermes
from rlrun.agent.tools import ToolCall, ToolRunner


def slow(seconds: float) -> str:
    time.sleep(seconds)
    return "late"


def boom() -> str:
    raise RuntimeError("database down")


async def async_add(a: int, b: int) -> str:
    return str(a + b)


def runner(metrics=None):
    return ToolRunner({"slow": slow, "boom": boom, "add": async_add, "upper": lambda text: text.upper()}, timeout_s=0.2,
                      metrics=metrics)


def test_timeouts_errors_and_unknown_tools_are_observations_and_counted():
    metrics = {}
    calls = [ToolCall("slow", {"seconds": 1.0}), ToolCall("boom"), ToolCall("nope"), ToolCall("add", {"a": 2, "b": 3}),
             ToolCall("upper", {"text": "ok"})]
    t0 = time.monotonic()
    results = asyncio.run(runner(metrics).run(calls))
    took = time.monotonic() - t0
    assert [r.error for r in results] == ["timeout", "error: RuntimeError: database down", "unknown tool", None, None]
    assert results[0].content == "error: tool slow timed out after 0.2 s"
    assert "database down" in results[1].content and "add, boom, slow, upper" in results[2].content
    assert [r.content for r in results[3:]] == ["5", "OK"]
    assert metrics == {"rollout/tool_calls": 5, "rollout/tool_errors": 2, "rollout/tool_timeouts": 1}
    # the calls ran concurrently and the hung one did not hold the turn: well under its 1 s sleep
    assert took < 0.9


def test_hermes_parser_reads_qwen_tool_calls_and_keeps_malformed_ones():
    text = ('I will look it up.\n<tool_call>\n{"name": "lookup", "arguments": {"key": "abc"}}\n</tool_call>\n'
            '<tool_call>\n{"name": "add", "arguments": "{\\"a\\": 1}"}\n</tool_call>'
            '<tool_call>{not json}</tool_call>')
    calls = parse_hermes(text)
    assert calls[:2] == [ToolCall("lookup", {"key": "abc"}), ToolCall("add", {"a": 1})]
    assert calls[2].name == "" and calls[2].arguments["raw"] == "{not json}"
    assert parse_hermes("no calls here") == []
    with pytest.raises(ValueError, match="hermes"):
        get_parser("qwen25")


def test_default_step_runs_the_parsed_calls_and_answers_with_tool_messages():
    from rlrun.agent import Environment, Turn

    text = '<tool_call>\n{"name": "add", "arguments": {"a": 2, "b": 5}}\n</tool_call>'
    env, metrics = Environment(), {}
    step = asyncio.run(env.step(Turn(text, [], "stop", parse_hermes(text)), runner(metrics)))
    assert not step.done and step.observation == [{"role": "tool", "name": "add", "content": "7"}]
    assert asyncio.run(env.step(Turn("the answer is 7", [], "stop", []), runner())).done


NAMES = st.from_regex(r"[a-z_][a-z0-9_]{0,11}", fullmatch=True)
ARGS = st.dictionaries(NAMES, st.one_of(st.integers(-10**6, 10**6), st.text(max_size=12), st.booleans()), max_size=3)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(NAMES, ARGS), min_size=1, max_size=3))
def test_hermes_reads_back_what_qwen3s_template_writes(calls):
    """Round trip through Qwen3's own chat template (tests/unit/qwen3_chat_template.jinja)."""
    from qwen3_offline import build_qwen3_tokenizer

    tok = QWEN3.get("tok") or QWEN3.setdefault("tok", build_qwen3_tokenizer())
    message = {"role": "assistant", "content": "",
               "tool_calls": [{"type": "function", "function": {"name": n, "arguments": a}} for n, a in calls]}
    text = tok.apply_chat_template([{"role": "user", "content": "q"}, message], tokenize=False)
    assert parse_hermes(text) == [ToolCall(n, a) for n, a in calls]


QWEN3: dict = {}
