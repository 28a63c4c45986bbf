"""What the served-model GPU tests share (test_gpu_reward_engine.py, test_gpu_served_teacher.py): a random-init
checkpoint of the copy task's model shape with the toy tokenizer, and `rlrun experiment=copy-grpo-h100` for 3
rollouts with extra overrides and the kit's backends, returning the run dir, its plan and its metrics rows."""
import json
import subprocess
import sys
from pathlib import Path

import torch
from test_sglang_engine import TEST_ARGS as KIT  # the kit's backends (no FA3), fewer CUDA graphs

ROLLOUTS = 3


def toy_checkpoint(path: Path, seed: int) -> Path:
    """A random-init HF dir of copy-grpo-h100's model (bf16) with the toy tokenizer's special ids."""
    from rlrun.config import load
    from rlrun.data.toy import build_toy_tokenizer
    from rlrun.train.hf_model import build_causal_lm

    tok = build_toy_tokenizer()
    model = build_causal_lm(load(["experiment=copy-grpo-h100"]).model, None, seed, dtype=torch.bfloat16)
    for name in ("pad_token_id", "bos_token_id", "eos_token_id"):
        setattr(model.config, name, getattr(tok, name))
    model.save_pretrained(path)
    tok.save_pretrained(path)
    return path


def run_copy_job(tmp_path: Path, *overrides: str) -> tuple[Path, dict, list[dict]]:
    out = subprocess.run([sys.executable, "-m", "rlrun.cli", "experiment=copy-grpo-h100",
                          f"rollout.num_rollout={ROLLOUTS}", *overrides, f"run.output_dir={tmp_path}",
                          "logging.progress=false", *KIT], capture_output=True, text=True, timeout=900)
    assert out.returncode == 0, out.stdout[-3000:] + out.stderr[-3000:]
    run_dir = next(Path(tmp_path).glob("copy-grpo-h100/*/"))
    plan = json.loads((run_dir / "plan.json").read_text())
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert len(rows) == ROLLOUTS
    return run_dir, plan, rows
