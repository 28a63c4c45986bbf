"""Tools for multi-turn rollouts: each call runs off the event loop with a time limit.

A tool is a plain function ``fn(**arguments) -> str`` (sync, run in a thread pool; or ``async``,
awaited). ``ToolRunner.run`` never raises for a tool's own failure: a tool that raises, hangs past
``timeout_s`` or is unknown becomes an error observation (``ToolResult.error``) and a counted metric
(``rollout/tool_calls``, ``rollout/tool_errors``, ``rollout/tool_timeouts``), so a bad tool never
crashes a run. A hung sync tool keeps its worker thread until it returns (Python cannot kill a
thread): the pool is sized for that (``max_workers``) and each timeout is counted, so it shows.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Callable

log = logging.getLogger(__name__)
METRICS = ("rollout/tool_calls", "rollout/tool_errors", "rollout/tool_timeouts")


@dataclass(frozen=True)
class ToolCall:
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class ToolResult:
    call: ToolCall
    content: str
    error: str | None = None  # "timeout" | "error: <exception>" | "unknown tool" | None (ok)

    def to_dict(self) -> dict:
        return {"name": self.call.name, "arguments": self.call.arguments, "content": self.content,
                "error": self.error}


_POOL: ThreadPoolExecutor | None = None
POOL_WORKERS = 32  # threads for sync tools, shared by every ToolRunner of the process


def shared_pool() -> ThreadPoolExecutor:
    global _POOL
    if _POOL is None:
        _POOL = ThreadPoolExecutor(max_workers=POOL_WORKERS, thread_name_prefix="rlrun-tool")
    return _POOL


class ToolRunner:
    """Runs tool calls with a per-call time limit; adds calls, errors and timeouts to ``metrics``
    (a dict shared with the caller, e.g. the rollout's counters)."""

    def __init__(self, tools: dict[str, Callable[..., Any]], timeout_s: float, *,
                 metrics: dict[str, float] | None = None, pool: ThreadPoolExecutor | None = None):
        self.tools = dict(tools)
        self.timeout_s = timeout_s
        self.metrics = metrics if metrics is not None else {}
        for key in METRICS:
            self.metrics.setdefault(key, 0.0)
        self._pool = pool or shared_pool()

    async def run(self, calls: list[ToolCall]) -> list[ToolResult]:
        """All calls of one turn, concurrently; results in call order."""
        return list(await asyncio.gather(*(self.call(c) for c in calls)))

    async def call(self, call: ToolCall) -> ToolResult:
        self.metrics["rollout/tool_calls"] += 1
        fn = self.tools.get(call.name)
        if fn is None:
            self.metrics["rollout/tool_errors"] += 1
            known = ", ".join(sorted(self.tools)) or "none"
            return ToolResult(call, f"error: unknown tool {call.name!r} (tools: {known})", "unknown tool")
        try:
            if inspect.iscoroutinefunction(fn):
                out = await asyncio.wait_for(fn(**call.arguments), self.timeout_s)
            else:
                loop = asyncio.get_running_loop()
                out = await asyncio.wait_for(loop.run_in_executor(self._pool, lambda: fn(**call.arguments)),
                                             self.timeout_s)
        except asyncio.TimeoutError:
            self.metrics["rollout/tool_timeouts"] += 1
            log.warning("tool %s timed out after %.1f s", call.name, self.timeout_s)
            return ToolResult(call, f"error: tool {call.name} timed out after {self.timeout_s:g} s", "timeout")
        except Exception as exc:  # noqa: BLE001 - the tool's failure is the model's observation
            self.metrics["rollout/tool_errors"] += 1
            log.warning("tool %s raised %r", call.name, exc)
            return ToolResult(call, f"error: {type(exc).__name__}: {exc}", f"error: {type(exc).__name__}: {exc}")
        return ToolResult(call, str(out))
