"""Run directories: every run keeps what reproduces it (resolved config, the overrides, the plan, the
package versions). `{run.output_dir}/{run.name}/{timestamp}`; run.resume=auto reuses the newest run dir
of that name that has checkpoints/, run.resume=must requires one."""
from __future__ import annotations

import json
import platform
import subprocess
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import Any, Sequence

from rlrun.config.errors import ConfigError, Problem
from rlrun.config.kinds import ENGINES, ROUTERS
from rlrun.config.schema import RunConfig

FILES = ("config.yaml", "overrides.yaml", "plan.json", "versions.json")
PACKAGES = ("rlrun", "hydra-core", "omegaconf", "pydantic", "torch", "ray", "transformers", "tokenizers",
            "megatron-core", "wandb")  # + each engine and router kind's packages (EngineKind, RouterKind.packages)


def versions() -> dict[str, Any]:
    """Installed versions, read from package metadata (importing torch or ray here would cost seconds)."""
    out: dict[str, Any] = {"python": platform.python_version(), "platform": platform.platform()}
    for pkg in PACKAGES + tuple(p for kinds in (ENGINES, ROUTERS) for spec in kinds.values() for p in spec.packages):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            out[pkg] = None
    out["git_commit"] = _git_commit()
    return out


def _git_commit() -> str | None:
    repo = Path(__file__).resolve().parents[3]
    try:
        r = subprocess.run(["git", "-C", str(repo), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return r.stdout.strip() or None if r.returncode == 0 else None


def existing_run_dirs(cfg: RunConfig) -> list[Path]:
    """Run dirs of cfg.run.name that hold checkpoints/, oldest first."""
    root = Path(cfg.run.output_dir) / cfg.run.name
    if not root.is_dir():
        return []
    return sorted(d for d in root.iterdir() if d.is_dir() and (d / "checkpoints").is_dir())


def run_dirs_in(folder: Path) -> list[Path]:
    """The run dirs directly under `folder` (a run name's folder, {run.output_dir}/{run.name}), oldest first:
    their names are UTC timestamps, so the name order is the time order."""
    if not folder.is_dir():
        return []
    return sorted(d for d in folder.iterdir() if d.is_dir() and (d / "config.yaml").is_file())


def choose_run_dir(cfg: RunConfig, now: datetime | None = None) -> Path:
    if cfg.run.resume in ("auto", "must"):
        found = existing_run_dirs(cfg)
        if found:
            return found[-1]
        if cfg.run.resume == "must":
            raise ConfigError([Problem("run.resume", f"is 'must' but {Path(cfg.run.output_dir) / cfg.run.name} "
                                       "has no run dir with checkpoints/", "use run.resume=auto (start fresh when "
                                       "nothing to resume) or point run.output_dir/run.name at the old run",
                                       cfg.run.resume)])
    stamp = (now or datetime.now(timezone.utc)).strftime("%Y%m%d-%H%M%S-%f")
    return Path(cfg.run.output_dir) / cfg.run.name / stamp


def write_yaml(path: Path, data: Any) -> None:
    import yaml

    path.write_text(yaml.safe_dump(data, sort_keys=False, default_flow_style=False))


def write_run_files(run_dir: Path, cfg: RunConfig, plan: Any, overrides: Sequence[str]) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    write_yaml(run_dir / "config.yaml", cfg.to_dict())
    write_yaml(run_dir / "overrides.yaml", list(overrides))
    (run_dir / "plan.json").write_text(json.dumps(plan.to_dict(), indent=2) + "\n")
    (run_dir / "versions.json").write_text(json.dumps(versions(), indent=2) + "\n")


def prepare_run_dir(cfg: RunConfig, plan: Any, overrides: Sequence[str], run_dir: Path | None = None) -> Path:
    """Create (or, when resuming, reuse) the run dir and write the four reproducibility files.
    A resumed run keeps its original files and adds the new ones as *.resume-N so nothing is lost."""
    run_dir = Path(run_dir) if run_dir is not None else choose_run_dir(cfg)
    if (run_dir / "config.yaml").exists():
        n = 1 + sum(1 for _ in run_dir.glob("config.resume-*.yaml"))
        sub = run_dir / f".resume-{n}"
        write_run_files(sub, cfg, plan, overrides)
        for name in FILES:
            stem, ext = name.rsplit(".", 1)
            (sub / name).rename(run_dir / f"{stem}.resume-{n}.{ext}")
        sub.rmdir()
    else:
        write_run_files(run_dir, cfg, plan, overrides)
    return run_dir


def read_run_dir(run_dir: Path) -> tuple[dict, list[str]]:
    """(resolved config dict, overrides) of a run dir, for `rlrun diff` and resume."""
    import yaml

    run_dir = Path(run_dir)
    cfg = yaml.safe_load((run_dir / "config.yaml").read_text())
    ov_path = run_dir / "overrides.yaml"
    overrides = yaml.safe_load(ov_path.read_text()) if ov_path.exists() else []
    return cfg, list(overrides or [])
