"""The RolloutEngine protocol: one engine's control plane, as rlrun.rollout.engines.group.EngineGroup (the fleet)
drives it. The data plane is the engine's `url` behind the router (generation never goes through this object).
An engine kind (rlrun.rollout.engines.<kind>/) has a pure spec.py registering its EngineKind, whose `start`
("module:function") builds the engines:

    start(cfg, plan, placement, runtime_env, model_dir, log_dir, watch=None) -> (engines, restart)
        engines: a RolloutEngine per engine of the plan, started and healthy; restart(i): engine i again;
        watch(): called about once a second while the engines start, raises to end the start (every engine it
        launched stopped): the runner's check of trainer ranks that build meanwhile

Engines that speak SGLang's HTTP API (both built-in kinds: the hf engine implements it) get every method but
alive/stop from rlrun.rollout.engines.http.HTTPEngine. Pure typing: no torch, no ray.
"""
from __future__ import annotations

from typing import Protocol, runtime_checkable


@runtime_checkable
class RolloutEngine(Protocol):
    @property
    def url(self) -> str: ...                                   # where the router sends its requests
    # ---- lifecycle: start is the kind's start(); restart is start again
    def alive(self) -> bool: ...                                # its process(es) run
    def healthy(self, timeout_s: float) -> bool: ...            # it answers (GET /health)
    def stop(self) -> None: ...
    # ---- generation control
    def pause(self, mode: str) -> None: ...                     # "abort" | "in_place" | "retract"
    def continue_generation(self) -> None: ...
    def abort(self) -> None: ...                                # every request in flight ends now
    def flush_cache(self) -> bool: ...                          # idle: prefix cache dropped, True; busy: False
    # ---- memory (colocated with the trainer: lend the GPU while it trains)
    def release_memory(self, tags: list[str] | None) -> None: ...
    def resume_memory(self, tags: list[str] | None) -> None: ...
    # ---- weights: a file transport's engine end (pushes from the trainer's memory post to `url` directly)
    def load_weights(self, path: str, version: str) -> None: ...
    # the delta transport's engine end: every host of the engine brings its local checkpoint `local_dir` to
    # `version` of the stream published under `source_dir` (rlrun.rollout.delta.pull), before load_weights(local_dir)
    def pull_weights(self, local_dir: str, source_dir: str, version: int) -> None: ...
    def version(self) -> str: ...                               # the weight_version it serves
    def checksum(self, kind: str) -> str: ...                   # "sha256" | "fingerprint" (kinds with checksums)
    def weight_dtype(self) -> str: ...
    # ---- profiling: False when it has no profiler
    def start_profile(self, output_dir: str) -> bool: ...
    def stop_profile(self) -> None: ...
