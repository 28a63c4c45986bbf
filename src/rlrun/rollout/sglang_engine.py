"""The sglang engine kind: one `python -m sglang.launch_server` per engine, owned by a Ray actor
placed on the engine's placement-group bundle.

GPU pinning: actors run with RAY_EXPERIMENTAL_NOSET_CUDA_VISIBLE_DEVICES=1 (hardware env), so the
server sees every GPU of the node and `--base-gpu-id` (the engine's first GPU in the plan) plus
`--tp-size` pick its GPUs, as slime does. Startup waits for /health_generate (a real one-token
generation) and fails with the server's log tail.

Run against the real SGLang 0.5.16 on the lent H100 (tests/gpu/test_sglang_engine.py); on the CPU the
same launch path runs with stand-in launchers. docs/sglang.md says what ran where.
"""
from __future__ import annotations

import os
import sys
from pathlib import Path

from rlrun.rollout.process import ServerProcess, free_port
from rlrun.rollout.sglang_args import EngineSlot, server_args, to_argv

LAUNCHER = (sys.executable, "-m", "sglang.launch_server")


def engine_slot(rank: int, gpus: list[int], host: str = "127.0.0.1") -> EngineSlot:
    """gpus: the engine's GPU ids on its node, from Plan.placement (role 'engine', rank = engine id)."""
    return EngineSlot(rank=rank, base_gpu_id=min(gpus), port=free_port(host), nccl_port=free_port(host))


class SGLangEngine:
    def __init__(self, args: dict, *, log_dir: str | Path, env: dict[str, str] | None = None,
                 launcher: tuple[str, ...] = LAUNCHER):
        self.args = dict(args)
        self.url = f"http://{args['host']}:{args['port']}"
        self.argv = [*launcher, *to_argv(self.args)]
        self.process = ServerProcess(f"sglang engine {self.url}", self.argv,
                                     Path(log_dir) / f"sglang-{args['port']}.log",
                                     env={**os.environ, **(env or {})})

    @classmethod
    def from_config(cls, cfg, rank: int, gpus: list[int], log_dir: str | Path, env: dict | None = None,
                    model_path: str | None = None, launcher: tuple[str, ...] = LAUNCHER) -> "SGLangEngine":
        slot = engine_slot(rank, gpus, cfg.rollout.router.host)
        return cls(server_args(cfg, slot, model_path), log_dir=log_dir, env=env, launcher=launcher)

    def start(self, timeout_s: float = 900.0) -> str:
        self.process.start()
        self.process.wait_healthy(f"{self.url}/health_generate", timeout_s, interval_s=1.0)
        return self.url

    def alive(self) -> bool:
        return self.process.alive()

    def stop(self) -> None:
        self.process.stop()


class SGLangEngineActor:
    """Ray actor body: builds the argv and picks the ports *on the actor's node* (the driver may
    run elsewhere), then owns the server process. Ray options (placement-group bundle, GPU share,
    runtime_env with the hardware env incl. NOSET_CUDA_VISIBLE_DEVICES) come from the runner."""

    def __init__(self, cfg, rank: int, gpus: list[int], log_dir: str, env: dict | None = None,
                 model_path: str | None = None, launcher: tuple[str, ...] = LAUNCHER):
        # launcher: tests pass a stand-in server that accepts SGLang's flags
        self.engine = SGLangEngine.from_config(cfg, rank, gpus, log_dir, env=env, model_path=model_path,
                                               launcher=launcher)

    def start(self, timeout_s: float = 900.0) -> str:
        return self.engine.start(timeout_s)

    def alive(self) -> bool:
        return self.engine.alive()

    def stop(self) -> None:
        self.engine.stop()


class RaySGLangEngine:
    """What EngineGroup drives (.url, .alive(), .stop()) around one SGLangEngineActor.

        RaySGLangEngine(cfg, i, placement.gpu_ids("engine", i), placement.options("engine", i),
                        runtime_env(env), log_dir)
    """

    def __init__(self, cfg, rank: int, gpus: list[int], actor_options: dict, runtime_env: dict | None,
                 log_dir: str | Path, *, model_path: str | None = None, launcher: tuple[str, ...] = LAUNCHER,
                 timeout_s: float = 900.0):
        import ray

        self._ray = ray
        cls = ray.remote(SGLangEngineActor).options(**actor_options, runtime_env=runtime_env)
        self.actor = cls.remote(cfg, rank, gpus, str(log_dir), (runtime_env or {}).get("env_vars"),
                                model_path, tuple(launcher))
        self.url = ray.get(self.actor.start.remote(timeout_s))

    def alive(self) -> bool:
        try:
            return bool(self._ray.get(self.actor.alive.remote(), timeout=10))
        except Exception:  # noqa: BLE001 - actor dead or unreachable: the engine is gone
            return False

    def stop(self) -> None:
        try:
            self._ray.get(self.actor.stop.remote(), timeout=30)
        except Exception:  # noqa: BLE001 - already dead: killing the actor is all that is left
            pass
        self._ray.kill(self.actor)
