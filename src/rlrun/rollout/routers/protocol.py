"""The RolloutRouter protocol: the router in front of the engines, as the fleet (rlrun.rollout.engines.group
.EngineGroup) registers and removes them and the data plane (rlrun.rollout.handle) sends requests to its `url`.
A router kind (its package: rlrun.config.kinds.RouterKind) has a pure spec.py registering its RouterKind,
whose `factory` ("module:function") builds one, not started:

    factory(*, policy, log_dir, host="127.0.0.1", port=None, request_timeout_s=600.0, health_check_endpoint="/health",
            **options) -> RolloutRouter
        policy: one of the kind's RouterKind.policies; port None: a free one, picked by the router;
        health_check_endpoint: the path it probes each engine at (the engine kind's EngineKind.probe_path)

Pure: no torch, no ray (the kind's launcher is imported only when a run builds its router)."""
from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from rlrun.config.kinds import ENGINES, ROUTERS, resolve


@runtime_checkable
class RolloutRouter(Protocol):
    url: str                                                     # where the data plane sends its requests

    def start(self, timeout_s: float = ...) -> "RolloutRouter": ...  # healthy when it returns
    def stop(self) -> None: ...
    def workers(self) -> dict[str, str]: ...                     # url -> worker id, registered now
    def add_worker(self, url: str, wait_s: float = ...) -> None: ...  # wait_s 0: return before it is registered
    def wait_for_workers(self, urls: list[str], timeout_s: float) -> None: ...
    def remove_worker(self, url: str) -> bool: ...               # False: it was not registered
    def log_tail(self) -> str: ...


def build_router(kind: str, **options: Any) -> RolloutRouter:
    """A router of kind `kind` (rollout.router.kind), not started; options as the protocol's factory takes them."""
    return resolve(ROUTERS[kind].factory)(**options)


def run_router(rollout_cfg: Any, log_dir: str | Path) -> RolloutRouter:
    """The run's router (rollout.router) in front of engines of kind rollout.engine, not started."""
    r = rollout_cfg.router
    return build_router(r.kind, policy=r.policy, host=r.host, port=r.port, request_timeout_s=r.request_timeout_s,
                        health_check_endpoint=ENGINES[rollout_cfg.engine].probe_path, log_dir=log_dir)
