"""The loops, one per mode (train.async_train), each composing the same parts (rlrun.parts)."""
from __future__ import annotations


def _sync(p) -> dict:
    from rlrun.loops import sync_loop as loop

    return loop.run(p)


def _async(p) -> dict:
    from rlrun.loops import async_loop

    return async_loop.run(p)


LOOPS = {"sync": _sync, "async": _async}


def loop_for(cfg):
    return LOOPS["async" if cfg.train.async_train else "sync"]
