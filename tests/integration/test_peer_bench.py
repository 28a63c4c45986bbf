"""bench/peer_grpo.py's CPU mode: the same GRPO job in rlrun (torch trainer + hf engine through Ray) and in TRL's
GRPOTrainer, both real, one process. The GPU run (Megatron + SGLang vs TRL on one H200) is
`ITEMS=peer bash tools/device/sglang.sh` (docs/benchmarks.md, "Peer benchmark")."""
import json
import subprocess
import sys
from pathlib import Path

import importlib.util

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))
import peer_grpo  # noqa: E402  (stdlib only at import)


def test_time_to_reward_is_the_first_10_rollout_mean_at_the_target():
    # rollouts 1-9 score 0.1, 10-19 score 0.9: the mean of rollouts 9-18 is (0.1 + 9 * 0.9) / 10 = 0.82 >= 0.8,
    # the mean of rollouts 8-17 is (2 * 0.1 + 8 * 0.9) / 10 = 0.74; one second a step -> 18 s
    r = peer_grpo.time_to_reward([0.1] * 9 + [0.9] * 10, [1.0] * 19, 0.8)
    assert (r["reached"], r["rollout"], r["loop_s"]) == (True, 18, 18.0)
    assert r["curve"] == pytest.approx([0.18, 0.9])  # (9 * 0.1 + 0.9) / 10, then nine 0.9s
    r = peer_grpo.time_to_reward([0.1] * 12, [0.5] * 12, 0.8)
    assert (r["reached"], r["loop_s"]) == (False, 6.0)
    assert r["text"].startswith("not reached in 12 steps")


def test_the_window_is_steps_2_to_8():
    assert peer_grpo.window(list(range(1, 10))) == [2, 3, 4, 5, 6, 7, 8]
    assert peer_grpo.median_window([9.0, 1.0, 3.0]) == 2.0  # steps 2-3 of a 3-step run


@pytest.mark.skipif(importlib.util.find_spec("trl") is None, reason="trl is in the dev extra (pip install -e '.[dev]')")

def test_peer_bench_runs_both_sides_on_the_cpu(tmp_path):
    r = subprocess.run([sys.executable, str(ROOT / "bench" / "peer_grpo.py"), "--device", "cpu", "--steps", "3",
                        "--out", str(tmp_path)], capture_output=True, text=True, timeout=240, cwd=ROOT)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    result = json.loads(r.stdout.split("PEER_RESULT ", 1)[1])
    speed = result["speed"]
    assert result["trl_version"] == "1.16.0"
    assert speed["steps"] == {"rlrun": 3, "trl": 3}
    # step k of both sides trained on the same prompts (rlrun's records vs the prompts TRL's reward saw)
    assert speed["same_prompts"] == [True, True, True]
    # one optimizer step per rollout of 4 prompts x 4 samples on TRL's side
    assert speed["trl_settings"]["per_device_train_batch_size"] * speed["trl_settings"]["gradient_accumulation_steps"] \
        == 16
    assert speed["trl_settings"]["num_generations"] == 4
    for side in ("rlrun", "trl"):
        assert speed[side]["step"] > 0 and speed[side]["generation"] > 0 and speed[side]["training"] > 0
        # the phases measured inside a step do not exceed it (per step; the medians of 2 steps are their means)
        assert speed[side]["generation"] + speed[side]["training"] <= speed[side]["step"]
    assert speed["ratio"]["step"] == pytest.approx(speed["rlrun"]["step"] / speed["trl"]["step"])
    assert "| step |" in r.stdout and "rlrun/TRL step time" in r.stdout


def test_trl_gets_the_copy_tasks_entropy_bonus():
    # experiment=copy-grpo-h100 trains with algo.entropy_coef 0.05 (its YAML says why); TRL's GRPOConfig has the same
    # bonus (the mean per-token entropy), so the peer job must hand it over, not drop it
    from rlrun.config import load

    for job in (peer_grpo.GPU_REWARD, peer_grpo.CPU_REWARD):
        cfg = load(job)
        assert cfg.algo.entropy_coef == 0.05
        assert peer_grpo.trl_settings(cfg, None, cuda=False, dtype="float32")["entropy_coef"] == 0.05
    assert peer_grpo.trl_settings(load(peer_grpo.CPU_SPEED), None, cuda=False, dtype="float32")["entropy_coef"] == 0.0
