"""Run a slime custom generate function (``--custom-generate-function-path``) inside rlrun, unchanged.

slime's contract (slime/rollout/sglang_rollout.py, ``generate_and_rm``): ``async def generate(args,
sample, sampling_params[, evaluation=False]) -> Sample | list[Sample]`` where ``args`` is slime's
argparse namespace, ``sample`` a ``slime.utils.types.Sample`` and ``sampling_params`` SGLang's
sampling dict (a copy per sample). The function POSTs to sglang-router (slime's
``http_utils.post``), fills ``sample.tokens`` (prompt + response ids), ``response``,
``response_length``, ``loss_mask``, ``rollout_log_probs``, ``status`` and optionally ``reward``.

``rollout.generate_fn=slime:<path>`` runs it through ``slime_generate``, which gives it what slime
gives it:

* ``args``: every field in ``ARGS``, derived from the RunConfig (docs/agents.md lists them), a
  fresh shallow copy per call (slime's multi-agent example sets attributes on it);
* slime's HTTP client, opened for the running event loop and pointed at rlrun's router through
  ``args.sglang_router_ip`` / ``args.sglang_router_port``;
* ``sample``: slime's own ``Sample`` when slime is importable, else rlrun's stand-in with the same
  fields and semantics (``rlrun.agent.slime_compat``);
* ``sampling_params``: the dict rlrun sends (the sample's seed as ``sampling_seed``).

Its result (one Sample or a list) comes back as rlrun Samples: the prompt is ``tokens`` minus the
last ``response_length`` ids; loss mask and log-probs one per response token (else a clear error).
"""
from __future__ import annotations

import argparse
import copy
import inspect
import math
from enum import Enum
from typing import Any, Callable
from urllib.parse import urlsplit

from rlrun.agent.prefix import PREFIX
from rlrun.data.sample import Sample, Status
from rlrun.rollout.generate_api import GenerateFn


def _rm_type(cfg) -> str | None:
    return None if ":" in cfg.data.rm_type else cfg.data.rm_type


def _custom_rm_path(cfg) -> str | None:
    """slime's --custom-rm-path for data.rm_type=slime:<module>:<fn> (slime's rm_hub imports it by this
    dotted path, e.g. in its multi-agent example); a file path has no dotted form: None."""
    rm = cfg.data.rm_type
    if not rm.startswith(PREFIX):
        return None
    dotted = dotted_path(rm)
    return None if ".py:" in dotted else dotted


# slime's args field -> (where rlrun's value comes from, how it is computed from (cfg, handle, dotted)).
# The rollout handle carries rollout.max_response_len / context_length / max_turns as the runner set them.
ARGS: dict[str, tuple[str, Callable[[Any, Any, str], Any]]] = {
    "sglang_router_ip": ("rlrun's router (its URL)", lambda c, h, p: urlsplit(h.client.url).hostname),
    "sglang_router_port": ("rlrun's router (its URL)", lambda c, h, p: urlsplit(h.client.url).port),
    "hf_checkpoint": ("the engines' model dir (checkpoint.hf, or the run's converted copy)",
                      lambda c, h, p: h.model_path or c.checkpoint.hf),
    "rollout_temperature": ("rollout.temperature", lambda c, h, p: c.rollout.temperature),
    "rollout_top_p": ("rollout.top_p", lambda c, h, p: c.rollout.top_p),
    "rollout_top_k": ("rollout.top_k", lambda c, h, p: c.rollout.top_k),
    "rollout_stop": ("rollout.stop ([] -> None, slime's default)", lambda c, h, p: list(c.rollout.stop) or None),
    "rollout_stop_token_ids": ("rollout.stop_token_ids ([] -> None, slime's default)",
                               lambda c, h, p: list(c.rollout.stop_token_ids) or None),
    "rollout_skip_special_tokens": ("False (rlrun keeps special tokens; slime's default)", lambda c, h, p: False),
    "rollout_max_response_len": ("rollout.max_response_len", lambda c, h, p: h.max_response_len),
    "rollout_max_context_len": ("rollout.context_length", lambda c, h, p: h.context_length),
    "eval_max_context_len": ("rollout.context_length", lambda c, h, p: h.context_length),
    "rollout_seed": ("run.seed", lambda c, h, p: c.run.seed),
    "n_samples_per_prompt": ("rollout.n_samples_per_prompt", lambda c, h, p: c.rollout.n_samples_per_prompt),
    "rollout_batch_size": ("rollout.rollout_batch_size", lambda c, h, p: c.rollout.rollout_batch_size),
    "over_sampling_batch_size": ("rollout.over_sampling_batch_size",
                                 lambda c, h, p: c.rollout.over_sampling_batch_size),
    "partial_rollout": ("rollout.partial_rollout", lambda c, h, p: c.rollout.partial_rollout),
    "mask_offpolicy_in_partial_rollout": ("rollout.mask_offpolicy_in_partial_rollout",
                                          lambda c, h, p: c.rollout.mask_offpolicy_in_partial_rollout),
    "rollout_num_gpus": ("rollout.num_gpus", lambda c, h, p: c.rollout.num_gpus),
    "rollout_num_gpus_per_engine": ("rollout.gpus_per_engine", lambda c, h, p: c.rollout.gpus_per_engine),
    "rollout_num_engines": ("rollout.num_gpus / rollout.gpus_per_engine", lambda c, h, p: c.rollout.num_engines),
    "sglang_server_concurrency": ("ceil(rollout.max_concurrency / engines): slime's per-engine bound",
                                  lambda c, h, p: math.ceil(c.rollout.max_concurrency / c.rollout.num_engines)),
    "sglang_dp_size": ("rollout.sglang.dp_size (None when unset, slime's default)",
                       lambda c, h, p: c.rollout.sglang.get("dp_size")),
    "router_policy": ("rollout.router.policy", lambda c, h, p: c.rollout.router.policy),
    "sglang_model_routers": ("None (one model behind rlrun's router)", lambda c, h, p: None),
    "use_distributed_post": ("False (posts go from the rollout process)", lambda c, h, p: False),
    "sglang_enable_deterministic_inference": ("False (rlrun seeds each request instead)", lambda c, h, p: False),
    "sglang_speculative_algorithm": ("None", lambda c, h, p: None),
    "use_rollout_routing_replay": ("False", lambda c, h, p: False),
    "ci_test": ("False", lambda c, h, p: False),
    "context_parallel_size": ("parallelism.cp", lambda c, h, p: c.parallelism.cp),
    "max_tokens_per_gpu": ("train.max_tokens_per_gpu", lambda c, h, p: c.train.max_tokens_per_gpu),
    "num_gpus_per_node": ("train.gpus_per_node", lambda c, h, p: c.train.gpus_per_node),
    "rm_type": ("data.rm_type (None when it names a function)", lambda c, h, p: _rm_type(c)),
    "rm_url": ("data.rm_url", lambda c, h, p: c.data.rm_url),
    "custom_rm_path": ("data.rm_type=slime:a.b:f -> \"a.b.f\" (None otherwise)", lambda c, h, p: _custom_rm_path(c)),
    "reward_key": ("data.reward_key", lambda c, h, p: c.data.reward_key),
    "group_rm": ("False", lambda c, h, p: False),
    "apply_chat_template": ("data.apply_chat_template", lambda c, h, p: c.data.apply_chat_template),
    "apply_chat_template_kwargs": ("{}", lambda c, h, p: {}),
    "custom_generate_function_path": ("rollout.generate_fn, in slime's dotted form", lambda c, h, p: p),
    "max_turns": ("rollout.max_turns (rlrun's; slime has no such flag)", lambda c, h, p: h.max_turns),
}


