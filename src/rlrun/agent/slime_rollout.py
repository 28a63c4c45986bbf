"""Run a slime rollout function (``--rollout-function-path``) inside rlrun, unchanged.

slime's contract (slime/ray/rollout.py, ``call_rollout_fn``): ``generate_rollout(args, rollout_id, data_buffer,
evaluation=False)`` returns the rollout's groups, ``list[list[Sample]]`` (or an object with ``.samples``, slime's
``RolloutFnTrainOutput``), each sample generated and scored; ``data_buffer`` is slime's data source
(slime/rollout/data_source.py ``RolloutDataSourceWithBuffer``): ``get_samples(n)`` hands out n groups of
``n_samples_per_prompt`` fresh Samples (prompt, label, metadata, index, group_index), ``add_samples(groups)`` takes
groups back (slime's fully-async example requeues aborted groups there), handed out again first.

``rollout.rollout_fn=slime:<module>:<fn>`` makes rlrun's rollout side (rlrun.parts.rollout_side) call it once per
rollout with what slime gives it: the args of rlrun.agent.slime_adapter (``ARGS``, the same as a generate function
gets, plus ``rollout_function_path`` and ``rollout_global_dataset``), slime's HTTP client pointed at rlrun's
router, and ``SlimeDataBuffer`` over rlrun's prompt data. Its groups come back as rlrun Samples (the adapter's
``from_slime``: prompt = tokens minus the response, loss mask, log-probs, reward read at data.reward_key).
"""
from __future__ import annotations

import copy
import inspect
import threading
from types import SimpleNamespace
from typing import Any

from rlrun.agent import slime_adapter as sa
from rlrun.data.sample import Sample


# slime's default --rollout-function-path (slime/utils/arguments.py), what args.rollout_function_path says without one
DEFAULT_ROLLOUT = "slime.rollout.sglang_rollout.generate_rollout"


class SlimeDataBuffer:
    """slime's data_buffer over rlrun's prompt dataset (thread-safe: slime's fully-async worker calls it from
    its own thread)."""

    def __init__(self, prompts, n_samples_per_prompt: int, sample_cls):
        self.prompts, self.n, self.cls = prompts, n_samples_per_prompt, sample_cls
        self.buffer: list[list[Any]] = []
        self.lock = threading.Lock()
        self.groups = 0   # group ids handed out (slime's group_index)
        self.samples = 0  # sample ids handed out (slime's index)

    def get_samples(self, num_samples: int) -> list[list[Any]]:
        """num_samples groups: those handed back first (slime's buffer), then fresh prompts."""
        from rlrun.data import make_group

        with self.lock:
            out, self.buffer = self.buffer[:num_samples], self.buffer[num_samples:]
            for item in self.prompts.next_batch(num_samples - len(out)):
                group = []
                for s in make_group(item, self.n, self.groups):
                    one = sa.to_slime(s, self.cls)
                    one.index, self.samples = self.samples, self.samples + 1
                    group.append(one)
                self.groups += 1
                out.append(group)
            return out

    def add_samples(self, samples: list[list[Any]]) -> None:
        with self.lock:
            self.buffer.extend(samples)

    def get_buffer_length(self) -> int:
        with self.lock:
            return len(self.buffer)

    def __len__(self) -> int:
        return len(self.prompts.items)


def slime_rollout_args(cfg, router_url: str, model_path: str | None, dotted: str) -> Any:
    """slime's args for a rollout function: the generate-function args (slime_adapter.ARGS) + its own fields."""
    handle = SimpleNamespace(client=SimpleNamespace(url=router_url), model_path=model_path,
                             max_response_len=cfg.rollout.max_response_len, context_length=cfg.rollout.context_length,
                             max_turns=cfg.rollout.max_turns)
    gen = cfg.rollout.generate_fn
    args = sa.slime_args(cfg, handle, sa.dotted_path(gen) if gen else None)
    args.rollout_function_path = dotted
    args.rollout_global_dataset = True  # rlrun always draws from its prompt dataset
    return args


def _flatten(group) -> list:
    """A group: a list of Samples, or of lists of them (a generate function's fan-out)."""
    return [s for item in group for s in (item if isinstance(item, list) else [item])]


