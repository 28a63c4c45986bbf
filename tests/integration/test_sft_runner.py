"""An SFT run through the runner (no engines) learns the default toy task from its labels, and an RL run
started from its checkpoint (checkpoint.hf) begins far above chance (docs/algorithms.md "SFT")."""
from __future__ import annotations

from pathlib import Path

import pytest

from rlrun import runner
from rlrun.checkpoint import find_latest, hf_model_dir
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]
QUIET = ["logging.wandb.mode=disabled", "logging.progress=false"]


def _run(overrides):
    cfg = load(overrides)
    plan = make_plan(cfg)
    return runner.run(cfg, plan, prepare_run_dir(cfg, plan, overrides))


def test_sft_then_rl_starts_above_chance(tmp_path, ray_cpu):
    sft = _run(["experiment=tiny-sft-cpu", f"run.output_dir={tmp_path}", *QUIET])
    rows = read_metrics(Path(sft["run_dir"]) / METRICS_FILE)
    losses = [r["train/loss"] for r in rows]
    assert len(losses) == 20 and not any(k.startswith("rollout/engine") for k in rows[0])
    # the first step's loss is the untrained model's NLL of the label: about ln(64) = 4.16 (uniform logits)
    assert losses[0] > 3.0 and losses[-1] < 0.25 * losses[0]  # measured 4.1 -> 0.44 (docs/benchmarks.md)
    model = hf_model_dir(find_latest(Path(sft["run_dir"]) / "checkpoints"))
    assert (model / "tokenizer.json").is_file() and (model / "config.json").is_file()
    rl = _run([f"checkpoint.hf={model}", "rollout.num_rollout=1", f"run.output_dir={tmp_path}", *QUIET])
    # chance on echo is about 1/43 (the tokens the toy tokenizer has); the default job's first rollout: 0.04
    assert rl["reward_first"] > 0.3  # measured 0.56
