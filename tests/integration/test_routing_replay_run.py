"""Routing replay through rlrun on the CPU (the acceptance of R3, docs/rollout.md "Routing replay"): a tiny
Qwen3-MoE (model=tiny-moe) whose routers are near-tied (rlrun.rollout.tiny_model.distinct_experts: float32
rounding decides the top-k, as bf16 does at scale), the hf engine, the torch trainer, rollout.routing_replay=true.
Each train step logs the train/rollout log-prob mismatch of its replayed forward and of the same forward routed
by the trainer itself: the first is rounding only (<= 1e-5, the tolerance derived in
tests/unit/test_routing_replay.py), the second is not."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlrun import runner
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow]
QUIET = ["logging.wandb.mode=disabled", "logging.progress=false"]


@pytest.fixture(scope="module")
def near_tied_checkpoint(tmp_path_factory):
    from rlrun.data.toy import build_toy_tokenizer
    from rlrun.rollout.tiny_model import distinct_experts
    from rlrun.train.hf_model import build_causal_lm

    cfg = load(["hardware=cpu", "model=tiny-moe"])
    tok = build_toy_tokenizer()
    model = distinct_experts(build_causal_lm(cfg.model, None, cfg.run.seed), seed=1, near_tie=1e-6)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(model.config, name, getattr(tok, name))
    out = tmp_path_factory.mktemp("tiny_moe_near_tie")
    model.save_pretrained(out)
    tok.save_pretrained(out)
    return out


def test_replayed_trainer_logprobs_equal_the_engines(near_tied_checkpoint, tmp_path, ray_cpu):
    overrides = ["hardware=cpu", "model=tiny-moe", f"checkpoint.hf={near_tied_checkpoint}",
                 "rollout.routing_replay=true", "rollout.num_rollout=2", "rollout.rollout_batch_size=4",
                 "rollout.n_samples_per_prompt=4", "rollout.max_response_len=8", "checkpoint.save_interval=null",
                 f"run.output_dir={tmp_path}"]
    cfg = load([*overrides, *QUIET])
    plan = make_plan(cfg)
    summary = runner.run(cfg, plan, prepare_run_dir(cfg, plan, overrides))
    rows = read_metrics(Path(summary["run_dir"]) / METRICS_FILE)
    assert len(rows) == 2
    for row in rows:  # each step trains on weights equal to the engine's (pushed after the previous step)
        assert row["train/train_rollout_logp_abs_diff"] <= 1e-5
        assert row["train/train_rollout_logp_abs_diff_no_replay"] > 1e-3
        assert 0 < row["train/routing_replay_changed_frac"] < 1
    print({k: [r[k] for r in rows] for k in ("train/train_rollout_logp_abs_diff",
                                             "train/train_rollout_logp_abs_diff_no_replay",
                                             "train/routing_replay_changed_frac")})
