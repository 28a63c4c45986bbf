"""Algorithms other than GRPO through the real runner (embedded-style CPU job: trainer rank + hf
engine as Ray actors, the real sglang-router, weight sync, checkpoints), 2 rollouts each, all in
one Ray session (the runner leaves a caller's Ray connection open), plus the PPO critic under
data parallelism.
"""
from __future__ import annotations

from pathlib import Path

import pytest
import ray
import torch

from rlrun import runner
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]


def _run(tmp_path, algo: str):
    overrides = [f"algo={algo}", f"run.output_dir={tmp_path}", "rollout.num_rollout=2",
                 "logging.wandb.mode=disabled", "logging.progress=false"]
    cfg = load(overrides)
    plan = make_plan(cfg)
    summary = runner.run(cfg, plan, prepare_run_dir(cfg, plan, overrides))
    assert ray.is_initialized()  # the caller's connection is still the caller's
    rows = read_metrics(Path(summary["run_dir"]) / METRICS_FILE)
    assert summary["steps"] == 2 and [r["step"] for r in rows] == [0, 1]
    for r in rows:
        assert r["rollout/samples"] == r["rollout/kept_samples"] == plan.samples_per_rollout
        assert r["train/train_rollout_logp_abs_diff"] < 1e-5  # the engines hold the trained weights
        assert r["train/grad_norm"] > 0 and r["train/pg_clipfrac"] == 0.0  # one on-policy step per rollout
    return summary, rows


def test_ppo_trains_actor_and_critic(ray_cpu, tmp_path):
    summary, rows = _run(tmp_path, "ppo")
    for r in rows:
        # one response token, gamma 1: the return is the reward itself (A + V = r - V + V)
        assert r["critic/returns_mean"] == pytest.approx(r["rollout/reward_mean"], abs=1e-6)
        assert r["critic/value_loss"] > 0 and r["critic/clipfrac"] == 0.0 and r["critic/grad_norm"] > 0
        assert "critic/values_mean" in r and "train/kl" not in r  # ppo.yaml has no KL term
    assert rows[0]["critic/values_mean"] != rows[1]["critic/values_mean"]  # the critic was updated
    assert (Path(summary["checkpoint"]) / "trainer" / "critic.safetensors").is_file()


def test_reinforce_plus_plus_shapes_rewards_with_kl_to_the_initial_policy(ray_cpu, tmp_path):
    _, rows = _run(tmp_path, "reinforce_plus_plus")
    # the reference is the initial policy: no KL before the first update, some after it
    assert rows[0]["train/kl"] == pytest.approx(0.0, abs=1e-7) and rows[1]["train/kl"] > 1e-6


def test_gspo_runs_with_its_sequence_ratio(ray_cpu, tmp_path):
    _, rows = _run(tmp_path, "gspo")
    assert all(r["train/ppo_kl"] == pytest.approx(0.0, abs=1e-7) for r in rows)  # on-policy: ratio 1


def _ppo_step(world: int):
    from rlrun.launch.placement import Placement
    from rlrun.launch.train_group import TrainGroup
    from rlrun.train.base import TrainBatch

    g = torch.Generator().manual_seed(0)
    lens, starts = (9, 12, 7, 15, 10, 11), (5, 6, 4, 8, 5, 5)
    toks = [torch.randint(4, 47, (n,), generator=g) for n in lens]
    resp = [n - s for n, s in zip(lens, starts)]
    batch = TrainBatch(toks, list(starts), [torch.ones(r) for r in resp], advantages=[torch.ones(r) for r in resp])
    cfg = load(["algo=ppo", f"train.gpus_per_node={world}", "train.max_tokens_per_gpu=24", "rollout.num_gpus=1",
                "train.colocate=false", "optim.lr=1e-3"])
    plan = make_plan(cfg)
    placement = Placement(plan, "cpu")
    group = TrainGroup(cfg, plan, placement, {"OMP_NUM_THREADS": "1"})
    try:
        values = group.compute_values(batch)
        metrics = group.train_step(batch.with_(values=values, returns=[torch.full((r,), 0.5) for r in resp]))
        return values, metrics, group.compute_values(batch)
    finally:
        group.shutdown()
        placement.remove()


def test_two_ranks_make_the_same_critic_update_as_one(ray_cpu):
    v1, m1, after1 = _ppo_step(1)
    v2, m2, after2 = _ppo_step(2)
    for a, b in zip(v1, v2):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=0)  # the shards come back in sample order
    for key in ("critic/value_loss", "critic/grad_norm", "critic/values_mean", "train/loss"):
        assert m2[key] == pytest.approx(m1[key], rel=1e-5), key
    moved = max((a - b).abs().max().item() for a, b in zip(after1, v1))
    assert moved > 1e-4  # the critic moved ...
    for a, b in zip(after1, after2):  # ... by the same update on both layouts
        torch.testing.assert_close(a, b, atol=1e-5, rtol=0)
