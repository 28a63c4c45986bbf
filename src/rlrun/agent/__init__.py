"""Multi-turn agentic rollouts: environments, tools, tool-call parsers, the slime adapter, data
sources and batch reward classes (docs/agents.md)."""
from rlrun.agent.env import Environment, Step, Turn, env_generate, observation_ids
from rlrun.agent.parsers import PARSERS
from rlrun.agent.tools import ToolCall, ToolResult, ToolRunner

__all__ = ["Environment", "PARSERS", "Step", "ToolCall", "ToolResult", "ToolRunner", "Turn", "env_generate",
           "observation_ids"]
