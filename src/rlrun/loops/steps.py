"""The phases of one loop step, each a small function, so that rlrun/loops/sync_loop.py reads as the recipe.

(generation itself: rlrun.rollout.handle.generate_samples, called by rlrun.parts.rollout_side)
score: rule/remote/custom rewards (rlrun.reward.score_batch)
group_filter: dynamic sampling (drop groups whose rewards all agree: they carry no GRPO signal)
to_train_batch / add_advantages: samples -> TrainBatch with per-token advantages (rlrun.algo)
"""
from __future__ import annotations

import statistics
from pathlib import Path

import torch

from rlrun.algo import compute_advantages
from rlrun.train.base import TrainBatch

TOY_PROMPTS = 4096  # rows of the generated toy set (data.prompt_data=null); cycled by data.num_epochs


def request_seed(run_seed: int, rollout_id: int, index: int) -> int:
    """Per-request sampling seed: a resumed run draws the very same samples as the original."""
    return (run_seed * 1_000_003 + rollout_id * 100_003 + index) % (2**31 - 1)


def load_source(cfg, prompts):
    """data.source -> a DataSource over `prompts` (None: the runner reads `prompts` directly)."""
    if cfg.data.source is None:
        return None
    from rlrun.rollout.generate_api import load_object

    return load_object(cfg.data.source, "data.source class")(prompts, cfg.rollout.n_samples_per_prompt)


def score(samples: list, rm_type: str, n: int, remote_url: str | None = None) -> dict[str, float]:
    """Sets sample.reward of the samples that have none (a generate function, an environment or a
    reused group may have set it); returns the reward counters (timeouts, errors, seconds).
    remote_url: data.rm_url, where rm_type remote (also a sample's metadata rm_type) posts each sample."""
    from rlrun.reward import score_batch

    metrics: dict[str, float] = {}
    todo = [s for s in samples if s.reward is None]
    if not todo:
        return metrics
    rewards = score_batch(rm_type, [s.response for s in todo], [s.label for s in todo],
                          [s.metadata for s in todo], prompts=[s.prompt for s in todo],
                          group_size=n if len(todo) == len(samples) else None, metrics=metrics,
                          remote_url=remote_url)
    for s, r in zip(todo, rewards):
        s.reward = float(r)
    return metrics


def group_filter(mode: str | None):
    """rollout.dynamic_sampling -> the GroupCollector keep function (None keeps every group)."""
    from rlrun.data import reward_std_nonzero

    if mode not in (None, "nonzero_std"):
        raise ValueError(f"rollout.dynamic_sampling={mode!r} is not one of null|nonzero_std")
    return None if mode is None else reward_std_nonzero


def load_prompts(cfg, tokenizer, run_dir: Path, *, path: str | None = None, train: bool = True):
    """The training prompts (data.*) or an eval set (`path`) as a PromptDataset.

    data.prompt_data=null means the packaged toy task: it is written once into the run dir, so
    the run dir holds the exact prompts it trained on.
    """
    from rlrun.data import PromptDataset
    from rlrun.data.toy import write_toy_jsonl

    d = cfg.data
    if path is None:
        path = d.prompt_data
        if path is None:
            path = run_dir / "data" / "toy.jsonl"
            if not path.exists():
                write_toy_jsonl(path, TOY_PROMPTS, cfg.run.seed)
    return PromptDataset(path, input_key=d.input_key, label_key=d.label_key, metadata_key=d.metadata_key,
                         tokenizer=tokenizer, apply_chat_template=d.apply_chat_template,
                         max_prompt_len=d.max_prompt_len, shuffle=d.shuffle and train, seed=cfg.run.seed,
                         num_epochs=d.num_epochs if train else 1)


def make_samples(items: list, n: int, group_offset: int) -> list:
    """n Samples per prompt item (a GRPO group), laid out group after group."""
    from rlrun.data import make_group

    return [s for g, item in enumerate(items) for s in make_group(item, n, group_offset + g)]


