"""Rules for the debug: and logging: settings that observe a run (docs/observability.md): a profile step the
run never reaches, or an engine profile with no step to profile, would otherwise be silently ignored."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.registry import RULES as rule
from rlrun.config.schema import RunConfig


@rule
def profiling(cfg: RunConfig) -> Iterator[Problem]:
    d, n = cfg.debug, cfg.rollout.num_rollout
    late = [s for s in d.profile_steps if s >= n]
    if late:
        yield Problem("debug.profile_steps", f"steps {late} are never reached: the run has rollouts 0..{n - 1}",
                      f"list rollout steps below {n} (0-based, as in metrics.jsonl)", list(d.profile_steps))
    if d.profile_engines and not d.profile_steps:
        yield Problem("debug.profile_engines", "is true but debug.profile_steps is empty, so no step is profiled",
                      "list the steps to profile, e.g. debug.profile_steps=[2]", d.profile_engines)
    if d.rollout_only and cfg.train.async_train:
        yield Problem("debug.rollout_only", "runs the synchronous loop only (nothing trains, so there is nothing "
                      "for rollouts to overlap with)", "set train.async_train=false", d.rollout_only)
    if d.rollout_only and d.profile_steps and not d.profile_engines:
        yield Problem("debug.profile_steps", "profiles the trainer, which debug.rollout_only=true never runs",
                      "add debug.profile_engines=true (engines that have a profiler) or drop debug.rollout_only",
                      list(d.profile_steps))
