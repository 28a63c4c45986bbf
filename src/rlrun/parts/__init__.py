"""The parts a run is built from, one job each (docs/runner.md); rlrun.runner builds them and a
loop (rlrun.loops) composes them:

    RolloutSide   engines + router + prompt data + generation (generate function) + groups
    TrainGroup    the trainer ranks (rlrun.launch.train_group)
    WeightSync    trainer weights -> engines, versioned and checksum-verified
    Offload       the trainer's block: GPU memory swaps around training and the weight push
    Checkpoints   save / restore (trainer state + driver state)
    Evaluator     eval datasets through the rollout side
    RunMetrics    metrics.jsonl / wandb / progress, and the run's summary
    Invariants    the run invariants checked every rollout (rlrun.guard.invariants)
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

from rlrun.guard.invariants import NoChecks


@dataclass
class Parts:
    cfg: Any
    plan: Any
    rollout: Any      # RolloutSide
    trainer: Any      # TrainGroup
    weights: Any      # WeightSync
    offload: Any      # Offload
    checkpoints: Any  # Checkpoints
    evaluator: Any    # Evaluator
    metrics: Any      # RunMetrics
    check_stop: Callable[[], None] = lambda: None  # raises after SIGINT/SIGTERM (runner.StopRequest)
    invariants: Any = field(default_factory=NoChecks)  # Invariants (a hand-built Parts: none)