def slime_args(cfg, handle, dotted: str | None = None) -> argparse.Namespace:
    """slime's args namespace for a generate function, from the RunConfig and the rollout handle."""
    return argparse.Namespace(**{name: get(cfg, handle, dotted) for name, (_src, get) in ARGS.items()})


def sampling_params(sampling, seed: int | None = None) -> dict:
    """SGLang's sampling dict as rlrun sends it (slime's `sampling_params` argument), seeded per sample."""
    return sampling.to_json(seed=seed)


def to_slime(sample: Sample, cls) -> Any:
    """rlrun's prompt Sample -> slime's Sample (`cls`): prompt ids in `tokens`, nothing generated yet."""
    out = cls(prompt=sample.prompt, tokens=list(sample.prompt_tokens), label=sample.label,
              metadata=sample.metadata, group_index=sample.group_id)
    out.index = sample.group_id  # rlrun numbers prompts (groups), not samples
    return out


def reward_value(reward, key: str | None = None) -> float:
    """slime's Sample.get_reward_value: a dict reward (e.g. ReTool's {"score", "acc", ...}) is read at `key`
    (data.reward_key, slime's --reward-key), "score" when none is set."""
    if isinstance(reward, dict):
        k = key or "score"
        if k not in reward:
            raise ValueError(f"slime reward {reward!r} has no key {k!r}: set data.reward_key (slime's --reward-key)")
        return float(reward[k])
    return float(reward)


def from_slime(out, sample: Sample, reward_key: str | None = None) -> Sample:
    """Copy one slime Sample into rlrun's `sample`; the prompt is `tokens` minus the response."""
    n = int(out.response_length)
    tokens = [int(t) for t in out.tokens]
    if n > len(tokens):
        raise ValueError(f"slime generate function returned response_length {n} but only {len(tokens)} tokens")
    sample.prompt_tokens, sample.response_tokens = tokens[:len(tokens) - n], tokens[len(tokens) - n:]
    mask = [int(m) for m in out.loss_mask] if out.loss_mask is not None else [1] * n
    logprobs = [float(x) for x in out.rollout_log_probs] if out.rollout_log_probs is not None else None
    if len(mask) != n or (logprobs is not None and len(logprobs) != n):
        raise ValueError(f"slime generate function: {n} response tokens but {len(mask)} loss-mask entries and "
                         f"{len(logprobs) if logprobs is not None else 'no'} log-probs; they must match")
    if logprobs is None:
        sample.metadata["rollout_logprobs_missing"] = True
    sample.loss_mask, sample.rollout_logprobs = mask, logprobs or [0.0] * n
    version = _version(out.weight_versions[-1]) if out.weight_versions else None
    sample.weight_version = version
    sample.token_versions = [version if m else None for m in mask]
    sample.response = out.response
    sample.prompt = out.prompt
    sample.status = Status(out.status.value if isinstance(out.status, Enum) else str(out.status))
    if out.reward is not None:
        sample.reward = reward_value(out.reward, reward_key)
    return sample


