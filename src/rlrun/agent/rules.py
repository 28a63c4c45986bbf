"""Rules for multi-turn rollouts (docs/agents.md): rollout.generate_fn, rollout.max_turns, data.source,
a slime reward function in data.rm_type.

These import the user's code (what the runner would import), so a path that does not import, names
the wrong kind of object or has the wrong arity is reported by `rlrun validate`, not by a Ray worker.
Nothing is imported while the keys are null (the default), so `rlrun plan` stays torch-free.
"""
from __future__ import annotations

from typing import Iterator

from rlrun.agent.prefix import PREFIX
from rlrun.config.errors import Problem
from rlrun.config.kinds import LOSS_TYPES
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
    r = cfg.rollout
    if r.partial_rollout and (r.generate_fn or "").startswith(PREFIX):
        yield Problem("rollout.partial_rollout", "a slime generate function sends its own requests to the router; "
                      "rlrun continues aborted requests only for those sent through its handle, and slime's "
                      "examples assert `not args.partial_rollout`", "set rollout.partial_rollout=false", True)


@rule
def slime_reward(cfg: RunConfig) -> Iterator[Problem]:
    """data.rm_type=slime:<path>: slime's reward(args, sample), called by the slime adapter right after a
    slime generate function or rlrun's own generation (slime's default generate; as slime's generate_and_rm
    does), for every sample it makes, eval ones too."""
    rm = cfg.data.rm_type
    if not rm.startswith(PREFIX):
        return
    # rlrun's own generation (generate_fn null) is slime's default generate: rlrun.agent.slime_rollout scores it
    if cfg.rollout.generate_fn is not None and not cfg.rollout.generate_fn.startswith(PREFIX) \
            and cfg.rollout.rollout_fn is None:
        yield Problem("data.rm_type", f"{rm!r} is a slime reward function (args, sample); it scores the samples of a "
                      f"slime generate function, but rollout.generate_fn is {cfg.rollout.generate_fn!r}",
                      "set rollout.generate_fn=slime:<module>:<generate> (or a slime rollout.rollout_fn, whose "
                      "generate_and_rm calls it), or port the reward to "
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


@rule
def slime_rollout_fn(cfg: RunConfig) -> Iterator[Problem]:
    """rollout.rollout_fn=slime:<path>: slime's rollout function (args, rollout_id, data_buffer) makes each rollout
    (rlrun.agent.slime_rollout). It draws its prompts from slime's data buffer, filters and scores them itself."""
    r = cfg.rollout
    spec = r.rollout_fn
    if spec is None:
        return
    if not spec.startswith(PREFIX):
        yield Problem("rollout.rollout_fn", f"{spec!r}: rlrun runs slime's rollout functions only (its own rollout "
                      "is rollout.generate_fn per sample)", "write slime:<module>:<function>", spec)
        return
    if r.generate_fn is not None and not r.generate_fn.startswith(PREFIX):
        yield Problem("rollout.generate_fn", f"{r.generate_fn!r}: slime's rollout function calls slime's "
                      "generate_and_rm, which runs a slime generate function (args.custom_generate_function_path)",
                      "use slime:<module>:<generate> or null (slime's default generate)", r.generate_fn)
    for key, value, why in (
            ("rollout.dynamic_sampling", r.dynamic_sampling, "the rollout function keeps its own filters"),
            ("data.source", cfg.data.source, "the rollout function draws from slime's data buffer"),
            ("rollout.partial_rollout", r.partial_rollout or None, "rlrun continues aborted requests only for "
             "those sent through its handle (the rollout function requeues aborted groups itself)")):
        if value is not None:
            yield Problem(key, f"{value!r} would be ignored with rollout.rollout_fn: {why}", f"remove {key}", value)
    if cfg.eval.datasets:
        yield Problem("eval.datasets", "with rollout.rollout_fn slime evaluates through the rollout function "
                      "(evaluation=True, its --eval-function-path default); rlrun evaluates through "
                      "rollout.generate_fn only", "remove eval.datasets (or evaluate the checkpoints apart)",
                      [d.name for d in cfg.eval.datasets])
    from rlrun.agent.slime_adapter import load_problem
    from rlrun.rollout.generate_api import load_object

    try:
        fn = load_object(spec[len(PREFIX):], "slime rollout function")
    except Exception as exc:  # noqa: BLE001 - the user's import error is the problem to report
        yield Problem("rollout.rollout_fn", load_problem(spec, exc), "fix the path: slime:<module>:<fn>", spec)
        return
    import inspect

    try:
        inspect.signature(fn).bind(None, 0, None)
    except TypeError:
        yield Problem("rollout.rollout_fn", f"{spec!r} does not take (args, rollout_id, data_buffer)",
                      "write slime's `generate_rollout(args, rollout_id, data_buffer, evaluation=False)`", spec)


@rule
def slime_reward_post_process(cfg: RunConfig) -> Iterator[Problem]:
    """algo.reward_post_process=slime:<path>: slime's post_process_rewards(args, samples) -> (raw_rewards, rewards),
    run unchanged on each rollout's trained samples (rlrun.agent.slime_rollout.SlimeRewardPostProcess); its
    rewards replace the group normalisation, so it needs an estimator that reads rewards."""
    spec = cfg.algo.reward_post_process
    if spec is None:
        return
    key = "algo.reward_post_process"
    if not spec.startswith(PREFIX):
        yield Problem(key, f"{spec!r}: rlrun runs slime's reward post-process functions (args, samples) only",
                      "write slime:<module>:<function> (slime's --custom-reward-post-process-path)", spec)
        return
    if not LOSS_TYPES[cfg.algo.loss_type].needs_advantages:
        yield Problem(key, f"algo.loss_type={cfg.algo.loss_type} reads no advantages, so the post-processed rewards "
                      "would be ignored", f"remove {key}", spec)
    from rlrun.agent.slime_adapter import load_problem
    from rlrun.rollout.generate_api import load_object

    try:
        fn = load_object(spec[len(PREFIX):], "slime reward post-process function")
    except Exception as exc:  # noqa: BLE001 - the user's import error is the problem to report
        yield Problem(key, load_problem(spec, exc), "fix the path: slime:<module>:<fn>", spec)
        return
    import inspect

    try:
        inspect.signature(fn).bind(None, None)
    except TypeError:
        yield Problem(key, f"{spec!r} does not take (args, samples)", "write `def post_process_rewards(args, "
                      "samples, **kwargs) -> (raw_rewards, rewards)`, slime's form", spec)
    except ValueError:
        pass
