"""The phases of one loop step, each a small function, so that rlrun/loop.py reads as the recipe.

generate: prompts -> n samples each, through the rollout client -> sglang-router -> engines
score: rule/remote/custom rewards (rlrun.reward.score_batch)
keep_groups: dynamic sampling (drop groups whose rewards all agree: they carry no GRPO signal)
to_train_batch / add_advantages: samples -> TrainBatch with per-token advantages (rlrun.algo)
"""
from __future__ import annotations

import asyncio
import statistics

import torch

from rlrun.algo import compute_advantages
from rlrun.rollout.client import RolloutClient, Sampling, fill_sample
from rlrun.train.base import TrainBatch


def request_seed(run_seed: int, rollout_id: int, index: int) -> int:
    """Per-request sampling seed: a resumed run draws the very same samples as the original."""
    return (run_seed * 1_000_003 + rollout_id * 100_003 + index) % (2**31 - 1)


def prompt_ids(tokenizer, text: str, chat_template: bool) -> list[int]:
    if chat_template:
        return list(tokenizer.apply_chat_template([{"role": "user", "content": text}], tokenize=True,
                                                  add_generation_prompt=True, return_dict=False))
    return list(tokenizer(text, add_special_tokens=False)["input_ids"])


def generate(url: str, rollout_cfg, samples: list, sampling: Sampling, seeds: list[int]) -> int:
    """One /generate per sample (all in flight, bounded by rollout.max_concurrency); fills them in
    place and returns how many requests the client retried."""

    async def run():
        async with RolloutClient.from_config(url, rollout_cfg) as client:
            async def one(sample, seed):
                out = await client.generate(input_ids=sample.prompt_tokens, sampling=sampling, seed=seed)
                fill_sample(sample, out)

            await asyncio.gather(*(one(s, seed) for s, seed in zip(samples, seeds)))
            return client.retries

    return asyncio.run(run())


def score(samples: list, rm_type: str, n: int) -> dict[str, float]:
    """Sets sample.reward; returns the reward counters (timeouts, errors, seconds)."""
    from rlrun.reward import score_batch

    metrics: dict[str, float] = {}
    rewards = score_batch(rm_type, [s.response for s in samples], [s.label for s in samples],
                          [s.metadata for s in samples], prompts=[s.prompt for s in samples], group_size=n,
                          metrics=metrics)
    for s, r in zip(samples, rewards):
        s.reward = float(r)
    return metrics


def keep_groups(samples: list, n: int, mode: str | None) -> list:
    """rollout.dynamic_sampling: None keeps all; nonzero_std drops groups with one reward value."""
    if mode is None:
        return samples
    if mode != "nonzero_std":
        raise ValueError(f"rollout.dynamic_sampling={mode!r} is not one of null|nonzero_std")
    groups = [samples[i:i + n] for i in range(0, len(samples), n)]
    return [s for g in groups if len({x.reward for x in g}) > 1 for s in g]


def to_train_batch(samples: list) -> TrainBatch:
    return TrainBatch(
        tokens=[torch.tensor(list(s.prompt_tokens) + list(s.response_tokens), dtype=torch.long) for s in samples],
        response_start=[len(s.prompt_tokens) for s in samples],
        loss_mask=[torch.tensor(s.loss_mask, dtype=torch.float32) for s in samples],
        rollout_logp=[torch.tensor(s.rollout_logprobs, dtype=torch.float32) for s in samples])


def _pad(xs: list[torch.Tensor]) -> torch.Tensor:
    return torch.nn.utils.rnn.pad_sequence(xs, batch_first=True) if xs else torch.zeros(0, 0)


def add_advantages(cfg, batch: TrainBatch, rewards: list[float], n: int) -> TrainBatch:
    """Per-token advantages from rlrun.algo on the padded view of the batch (whole groups only)."""
    a = cfg.algo
    lengths = [int(m.numel()) for m in batch.loss_mask]
    mask = _pad(batch.loss_mask)
    response_mask = _pad([torch.ones(k) for k in lengths])
    logp = _pad(batch.old_logp) if batch.old_logp is not None else None
    ref = _pad(batch.ref_logp) if batch.ref_logp is not None else None
    adv, _ = compute_advantages(
        a.advantage_estimator, torch.tensor(rewards, dtype=torch.float32), n, loss_mask=mask,
        response_mask=response_mask, logp=logp, ref_logp=ref, kl_coef=a.kl_coef, kl_type=a.kl_loss_type,
        normalize_std=a.normalize_std, normalize_advantages=a.normalize_advantages, gamma=a.gamma, lambd=a.lambd)
    return batch.with_(advantages=[adv[i, :k].clone() for i, k in enumerate(lengths)])


def rollout_metrics(samples: list, prefix: str = "rollout") -> dict[str, float]:
    rewards = [s.reward for s in samples]
    lengths = [len(s.response_tokens) for s in samples]
    truncated = sum(1 for s in samples if str(getattr(s.status, "value", s.status)) == "truncated")
    return {f"{prefix}/reward_mean": statistics.fmean(rewards),
            f"{prefix}/reward_std": statistics.pstdev(rewards) if len(rewards) > 1 else 0.0,
            f"{prefix}/response_len_mean": statistics.fmean(lengths),
            f"{prefix}/truncated_frac": truncated / len(samples),
            f"{prefix}/samples": float(len(samples))}


class PromptOrder:
    """Deterministic, resumable order over a prompt list: epoch e is a permutation seeded by
    (seed, e), and `cursor` (prompts consumed) is all a checkpoint needs to continue it."""

    def __init__(self, rows: list, seed: int, shuffle: bool):
        if not rows:
            raise ValueError("the prompt dataset is empty (data.prompt_data)")
        self.rows, self.seed, self.shuffle = rows, seed, shuffle
        self.cursor = 0
        self._epoch, self._perm = -1, []

    def _order(self, epoch: int) -> list[int]:
        if epoch != self._epoch:
            g = torch.Generator().manual_seed(self.seed * 7919 + epoch)
            n = len(self.rows)
            self._perm = torch.randperm(n, generator=g).tolist() if self.shuffle else list(range(n))
            self._epoch = epoch
        return self._perm

    def take(self, k: int) -> list:
        out = []
        for _ in range(k):
            epoch, pos = divmod(self.cursor, len(self.rows))
            out.append(self.rows[self._order(epoch)[pos]])
            self.cursor += 1
        return out


def load_prompts(data_cfg, seed: int) -> list[dict]:
    """Rows {prompt, label, metadata} of the training prompts."""
    from rlrun.data.toy import toy_dataset

    rows = toy_dataset(4096, seed)
    return [{"prompt": r["input"], "label": r["label"], "metadata": r["metadata"]} for r in rows]


def load_eval_prompts(data_cfg, ds) -> list[dict]:
    raise NotImplementedError


def make_samples(rows: list, n: int, tokenizer, data_cfg, group_offset: int) -> list:
    """n Samples per row (a GRPO group), prompt tokenised once per row."""
    from rlrun.data import Sample

    out = []
    for g, row in enumerate(rows):
        ids = prompt_ids(tokenizer, row["prompt"], data_cfg.apply_chat_template)
        for _ in range(n):
            out.append(Sample(prompt=row["prompt"], prompt_tokens=ids, label=row["label"],
                              metadata=dict(row.get("metadata") or {}), group_id=group_offset + g))
    return out
