"""Per-step metrics: metrics.jsonl (always), wandb (offline without a key), TensorBoard, a progress
bar in a terminal or one line per rollout elsewhere, a plot.

metrics.jsonl is the source of truth (one JSON object per rollout step, flushed each line, so a
killed run keeps everything up to its last step); wandb, TensorBoard, the bar/lines and the plot are views of it.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

METRICS_FILE = "metrics.jsonl"
PLOT_FILE = "reward_length.png"
TENSORBOARD_DIR = "tensorboard"
_BAR_KEYS = (("rollout/reward_mean", "reward"), ("rollout/response_len_mean", "len"))
_LINE_KEYS = (*_BAR_KEYS, ("rollout/kept_samples", "kept"), ("train/loss", "loss"), ("eval/reward_mean", "eval"))


def wandb_mode(configured: str) -> str:
    """online needs WANDB_API_KEY; without one fall back to offline rather than prompting."""
    if configured == "online" and not os.environ.get("WANDB_API_KEY"):
        return "offline"
    return configured


class WandbSink:
    """One wandb run per run dir (a resumed run appends to it); sample generations as a table."""

    def __init__(self, run_dir: Path, cfg, mode: str):
        import wandb

        self._wandb = wandb
        w = cfg.logging.wandb
        if w.host and mode == "online":  # a self-hosted server, as slime's --wandb-host does (wandb.login(host=))
            wandb.login(host=w.host)
        self.run = wandb.init(
            dir=str(run_dir), mode=mode, project=w.project, entity=w.entity, group=w.group,
            name=cfg.run.name, config=cfg.to_dict() if hasattr(cfg, "to_dict") else None,
            id=self._wandb_id(run_dir), resume="allow", settings=wandb.Settings(console="off", silent=True))

    @staticmethod
    def _wandb_id(run_dir: Path) -> str:
        f = run_dir / "wandb_id.txt"
        if not f.exists():
            import uuid

            f.write_text(uuid.uuid4().hex[:12])
        return f.read_text().strip()

    def log(self, row: dict) -> None:
        self.run.log(row, step=row["step"])

    def log_samples(self, step: int, rows: list[dict]) -> None:
        cols = ("rollout_id", "group_id", "prompt", "response", "reward", "status", "kept_index")
        self.run.log({"samples": self._wandb.Table(columns=list(cols), data=[[r[c] for c in cols] for r in rows])},
                     step=step)

    def close(self) -> None:
        self.run.finish()


class TensorBoardSink:
    """logging.tensorboard=true: every series as a scalar in RUN_DIR/tensorboard (SummaryWriter)."""

    def __init__(self, run_dir: Path):
        from torch.utils.tensorboard import SummaryWriter

        self.writer = SummaryWriter(log_dir=str(run_dir / TENSORBOARD_DIR))

    def log(self, row: dict) -> None:
        for k, v in row.items():
            if k != "step":
                self.writer.add_scalar(k, v, global_step=row["step"])
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class ProgressBar:
    """A terminal: rich's bar, updated per rollout."""

    def __init__(self, total: int, start: int):
        from rich.progress import (BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn,
                                   TimeRemainingColumn)

        self._progress = Progress(TextColumn("[bold]rollout"), BarColumn(), MofNCompleteColumn(),
                                  TimeElapsedColumn(), TextColumn("ETA"), TimeRemainingColumn(),
                                  TextColumn("{task.fields[info]}"))
        self._task = self._progress.add_task("rollout", total=total, completed=start, info="")
        self._progress.start()

    def log(self, row: dict) -> None:
        info = "  ".join(f"{short} {row[k]:.3g}" for k, short in _BAR_KEYS if k in row)
        self._progress.update(self._task, completed=row["step"] + 1, info=info)

    def close(self) -> None:
        self._progress.stop()