def offpolicy_mask(sample) -> list[int]:
    """1 for the tokens of the sample's last policy version, 0 for those an older version
    generated before a partial rollout was continued (slime's --mask-offpolicy-in-partial-rollout);
    all 1 when versions are not tracked. None (the initial weights) counts as version 0."""
    if not sample.token_versions:
        return [1] * len(sample.response_tokens)
    num = lambda v: 0 if v is None else v  # noqa: E731
    last = max(num(v) for v in sample.token_versions)
    return [int(num(v) == last) for v in sample.token_versions]  # inserted tokens are masked already


def to_train_batch(samples: list, mask_offpolicy: bool = False) -> TrainBatch:
    """mask_offpolicy: tokens of an older policy version are left out of the loss through
    TrainBatch.offpolicy_mask (the trainer folds it into the loss mask and reports the share it removed,
    train/offpolicy_maskfrac)."""
    off = [torch.tensor(offpolicy_mask(s), dtype=torch.float32) for s in samples] if mask_offpolicy else None
    return TrainBatch(
        tokens=[torch.tensor(list(s.prompt_tokens) + list(s.response_tokens), dtype=torch.long) for s in samples],
        response_start=[len(s.prompt_tokens) for s in samples],
        loss_mask=[torch.tensor(s.effective_loss_mask, dtype=torch.float32) for s in samples],
        rollout_logp=[torch.tensor(s.rollout_logprobs, dtype=torch.float32) for s in samples], offpolicy_mask=off)


def _pad(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(xs, batch_first=True) if xs else torch.zeros(0, 0)


def add_advantages(cfg, batch: TrainBatch, rewards: list[float], n: int,
                   group_ids: list[int] | None = None) -> TrainBatch:
    """Per-token advantages (and, for PPO, the critic's returns) from rlrun.algo on the padded view
    of the batch. group_ids: each sample's Sample.group_id, so that a group that reaches the trainer
    incomplete is normalised over its members (None: whole consecutive groups of n). Only trained
    tokens (loss mask times TrainBatch.offpolicy_mask) enter whitening and REINFORCE++'s returns."""
    a = cfg.algo
    lengths = [int(m.numel()) for m in batch.loss_mask]
    if group_ids is not None and any(g < 0 for g in group_ids):
        raise ValueError("a sample has no group id (Sample.group_id = -1): a generate function must return its "
                         "samples with the group_id of the prompt they answer")
    pad = lambda xs: None if xs is None else _pad(xs)  # noqa: E731
    adv, ret = compute_advantages(
        a.advantage_estimator, torch.tensor(rewards, dtype=torch.float32), n, loss_mask=_pad(batch.trained_mask),
        response_mask=_pad([torch.ones(k) for k in lengths]), logp=pad(batch.old_logp), ref_logp=pad(batch.ref_logp),
        values=pad(batch.values), kl_coef=a.kl_coef, kl_type=a.kl_loss_type, normalize_std=a.normalize_std,
        normalize_advantages=a.normalize_advantages, gamma=a.gamma, lambd=a.lambd,
        group_ids=None if group_ids is None else torch.tensor(group_ids))
    unpad = lambda x: [x[i, :k].clone() for i, k in enumerate(lengths)]  # noqa: E731
    return batch.with_(advantages=unpad(adv), returns=unpad(ret) if a.advantage_estimator == "ppo" else None)


def rollout_metrics(samples: list, prefix: str = "rollout") -> dict[str, float]:
    rewards = [s.reward for s in samples]
    lengths = [len(s.response_tokens) for s in samples]
    truncated = sum(1 for s in samples if str(getattr(s.status, "value", s.status)) == "truncated")
    return {f"{prefix}/reward_mean": statistics.fmean(rewards),
            f"{prefix}/reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            f"{prefix}/response_len_mean": statistics.fmean(lengths),
            f"{prefix}/truncated_frac": truncated / len(samples),
            f"{prefix}/samples": float(len(samples))}


def mean_metrics(rows: list[dict[str, float]]) -> dict[str, float]:
    """Per-key mean over the optimizer steps of one rollout (keys missing from a step are skipped)."""
    keys = {k for row in rows for k in row}
    return {k: statistics.fmean(row[k] for row in rows if k in row) for k in sorted(keys)}
