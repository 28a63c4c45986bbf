"""Offload only what must move: the plan keeps a colocated trainer resident when it fits beside its engines
(rlrun.config.memory.trainer_offload), says which mode a run gets and why, and validate refuses a forced resident
trainer that does not fit. The memory figures are the estimate's own (rlrun.config.memory); the expectations
recompute the decision from them by the rule (peak + ESTIMATE_ERROR within the GPU)."""
import pytest

from rlrun.config import load
from rlrun.config.capability import memory_fits
from rlrun.config.memory import ENGINE_OVERHEAD_GIB, ESTIMATE_ERROR, engine_fraction, trainer_offload
from rlrun.config.plan import make_plan
from rlrun.config.render import summary_lines
from rlrun.interop.slime_export import export_config

ONE_H100 = ["hardware=h100", "hardware.gpus_per_node=1", "model=qwen3-0.6b", "data=toy",
            "checkpoint.random_init=true", "rollout.rollout_batch_size=16", "rollout.n_samples_per_prompt=8",
            "rollout.max_response_len=256"]  # the issue-33 job on one H100


def _offload_line(plan) -> str:
    return next(line for line in summary_lines(plan) if line.startswith("offload:"))


def test_auto_keeps_the_trainer_resident_when_both_fit_and_the_engines_release_only_kv():
    plan = make_plan(load([*ONE_H100, "rollout.mem_fraction_static=0.5"]))
    m = plan.memory
    assert not plan.offload_train and plan.offload_rollout
    # resident: the training phase holds the engine's kept weights + its runtime, the rollout phase the trainer
    train_phase = m["trainer_total"] + m["trainer_overhead"] + m["engine_weights"] + ENGINE_OVERHEAD_GIB
    rollout_phase = m["engine_total"] + m["trainer_overhead"] + m["trainer_total"]
    assert m["peak"] == pytest.approx(max(train_phase, rollout_phase))
    assert m["peak"] * (1 + ESTIMATE_ERROR) <= m["available"] and plan.fits
    assert plan.offload_why.startswith("auto: resident, trainer ")
    assert _offload_line(plan).startswith("offload: trainer resident, engines release only their KV cache for training")


def test_auto_offloads_when_they_do_not_fit_and_names_the_pool_that_would():
    plan = make_plan(load([*ONE_H100, "rollout.mem_fraction_static=0.7"]))  # 55.7 GiB of pool beside the trainer
    assert plan.offload_train
    m = plan.memory
    assert m["peak"] == pytest.approx(max(m["trainer_total"], m["engine_total"]) + m["trainer_overhead"])
    frac = int((m["available"] / (1 + ESTIMATE_ERROR) - ENGINE_OVERHEAD_GIB - m["trainer_overhead"]
                - m["trainer_total"]) / m["available"] * 100) / 100
    assert f"would exceed the 79.6 GiB of a GPU; rollout.mem_fraction_static={frac:g} would keep it resident" \
        in plan.offload_why
    assert _offload_line(plan).startswith("offload: trainer offloaded (pinned host memory, async copies), engines "
                                          "release weights + KV cache for training (auto: offloaded, resident trainer ")
    # the hint is right: that pool keeps it resident, one step more does not
    assert not make_plan(load([*ONE_H100, f"rollout.mem_fraction_static={frac}"])).offload_train
    assert make_plan(load([*ONE_H100, f"rollout.mem_fraction_static={frac + 0.02:.2f}"])).offload_train


def test_forced_modes_win_and_a_forced_resident_that_does_not_fit_is_refused():
    fits = load([*ONE_H100, "rollout.mem_fraction_static=0.5", "train.offload=true"])
    assert trainer_offload(fits) == (True, "forced: train.offload=true")
    assert make_plan(fits).offload_train
    resident = make_plan(load([*ONE_H100, "rollout.mem_fraction_static=0.5", "train.offload=false"]))
    assert not resident.offload_train and resident.offload_why == "forced: train.offload=false"
    # 0.7 of the GPU for the engine beside a resident trainer: rlrun validate's memory gate refuses it
    problem, = memory_fits(load([*ONE_H100, "train.offload=false"]))
    assert problem.path == "checks.memory_fit"
    assert "would run out of memory" in problem.message
    assert not list(memory_fits(load([*ONE_H100, "train.offload=true"])))  # offloaded, the same run fits
    assert problem.fix.startswith("train.offload=null (auto) or true: a resident trainer (train.offload=false) "
                                  "does not fit beside its engines")