class LogLines:
    """Not a terminal (a log file, a pipe, a cluster job): one line per rollout, flushed, e.g.
    [rlrun] rollout 3 (4/60) reward 0.125 len 2.06 kept 128 | rollout 0.41s train 0.22s | step 0.75s ETA 42s
    The ETA is the mean step time of this process's rollouts times the rollouts left."""

    def __init__(self, total: int, start: int, stream=None):
        self.total, self.stream = total, stream or sys.stdout
        self._done, self._seconds = 0, 0.0

    def log(self, row: dict) -> None:
        self._done += 1
        self._seconds += row.get("time/step_s", 0.0)
        left = self.total - (row["step"] + 1)
        print(format_line(row, self.total, self._seconds / self._done * left), file=self.stream, flush=True)

    def close(self) -> None:
        pass


def format_line(row: dict, total: int, eta_s: float) -> str:
    head = " ".join(f"{short} {row[k]:.4g}" for k, short in _LINE_KEYS if k in row)
    phases = " ".join(f"{k[5:-2]} {v:.2f}s" for k, v in row.items()
                      if k.startswith("time/") and k.endswith("_s") and k != "time/step_s")
    tail = f"step {row.get('time/step_s', 0.0):.2f}s ETA {_duration(eta_s)}"
    return f"[rlrun] rollout {row['step']} ({row['step'] + 1}/{total}) {head} | {phases} | {tail}"


def _duration(s: float) -> str:
    s = int(round(s))
    return f"{s // 3600}h{s % 3600 // 60:02d}m" if s >= 3600 else f"{s // 60}m{s % 60:02d}s" if s >= 60 else f"{s}s"


class MetricsLogger:
    """metrics.jsonl plus the views of it that the config asks for (the sinks above)."""

    def __init__(self, run_dir: str | Path, cfg, total: int, start: int = 0, stream=None):
        self.path = Path(run_dir) / METRICS_FILE
        self.run_dir = Path(run_dir)
        drop_torn_tail(self.path)  # a row a kill cut short would glue onto the resumed run's first row
        self._file = self.path.open("a")
        self._sinks: list = []
        mode = wandb_mode(cfg.logging.wandb.mode)
        self._wandb = WandbSink(self.run_dir, cfg, mode) if mode != "disabled" else None
        if self._wandb is not None:
            self._sinks.append(self._wandb)
        if cfg.logging.tensorboard:
            self._sinks.append(TensorBoardSink(self.run_dir))
        if cfg.logging.progress:
            stream = stream or sys.stdout
            tty = hasattr(stream, "isatty") and stream.isatty()
            self._sinks.append(ProgressBar(total, start) if tty else LogLines(total, start, stream))

    def log(self, step: int, metrics: dict[str, float]) -> None:
        row = {"step": step, **{k: float(v) for k, v in metrics.items()}}
        self._file.write(json.dumps(row) + "\n")
        self._file.flush()
        for sink in self._sinks:
            sink.log(row)

    def log_samples(self, step: int, rows: list[dict]) -> None:
        """The rollout's recorded samples (rlrun.records) as a wandb table, when wandb is on."""
        if self._wandb is not None and rows:
            self._wandb.log_samples(step, rows)

    def close(self) -> None:
        for sink in reversed(self._sinks):
            sink.close()
        self._sinks = []
        self._file.close()


def drop_torn_tail(path: Path) -> int:
    """Cuts metrics.jsonl back to its last newline (what a SIGKILL mid-write leaves after it); returns the bytes
    cut. The step of the torn row is logged again by the resumed run, which redoes it from the checkpoint."""
    if not path.exists():
        return 0
    with path.open("r+b") as f:
        size = f.seek(0, 2)
        if size == 0 or (f.seek(size - 1), f.read(1))[1] == b"\n":
            return 0  # the usual case: a clean end, found without reading the file
        f.seek(0)
        keep = f.read().rfind(b"\n") + 1
        f.truncate(keep)
    return size - keep


