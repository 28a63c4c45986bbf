"""Multi-turn agentic rollouts: environments, tools, tool-call parsers, the slime adapter, data
sources and batch reward classes (docs/agents.md). The names below import on first use, so that
`rlrun plan` (which loads rlrun.agent.rules) does not import the environments' asyncio and tools."""
from __future__ import annotations

import importlib
from typing import Any

_WHERE = {"Environment": "env", "Step": "env", "Turn": "env", "env_generate": "env", "observation_ids": "env",
          "PARSERS": "parsers", "ToolCall": "tools", "ToolResult": "tools", "ToolRunner": "tools"}
__all__ = ["Environment", "PARSERS", "Step", "ToolCall", "ToolResult", "ToolRunner", "Turn", "env_generate",
           "observation_ids"]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module 'rlrun.agent' has no attribute {name!r}")
    return getattr(importlib.import_module(f"rlrun.agent.{_WHERE[name]}"), name)
