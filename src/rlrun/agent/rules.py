"""Rules for multi-turn rollouts (docs/agents.md): rollout.generate_fn, rollout.max_turns, data.source,
a slime reward function in data.rm_type.

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


@rule
def slime_partial_rollout(cfg: RunConfig) -> Iterator[Problem]:
    """A slime generate function posts to the router itself, so rlrun's partial rollout (an aborted
    request continued after the weight push, ClientHandle.generate) cannot reach its requests; slime's
    examples refuse it too (`assert not args.partial_rollout`)."""
    from rlrun.agent.slime_adapter import PREFIX

    r = cfg.rollout
    if r.partial_rollout and (r.generate_fn or "").startswith(PREFIX):
        yield Problem("rollout.partial_rollout", "a slime generate function sends its own requests to the router; "
                      "rlrun continues aborted requests only for those sent through its handle, and slime's "
                      "examples assert `not args.partial_rollout`", "set rollout.partial_rollout=false", True)


@rule
def slime_reward(cfg: RunConfig) -> Iterator[Problem]:
    """data.rm_type=slime:<path>: slime's reward(args, sample), called by the slime adapter right after a
    slime generate function (as slime's generate_and_rm does), for every sample it makes, eval ones too."""
    from rlrun.agent.slime_adapter import PREFIX

    rm = cfg.data.rm_type
    if not rm.startswith(PREFIX):
        return
    if not (cfg.rollout.generate_fn or "").startswith(PREFIX):
        yield Problem("data.rm_type", f"{rm!r} is a slime reward function (args, sample); it scores the samples of a "
                      f"slime generate function, but rollout.generate_fn is {cfg.rollout.generate_fn!r}",
                      "set rollout.generate_fn=slime:<module>:<generate>, or port the reward to "
                      "data.rm_type=module:function (response, label, metadata; docs/rewards.md)", rm)
    for i, ds in enumerate(cfg.eval.datasets):
        if ds.rm_type != rm:
            yield Problem(f"eval.datasets.{i}.rm_type", f"{ds.rm_type!r} would not be used: the slime reward "
                          f"function {rm!r} scores every sample the slime generate function makes, eval ones too "
                          "(as slime's --custom-rm-path does)", f"set eval.datasets.{i}.rm_type={rm}", ds.rm_type)
    from rlrun.agent.slime_adapter import load_problem, slime_reward as load

    try:
        fn = load(rm)
    except Exception as exc:  # noqa: BLE001 - the user's import error is the problem to report
        yield Problem("data.rm_type", load_problem(rm, exc), "fix the path: slime:<module>:<fn> or "
                      "slime:path/to/file.py:<fn>", rm)
        return
    import inspect

    if not inspect.iscoroutinefunction(fn):
        yield Problem("data.rm_type", f"{rm!r} is not an async function", "write `async def reward(args, sample, "
                      "**kwargs)`, slime's --custom-rm-path form", rm)
