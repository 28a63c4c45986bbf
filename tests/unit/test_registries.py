"""Kind registries (rlrun.config.kinds): a new rollout engine, trainer backend and advantage estimator are one
spec each (plus, for the estimator, its token rule registered under the same name), and validate / plan read
the spec, never the name. The fixture registers one of each, as a plugin module would, and removes them after.
"""
import pytest
import torch

from rlrun.algo.advantages import compute_advantages
from rlrun.config import ConfigError, load
from rlrun.config.kinds import (BACKENDS, ENGINES, ESTIMATORS, ROUTERS, BackendKind, EngineKind, EstimatorKind,
                                RouterKind, resolve, use_critic)
from rlrun.config.plan import make_plan
from rlrun.config.registry import Checks

# a CPU engine kind that pushes to every GPU of a multi-GPU engine, with a static memory pool
TOY_ENGINE = EngineKind("toy_engine", needs_gpu=False, sharded_weights=True, memory="static_pool",
                        start="rlrun.rollout.engines.hf.engine:start")
# a data-parallel backend with a critic that builds qwen3 (the tiny model's family)
TOY_BACKEND = BackendKind("toy_backend", needs_gpu=False, model_parallel=False, critic=True, state_dtypes=("fp32",),
                          bf16_grads=False, cuda_graphs=False, sliding_window=True, checkpoint_bytes={"fp32": 12},
                          memory="fp32", factory="rlrun.train.torch_backend:TorchBackend", families=("qwen3",))
def _toy_rule(r, lmask, rmask, tok_kl, values, *, kl_coef, gamma, lambd):
    adv = (r[:, None] - values) * rmask
    return adv, adv


# group-mean baseline without std division, needs a critic; its token rule is the function itself (a kind
# registered at run time by code that holds it; the built-in ones name theirs by path)
TOY_ESTIMATOR = EstimatorKind("toy_est", _toy_rule, group_normalised=True, std_normalised=False, needs_critic=True)


@pytest.fixture
def toy_kinds():
    with ENGINES.registered(TOY_ENGINE), BACKENDS.registered(TOY_BACKEND), ESTIMATORS.registered(TOY_ESTIMATOR):
        yield


def test_the_built_in_kinds_are_the_schema_names():
    assert ENGINES.names() == ("hf", "sglang")
    assert BACKENDS.names() == ("torch", "megatron")
    assert ESTIMATORS.names() == ("grpo", "gspo", "cispo", "reinforce_plus_plus", "reinforce_plus_plus_baseline",
                                  "ppo")
    assert all(callable(resolve(spec.token_rule)) for spec in ESTIMATORS.values())  # every spec has its rule
    assert [e for e, s in ESTIMATORS.items() if s.needs_critic] == ["ppo"]
    assert resolve(BACKENDS["torch"].factory).__name__ == "TorchBackend"


def test_an_unknown_kind_is_reported_like_a_literal():
    with pytest.raises(ConfigError) as err:
        load(["rollout.engine=toy_engine"])
    (p,) = err.value.problems
    # on the CPU profile only the engines that run here are offered, the others said why (docs: issue 37 item 8)
    assert p.path == "rollout.engine" and p.fix == "use one of: hf (sglang: sglang needs GPUs; hardware is cpu)"


def test_new_kinds_validate_and_plan_from_their_specs(toy_kinds):
    cfg = load(["rollout.engine=toy_engine", "train.backend=toy_backend", "algo.advantage_estimator=toy_est"])
    assert use_critic(cfg)
    plan = make_plan(cfg)
    # static pool: mem_fraction_static of the device + the engine overhead, as for sglang
    from rlrun.config.memory import ENGINE_OVERHEAD_GIB
    from rlrun.config.memory import engine_fraction
    assert plan.memory["engine_total"] == pytest.approx(engine_fraction(cfg)[0] * cfg.hardware.memory_gib
                                                        + ENGINE_OVERHEAD_GIB)
    assert any("critic" in n for n in plan.memory["notes"])  # the critic doubles the trainer's state


