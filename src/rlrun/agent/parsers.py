"""Tool-call parsers: model text -> ToolCalls, chosen by name (``PARSERS``; a new format is one entry).

``hermes``: the format of Qwen2.5/Qwen3 and Hermes chat templates,
``<tool_call>\\n{"name": ..., "arguments": {...}}\\n</tool_call>`` (one block per call; the Qwen3
template renders the tools list and these blocks, see its ``tokenizer_config.json``). A block that is
not valid JSON or has no name is returned as a call named ``""`` with the raw text, so that the
environment sees (and the ToolRunner counts) the malformed call instead of it vanishing.
"""
from __future__ import annotations

import json
import re
from typing import Callable

from rlrun.agent.tools import ToolCall

_HERMES = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)


def parse_hermes(text: str) -> list[ToolCall]:
    calls = []
    for body in _HERMES.findall(text):
        try:
            obj = json.loads(body)
            name, args = obj["name"], obj.get("arguments", {})
            if isinstance(args, str):
                args = json.loads(args)
            if not isinstance(name, str) or not isinstance(args, dict):
                raise TypeError("name must be a string and arguments an object")
        except (ValueError, KeyError, TypeError) as exc:
            calls.append(ToolCall("", {"raw": body, "error": f"{type(exc).__name__}: {exc}"}))
            continue
        calls.append(ToolCall(name, args))
    return calls


def parse_none(text: str) -> list[ToolCall]:
    """No tool calls (an environment that reads the text itself)."""
    return []


PARSERS: dict[str, Callable[[str], list[ToolCall]]] = {"hermes": parse_hermes, "none": parse_none}


def get_parser(name: str) -> Callable[[str], list[ToolCall]]:
    if name not in PARSERS:
        raise ValueError(f"tool-call parser {name!r} is unknown; use one of {', '.join(sorted(PARSERS))}")
    return PARSERS[name]
