"""`rlrun replay RUN_DIR [--rollouts A:B] [overrides]`: train from the rollouts a run recorded, with no
engines and no router (slime's --load-debug-rollout-data / --debug-train-only).

The run's own overrides are composed again, then the new ones on top; each rollout's batch is the
recorded samples in their trained order (records' kept_index), with the recorded rewards, tokens,
masks and engine log-probs, so with no overrides the trainer sees bit-identical batches and writes
the same train/* series (tests/integration/test_replay.py). Replay needs logging.rollout_records=all
and says so otherwise. Starting at A > 0 loads the original run's checkpoint iter_A.

Overrides of what shaped the recorded rollouts (rollout.*, data.*, eval.*) are refused: the records do not
change. The replay is a run dir of its own, RUN_DIR/replay/<timestamp> ({run.output_dir}/replay/<timestamp>
when the replay sets run.output_dir), driven by the synchronous loop
(rlrun.loops.sync_loop) over parts (rlrun.parts) where the rollout side reads records (RecordedRollouts) and weight
sync, offload and eval have no engines (NoEngines); trainer, checkpoints and metrics are the real ones.
"""
from __future__ import annotations

from contextlib import ExitStack, contextmanager
from datetime import datetime, timezone
from pathlib import Path

from rlrun import checkpoint as ckpt
from rlrun.config import load
from rlrun.config.errors import ConfigError, Problem, UsageError
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir, read_run_dir
from rlrun.parts import Parts
from rlrun.parts.checkpoints import Checkpoints
from rlrun.parts.no_engines import NoEngines
from rlrun.parts.run_metrics import RunMetrics
from rlrun.records import read_rollout, record_files, recorded_mode, to_samples
from rlrun.rollout.handle import PolicyVersion
from rlrun.runner import start_trainer

REPLAY_DIR = "replay"
# Settings that shape the recorded rollouts (what was sampled, how many, how it was scored): a replay trains on
# the records as they are, so an override of these cannot apply and is refused (rollout.num_rollout: --rollouts).
ROLLOUT_SIDE = ("rollout.", "data.", "eval.")


def refused_overrides(overrides: list[str]) -> list[Problem]:
    out = []
    for o in overrides:
        key = o.lstrip("+~").split("=", 1)[0]
        if key.startswith(ROLLOUT_SIDE) or key.rstrip(".") + "." in ROLLOUT_SIDE:
            fix = ("use --rollouts A:B" if key == "rollout.num_rollout" else
                   "drop it (a replay trains on the recorded samples as they were generated and scored), or run "
                   "the job again with it")
            out.append(Problem(key, "shapes the recorded rollouts, which a replay does not generate again, so it "
                               "cannot apply", fix, o.split("=", 1)[1] if "=" in o else None))
    return out


def _parse_range(text: str | None, total: int) -> tuple[int, int]:
    """"A:B" (either side may be empty) -> [A, B) within [0, total)."""
    if not text:
        return 0, total
    a, sep, b = text.partition(":")
    try:
        lo, hi = int(a) if a else 0, (int(b) if b else total) if sep else int(a) + 1
    except ValueError:
        raise ConfigError([Problem("--rollouts", "is not A:B", "e.g. --rollouts 0:10 or --rollouts 5:", text)])
    if not 0 <= lo < hi <= total:
        raise ConfigError([Problem("--rollouts", f"must lie within 0:{total} (the run recorded {total} rollouts) "
                                   "and not be empty", f"e.g. --rollouts 0:{total}", text)])
    return lo, hi