def test_rules_read_the_new_specs(toy_kinds):
    with pytest.raises(ConfigError) as err:  # a group-normalised estimator with one sample per prompt
        load(["algo.advantage_estimator=toy_est", "rollout.n_samples_per_prompt=1"])
    assert err.value.paths == ["rollout.n_samples_per_prompt"]
    with pytest.raises(ConfigError) as err:  # its critic on a backend that builds none
        load(["algo.advantage_estimator=toy_est", "hardware=h100", "model=qwen3-0.6b", "train.backend=megatron"])
    assert err.value.paths == ["train.backend"]
    assert err.value.problems[0].fix.startswith("set train.backend=torch or toy_backend")
    with pytest.raises(ConfigError) as err:  # a data-parallel-only backend with tensor parallelism
        load(["train.backend=toy_backend", "hardware=h100", "model=qwen3-4b"])
    assert err.value.paths == ["train.backend"] and "data-parallel only" in err.value.problems[0].message


def test_an_engine_refuses_a_transport_it_does_not_take():
    with ENGINES.registered(EngineKind("disk_only", needs_gpu=False, weight_sync=("disk",))):
        with pytest.raises(ConfigError) as err:  # the default CPU job is colocated: auto resolves to tensor
            load(["rollout.engine=disk_only"])
        assert err.value.paths == ["rollout.weight_sync"]
        assert err.value.problems[0].fix == "set rollout.weight_sync=disk"
        assert load(["rollout.engine=disk_only", "rollout.weight_sync=disk"]).rollout.weight_sync == "disk"


def test_a_router_kind_offers_its_own_policies(tmp_path):
    """rollout.router.kind picks the spec; rollout.router.policy is checked against that kind's policies; the run
    builds its router through the spec's factory (rlrun.rollout.routers.protocol.run_router); versions.json records
    the kind's packages."""
    from rlrun.config.rundir import versions
    from rlrun.rollout.routers.protocol import run_router

    built = []
    toy = RouterKind("toy_router", policies=("nearest",), factory=lambda **options: built.append(options) or "router",
                     packages=("toy-router-dist",))
    with pytest.raises(ConfigError) as err:  # the default kind (sglang_router) offers no "nearest"
        load(["rollout.router.policy=nearest"])
    assert err.value.paths == ["rollout.router.policy"]
    assert err.value.problems[0].fix == "use one of: cache_aware, round_robin, random, power_of_two"
    with ROUTERS.registered(toy):
        cfg = load(["rollout.router.kind=toy_router", "rollout.router.policy=nearest"])
        with pytest.raises(ConfigError) as err:  # the toy kind offers only its own
            load(["rollout.router.kind=toy_router"])  # policy: cache_aware, the default
        assert err.value.paths == ["rollout.router.policy"] and err.value.problems[0].fix == "use one of: nearest"
        assert run_router(cfg.rollout, tmp_path) == "router"
        assert versions()["toy-router-dist"] is None  # recorded, not installed
    assert built == [{"policy": "nearest", "host": "127.0.0.1", "port": None, "request_timeout_s": 600.0,
                      "health_check_endpoint": "/health",  # the hf engine's EngineKind.probe_path
                      "log_dir": tmp_path}]  # hardware=cpu's router timeout (conf/hardware/cpu.yaml)


def test_the_new_estimator_computes_through_its_rule(toy_kinds):
    rewards = torch.tensor([1.0, 0.0, 3.0, 1.0])  # groups of 2: means 0.5 and 2.0, no std division
    mask = torch.ones(4, 2)
    values = torch.full((4, 2), 0.25)
    adv, _ = compute_advantages("toy_est", rewards, 2, loss_mask=mask, values=values)
    assert adv[:, 0].tolist() == [0.25, -0.75, 0.75, -1.25]  # (r - group mean) - 0.25, exact in binary
    with pytest.raises(ValueError, match="needs critic"):
        compute_advantages("toy_est", rewards, 2, loss_mask=mask)


def test_a_spec_with_an_unknown_model_is_refused_where_it_is_written():
    with pytest.raises(ValueError, match=r"EngineKind\('x'\).memory='static': use one of static_pool, per_sequence"):
        EngineKind("x", needs_gpu=False, memory="static")
    with pytest.raises(ValueError, match=r"weight_sync='nccl'"):
        EngineKind("x", needs_gpu=False, weight_sync=("nccl",))
    with pytest.raises(ValueError, match=r"BackendKind\('y'\).state_dtypes='fp16'"):
        BackendKind("y", needs_gpu=False, model_parallel=False, critic=False, state_dtypes=("fp16",),
                    bf16_grads=False, cuda_graphs=False, sliding_window=True)


def test_checks_registry_runs_every_check_in_order():
    checks = Checks()
    checks(lambda x: [f"a{x}"])
    checks(lambda x: [f"b{x}", f"c{x}"])
    assert checks.run(1) == ["a1", "b1", "c1"] and len(checks) == 2
