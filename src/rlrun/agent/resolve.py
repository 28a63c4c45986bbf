"""rollout.generate_fn -> a generate function, through adapters chosen by what the path names:

    a function (handle, sample, sampling)           used as is (rlrun's form, rlrun.rollout.generate_api)
    an Environment subclass                          its multi-turn loop (rlrun.agent.env.env_generate)
    "slime:<path>" to (args, sample, sampling_params) slime's form, through rlrun.agent.slime_adapter

``check`` is what ``rlrun validate`` runs: the path imports and the object has the right arity.
"""
from __future__ import annotations

import inspect

from rlrun.agent.prefix import PREFIX
from rlrun.rollout.generate_api import GenerateFn, resolve_generate_fn

ARITY = 3  # (handle, sample, sampling) and slime's (args, sample, sampling_params)


def _load(spec: str | None):
    slime = spec is not None and spec.startswith(PREFIX)
    return resolve_generate_fn(spec[len(PREFIX):] if slime else spec), slime


def check(spec: str | None) -> str | None:
    """None when `spec` resolves to something rlrun can call, else what is wrong."""
    from rlrun.agent.env import Environment

    try:
        obj, slime = _load(spec)
    except Exception as exc:  # noqa: BLE001 - an import error in user code is a config problem here
        from rlrun.agent.slime_adapter import load_problem

        return load_problem(spec, exc) if spec.startswith(PREFIX) else str(exc)
    if isinstance(obj, type):
        if issubclass(obj, Environment) and not slime:
            return _check_env(spec, obj)
        return f"{spec!r} is a class that is not an rlrun.agent.Environment subclass"
    try:
        params = [p for p in inspect.signature(obj).parameters.values()
                  if p.default is p.empty and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        return None  # builtins without a signature: trust the caller
    want = "(args, sample, sampling_params)" if slime else "(handle, sample, sampling)"
    if len(params) != ARITY:
        return f"{spec!r} takes {len(params)} required positional arguments; a generate function takes {want}"
    if not inspect.iscoroutinefunction(obj):
        return f"{spec!r} is not an async function; write `async def f{want}`"
    return None


def _check_env(spec: str, env) -> str | None:
    from rlrun.agent.parsers import PARSERS

    if env.parser not in PARSERS:
        return f"{spec!r}: parser {env.parser!r} is not one of {', '.join(sorted(PARSERS))} (rlrun.agent.parsers)"
    bad = [name for name, fn in dict(env.tools).items() if not callable(fn)]
    if bad:
        return f"{spec!r}: tools {bad} are not callable (tools maps a name to a function)"
    return None


def load_generate_fn(spec: str | None, cfg=None) -> GenerateFn:
    """The function the runner calls; `cfg` (the RunConfig) gives a slime function its args."""
    from rlrun.agent.env import Environment, env_generate
    from rlrun.agent.slime_adapter import dotted_path, slime_generate

    obj, slime = _load(spec)
    if slime:
        return slime_generate(obj, cfg, dotted_path(spec))
    if isinstance(obj, type) and issubclass(obj, Environment):
        return env_generate(obj)
    return obj
