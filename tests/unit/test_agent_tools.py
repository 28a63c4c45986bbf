"""Tools and tool-call parsing: time limits, exceptions and unknown tools become observations and counts."""
import asyncio
import time

import pytest

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
