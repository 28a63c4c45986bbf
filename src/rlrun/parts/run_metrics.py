"""The run's metrics (metrics.jsonl, wandb, progress bar or log lines, TensorBoard, plot), its rollout
records (rlrun.records) and its summary."""
from __future__ import annotations

import statistics
from pathlib import Path

from rlrun.metrics import METRICS_FILE, MetricsLogger, plot, read_metrics
from rlrun.records import RecordsWriter

SUMMARY_WINDOW = 5  # steps averaged for the first/last reward of the summary


def summary_window(steps: int) -> int:
    """Steps in each of the "first" and "last" windows: SUMMARY_WINDOW, at most half the run, so the two never
    overlap (with 5 rollouts "first 5 -> last 5" compared a window with itself); one step: that step."""
    return min(SUMMARY_WINDOW, max(1, steps // 2)) if steps else 0


class RunMetrics:
    def __init__(self, cfg, run_dir: Path, extra=lambda: {}):
        self.cfg, self.run_dir, self.extra = cfg, Path(run_dir), extra  # extra(): merged into each row
        self.logger: MetricsLogger | None = None
        self.records: RecordsWriter | None = None

    def open(self, start: int) -> None:
        self.logger = MetricsLogger(self.run_dir, self.cfg, total=self.cfg.rollout.num_rollout, start=start)
        self.records = RecordsWriter(self.run_dir, self.cfg.logging.rollout_records,
                                     self.cfg.rollout.n_samples_per_prompt)

    def _opened(self) -> tuple[MetricsLogger, RecordsWriter]:
        if self.logger is None or self.records is None:
            raise RuntimeError("RunMetrics: open() first (the loop opens it at its resume point)")
        return self.logger, self.records

    def record(self, rollout_id: int, samples: list, kept: list) -> None:
        """The rollout's samples -> RUN_DIR/rollouts (logging.rollout_records); the rows -> a wandb table."""
        logger, records = self._opened()
        logger.log_samples(rollout_id, records.write(rollout_id, samples, kept))

    def log(self, rollout_id: int, metrics: dict[str, float]) -> None:
        self._opened()[0].log(rollout_id, {**metrics, **self.extra()})

    def close(self) -> None:
        if self.logger is None:
            return
        self.logger.close()
        if (self.run_dir / METRICS_FILE).exists():
            plot(self.run_dir)

    def summary(self, checkpoint: str) -> dict:
        rows = read_metrics(self.run_dir / METRICS_FILE)
        rewards = [r["rollout/reward_mean"] for r in rows]
        w = summary_window(len(rewards))
        return {"run_dir": str(self.run_dir), "steps": len(rows), "window": w,
                "reward_first": statistics.fmean(rewards[:w]) if w else None,
                "reward_last": statistics.fmean(rewards[-w:]) if w else None,
                "checkpoint": checkpoint}
