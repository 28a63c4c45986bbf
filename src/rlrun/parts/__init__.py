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

from rlrun.parts.seams import (CheckpointsPart, EvaluatorPart, MetricsPart, OffloadPart, RolloutPart, TrainerPart,
                               WeightSyncPart)
from rlrun.guard.invariants import NoChecks


@dataclass
class Parts:
    """Each field's type is its seam (rlrun.parts.seams): what the loops call on it."""
    cfg: Any
    plan: Any
    rollout: RolloutPart              # RolloutSide
    trainer: TrainerPart              # TrainGroup
    weights: WeightSyncPart           # WeightSync
    offload: OffloadPart              # Offload
    checkpoints: CheckpointsPart      # Checkpoints
    evaluator: EvaluatorPart          # Evaluator
    metrics: MetricsPart              # RunMetrics
    check_stop: Callable[[], None] = lambda: None  # raises after SIGINT/SIGTERM (runner.StopRequest)
    invariants: Any = field(default_factory=NoChecks)  # Invariants (a hand-built Parts: none)
    teacher: Any = None               # algo.distill: log_probs(batch) (rlrun.parts.teacher); None = no distillation
