"""The sample side of a loop step, used by the parts (rollout side, evaluator): prompts, per-request seeds,
samples per group, scoring (rule/remote/custom rewards: rlrun.reward.score_batch), dynamic sampling (drop
groups whose rewards all agree: they carry no GRPO signal) and the rollout's metrics. Generation itself is
rlrun.rollout.handle.generate_samples, called by rlrun.parts.rollout_side.
"""
from __future__ import annotations

import statistics
from pathlib import Path

from rlrun.data import PromptDataset, make_group, reward_std_nonzero
from rlrun.data.toy import write_toy_jsonl
from rlrun.reward.scoring import RewardError, score_batch
from rlrun.rollout.generate_api import load_object

TOY_PROMPTS = 4096  # rows of the generated toy set (data.prompt_data=null); cycled by data.num_epochs


def request_seed(run_seed: int, rollout_id: int, index: int) -> int:
    """Per-request sampling seed: a resumed run draws the very same samples as the original."""
    return (run_seed * 1_000_003 + rollout_id * 100_003 + index) % (2**31 - 1)


def load_source(cfg, prompts):
    """data.source -> a DataSource over `prompts` (None: the runner reads `prompts` directly)."""
    if cfg.data.source is None:
        return None
    return load_object(cfg.data.source, "data.source class")(prompts, cfg.rollout.n_samples_per_prompt)


def score(samples: list, rm_type: str, n: int, remote_url: str | None = None, judge=None) -> dict[str, float]:
    """Sets sample.reward of the samples that have none (a generate function, an environment or a
    reused group may have set it); returns the reward counters (timeouts, errors, seconds).
    remote_url: data.rm_url, where rm_type remote (also a sample's metadata rm_type) posts each sample.
    judge: the reward engines' judge (rm_type reward_model; rlrun.parts.reward_engines), None without them."""
    metrics: dict[str, float] = {}
    todo = [s for s in samples if s.reward is None]
    if not todo:
        return metrics
    failures: list[tuple[int, str]] = []
    rewards = score_batch(rm_type, [s.response for s in todo], [s.label for s in todo],
                          [s.metadata for s in todo], prompts=[s.prompt for s in todo],
                          group_size=n if len(todo) == len(samples) else None, metrics=metrics,
                          remote_url=remote_url, failures=failures, judge=judge)
    if failures and len(failures) == len(todo):  # a broken reward, not bad responses: stop, do not train on zeros
        raise every_sample_failed(rm_type, todo, failures)
    for s, r in zip(todo, rewards):
        s.reward = float(r)
    return metrics


def every_sample_failed(rm_type: str, todo: list, failures: list[tuple[int, str]]):
    """The RewardError of a batch whose every sample failed: the first error and the sample it failed on."""
    i, why = failures[0]
    s = todo[i]
    return RewardError(
        f"the reward (data.rm_type={rm_type}) failed on every one of the {len(todo)} samples of this rollout; the "
        f"first error: {why}\n  on the sample: prompt={_short(s.prompt)}, response={_short(s.response)}, "
        f"label={_short(s.label)}, metadata={_short(s.metadata)}\n  Fix: make the reward accept "
        "(response, label, metadata) and return a number for this sample (docs/rewards.md); `rlrun validate "
        "--check-paths` calls it once on a data row. A few failing samples score 0 and are counted in "
        "reward/errors instead")


def _short(value, width: int = 200) -> str:
    text = repr(value)
    return text if len(text) <= width else text[:width] + "..."


def group_filter(mode: str | None):
    """rollout.dynamic_sampling -> the GroupCollector keep function (None keeps every group)."""
    if mode not in (None, "nonzero_std"):
        raise ValueError(f"rollout.dynamic_sampling={mode!r} is not one of null|nonzero_std")
    return None if mode is None else reward_std_nonzero


def load_prompts(cfg, tokenizer, run_dir: Path, *, path: str | Path | None = None, train: bool = True):
    """The training prompts (data.*) or an eval set (`path`) as a PromptDataset.

    data.prompt_data=null means the packaged toy task: it is written once into the run dir, so
    the run dir holds the exact prompts it trained on.
    """
    d = cfg.data
    if path is None:
        path = d.prompt_data
        if path is None:
            toy = run_dir / "data" / "toy.jsonl"
            if not toy.exists():
                write_toy_jsonl(toy, TOY_PROMPTS, cfg.run.seed, d.toy_task)
            path = toy
    return PromptDataset(path, input_key=d.input_key, label_key=d.label_key, metadata_key=d.metadata_key,
                         tokenizer=tokenizer, apply_chat_template=d.apply_chat_template,
                         max_prompt_len=d.max_prompt_len, shuffle=d.shuffle and train, seed=cfg.run.seed,
                         num_epochs=d.num_epochs if train else 1)


def make_samples(items: list, n: int, group_offset: int) -> list:
    """n Samples per prompt item (a GRPO group), laid out group after group."""
    return [s for g, item in enumerate(items) for s in make_group(item, n, group_offset + g)]


def rollout_metrics(samples: list, prefix: str = "rollout") -> dict[str, float]:
    rewards = [s.reward for s in samples]
    lengths = [len(s.response_tokens) for s in samples]
    truncated = sum(1 for s in samples if str(getattr(s.status, "value", s.status)) == "truncated")
    return {f"{prefix}/reward_mean": statistics.fmean(rewards),
            f"{prefix}/reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            f"{prefix}/response_len_mean": statistics.fmean(lengths),
            f"{prefix}/truncated_frac": truncated / len(samples),
            f"{prefix}/samples": float(len(samples))}