def check_records(run_dir: Path) -> int:
    """How many rollouts the run recorded in full; a clear error when replay cannot use them."""
    if not (run_dir / "config.yaml").exists():
        raise ConfigError([Problem(str(run_dir), "is not a run dir (no config.yaml)",
                                   "pass the run dir of a finished or stopped run (outputs/NAME/TIMESTAMP)",
                                   str(run_dir))])
    mode = recorded_mode(run_dir)
    if mode != "all":
        raise ConfigError([Problem("logging.rollout_records", f"was {mode!r} in {run_dir}: replay trains on every "
                                   "sample of a rollout, and this run kept " +
                                   ("none" if mode == "none" else "only the first group of each rollout"),
                                   "run it again with logging.rollout_records=all", mode)])
    files = record_files(run_dir)
    ids = [int(f.stem.split("_")[1]) for f in files]
    if ids != list(range(len(ids))):
        raise ConfigError([Problem("logging.rollout_records", f"{run_dir}/rollouts holds rollouts {ids[:5]}... "
                                   "with gaps", "replay a range without gaps with --rollouts A:B", "all")])
    return len(ids)


class _NoPrompts:
    """Replay reads no prompt data: its checkpoints carry an empty data state."""

    def state_dict(self) -> dict:
        return {}

    def load_state_dict(self, state: dict) -> None:
        pass


class RecordedRollouts:
    """The rollout side of a replay: each rollout's recorded samples; no engines, nothing to profile."""

    def __init__(self, source: Path):
        self.source, self.prompts = Path(source), _NoPrompts()
        self.versions, self.engines = PolicyVersion(), NoEngines()  # the async loop's gate and fleet: idle

    def collect(self, rollout_id: int, sampling):
        """The recorded samples of `rollout_id`; kept = the trained ones in their trained order."""
        rows = read_rollout(self.source, rollout_id)
        samples = to_samples(rows)
        order = sorted((r["kept_index"], i) for i, r in enumerate(rows) if r["kept_index"] >= 0)
        return samples, [samples[i] for _, i in order], {}

    @contextmanager
    def profiling(self, rollout_id: int):
        yield


def start_checkpoint(source: Path, start: int) -> Path:
    """The original run's checkpoint a replay from rollout `start` > 0 begins with."""
    found = ckpt.iter_dir(Path(source) / "checkpoints", start)
    if not (found / "driver.json").exists():
        saved = sorted(int(d.name.split("_")[1]) for d in (Path(source) / "checkpoints").glob("iter_*"))
        raise ConfigError([Problem("--rollouts", f"starts at rollout {start}, but the run saved no checkpoint "
                                   f"{found.name} (saved: {saved or 'none'})",
                                   "start at 0 or at a saved iteration", start)])
    return found


class ReplayCheckpoints(Checkpoints):
    """Saves into the replay's run dir; a replay from rollout A > 0 starts from the original run's iter_A."""

    def __init__(self, cfg, run_dir: Path, trainer, source: Path, start: int):
        super().__init__(cfg, run_dir, trainer)
        self.source, self.start = Path(source), start

    def restore(self):
        if not self.start:
            return None
        found = start_checkpoint(self.source, self.start)
        self.trainer.load(str(ckpt.trainer_dir(found)))
        state = ckpt.read_driver_state(found)
        state.restore_rng()
        return state


def build(cfg, plan, run_dir: Path, source: Path, start: int, stack: ExitStack) -> Parts:
    """The parts of a replay: the real trainer ranks, checkpoints and metrics; records for rollouts."""
    _, _, trainer = start_trainer(cfg, plan, run_dir, stack)
    none = NoEngines()
    metrics = RunMetrics(cfg, run_dir)
    stack.callback(metrics.close)
    return Parts(cfg=cfg, plan=plan, rollout=RecordedRollouts(source), trainer=trainer, weights=none, offload=none,
                 checkpoints=ReplayCheckpoints(cfg, run_dir, trainer, source, start), evaluator=none,
                 metrics=metrics)


