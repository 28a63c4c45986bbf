"""The hf engine kind's Ray side: an HFEngineActor on the bundle the plan gives it, and RayEngine, its
RolloutEngine adapter (SGLang's HTTP API through HTTPEngine; alive/stop through the actor). start() is the
kind's `start` (rlrun.rollout.engines.protocol); its restart re-creates engine i on the same bundle, so a
replacement lands where the plan says.
"""
from __future__ import annotations

import ray

from rlrun.config.engine_health import ALIVE_TIMEOUT_S as _ALIVE_TIMEOUT_S
from rlrun.config.engine_health import STOP_GRACE_S as _STOP_GRACE_S
from rlrun.rollout.engines.http import HTTPEngine
from rlrun.rollout.engines.starting import start_all
from rlrun.rollout.hf_engine import HFEngineActor


class _PlacedHFEngine(HFEngineActor):
    """HFEngineActor that moves its model to the GPU its bundle holds (it loads on the CPU)."""

    def __init__(self, model_dir: str, gpu_id: int | None, threads: int, engine_id: int = 0, **kw):
        import torch

        self.engine_id = engine_id
        # the node it runs on, asked here: a bundle Ray moved off a lost node is elsewhere now
        kw["host"] = kw.get("host") or ray.util.get_node_ip_address()
        if threads:
            torch.set_num_threads(threads)
        super().__init__(model_dir, **kw)
        if gpu_id is not None:
            torch.cuda.set_device(gpu_id)
            self.engine.model.to(torch.device("cuda", gpu_id))

    def __repr__(self) -> str:  # Ray shows it as the actor's repr_name (dashboard, ray.util.state)
        return f"engine {self.engine_id}"


class RayEngine(HTTPEngine):
    def __init__(self, engine_id: int, placement, runtime_env: dict, model_dir: str, seed: int,
                 max_batch_size: int, threads: int, *, start_timeout_s: float, wait: bool = True):
        """Creates engine `engine_id`'s actor and asks it to start; wait=False returns at once (wait_started()
        waits: start several, then wait, and their start-ups overlap)."""
        gpus = placement.gpu_ids("engine", engine_id)
        if len(gpus) > 1:
            raise ValueError(f"the hf engine runs on one device, but engine {engine_id} spans GPUs {gpus}; "
                             f"set rollout.gpus_per_engine=1 or an engine kind that spans GPUs")
        actor = ray.remote(_PlacedHFEngine).options(**placement.options("engine", engine_id),
                                                     runtime_env=runtime_env)
        # Listen on its node's address (asked in the actor), so that the router reaches engines on other nodes.
        host = placement.bundle_of("engine", engine_id)[0].node_ip
        self.node = host  # named when the engine keeps failing (EngineGroup.max_restarts)
        self.engine_id = engine_id
        self.actor = actor.remote(model_dir, gpus[0] if gpus else None, threads, engine_id, seed=seed, host=None,
                                  max_batch_size=max_batch_size)
        self._started = self.actor.start.remote()
        self.url = ""  # known after wait_started()
        self.start_timeout_s = start_timeout_s  # rollout.engine_start_timeout_s
        if wait:
            self.wait_started()

    def wait_started(self) -> "RayEngine":
        try:  # bounded: a replacement whose bundle's node is gone is never placed (EngineGroup retries)
            self.url = ray.get(self._started, timeout=self.start_timeout_s)
        except ray.exceptions.GetTimeoutError:
            ray.kill(self.actor)
            raise TimeoutError(f"engine {self.engine_id} did not start within {self.start_timeout_s:.0f} s "
                               f"(rollout.engine_start_timeout_s; its bundle on node {self.node} may be gone, or the "
                               f"node is out of memory)") from None
        return self

    def alive(self) -> bool:
        try:
            ray.get(self.actor.url.remote(), timeout=_ALIVE_TIMEOUT_S)
            return True
        except Exception:  # noqa: BLE001 - actor died, timed out, or Ray is going down
            return False

    def stop(self) -> None:
        try:
            ray.get(self.actor.shutdown.remote(), timeout=_STOP_GRACE_S)
        except Exception:  # noqa: BLE001 - already dead or stalled: killing below is all that is left
            pass
        ray.kill(self.actor)


def start(cfg, plan, placement, runtime_env: dict, model_dir: str, log_dir: str, watch=None):
    """The plan's hf engines, started, and the restart callable EngineGroup needs."""
    # Several engines share the machine's cores on the cpu profile; one thread each keeps them
    # from oversubscribing (threads=0 leaves torch's default, fine on GPU nodes).
    env = runtime_env.get("env_vars", {})
    threads = int(env.get("OMP_NUM_THREADS", 0)) if cfg.hardware.vendor == "cpu" else 0

    def make(i: int, wait: bool = True) -> RayEngine:
        return RayEngine(i, placement, runtime_env, model_dir, cfg.run.seed + i, cfg.rollout.max_concurrency, threads,
                         wait=wait, start_timeout_s=cfg.rollout.engine_start_timeout_s)

    # every engine's actor first, then the waits: their start-ups (a worker process, torch, the model) overlap
    engines = start_all(plan.num_engines, lambda i: make(i, wait=False), lambda e: e.wait_started(), _kill,
                        cfg.rollout.max_engine_restarts, watch)
    return engines, make


def _kill(engine: RayEngine) -> None:
    try:
        ray.kill(engine.actor)
    except Exception:  # noqa: BLE001 - already gone
        pass
