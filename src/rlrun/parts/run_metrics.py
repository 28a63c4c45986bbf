"""The run's metrics (metrics.jsonl, wandb, progress bar, plot) and its summary."""
from __future__ import annotations

import statistics
from pathlib import Path

from rlrun.metrics import METRICS_FILE, MetricsLogger, plot, read_metrics

SUMMARY_WINDOW = 5  # steps averaged for the first/last reward of the summary


class RunMetrics:
    def __init__(self, cfg, run_dir: Path, extra=lambda: {}):
        self.cfg, self.run_dir, self.extra = cfg, Path(run_dir), extra  # extra(): merged into each row
        self.logger: MetricsLogger | None = None

    def open(self, start: int) -> None:
        self.logger = MetricsLogger(self.run_dir, self.cfg, total=self.cfg.rollout.num_rollout, start=start)

    def log(self, rollout_id: int, metrics: dict[str, float]) -> None:
        self.logger.log(rollout_id, {**metrics, **self.extra()})

    def close(self) -> None:
        if self.logger is None:
            return
        self.logger.close()
        if (self.run_dir / METRICS_FILE).exists():
            plot(self.run_dir)

    def summary(self, checkpoint: str) -> dict:
        rows = read_metrics(self.run_dir / METRICS_FILE)
        rewards = [r["rollout/reward_mean"] for r in rows]
        w = min(SUMMARY_WINDOW, len(rewards))
        return {"run_dir": str(self.run_dir), "steps": len(rows),
                "reward_first": statistics.fmean(rewards[:w]) if w else None,
                "reward_last": statistics.fmean(rewards[-w:]) if w else None,
                "checkpoint": checkpoint}
