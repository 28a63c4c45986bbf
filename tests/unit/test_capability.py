"""rlrun.config.capability: a config slime runs but rlrun's runner does not (a family a backend plans and exports
but does not train: Family.trained_by) is refused by `rlrun validate` and `rlrun run` before Ray starts, while
`rlrun plan` and `rlrun export slime` still work."""
import dataclasses

import pytest

from rlrun.cli import main
from rlrun.config import capability, load
from rlrun.config.families import FAMILIES

DEEPSEEK = ["model=deepseek-v3", "hardware=b200", "checks.memory_fit=warn"]


@pytest.fixture
def untrained_deepseek(monkeypatch):
    """deepseek_v3 as it was before the megatron backend built MLA: planned for megatron, trained by no backend."""
    monkeypatch.setitem(FAMILIES, "deepseek_v3", dataclasses.replace(
        FAMILIES["deepseek_v3"], trained_by=(), why_not="multi-latent attention is not built"))


def test_validate_and_run_refuse_what_no_backend_trains(capsys, untrained_deepseek):
    assert main(["validate", *DEEPSEEK]) == 2
    assert "model.family: rlrun's megatron backend does not train family deepseek_v3 yet (multi-latent attention " \
           "is not built)" in capsys.readouterr().err
    assert main(["run", *DEEPSEEK, "run.dry_run=true"]) == 2  # before the run dir and before Ray


def test_plan_and_export_still_work_with_a_note(capsys, untrained_deepseek):
    assert main(["plan", *DEEPSEEK]) == 0
    assert "note: model.family" in capsys.readouterr().err
    assert main(["export", "slime", *DEEPSEEK]) == 0
    assert "--q-lora-rank" in capsys.readouterr().out


def test_every_other_family_is_trained_where_it_is_accepted():
    untrained = {name for name, f in FAMILIES.items() if set(f.backends) - set(f.trains)}
    assert untrained == set()  # deepseek_v3 trains on megatron since it builds MLA
    assert capability.problems(load(DEEPSEEK)) == []
    assert capability.problems(load([])) == []
    assert capability.problems(load(["model=qwen3-4b", "hardware=h100"])) == []


# Qwen3-4B trained on one H100 with its engine (the run that died on the lent H100, 2026-11-25, docs/benchmarks.md):
# megatron, TP 1, DP 1, per GPU 3.63B params: bf16 weights 2 B + fp32 grads 4 B + fp32 master and Adam 12 B
# = 6.77 + 13.54 + 40.61 GiB, plus activations: the trainer alone needs 108.1 GiB of 79.6.
ONE_H100_4B = ["hardware=h100", "model=qwen3-4b", "model.vocab_size=64", "data=toy", "checkpoint.random_init=true",
               "parallelism.tp=1", "rollout.gpus_per_engine=1", "train.gpus_per_node=1", "rollout.engine=sglang",
               "rollout.rollout_batch_size=32", "rollout.n_samples_per_prompt=8", "rollout.max_response_len=512",
               "rollout.mem_fraction_static=0.4"]


def test_memory_that_surely_overflows_is_refused_before_the_run_and_noted_by_plan(capsys):
    assert main(["validate", *ONE_H100_4B]) == 2
    err = capsys.readouterr().err
    assert "checks.memory_fit: estimated peak 110.1 GiB per GPU exceeds the 79.6 GiB of a h100 GPU" in err
    assert "weights 6.8 + grads 13.5 + optimizer 40.6" in err and "would run out of memory" in err
    assert "optim.state_dtype=bf16 train.fp32_grads=false would save 20.3 GiB" in err  # the fix names the savings
    assert main(["run", *ONE_H100_4B, "run.dry_run=true"]) == 2
    capsys.readouterr()
    assert main(["plan", *ONE_H100_4B]) == 0  # the breakdown stays visible
    assert "note: checks.memory_fit" in capsys.readouterr().err
    assert main(["validate", *ONE_H100_4B, "checks.memory_fit=warn"]) == 0  # the user's call: a warning
    assert "warning: checks.memory_fit" in capsys.readouterr().err
    assert main(["validate", *ONE_H100_4B, "checks.memory_fit=off"]) == 0
    assert "memory_fit" not in capsys.readouterr().err


def test_memory_overflows_the_estimate_cannot_vouch_for_only_warn():
    # glm4-9b on an H100 node: 80.9 GiB of 79.6, 1.6% over: inside the megatron estimate's 2.5% error
    near = load(["model=glm4-9b", "hardware=h100"])
    # qwen3-8b on MI300X, colocated without offload: trainer 66.2 GiB fits alone; only the engine's 0.7 x 192 GiB
    # pool pushes the sum over, and SGLang sizes that pool from the memory free when it starts
    engine = load(["model=qwen3-8b", "hardware=mi300x"])
    from rlrun.config import warn

    for cfg, why in ((near, "within the estimate's 2.5% error"), (engine, "with the engine's share")):
        assert capability.problems(cfg) == []
        [w] = [p for p in warn.check(cfg) if p.path == "checks.memory_fit"]
        assert why in w.message and "may run out of memory" in w.message
    assert capability.problems(load(["model=phi-3-mini"])) == []  # hardware=cpu: its memory_gib is a stand-in
