"""The seams between the loops and the parts: one Protocol per part, holding what the loops (rlrun.loops) call.
The real parts (rlrun.parts.*, rlrun.launch.train_group.TrainGroup), replay's stand-ins (rlrun.replay) and the
tests' doubles satisfy them; mypy checks that (tests/unit/test_seams.py runs it on tests/unit/seam_conformance.py).
Pure typing: no torch, no ray. The async loop also reaches the rollout side's engines and weight versions
(rollout.engines, rollout.versions), which have no stand-in: they are not part of these seams."""
from __future__ import annotations

from contextlib import AbstractContextManager
from typing import Any, Protocol


class PromptState(Protocol):
    """The data position a checkpoint saves (rlrun.data.PromptDataset)."""
    def state_dict(self) -> dict: ...
    def load_state_dict(self, state: dict) -> None: ...


class RolloutPart(Protocol):
    """Samples for a rollout: generate, score, keep the groups that carry signal (rlrun.parts.rollout_side)."""
    @property
    def prompts(self) -> PromptState: ...
    def collect(self, rollout_id: int, sampling: Any) -> tuple[list, list, dict]: ...
    def profiling(self, rollout_id: int) -> AbstractContextManager[Any]: ...


class TrainerPart(Protocol):
    """The trainer ranks as one backend (rlrun.launch.train_group.TrainGroup; rlrun.train.base.TrainerBackend)."""
    def compute_log_probs(self, batch: Any, which: str) -> list: ...
    def compute_values(self, batch: Any) -> list: ...
    def train_step(self, batch: Any) -> dict[str, float]: ...


class WeightSyncPart(Protocol):
    """Trainer weights -> engines, versioned and verified (rlrun.parts.weight_sync)."""
    def sync(self, version: int, only_if_stale: bool = False) -> None: ...


class OffloadPart(Protocol):
    """The trainer's block: memory swaps around training and the weight push (rlrun.parts.offload)."""
    def training(self, version: int, timer: Any, push: bool = True) -> AbstractContextManager[Any]: ...


class CheckpointsPart(Protocol):
    """Save / restore trainer and driver state (rlrun.parts.checkpoints)."""
    def save(self, rollout_id: int, data_state: dict) -> None: ...
    def restore(self) -> Any: ...
    def latest(self) -> str: ...


class EvaluatorPart(Protocol):
    """Eval datasets through the rollout side (rlrun.parts.evaluator)."""
    def evaluate(self, rollout_id: int) -> dict[str, float]: ...


class MetricsPart(Protocol):
    """metrics.jsonl / wandb / progress and the run's summary (rlrun.parts.run_metrics)."""
    def open(self, start: int) -> None: ...
    def record(self, rollout_id: int, samples: list, kept: list) -> None: ...
    def log(self, rollout_id: int, metrics: dict[str, float]) -> None: ...
    def summary(self, checkpoint: str) -> dict: ...
