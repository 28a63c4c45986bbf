"""A distillation teacher served by an SGLang engine on a GPU (algo.distill.where=engine, slime's --opd-type sglang;
docs/algorithms.md "On-policy distillation"): `rlrun experiment=copy-grpo-h100` (Megatron + an SGLang rollout engine,
colocated on one GPU) with a teacher checkpoint served by an SGLang teacher engine, started by the sglang kind's own
launch code on the plan's teacher slot beside the rollout engine, behind its own sglang-router; every sample's tokens
are scored with SGLang's logprob_start_len / input_token_logprobs. The teacher is a random-init model of the run's
shape with the toy tokenizer, so its log-probs are not a signal: the run must finish its rollouts with the teacher's
log-probs of every response token (finite, <= 0) and the reverse KL metric.

Runs on the lent GPU with the kit staged (tools/device/sglang.sh ITEMS=py:test_gpu_served_teacher.py); skips where
SGLang cannot be imported. The CPU half (an hf teacher engine through the runner, the client against a real hf engine)
is tests/integration/test_training_modes.py and tests/unit/test_distill.py."""
import importlib.util
import math

import pytest
import torch
from served_job import run_copy_job, toy_checkpoint

pytestmark = pytest.mark.skipif(importlib.util.find_spec("sglang") is None or not torch.cuda.is_available(),
                                reason="needs a GPU and SGLang 0.5.16 (tools/device/stage.sh with the kit in .sgl/)")


def test_an_sglang_teacher_engine_scores_every_sample(tmp_path):
    teacher = toy_checkpoint(tmp_path / "teacher", 11)
    run_dir, plan, rows = run_copy_job(tmp_path, "algo.distill.where=engine", f"algo.distill.teacher={teacher}")
    assert plan["teacher_engines"] == 1 and [s["gpu"] for s in plan["placement"] if s["role"] == "teacher"] == [0]
    for r in rows:
        assert math.isfinite(r["distill/reverse_kl"]) and r["distill/teacher_logp"] <= 0
        # a random teacher of a 64-token vocabulary: about ln(1/64) = -4.2 per token, far from the trained student
        assert -10 < r["distill/teacher_logp"] < -1
    assert list((run_dir / "logs" / "teacher").glob("sglang-*.log"))  # the teacher engine's own server log