def _version(v) -> int | None:
    try:
        return int(v)
    except (TypeError, ValueError):
        return None


def _results(out, sample: Sample, reward_key: str | None = None) -> Sample | list[Sample]:
    """A Sample -> `sample` filled in; a list (slime's fan-out, e.g. multi-agent) -> one rlrun Sample
    each, in the prompt's group, the first reusing `sample`."""
    if not isinstance(out, list):
        return from_slime(out, sample, reward_key)
    if not out:
        raise ValueError("slime generate function returned an empty list; return at least one Sample")
    results = []
    for i, one in enumerate(out):
        target = sample if i == 0 else Sample(prompt=sample.prompt, label=sample.label, group_id=sample.group_id,
                                              metadata=copy.deepcopy(sample.metadata))
        results.append(from_slime(one, target, reward_key))
    return results


def slime_generate(fn, cfg=None, dotted: str | None = None) -> GenerateFn:
    """rlrun's generate-function form of a slime one. `cfg`: the RunConfig (None: rlrun's defaults);
    `dotted`: the function's path in slime's form (args.custom_generate_function_path). Its
    `for_evaluation` attribute is the same for eval datasets: slime passes evaluation=True there
    to a function that takes it."""
    from rlrun.agent import slime_compat

    if cfg is None:
        from rlrun.config import load

        cfg = load([])
    takes_evaluation = "evaluation" in inspect.signature(fn).parameters
    rm = slime_reward(cfg.data.rm_type)
    base: list[argparse.Namespace] = []

    def make(evaluation: bool):
        async def adapted(handle, sample: Sample, sampling) -> Sample | list[Sample]:
            if not base:
                base.append(slime_args(cfg, handle, dotted))
                # GenerateState is one per process (slime's SingletonMeta), built from the first args it
                # sees: a new run in the same process (tests, an in-process sweep) starts from its own args
                if hasattr(slime_compat.GenerateState, "clear_instances"):
                    slime_compat.GenerateState.clear_instances()
            args = copy.copy(base[0])
            slime_compat.ensure_client(args)
            kw = {"evaluation": evaluation} if takes_evaluation else {}
            out = await fn(args, to_slime(sample, slime_compat.Sample), sampling_params(sampling, handle.seed), **kw)
            if rm is not None:
                await _score(rm, args, out)
            return _results(out, sample, args.reward_key)

        adapted.__name__ = f"slime[{getattr(fn, '__name__', fn)}{', evaluation' if evaluation else ''}]"
        return adapted

    adapted = make(False)
    adapted.for_evaluation = make(True)
    return adapted


def dotted_path(spec: str) -> str:
    """rollout.generate_fn=slime:a.b:generate -> "a.b.generate" (slime's --custom-generate-function-path
    form); a file path stays "path/to/file.py:generate" (slime has no form for it)."""
    target = spec[len(PREFIX):] if spec.startswith(PREFIX) else spec
    module, _, attr = target.rpartition(":")
    return target if module.endswith(".py") else f"{module}.{attr}"


def slime_reward(rm_type: str):
    """data.rm_type=slime:<path> -> slime's `async def reward(args, sample, **kw)` (--custom-rm-path), else None."""
    if not rm_type.startswith(PREFIX):
        return None
    from rlrun.rollout.generate_api import load_object

    return load_object(rm_type[len(PREFIX):], "slime reward function")


async def _score(rm, args, out) -> None:
    """slime's generate_and_rm after the function: a Sample without a reward gets rm(args, sample); a
    list gets one rm(args, [those without one]) call, slime's batched form for --custom-rm-path.
    Unlike slime, aborted samples are scored too: slime hands them back to its buffer for another
    try, rlrun trains on what came back."""
    if isinstance(out, list):
        todo = [s for s in out if s.reward is None]
        if todo:
            rewards = await rm(args, todo)
            if len(rewards) != len(todo):
                raise ValueError(f"slime reward function returned {len(rewards)} rewards for {len(todo)} samples")
            for s, r in zip(todo, rewards):
                s.reward = r
    elif out.reward is None:
        out.reward = await rm(args, out)


def load_problem(spec: str, exc: Exception) -> str:
    """What to say when a slime:<path> does not import: slime itself missing gets its own fix."""
    if isinstance(exc, ModuleNotFoundError) and (exc.name or "").split(".")[0] == "slime":
        return (f"{spec!r} imports slime, which does not import here ({exc}); put a slime checkout on "
                "PYTHONPATH (slime's modules need pylatexenc, psutil, httpx: pip install -e '.[slime-examples]')")
    return str(exc)