def replay(source: Path, overrides: list[str], rollouts: str | None = None, config_dir=None) -> dict:
    from rlrun.loops import sync_loop as loop

    source = Path(source)
    total = check_records(source)
    refused = refused_overrides(overrides)
    if refused:
        raise ConfigError(refused)
    lo, hi = _parse_range(rollouts, total)
    if lo:
        start_checkpoint(source, lo)  # before Ray starts: a missing checkpoint is a usage error
    _, saved = read_run_dir(source)
    # the recorded batches stand in for the engines; nothing is recorded, evaluated or synced again
    fixed = [f"rollout.num_rollout={hi}", "logging.rollout_records=none", "debug.rollout_only=false",
             "debug.profile_engines=false"]
    cfg = load([*saved, *overrides, *fixed], config_dir)
    if cfg.rollout.routing_replay:
        raise ConfigError([Problem("rollout.routing_replay", f"{source} ran with routing replay, and its rollout "
                                   "records do not keep the routed experts (L x top_k int32 a token), so the replayed "
                                   "training could not route as the original did", "replay a run without "
                                   "rollout.routing_replay", True)])
    changed = training_changes(load([*saved, *fixed], config_dir), cfg)
    plan = make_plan(cfg)
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S-%f")
    # RUN_DIR/replay/<timestamp>, or {run.output_dir}/replay/<timestamp> when the replay sets run.output_dir
    out = Path(cfg.run.output_dir) if any(o.split("=", 1)[0] == "run.output_dir" for o in overrides) else source
    run_dir = prepare_run_dir(cfg, plan, [*saved, *overrides, *fixed], run_dir=out / REPLAY_DIR / stamp)
    print(f"[rlrun] replay of {source} rollouts {lo}:{hi} -> {run_dir}", flush=True)
    with ExitStack() as stack:
        summary = loop.run(build(cfg, plan, run_dir, source, lo, stack))  # the synchronous loop
    # equality with the original run means something only where the training is the original's
    summary["changed"] = changed
    summary["matches"] = None if changed else compare_train_series(source, run_dir)
    return summary


# Where a run writes and what it logs or checks: overrides of these leave the replayed training as it was.
NOT_TRAINING = ("run.", "logging.", "debug.", "checks.")


def training_changes(original, replayed) -> dict[str, tuple]:
    """The settings the replay's overrides change in the training: dotted key -> (original, replayed)."""
    def leaves(d: dict, prefix: str = "") -> dict:
        out = {}
        for k, v in d.items():
            out.update(leaves(v, f"{prefix}{k}.") if isinstance(v, dict) and v else {f"{prefix}{k}": v})
        return out

    a, b = leaves(original.model_dump(mode="json")), leaves(replayed.model_dump(mode="json"))
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b))
            if a.get(k) != b.get(k) and not k.startswith(NOT_TRAINING)}


def compare_train_series(original: Path, replayed: Path, keys=("train/loss", "train/grad_norm")) -> dict[str, int]:
    """How many steps of the replay have exactly the original's value, per key."""
    from rlrun.metrics import METRICS_FILE, read_metrics

    orig = {r["step"]: r for r in read_metrics(Path(original) / METRICS_FILE)}
    out = {}
    for k in keys:
        rows = [r for r in read_metrics(Path(replayed) / METRICS_FILE) if k in r]
        out[k] = sum(1 for r in rows if orig.get(r["step"], {}).get(k) == r[k])
    return out


def replay_main(a) -> int:
    if len(a.positional) != 1:
        raise UsageError("replay takes one RUN_DIR (and optional --rollouts A:B and overrides)")
    s = replay(Path(a.positional[0]), a.overrides, a.rollouts, a.config_dir)
    m, changed = s.pop("matches"), s.pop("changed")
    steps = s["steps"]
    if changed:
        what = ", ".join(f"{k} {old} -> {new}" for k, (old, new) in changed.items())
        print(f"[rlrun] replay done: {steps} steps; not compared with the original run: the overrides change the "
              f"training ({what}), so equal or different series say nothing about reproduction", flush=True)
    else:
        print(f"[rlrun] replay done: {steps} steps; equal to the original run: "
              + ", ".join(f"{k} {v}/{steps}" for k, v in m.items()), flush=True)
    if steps and s["reward_first"] is not None:
        print(f"[rlrun] recorded reward {s['reward_first']:.3f} -> {s['reward_last']:.3f}; run dir {s['run_dir']}")
    return 0