def read_metrics(path: str | Path) -> list[dict]:
    """Rows of metrics.jsonl; when a resumed run re-logs a step, the later row wins. A row is complete once its
    newline is written: text after the last newline is a row being written (a reader during the run sees a long row
    in pieces) or one a kill cut short, and is not read; a complete row that is not JSON is an error."""
    rows: dict[int, dict] = {}
    for line in Path(path).read_text().split("\n")[:-1]:
        if line.strip():
            row = json.loads(line)
            rows[int(row["step"])] = row
    return [rows[k] for k in sorted(rows)]


def run_title(run_dir: str | Path) -> str:
    """"<run.name> (<run dir's timestamp>)" from the run dir's config.yaml (the dir name without one)."""
    import yaml

    run_dir = Path(run_dir)
    cfg = run_dir / "config.yaml"
    name = (yaml.safe_load(cfg.read_text()) or {}).get("run", {}).get("name") if cfg.exists() else None
    return f"{name} ({run_dir.name})" if name else run_dir.name


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
    fig.suptitle(run_title(run_dir))
    fig.tight_layout()
    out = run_dir / PLOT_FILE
    fig.savefig(out, dpi=100)
    plt.close(fig)
    return out


@dataclass
class Active:
    part: str
    phase: str
    since: float  # time.monotonic()
    thread: str = ""


@dataclass
class PhaseBoard:
    """What each part is doing now and how long its phases took so far (thread-safe)."""
    active: dict = field(default_factory=dict)   # part -> Active
    history: dict = field(default_factory=dict)  # (part, phase) -> [seconds]
    lock: threading.Lock = field(default_factory=threading.Lock)

    @contextmanager
    def phase(self, part: str, name: str):
        a = Active(part, name, time.monotonic(), threading.current_thread().name)
        with self.lock:
            outer = self.active.get(part)
            self.active[part] = a
        try:
            yield
        finally:
            with self.lock:
                self.history.setdefault((part, name), []).append(time.monotonic() - a.since)
                if outer is None:
                    self.active.pop(part, None)
                else:
                    self.active[part] = outer

    def seed(self, part: str, phase: str, seconds: list[float]) -> None:
        with self.lock:
            self.history.setdefault((part, phase), [])[:0] = seconds

    def snapshot(self) -> tuple[list[Active], dict]:
        with self.lock:
            return list(self.active.values()), {k: list(v) for k, v in self.history.items()}

    def reset(self) -> None:
        with self.lock:
            self.active.clear()
            self.history.clear()


BOARD = PhaseBoard()  # the run's one board: the loops' Timer and the rollout side enter their phases here, and
# the stall watchdog (rlrun.guard.watchdog) reads it


class Timer:
    """Wall time per phase of one loop step: `with t("train"): ...`, then t.metrics(tokens). Inside a phase,
    `with t.part("offload/release"): ...` times one piece of it (metric offload/release_s, not a phase: the
    phases still sum to the step)."""

    def __init__(self):
        self._start = time.perf_counter()
        self.seconds: dict[str, float] = {}
        self.parts: dict[str, float] = {}

    @contextlib.contextmanager
    def part(self, name: str):
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.parts[name] = self.parts.get(name, 0.0) + time.perf_counter() - t0

    @contextlib.contextmanager
    def __call__(self, phase: str):

        t0 = time.perf_counter()
        try:
            with BOARD.phase("driver", phase):
                yield
        finally:
            self.seconds[phase] = self.seconds.get(phase, 0.0) + time.perf_counter() - t0

    def metrics(self, tokens: dict[str, int]) -> dict[str, float]:
        """time/<phase>_s, time/step_s, and perf/<phase>_tokens_per_s for phases with a token count."""
        out = {f"time/{k}_s": v for k, v in self.seconds.items()}
        out.update({f"{k}_s": v for k, v in self.parts.items()})
        out["time/step_s"] = time.perf_counter() - self._start
        for phase, n in tokens.items():
            if self.seconds.get(phase):
                out[f"perf/{phase}_tokens_per_s"] = n / self.seconds[phase]
        return out
