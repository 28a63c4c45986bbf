"""Custom reward functions by `module.path:function` or `path/to/file.py:function` (sync or async, per
sample or group; loaded by rlrun.userfn).

Per-sample signature: fn(response, label, metadata) -> float (or an awaitable of it).
Per-group signature:  fn(responses, labels, metadatas) -> list[float], marked with @per_group;
score_batch calls it once per group of `group_size` consecutive samples.
Batch class: `module.path:Class` whose instances are called as inst(responses, labels, metadatas) ->
list[float] (or an awaitable) with the whole batch, in the driver process, built once per process
(a model-based reward loads its model in __init__). No time limit applies; an exception scores the
batch 0 and is counted in reward/errors.
"""

from __future__ import annotations

import asyncio
import inspect
import threading


def is_custom(rm_type: str) -> bool:
    return ":" in rm_type


def load_function(path: str):
    """`module.path:function` or `path/to/file.py:function` (rlrun.userfn, the loader of every user
    reference); the error says which part is missing and how to fix it."""
    from rlrun.userfn import load

    return load(path, "custom reward")


def per_group(fn):
    """Mark a custom reward as per-group: called with lists of one group's responses/labels/metadata."""
    fn.rlrun_per_group = True
    return fn


def is_per_group(fn) -> bool:
    return bool(getattr(fn, "rlrun_per_group", False))


def run_sync(value):
    """Resolve an awaitable from sync code, also when the calling thread already runs a loop."""
    if not inspect.isawaitable(value):
        return value

    async def wrap():
        return await value

    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(wrap())
    box = {}
    t = threading.Thread(target=lambda: box.update(v=asyncio.run(wrap())))
    t.start()
    t.join()
    return box["v"]


def call_custom(path: str, *args):
    return run_sync(load_function(path)(*args))


_INSTANCES: dict[str, object] = {}


def is_batch_class(path: str) -> bool:
    return is_custom(path) and isinstance(load_function(path), type)


def batch_class_scores(path: str, responses: list, labels: list, metadatas: list) -> list[float]:
    """Score a batch with the reward class at `path` (one instance per process)."""
    if path not in _INSTANCES:
        _INSTANCES[path] = load_function(path)()
    out = [float(x) for x in run_sync(_INSTANCES[path](responses, labels, metadatas))]
    if len(out) != len(responses):
        raise ValueError(f"reward class {path} returned {len(out)} scores for {len(responses)} responses")
    return out
