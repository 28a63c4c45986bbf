"""The reward engines (reward.model; docs/rewards.md "Reward engines"): a reward model served by an engine kind (the
hf engine on the CPU, SGLang on GPUs) on the plan's "reward" slots, behind a router of its own (rollout.router.kind)
and watched by an EngineGroup (a dead engine is restarted from the reward model's checkpoint), judging samples through
rlrun.reward.judge. The kind's own start places them (Placement.as_role), so a reward engine is launched exactly
as a rollout engine is; they take no weight pushes and are not offloaded (the reward model does not train)."""
from __future__ import annotations

import dataclasses
from pathlib import Path

from rlrun.config.kinds import ENGINES, resolve
from rlrun.launch.env import runtime_env
from rlrun.reward.judge import Judge
from rlrun.rollout.engines.group import EngineGroup
from rlrun.rollout.routers.protocol import RolloutRouter, run_router

ROLE = "reward"  # the plan's placement role (rlrun.config.plan.reward_slots)


def engine_config(cfg, m=None):
    """The run config as a served model's engines' kind reads it (`m`: a ServedSection, reward.model unless given):
    rollout.* describes those engines (their kind, GPUs per engine, memory share, concurrency; no offload; the
    served model's own context length; a router on a free port). The kind's argument section (rollout.sglang) is
    the run's: its server flags (attention backend, CUDA graphs, ...) are the machine's, for served engines of that
    kind too."""
    m, r = m or cfg.reward.model, cfg.rollout
    rollout = r.model_copy(update={
        "engine": m.engine, "gpus_per_engine": m.gpus_per_engine, "num_gpus": m.num_engines * m.gpus_per_engine,
        "mem_fraction_static": m.mem_fraction_static, "max_concurrency": m.max_concurrency, "offload": False,
        "context_length": None, "request_timeout_s": m.timeout_s,
        "router": r.router.model_copy(update={"port": None}),
    })
    return cfg.model_copy(update={"rollout": rollout})


def start_served(cfg, plan, placement, env: dict, run_dir: Path, stack, role: str, m, checkpoint: str,
                 count: int) -> RolloutRouter:
    """`count` engines of the ServedSection `m` serving `checkpoint` on the plan's `role` slots (the kind's own start,
    placed by Placement.as_role) -> their router -> registered and watched (a dead engine is restarted from the
    checkpoint); each stopped by `stack` in reverse order. They take no weight pushes and are not offloaded."""
    log_dir = Path(run_dir) / "logs" / role
    view = engine_config(cfg, m)
    engines, restart = resolve(ENGINES[m.engine].start)(
        view, dataclasses.replace(plan, num_engines=count), placement.as_role(role),
        runtime_env(env), checkpoint, str(log_dir))
    router = run_router(view.rollout, log_dir)
    stack.callback(router.stop)
    router.start()
    group = EngineGroup(router, engines, restart, max_restarts=cfg.rollout.max_engine_restarts)
    stack.callback(group.stop)
    group.start()
    return router


class RewardEngines:
    def __init__(self, router: RolloutRouter, judge: Judge):
        self.router, self.judge = router, judge

    @classmethod
    def start(cls, cfg, plan, placement, env: dict, run_dir: Path, stack) -> "RewardEngines":
        """The reward engines (start_served on the "reward" slots) and their judge."""
        from transformers import AutoTokenizer

        m = cfg.reward.model
        router = start_served(cfg, plan, placement, env, run_dir, stack, ROLE, m, m.checkpoint, plan.reward_engines)
        return cls(router, Judge.from_config(m, router.url, AutoTokenizer.from_pretrained(m.checkpoint)))
