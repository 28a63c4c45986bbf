"""Per-step metrics: metrics.jsonl (always), wandb (offline without a key), a progress bar, a plot.

metrics.jsonl is the source of truth (one JSON object per rollout step, flushed each line, so a
killed run keeps everything up to its last step); wandb, the bar and the plot are views of it.
"""
from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "reward_length.png"
_BAR_KEYS = (("rollout/reward_mean", "reward"), ("rollout/response_len_mean", "len"))


def wandb_mode(configured: str) -> str:
    """online needs WANDB_API_KEY; without one fall back to offline rather than prompting."""
    if configured == "online" and not os.environ.get("WANDB_API_KEY"):
        return "offline"
    return configured


class MetricsLogger:
    def __init__(self, run_dir: str | Path, cfg, total: int, start: int = 0):
        self.path = Path(run_dir) / METRICS_FILE
        self.run_dir = Path(run_dir)
        self._file = self.path.open("a")
        self._wandb = None
        mode = wandb_mode(cfg.logging.wandb.mode)
        if mode != "disabled":
            import wandb

            self._wandb = wandb.init(
                dir=str(self.run_dir), mode=mode, project=cfg.logging.wandb.project, entity=cfg.logging.wandb.entity,
                name=cfg.run.name, config=cfg.to_dict() if hasattr(cfg, "to_dict") else None,
                id=self._wandb_id(), resume="allow", settings=wandb.Settings(console="off", silent=True))
        self._progress = None
        if cfg.logging.progress:
            from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

            self._progress = Progress(TextColumn("[bold]rollout"), BarColumn(), MofNCompleteColumn(),
                                      TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                      TextColumn("{task.fields[info]}"))
            self._task = self._progress.add_task("rollout", total=total, completed=start, info="")
            self._progress.start()

    def _wandb_id(self) -> str:
        # One wandb run per run dir, so a resumed run appends to the same wandb run.
        f = self.run_dir / "wandb_id.txt"
        if not f.exists():
            import uuid

            f.write_text(uuid.uuid4().hex[:12])
        return f.read_text().strip()

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        if self._wandb is not None:
            self._wandb.log(row, step=step)
        if self._progress is not None:
            info = "  ".join(f"{short} {row[k]:.3g}" for k, short in _BAR_KEYS if k in row)
            self._progress.update(self._task, completed=step + 1, info=info)

    def close(self) -> None:
        if self._progress is not None:
            self._progress.stop()
            self._progress = None
        if self._wandb is not None:
            self._wandb.finish()
            self._wandb = None
        self._file.close()


def read_metrics(path: str | Path) -> list[dict]:
    """Rows of metrics.jsonl; when a resumed run re-logs a step, the later row wins."""
    rows: dict[int, dict] = {}
    for line in Path(path).read_text().splitlines():
        if line.strip():
            row = json.loads(line)
            rows[int(row["step"])] = row
    return [rows[k] for k in sorted(rows)]


def plot(run_dir: str | Path) -> Path:
    """reward and response length per rollout step -> PNG in the run dir."""
    import matplotlib

    matplotlib.use("Agg")  # no display on servers; must precede pyplot
    import matplotlib.pyplot as plt

    run_dir = Path(run_dir)
    rows = read_metrics(run_dir / METRICS_FILE)
    steps = [r["step"] for r in rows]
    fig, (ax_r, ax_l) = plt.subplots(2, 1, figsize=(7, 6), sharex=True)
    ax_r.plot(steps, [r.get("rollout/reward_mean") for r in rows], label="rollout reward")
    evals = [(r["step"], r["eval/reward_mean"]) for r in rows if "eval/reward_mean" in r]
    if evals:
        ax_r.plot(*zip(*evals), "o-", label="eval reward")
    ax_r.set_ylabel("mean reward")
    ax_r.legend()
    ax_l.plot(steps, [r.get("rollout/response_len_mean") for r in rows])
    ax_l.set_ylabel("mean response length (tokens)")
    ax_l.set_xlabel("rollout step")
    fig.tight_layout()
    out = run_dir / PLOT_FILE
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


class Timer:
    """Wall time per phase of one loop step: `with t("train"): ...`, then t.metrics(tokens)."""

    def __init__(self):
        self._start = time.perf_counter()
        self.seconds: dict[str, float] = {}

    @contextlib.contextmanager
    def __call__(self, phase: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def metrics(self, tokens: dict[str, int]) -> dict[str, float]:
        """time/<phase>_s, time/step_s, and perf/<phase>_tokens_per_s for phases with a token count."""
        out = {f"time/{k}_s": v for k, v in self.seconds.items()}
        out["time/step_s"] = time.perf_counter() - self._start
        for phase, n in tokens.items():
            if self.seconds.get(phase):
                out[f"perf/{phase}_tokens_per_s"] = n / self.seconds[phase]
        return out
