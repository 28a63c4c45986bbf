"""slime's --custom-reward-post-process-path: algo.reward_post_process=slime:<path>, slime's
post_process_rewards(args, samples) -> (raw_rewards, rewards) run unchanged on each rollout's trained samples; its
rewards enter the advantage estimator as given, in place of the group normalisation (slime/ray/rollout.py
_post_process_rewards)."""
from __future__ import annotations

import pytest
import torch

from rlrun.config import load
from rlrun.config.errors import ConfigError
from rlrun.data.sample import Sample, Status

SEEN: dict = {}


def post_process_rewards(args, samples, **kwargs):
    """A slime-form post-process: rewards = raw - 0.25 (no group statistics), recording what it was given."""
    SEEN.update(args=args, samples=samples)
    raw = [s.get_reward_value(args) for s in samples]
    return raw, [r - 0.25 for r in raw]


SPEC = f"slime:{__name__}:post_process_rewards"


def _samples():
    return [Sample(prompt="p", prompt_tokens=[1, 2], response="ab", response_tokens=[3, 4], reward=r, group_id=0,
                   status=Status.COMPLETED, rollout_logprobs=[-0.5, -0.25]) for r in (1.0, 0.0)]


def test_import_and_export_of_the_flag():
    from rlrun.interop.slime_decode import decode, parse_args
    from rlrun.interop.slime_export import export_config

    d = decode(parse_args("--custom-reward-post-process-path slime.rollout.on_policy_distillation.post_process_rewards"
                          .split()))
    assert d.unknown == []
    assert d.values["algo.reward_post_process"] == "slime:slime.rollout.on_policy_distillation:post_process_rewards"
    text = export_config([f"algo.reward_post_process={SPEC}"])
    assert f"--custom-reward-post-process-path {__name__}.post_process_rewards" in text


def test_the_function_gets_slime_samples_and_sets_train_rewards():
    from rlrun.agent.slime_rollout import SlimeRewardPostProcess

    cfg = load([f"algo.reward_post_process={SPEC}"])
    fn = SlimeRewardPostProcess(cfg.algo.reward_post_process, cfg, "http://127.0.0.1:30000", None)
    kept = _samples()
    fn(kept)
    one = SEEN["samples"][0]
    assert (one.tokens, one.response_length, one.reward, one.loss_mask, one.rollout_log_probs) == (
        [1, 2, 3, 4], 2, 1.0, [1, 1], [-0.5, -0.25])
    assert SEEN["args"].custom_reward_post_process_path == f"{__name__}.post_process_rewards"
    assert [s.train_reward for s in kept] == [0.75, -0.25]
    assert [s.reward for s in kept] == [1.0, 0.0]  # the scored reward stays (slime logs raw_rewards)


def test_the_rollout_side_post_processes_the_kept_samples_only():
    from rlrun.parts.rollout_side import RolloutSide

    side = object.__new__(RolloutSide)
    seen = []
    side.reward_post_process = seen.append
    samples, kept = _samples(), _samples()[:1]
    assert side._post_processed(samples, kept, {}) == (samples, kept, {})
    assert seen == [kept]


def test_post_processed_rewards_skip_the_group_normalisation():
    from rlrun.loops.steps import add_advantages
    from rlrun.train.base import TrainBatch

    cfg = load(["algo=grpo", "rollout.n_samples_per_prompt=2", "rollout.rollout_batch_size=1"])
    batch = TrainBatch(tokens=[torch.arange(4)] * 2, response_start=[2, 2], loss_mask=[torch.ones(2)] * 2)
    given = add_advantages(cfg, batch, [0.75, -0.25], 2, [0, 0], final_rewards=True)
    assert [a.tolist() for a in given.advantages] == [[0.75, 0.75], [-0.25, -0.25]]
    normalised = add_advantages(cfg, batch, [0.75, -0.25], 2, [0, 0])
    # group mean 0.25, std (unbiased) of [0.5, -0.5] = 0.7071: 0.5 / (0.7071 + 1e-6)
    assert normalised.advantages[0].tolist() == pytest.approx([0.70710, 0.70710], abs=1e-4)


def test_validate_refuses_a_non_slime_or_missing_function():
    with pytest.raises(ConfigError) as exc:
        load(["algo.reward_post_process=my.mod:fn"])
    assert exc.value.problems[0].path == "algo.reward_post_process"
    with pytest.raises(ConfigError) as exc:
        load(["algo.reward_post_process=slime:no_such_module_xyz:fn"])
    assert "no_such_module_xyz" in exc.value.problems[0].message
    assert load([f"algo.reward_post_process={SPEC}"]).algo.reward_post_process == SPEC


async def custom_rm(args, sample, **kwargs):
    """slime's --custom-rm-path form; a dict reward, as slime's OPD reward_func returns the server's JSON."""
    return {"score": float(sample.response == sample.label), "length": sample.response_length,
            "url": args.rm_url, "tokens": list(sample.tokens)}


def test_a_slime_reward_scores_rlruns_own_generation_as_slimes_default_generate():
    """data.rm_type=slime:<path> with rollout.generate_fn null: slime's generate_and_rm after its default generate
    calls custom_rm(args, sample); rlrun does it through the adapter, args.rm_url = data.rm_url."""
    from rlrun.agent.slime_rollout import SlimeRewardOnOwnGeneration

    url = "http://127.0.0.1:13141/generate"
    cfg = load([f"data.rm_type=slime:{__name__}:custom_rm", f"data.rm_url={url}", "data.reward_key=length"])
    assert cfg.rollout.generate_fn is None  # validates: no rm_url or generate_fn complaint
    fn = SlimeRewardOnOwnGeneration(cfg, "http://127.0.0.1:30000", None)
    samples = _samples()
    samples[1].reward = None
    samples[0].reward = None
    samples.append(Sample(prompt="p", response="x", response_tokens=[5], reward=0.5, group_id=0))
    fn(samples)
    assert [s.reward for s in samples] == [2.0, 2.0, 0.5]  # read at data.reward_key; a set reward stays
    assert fn.args.rm_url == url
