"""A reward engine on a GPU (reward.model, docs/rewards.md "Reward engines"): `rlrun experiment=copy-grpo-h100` (Megatron
+ an SGLang rollout engine, colocated on one GPU) with rm_type reward_model: an SGLang reward engine, started by the
sglang kind's own launch code on the plan's reward slot beside the rollout engine, behind its own sglang-router,
judges every sample (a yes-token judge: P("y") after "<prompt><response>?"). The judge is a random-init model of the
run's shape with the toy tokenizer, so its scores are small probabilities, not a signal: the run must finish its
rollouts with every sample judged (no reward/errors or reward/timeouts) and scores inside (0, 1).

Runs on the lent GPU with the kit staged (tools/device/stage.sh; tools/device/sglang.sh ITEMS=py:test_gpu_reward_engine.py);
skips where SGLang cannot be imported. The CPU half (hf reward engines through the runner, the judge against a
hand forward) is tests/unit/test_reward_engines.py and tests/integration/test_training_modes.py."""
import importlib.util

import pytest
import torch
from served_job import run_copy_job, toy_checkpoint

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None or not torch.cuda.is_available(),
                                reason="needs a GPU and SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)")


def test_an_sglang_reward_engine_judges_every_sample(tmp_path):
    judge = toy_checkpoint(tmp_path / "judge", 7)
    run_dir, plan, rows = run_copy_job(tmp_path, "data.rm_type=reward_model", f"reward.model.checkpoint={judge}",
                                       "reward.model.prompt_template='{prompt}{response}?'", "reward.model.target=y")
    assert plan["reward_engines"] == 1 and [s["gpu"] for s in plan["placement"] if s["role"] == "reward"] == [0]
    assert all(r["reward/errors"] == r["reward/timeouts"] == 0 and r["reward/count"] == 256 for r in rows)
    assert all(0 < r["rollout/reward_mean"] < 1 for r in rows)
    assert list((run_dir / "logs" / "reward").glob("sglang-*.log"))  # the reward engine's own server log
