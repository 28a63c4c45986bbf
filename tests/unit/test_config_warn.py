"""Warnings (rlrun.config.warn) print and never fail; `--cfg job --resolve` prints the values the run
uses; sequence parallelism at TP 1 is a plan note, not a problem."""
import json

import yaml

from rlrun.cli import main
from rlrun.config import load
from rlrun.config.plan import make_plan


def test_num_epochs_without_num_rollout_warns_but_validates(capsys):
    assert main(["validate", "data.num_epochs=3"]) == 0
    out = capsys.readouterr()
    assert out.out == "valid\n"
    assert out.err.startswith("warning: data.num_epochs: does not set the run length: rollout.num_rollout=60")
    assert main(["validate", "data.num_epochs=3", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is True and [w["path"] for w in doc["warnings"]] == ["data.num_epochs"]
    assert main(["validate", "data.num_epochs=3", "rollout.num_rollout=90"]) == 0  # both set: as meant
    assert capsys.readouterr().err == ""


def test_cfg_resolve_prints_the_derived_values(capsys):
    assert main(["--cfg", "job", "train.num_steps_per_rollout=2"]) == 0
    composed = yaml.safe_load(capsys.readouterr().out)
    assert composed["train"]["global_batch_size"] is None and composed["optim"]["critic_lr"] is None
    assert main(["--cfg", "job", "--resolve", "train.num_steps_per_rollout=2"]) == 0
    resolved = yaml.safe_load(capsys.readouterr().out)
    # the default CPU job: 16 prompts x 8 samples = 128 = 2 steps of 64; critic_lr = lr
    assert resolved["train"]["global_batch_size"] == 64
    assert resolved["optim"]["critic_lr"] == resolved["optim"]["lr"]
    assert resolved["rollout"]["num_gpus"] == 1 and resolved["algo"]["eps_clip_high"] == 0.2
    assert main(["--cfg", "job", "--resolve", "optim.lr=abc"]) == 2  # invalid: the problems, no tree
    assert "optim.lr" in capsys.readouterr().err


def test_sequence_parallel_at_tp1_is_a_note():
    plan = make_plan(load(["hardware=h100", "model=qwen3-4b", "parallelism.tp=1",
                           "parallelism.sequence_parallel=true"]))
    assert any(n.startswith("parallelism.sequence_parallel is off at TP 1") for n in plan.notes)
    assert not any("sequence_parallel" in n for n in make_plan(load(["hardware=h100", "model=qwen3-4b"])).notes)


def test_kl_with_the_reference_derived_from_checkpoint_hf_is_said():
    from rlrun.config import load
    from rlrun.config.warn import check

    ov = ["model=qwen3-4b", "hardware=h100", "checkpoint.hf=/nonexistent/Qwen3-4B", "algo.use_kl_loss=true"]
    (w,) = [p for p in check(load(ov), ov) if p.path == "checkpoint.ref"]
    assert "the KL reference is checkpoint.hf (/nonexistent/Qwen3-4B)" in w.message and "slime refuses" in w.message
    ov_ref = [*ov, "checkpoint.ref=/nonexistent/ref"]
    assert not [p for p in check(load(ov_ref), ov_ref) if p.path == "checkpoint.ref"]
    ov_off = ov[:-1]  # no KL: no reference needed
    assert not [p for p in check(load(ov_off), ov_off) if p.path == "checkpoint.ref"]
    ov_init = ["model=qwen3-0.6b", "hardware=h100", "checkpoint.random_init=true", "algo.use_kl_loss=true"]
    (w,) = [p for p in check(load(ov_init), ov_init) if p.path == "checkpoint.ref"]
    assert "the KL reference is the run's own seeded random init" in w.message
