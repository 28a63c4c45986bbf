"""What a stopped run tells its user, and what a resumed run changed.

    stopped(cfg, run_dir, signum) -> str    after Ctrl-C / SIGTERM: that it stopped, the last checkpoint,
                                            the exact command that resumes it (run.resume=auto + the run's
                                            own overrides, as overrides.yaml holds them)
    resume_changes(cfg, run_dir) -> list    on resume: every setting that differs from the run's last
                                            config (rlrun.config.diff.flatten of both resolved trees)
"""
from __future__ import annotations

import shlex
import signal
from pathlib import Path
from typing import Any

IGNORED = ("run.resume",)  # a resume sets it on purpose


def _overrides(run_dir: Path) -> list[str]:
    """The overrides of the newest start of this run dir (overrides.resume-N.yaml, else overrides.yaml)."""
    import yaml

    files = sorted(run_dir.glob("overrides.resume-*.yaml"), key=lambda f: int(f.stem.rsplit("-", 1)[1]))
    f = files[-1] if files else run_dir / "overrides.yaml"
    return list(yaml.safe_load(f.read_text()) or []) if f.is_file() else []


def resume_command(run_dir: Path) -> str:
    kept = [o for o in _overrides(Path(run_dir)) if o.lstrip("+~").split("=", 1)[0] != "run.resume"]
    return shlex.join(["rlrun", *kept, "run.resume=auto"])


def stopped(cfg: Any, run_dir: Path, signum: int) -> str:
    from rlrun import checkpoint as ckpt

    run_dir = Path(run_dir)
    save_dir = Path(cfg.checkpoint.save or run_dir / "checkpoints")
    try:
        latest = ckpt.find_latest(save_dir) if save_dir.exists() else None
        where = (f"{latest} (a resume continues at rollout {ckpt.read_driver_state(latest).next_rollout})"
                 if latest is not None else
                 f"none yet under {save_dir} (checkpoint.save_interval={cfg.checkpoint.save_interval}): a resume "
                 "starts from the beginning")
    except (OSError, ValueError, TypeError) as e:  # a pointer edited by hand: say so, keep the resume hint
        where = f"unreadable ({e})"
    name = signal.Signals(signum).name if signum in signal.Signals._value2member_map_ else str(signum)
    return (f"[rlrun] stopped by {name}; run dir {run_dir}\n"
            f"[rlrun] last checkpoint: {where}\n"
            f"[rlrun] resume with: {resume_command(run_dir)}")


def report(signum: int | None, cfg: Any, run_dir: Path) -> None:
    """runner.run's one call: print stopped(...) when a stop signal ended the run."""
    if signum is not None:
        print(stopped(cfg, run_dir, signum), flush=True)


def resume_changes(cfg: Any, run_dir: Path) -> list[str]:
    """'key: old -> new' for each setting that differs from the config this run dir last ran with
    (config.resume-N.yaml before the newest, else config.yaml); [] for a fresh run dir."""
    import yaml

    from rlrun.config.diff import flatten

    run_dir = Path(run_dir)
    starts = sorted(run_dir.glob("config.resume-*.yaml"), key=lambda f: int(f.stem.rsplit("-", 1)[1]))
    if not starts:
        return []
    previous = starts[-2] if len(starts) > 1 else run_dir / "config.yaml"
    old, new = flatten(yaml.safe_load(previous.read_text())), flatten(cfg.to_dict())
    keys = sorted((old.keys() | new.keys()) - set(IGNORED))
    return [f"{k}: {old.get(k, '<absent>')!r} -> {new.get(k, '<absent>')!r}" for k in keys if old.get(k) != new.get(k)]