class SlimeRolloutFn:
    """rollout.rollout_fn=slime:<path>, loaded once per rollout side."""

    def __init__(self, spec: str, cfg, prompts, router_url: str, model_path: str | None):
        from rlrun.agent import slime_compat
        from rlrun.rollout.generate_api import load_object

        self.fn = load_object(spec[len(sa.PREFIX):], "slime rollout function")
        self.cfg = cfg
        self.args = slime_rollout_args(cfg, router_url, model_path, sa.dotted_path(spec))
        self.buffer = SlimeDataBuffer(prompts, cfg.rollout.n_samples_per_prompt, slime_compat.Sample)
        if hasattr(slime_compat.GenerateState, "clear_instances"):  # one per process: this run's args
            slime_compat.GenerateState.clear_instances()
        slime_compat.ensure_client(self.args)
        self.takes_evaluation = "evaluation" in inspect.signature(self.fn).parameters

    def __call__(self, rollout_id: int) -> list[Sample]:
        """One rollout: slime's groups as rlrun Samples (group ids in the order slime returned them)."""
        out = self.fn(copy.copy(self.args), rollout_id, self.buffer)
        groups = getattr(out, "samples", out)
        if not isinstance(groups, list) or not all(isinstance(g, list) for g in groups):
            raise TypeError(f"slime rollout function {self.fn.__name__} returned {type(groups).__name__}; slime's "
                            "contract is list[list[Sample]] (or an object with .samples)")
        samples = []
        for gid, group in enumerate(groups):
            for s in _flatten(group):
                target = Sample(prompt=s.prompt, label=s.label, group_id=gid,
                                metadata=dict(s.metadata) if isinstance(s.metadata, dict) else {})
                samples.append(sa.from_slime(s, target, self.args.reward_key))
        return samples


class SlimeRewardPostProcess:
    """algo.reward_post_process=slime:<path>: slime's ``post_process_rewards(args, samples) -> (raw_rewards,
    rewards)`` (``--custom-reward-post-process-path``; slime/ray/rollout.py ``_post_process_rewards`` calls it in
    place of its group normalisation), called unchanged once per rollout on the samples that train, as slime
    Samples (tokens = prompt + response, response_length, reward, loss_mask, rollout_log_probs, label, metadata,
    index, group_index). Its `rewards` become each sample's ``train_reward``, which the advantage estimator takes
    as given (rlrun.loops.steps.add_advantages); ``reward`` stays the scored one (slime logs raw_rewards)."""

    def __init__(self, spec: str, cfg, router_url: str, model_dir: str | None):
        from rlrun.agent import slime_compat
        from rlrun.rollout.generate_api import load_object

        self.fn = load_object(spec[len(sa.PREFIX):], "slime reward post-process function")
        ro = cfg.rollout.rollout_fn
        self.args = slime_rollout_args(cfg, router_url, model_dir, sa.dotted_path(ro) if ro else DEFAULT_ROLLOUT)
        self.args.custom_reward_post_process_path = sa.dotted_path(spec)
        self.cls = slime_compat.Sample

    def __call__(self, samples: list[Sample]) -> None:
        out = self.fn(copy.copy(self.args), [to_slime_sample(s, self.cls, i) for i, s in enumerate(samples)])
        try:
            _raw, rewards = out
            rewards = [float(r) for r in rewards]
        except (TypeError, ValueError) as exc:
            raise TypeError(f"slime reward post-process {getattr(self.fn, '__name__', self.fn)} returned "
                            f"{type(out).__name__}; slime's contract is (raw_rewards, rewards), one float per "
                            "sample each") from exc
        if len(rewards) != len(samples):
            raise ValueError(f"slime reward post-process returned {len(rewards)} rewards for {len(samples)} samples")
        for s, r in zip(samples, rewards):
            s.train_reward = r


def to_slime_sample(s: Sample, cls, index: int) -> Any:
    """A generated rlrun Sample as slime's (what slime's default generate leaves for its rm_hub and
    post-processing): tokens = prompt + response ids, response_length, reward, loss mask, log-probs."""
    one = sa.to_slime(s, cls)
    one.tokens = list(s.prompt_tokens) + list(s.response_tokens)
    one.response, one.response_length, one.reward = s.response, len(s.response_tokens), s.reward
    one.loss_mask = list(s.effective_loss_mask)
    one.rollout_log_probs = list(s.rollout_logprobs) if s.rollout_logprobs is not None else None
    one.index = index
    return one


class SlimeRewardOnOwnGeneration:
    """data.rm_type=slime:<path> with rlrun's own generation (rollout.generate_fn null): slime's default generate
    (slime/rollout/sglang_rollout.py generate_and_rm) scores each sample it made with ``await custom_rm(args,
    sample)`` (rm_hub.async_rm: --custom-rm-path first); rlrun does the same through the adapter on each
    generated sample without a reward, eval ones too, the reward read at data.reward_key (slime's
    get_reward_value)."""

    def __init__(self, cfg, router_url: str, model_dir: str | None):
        from rlrun.agent import slime_compat

        self.rm = sa.slime_reward(cfg.data.rm_type)
        self.args = slime_rollout_args(cfg, router_url, model_dir, DEFAULT_ROLLOUT)
        self.cls = slime_compat.Sample

    def __call__(self, samples: list[Sample]) -> None:
        import asyncio

        todo = [s for s in samples if s.reward is None]
        if not todo:
            return
        slime = [to_slime_sample(s, self.cls, i) for i, s in enumerate(todo)]

        async def score():
            return await asyncio.gather(*(self.rm(copy.copy(self.args), one) for one in slime))

        from rlrun.reward.custom import run_sync

        for s, r in zip(todo, run_sync(score())):
            s.reward = sa.reward_value(r, self.args.reward_key)
