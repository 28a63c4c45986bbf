"""The loops, one per mode (train.async_train), each composing the same parts (rlrun.parts) through their seams
(`p: Parts`, rlrun.parts.seams; mypy checks src/rlrun/loops and src/rlrun/parts: tests/unit/test_seams.py)."""
from __future__ import annotations

from typing import Any, Callable

from rlrun.loops import async_loop, sync_loop
from rlrun.parts import Parts

LOOPS: dict[str, Callable[[Parts], dict]] = {"sync": sync_loop.run, "async": async_loop.run}


def loop_for(cfg: Any) -> Callable[[Parts], dict]:
    return LOOPS["async" if cfg.train.async_train else "sync"]
