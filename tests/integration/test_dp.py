"""Data parallelism of the torch backend over real Ray actors and a real gloo process group.

2 DP ranks on one global batch must give the same loss, grad norm and updated weights as 1 rank
on the same batch: each micro-batch loss is divided by the *global* sample count and gradients
are summed over ranks, so only float32 summation order differs (two micro-batch partial sums
all-reduced vs accumulated on one rank).

Tolerances, from the arithmetic:
- metrics: 1e-5 relative (a few float32 roundings of 2^-24 each on sums of a few hundred terms).
- weights: AdamW's first step moves each weight by u = lr * g / (|g| + eps) (bias-corrected moments:
  m = g, v = g^2) plus the decoupled decay, which is the same on both layouts. Its sensitivity to
  the gradient is du/dg = lr * eps / (|g| + eps)^2 <= lr / eps. With the default eps = 1e-8 and
  lr = 1e-3 that is 1e5: a gradient element near zero whose summation order changes it by 1e-10
  moves its weight by 1e-5 (measured 1.06e-5 on a fresh clone), so the comparison was luck. With
  eps = lr = 1e-3 the sensitivity is <= 1, so |dw| <= |dg|; |dg| <= ~8 roundings * 2^-24 * sum|g_i|
  <= 1e-6 for the gradient sizes of this batch (|g| < 0.2, grad norm ~1), and weights still move
  by up to lr * |g| / (|g| + eps) (> 5e-4 where |g| > eps, asserted).
"""
from __future__ import annotations

import pytest
import torch

from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.launch.placement import Placement
from rlrun.launch.train_group import TrainGroup
from rlrun.train.base import TrainBatch
from rlrun.train.hf_model import build_causal_lm

pytestmark = [pytest.mark.timeout(240), pytest.mark.slow]


def _batch() -> TrainBatch:
    g = torch.Generator().manual_seed(0)
    lens, starts = (9, 12, 7, 15, 10, 11), (5, 6, 4, 8, 5, 5)
    toks = [torch.randint(4, 47, (n,), generator=g) for n in lens]
    resp = [n - s for n, s in zip(lens, starts)]
    adv = (1.0, -1.0, 0.5, -0.5, 2.0, 0.3)
    masks = [torch.ones(r) for r in resp]
    masks[3][-2:] = 0  # a hole in the loss mask must be handled the same way on both layouts
    return TrainBatch(toks, list(starts), masks, advantages=[torch.full((r,), a) for r, a in zip(resp, adv)],
                      rollout_logp=[torch.full((r,), -3.5) for r in resp])


def _train_once(world: int):
    # max_tokens_per_gpu=24 forces several packed micro-batches per rank.
    cfg = load([f"train.gpus_per_node={world}", "train.max_tokens_per_gpu=24", "rollout.num_gpus=1",
                "train.colocate=false", "optim.lr=1e-3", "optim.adam_eps=1e-3"])
    plan = make_plan(cfg)
    placement = Placement(plan, "cpu")
    group = TrainGroup(cfg, plan, placement, {"OMP_NUM_THREADS": "1"})
    try:
        metrics = group.train_step(_batch())
        return metrics, group.state_dict_for_sync()
    finally:
        group.shutdown()
        placement.remove()


def test_two_ranks_make_the_same_update_as_one(ray_cpu):
    m1, w1 = _train_once(1)
    m2, w2 = _train_once(2)
    for key in ("train/loss", "train/pg_loss", "train/grad_norm", "train/entropy", "train/train_rollout_logp_abs_diff"):
        assert m2[key] == pytest.approx(m1[key], rel=1e-5), key
    assert m1["train/response_tokens"] == m2["train/response_tokens"] == 31
    # the update happened and is the same on both layouts (tolerances: module docstring)
    assert set(w1) == set(w2)
    w0 = build_causal_lm(load([]).model, None, load([]).run.seed).state_dict()  # lr 1e-3 moves each by ~1e-3
    assert max((w1[k] - w0[k]).abs().max().item() for k in w1) > 5e-4
    assert max((w1[k] - w2[k]).abs().max().item() for k in w1) < 1e-6
