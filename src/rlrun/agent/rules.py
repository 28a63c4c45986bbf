"""Rules for multi-turn rollouts (docs/agents.md): rollout.generate_fn, rollout.max_turns, data.source.

These import the user's code (what the runner would import), so a path that does not import, names
the wrong kind of object or has the wrong arity is reported by `rlrun validate`, not by a Ray worker.
Nothing is imported while the keys are null (the default), so `rlrun plan` stays torch-free.
"""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.registry import RULES as rule
from rlrun.config.schema import RunConfig


@rule
def generate_fn(cfg: RunConfig) -> Iterator[Problem]:
    r = cfg.rollout
    if r.generate_fn is not None:
        from rlrun.agent.resolve import check

        why = check(r.generate_fn)
        if why:
            yield Problem("rollout.generate_fn", why, "name an async function (handle, sample, sampling), an "
                          "rlrun.agent.Environment subclass, or slime:<path> to an async (args, sample, "
                          "sampling_params) function, as 'package.module:name' or 'path/to/file.py:name' "
                          "(docs/agents.md)", r.generate_fn)
    elif r.max_turns > 1:
        yield Problem("rollout.max_turns", f"{r.max_turns} turns but rollout.generate_fn is null (one request per "
                      "sample: max_turns would be ignored)", "set rollout.generate_fn to a multi-turn function or "
                      "Environment, or rollout.max_turns=1", r.max_turns)


@rule
def data_source(cfg: RunConfig) -> Iterator[Problem]:
    spec = cfg.data.source
    if spec is None:
        return
    from rlrun.agent.source import check_source_class
    from rlrun.rollout.generate_api import load_object

    try:
        why = check_source_class(load_object(spec, "data.source class"))
    except Exception as exc:  # noqa: BLE001 - the user's import error is the problem to report
        why = str(exc)
    if why:
        yield Problem("data.source", why, "name a subclass of rlrun.agent.source.DataSource (or BufferedDataSource) "
                      "as 'package.module:Class' or 'path/to/file.py:Class'", spec)
