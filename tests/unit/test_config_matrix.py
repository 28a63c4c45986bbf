"""Every shipped experiment and every model x algo x hardware combination composes and validates."""
import copy
import itertools
import time

import pytest

from rlrun.config import ConfigError, capability, load
from rlrun.config.compose import CONF_DIR, Composer
from rlrun.config.plan import make_plan
from rlrun.config.validate import validate

MODELS = sorted(p.stem for p in (CONF_DIR / "model").glob("*.yaml"))
ALGOS = sorted(p.stem for p in (CONF_DIR / "algo").glob("*.yaml"))
HARDWARE = sorted(p.stem for p in (CONF_DIR / "hardware").glob("*.yaml"))
EXPERIMENTS = sorted(p.stem for p in (CONF_DIR / "experiment").glob("*.yaml"))
# experiments with a `???` the user supplies (a path made by another run): the value the test supplies
REQUIRED = {"tiny-distill-cpu": ["algo.distill.teacher=/teacher"], "tiny-rm-cpu": ["reward.model.checkpoint=/rm"]}


def test_groups_are_complete():
    assert {"tiny", "qwen3-0.6b", "qwen3-1.7b", "qwen3-4b", "qwen3-8b", "qwen3-14b", "qwen3-32b", "qwen3-30b-a3b",
            "qwen3-235b-a22b", "glm4-9b", "llama3.1-8b", "deepseek-v3"} <= set(MODELS)
    assert {"grpo", "dr_grpo", "dapo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
            "ppo"} <= set(ALGOS)
    assert {"cpu", "h100", "h200", "b200", "mi300x", "mi325x", "mi355x"} <= set(HARDWARE)
    assert {"qwen3-4b-grpo-mi300x", "glm4-9b-grpo-h100"} <= set(EXPERIMENTS)


def test_a_required_value_left_out_is_refused_naming_it():
    with pytest.raises(ConfigError) as e:
        load(["experiment=tiny-distill-cpu"])
    assert any("algo.distill.teacher" in p.message or p.path == "algo.distill.teacher" for p in e.value.problems)


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_experiment_validates_and_plans(experiment):
    plan = make_plan(load([f"experiment={experiment}", *REQUIRED.get(experiment, [])]))
    assert plan.world_size == plan.tp * plan.pp * plan.cp * plan.dp
    assert plan.samples_per_rollout == plan.global_batch_size * plan.steps_per_rollout


def _leaves(d, prefix=""):
    for k, v in d.items():
        if isinstance(v, dict) and v:
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def _set(d, path, value):
    *parents, leaf = path.split(".")
    for p in parents:
        d = d[p]
    d[leaf] = value


GPUS = {"h100", "h200", "b200", "mi300x", "mi325x", "mi355x"}
# model x hardware pairs whose trainer state does not fit one GPU of one 8-GPU node at the model's recommended
# layout (rlrun.config.memory.overflow, "sure"); per GPU, trainer GiB from `rlrun plan` (weights + grads + optimizer
# + activations): deepseek-v3 1569.5; qwen3-235b-a22b and, on the 80 GB H100 only, qwen3-30b-a3b and qwen3-32b.
TOO_BIG_FOR_ONE_NODE = ({("deepseek-v3", hw) for hw in GPUS} | {("qwen3-235b-a22b", hw) for hw in GPUS}
                        | {("qwen3-30b-a3b", "h100"), ("qwen3-32b", "h100")})


def _refused(model: str, algo: str, hw: str) -> str | None:
    """The combinations refused by a rule (the text it must give), else None: PPO's critic is built by the torch
    backend only (GPU hardware defaults to megatron); deepseek-v3 (MLA) by megatron only, and hardware=cpu means the
    torch backend; models too big for one node (TOO_BIG_FOR_ONE_NODE; phi-3-mini's torch backend with PPO's critic
    holds 2 x 16 B/param = 113 GiB of state per H100) are valid configs that validate and run refuse for memory
    (_memory_refused)."""
    if model == "deepseek-v3" and hw == "cpu":
        return "does not build family deepseek_v3"
    if algo == "ppo" and hw != "cpu" and model != "phi-3-mini":  # phi-3-mini's profile picks torch
        return "trains a critic"
    return None


def _memory_refused(model: str, algo: str, hw: str) -> bool:
    """What rlrun validate and run refuse for memory (rlrun.config.capability.memory_fits; plan only notes it)."""
    return (model, hw) in TOO_BIG_FOR_ONE_NODE or (model, algo, hw) == ("phi-3-mini", "ppo", "h100")


@pytest.mark.slow  # ~100 Hydra compositions: 30-60 s on the shared 2-core machine
def test_every_model_algo_hardware_combination_is_valid():
    """Every combination is valid except the _refused ones: each other model's recommended layout fits an
    8-GPU node, and hardware=cpu reduces any model to the data-parallel torch/hf layout. Hydra composes every model x
    hardware pair; algo files are overlays applied after both (conf/config.yaml's order), so each algo's
    overlay (its difference from grpo, also composed by Hydra) is applied to the pair's tree; a cross-check
    below composes a diagonal of full triples with Hydra and compares."""
    t0, failures = time.time(), []
    with Composer() as c:
        base = dict(_leaves(c.compose(["algo=grpo"]).raw))
        overlays = {a: [(k, v) for k, v in _leaves(c.compose([f"algo={a}"]).raw)
                        if base.get(k) != v and not k.startswith("run.name")] for a in ALGOS}
        for i, (model, hw) in enumerate(itertools.product(MODELS, HARDWARE)):
            pair = c.compose([f"model={model}", f"hardware={hw}", "algo=grpo"]).raw  # noqa: E501
            for algo in ALGOS:
                raw = copy.deepcopy(pair)
                for k, v in overlays[algo]:
                    _set(raw, k, v)
                refused = _refused(model, algo, hw)
                try:
                    cfg = validate(raw)
                    make_plan(cfg)
                    memory = "checks.memory_fit" in [p.path for p in capability.problems(cfg)]
                    if memory != _memory_refused(model, algo, hw):
                        failures.append(f"model={model} algo={algo} hardware={hw}: refused for memory {memory}")
                    if refused:
                        failures.append(f"model={model} algo={algo} hardware={hw}: valid, expected {refused}")
                except Exception as e:  # collect all: one report for every broken combination
                    if not refused or refused not in str(e):
                        failures.append(f"model={model} algo={algo} hardware={hw}: {e}")
            if i % 6:
                continue
            algo = ALGOS[(i // 6) % len(ALGOS)]  # cross-check the overlay against a real Hydra composition
            full = c.compose([f"model={model}", f"hardware={hw}", f"algo={algo}"]).raw
            raw = copy.deepcopy(pair)
            for k, v in overlays[algo]:
                _set(raw, k, v)
            full["run"]["name"] = raw["run"]["name"]
            assert raw == full, (model, hw, algo)
    assert not failures, "\n".join(failures)
    print(f"{len(MODELS) * len(ALGOS) * len(HARDWARE)} combinations in {time.time() - t0:.1f}s")
