"""Adding an engine kind is one new package plus one registration: a test-only kind, "local", registered from
this test, runs the default CPU job end to end (3 rollouts of it) through the runner, the router, the weight
sync and its verification, with nothing in rlrun naming it. The router is a kind registered here too, "counted":
the real sglang-router built by the test's factory, so the runner is seen to build the run's router through
rollout.router.kind's spec.

The kind's "package" is the two pieces below, as rlrun/rollout/engines/<kind>/ holds them:
  spec    EngineKind("local", ...), whose `start` is the function itself (a kind registered at run time by code
          that holds it; the built-in kinds name theirs by path, rlrun.config.kinds.resolve)
  engine  LocalEngine, its RolloutEngine adapter: the control plane over SGLang's HTTP API (HTTPEngine) plus its
          own lifecycle, a server process on the driver's machine (the hf engine's server) instead of a Ray actor.
"""
from __future__ import annotations

from collections import Counter

import pytest

from rlrun import runner
from rlrun.config import load
from rlrun.config.kinds import ENGINES, ROUTERS, EngineKind, RouterKind
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.metrics import METRICS_FILE, read_metrics
from rlrun.rollout.engines.group import HFEngineProcess
from rlrun.rollout.engines.http import HTTPEngine
from rlrun.rollout.engines.protocol import RolloutEngine
from rlrun.rollout.routers.protocol import RolloutRouter
from rlrun.rollout.engines.sglang.router.router import Router

pytestmark = [pytest.mark.timeout(300), pytest.mark.slow]

CALLS: Counter = Counter()  # the protocol calls the fleet made on the plugin's engines
STARTED: list = []


class LocalEngine(HTTPEngine):
    def __init__(self, i: int, model_dir: str, seed: int, log_dir: str, threads: int):
        self.server = HFEngineProcess(model_dir, seed=seed, log_dir=log_dir, threads=threads).start().wait_healthy()
        self.url = self.server.url

    def alive(self) -> bool:
        return self.server.alive()

    def stop(self) -> None:
        self.server.stop()

    def version(self) -> str:
        CALLS["version"] += 1
        return super().version()

    def checksum(self, kind: str = "sha256") -> str:
        CALLS["checksum"] += 1
        return super().checksum(kind)


def local_start(cfg, plan, placement, runtime_env: dict, model_dir: str, log_dir: str):
    threads = int(runtime_env["env_vars"].get("OMP_NUM_THREADS", 1))

    def make(i: int) -> LocalEngine:
        engine = LocalEngine(i, model_dir, cfg.run.seed + i, log_dir, threads)
        STARTED.append(engine)
        return engine

    return [make(i) for i in range(plan.num_engines)], make


ROUTED: list = []  # the routers the runner built through the "counted" kind's factory


def counted_router(**options) -> Router:
    router = Router(**options)
    ROUTED.append(router)
    return router


COUNTED = RouterKind("counted", policies=("round_robin",), factory=counted_router)
LOCAL = EngineKind("local", needs_gpu=False, max_gpus_per_engine=1, checksums=True, memory="per_sequence",
                   start=local_start)


def test_a_kind_registered_here_runs_the_default_cpu_job(tmp_path):
    overrides = [f"run.output_dir={tmp_path}", "rollout.engine=local", "rollout.num_rollout=3",
                 "rollout.router.kind=counted", "rollout.router.policy=round_robin",
                 "logging.wandb.mode=disabled", "logging.progress=false"]
    with ENGINES.registered(LOCAL), ROUTERS.registered(COUNTED):
        cfg = load(overrides)
        plan = make_plan(cfg)
        run_dir = prepare_run_dir(cfg, plan, overrides)
        summary = runner.run(cfg, plan, run_dir)
    assert "local" not in ENGINES and "counted" not in ROUTERS  # registered for the block only

    assert summary["steps"] == 3
    assert len(STARTED) == plan.num_engines >= 1 and all(isinstance(e, RolloutEngine) for e in STARTED)
    assert not any(e.alive() for e in STARTED)  # the runner's teardown stopped them through the protocol
    (router,) = ROUTED  # one router, of the configured kind and policy, stopped by the teardown
    assert isinstance(router, RolloutRouter) and router.policy == "round_robin" and not router.process.alive()
    # every weight push was verified on the plugin's engines: checksum (its spec says it has them) + version
    assert CALLS["checksum"] >= 3 and CALLS["version"] >= 3, CALLS
    rows = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in rows] == [0, 1, 2]
    for r in rows:
        assert 0.0 <= r["rollout/reward_mean"] <= 1.0
        # the engine generated with the weights the trainer holds (both fp32 on the CPU; measured ~1e-7)
        assert r["train/train_rollout_logp_abs_diff"] < 1e-5