def test_not_colocated_the_trainer_stays():
    cfg = load(["hardware=h100", "model=qwen3-0.6b", "train.colocate=false", "train.gpus_per_node=4",
                "rollout.num_gpus=4"])
    assert trainer_offload(cfg) == (False, "auto: not colocated, the trainer's GPUs are its own")
    assert _offload_line(make_plan(cfg)).startswith("offload: trainer resident, engines keep their memory")


def test_slime_export_writes_the_decision():
    resident = export_config([*ONE_H100, "rollout.mem_fraction_static=0.5"])
    assert "--no-offload-train" in resident
    offloaded = export_config([*ONE_H100, "rollout.mem_fraction_static=0.7"])  # slime's colocated default is --offload-train: nothing to write
    assert "--no-offload-train" not in offloaded


def test_auto_pool_shrinks_to_keep_the_trainer_resident_while_it_holds_a_whole_rollout():
    """rollout.mem_fraction_static null: the hardware default (0.7) would push the trainer out, so the plan takes the
    largest pool that keeps it resident (the hint of the forced-0.7 plan), and that pool's KV cache still holds every
    sample of the rollout at full length: 16 x 8 samples of (toy max_prompt_len + 256) tokens."""
    cfg = load(ONE_H100)
    forced = make_plan(load([*ONE_H100, "rollout.mem_fraction_static=0.7"]))
    hint = float(forced.offload_why.rsplit("rollout.mem_fraction_static=", 1)[1].split()[0])
    fraction, why = engine_fraction(cfg)
    assert fraction == hint < 0.7
    plan = make_plan(cfg)
    assert not plan.offload_train and plan.engine_fraction == fraction
    need = 16 * 8 * (cfg.data.max_prompt_len + 256)
    assert plan.memory["kv_tokens"] >= need and f"at full length ({need:,})" in why
    assert plan.memory["engine_total"] == pytest.approx(fraction * 79.6 + ENGINE_OVERHEAD_GIB)
    assert f"engine pool {fraction:g} of a GPU (auto: {fraction:g}" in next(
        line for line in summary_lines(plan) if line.startswith("rollout:"))
    assert f"--sglang-mem-fraction-static {fraction:g}" in export_config(ONE_H100)  # slime gets the number


def test_auto_pool_keeps_the_default_when_the_smaller_pool_would_starve_the_rollout():
    # 64 x 16 samples of up to 8192 + 8192 tokens: far more KV than a pool that leaves room for the trainer
    big = [*ONE_H100, "rollout.rollout_batch_size=64", "rollout.n_samples_per_prompt=16",
           "rollout.max_response_len=8192"]
    fraction, why = engine_fraction(load(big))
    assert fraction == 0.7 and "would keep the trainer resident but hold" in why
    assert make_plan(load(big)).offload_train


def test_auto_pool_is_the_default_where_nothing_is_gained_and_a_set_pool_is_kept():
    apart = load(["hardware=h100", "model=qwen3-0.6b", "train.colocate=false", "train.gpus_per_node=4",
                  "rollout.num_gpus=4"])
    assert engine_fraction(apart) == (0.7, "auto: hardware.defaults.mem_fraction_static (h100)")
    assert engine_fraction(load([*ONE_H100, "train.offload=true"]))[0] == 0.7  # the user chose to offload
    assert engine_fraction(load([*ONE_H100, "rollout.mem_fraction_static=0.45"])) == \
        (0.45, "set: rollout.mem_fraction_static")
