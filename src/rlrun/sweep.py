"""Sweeps: `rlrun -m a=1,2 b=x,y` (also `rlrun plan -m`, `rlrun validate -m`). Hydra's sweep syntax
(a=1,2 / choice(...) / range(...) / glob(...) for groups) expands to the grid; every point is validated
and planned before anything launches (one invalid point: nothing launches, the error names it); each
point gets a run dir under one sweep root, which holds summary.md and summary.json."""
from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Sequence

from rlrun.config import capability
from rlrun.config.compose import Composer
from rlrun.config.errors import ConfigError, Problem
from rlrun.config.plan import make_plan
from rlrun.config.points import PointComposer
from rlrun.config.rundir import prepare_run_dir
from rlrun.config.validate import validate
from rlrun.launch.preflight import preflight


@dataclass(frozen=True)
class Point:
    index: int
    overrides: tuple[str, ...]   # everything that composes this point
    varying: tuple[str, ...]     # the swept overrides only (the point's label)

    @property
    def label(self) -> str:
        return " ".join(self.varying) or "(base)"


class SweepError(ConfigError):
    """Problems of one or more points; each problem's message starts with the point it belongs to."""


def expand(overrides: Sequence[str], group_options=None) -> list[Point]:
    """The grid, in Hydra's BasicSweeper order (last override varies fastest)."""
    from hydra.core.override_parser.overrides_parser import OverridesParser
    from hydra.core.override_parser.types import Glob, IntervalSweep

    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
    except Exception as e:
        raise SweepError([Problem("", f"cannot parse the sweep: {str(e).splitlines()[0]}",
                                  "write a=1,2 / a=choice(1,2) / a=range(0,10,2) / model=glob(qwen3-*)")]) from None
    axes: list[list[tuple[str, bool]]] = []
    for o in parsed:
        if not o.is_sweep_override():
            axes.append([(o.input_line, False)])
            continue
        key, value = o.get_key_element(), o.value()
        if isinstance(value, IntervalSweep):
            raise SweepError([Problem(o.key_or_group, "interval() sweeps need a search algorithm (Optuna, Ax); "
                                      "rlrun sweeps grids", "use choice(...) or range(...)", o.input_line)])
        if isinstance(value, Glob):
            options = group_options(o.key_or_group) if group_options else []
            values = value.filter(options)
            if not values:
                raise SweepError([Problem(o.key_or_group, f"glob {o.input_line} matches no option of "
                                          f"{o.key_or_group}: {options}", "fix the pattern", o.input_line)])
        else:
            values = list(o.sweep_string_iterator())
        axes.append([(f"{key}={v}", True) for v in values])
    points = []
    for i, combo in enumerate(itertools.product(*axes)):
        points.append(Point(i, tuple(ov for ov, _ in combo), tuple(ov for ov, swept in combo if swept)))
    return points


@dataclass
class Planned:
    point: Point
    cfg: Any
    plan: Any


def validate_points(points: Sequence[Point], config_dir=None) -> list[Planned]:
    """Compose, validate and plan every point; raise SweepError with every invalid point's problems."""

    out, problems = [], []
    with Composer(config_dir) as composer:
        fast = PointComposer(composer, config_dir)
        for p in points:
            try:
                composed = fast.compose(p.overrides)
                cfg = validate(composed.raw)
                out.append(Planned(p, cfg, make_plan(cfg, composed.choices)))
            except ConfigError as e:
                problems += [Problem(q.path, f"[point {p.index}: {p.label}] {q.message}", q.fix, q.value)
                             for q in e.problems]
    if problems:
        bad = len({q.message.split("]")[0] for q in problems})
        raise SweepError([Problem("", f"{bad} of {len(points)} sweep points are invalid; nothing was launched",
                                  "fix or drop the points below")] + problems)
    return out


def _sweep_root(first_cfg) -> Path:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return Path(first_cfg.run.output_dir) / "multirun" / stamp


def _scalar_metrics(result: Any) -> dict[str, Any]:
    if not isinstance(result, dict):
        return {}
    return {k: v for k, v in result.items() if isinstance(v, (int, float, str, bool)) or v is None}


def write_summary(root: Path, rows: list[dict]) -> None:
    (root / "summary.json").write_text(json.dumps({"points": rows}, indent=2) + "\n")
    # Numbers make the table; paths and other strings stay in summary.json.
    metric_keys = sorted({k for r in rows for k, v in r.get("metrics", {}).items()
                          if isinstance(v, (int, float)) and not isinstance(v, bool)})
    head = ["#", "overrides", "status", "run dir", *metric_keys]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in rows:
        cells = [str(r["index"]), f"`{r['label']}`", r["status"], Path(r["run_dir"]).name,
                 *[_fmt(r.get("metrics", {}).get(k)) for k in metric_keys]]
        lines.append("| " + " | ".join(cells) + " |")
    (root / "summary.md").write_text("\n".join(lines) + "\n")


def _fmt(v: Any) -> str:
    return "" if v is None else f"{v:.4g}" if isinstance(v, float) else str(v)


def _preflight_points(planned: list[Planned]) -> None:
    """What the runner cannot run (rlrun.config.capability) and rlrun.launch.preflight (on a local cluster; a
    remote cluster's points are checked on its head node by the runner) for every point before any run dir
    exists; ConfigError with each problem labelled by its point."""
    from dataclasses import replace


    def point_problems(item: Planned) -> list:
        if item.cfg.run.dry_run:
            return []
        local = item.cfg.cluster.address is None
        return capability.problems(item.cfg) + (preflight(item.cfg, item.plan) if local else [])

    problems = [replace(p, message=f"[point {item.point.label}] {p.message}") for item in planned
                for p in point_problems(item)]
    if problems:
        raise ConfigError(problems)


def launch(planned: list[Planned], root: Path | None = None) -> int:
    """Run every point in turn (each in its own run dir); a failed point is recorded, the rest still run."""

    _preflight_points(planned)
    root = root or _sweep_root(planned[0].cfg)
    root.mkdir(parents=True, exist_ok=True)
    rows = []
    for item in planned:  # all run dirs first: the sweep's whole layout exists before the first job starts
        run_dir = prepare_run_dir(item.cfg, item.plan, item.point.overrides, run_dir=root / str(item.point.index))
        rows.append({"index": item.point.index, "label": item.point.label, "overrides": list(item.point.overrides),
                     "run_dir": str(run_dir), "status": "pending", "metrics": {}})
    write_summary(root, rows)
    print(f"sweep: {len(planned)} points validated; root {root}")
    failed = 0
    for item, row in zip(planned, rows):
        if item.cfg.run.dry_run:
            row["status"] = "dry_run"
            continue
        from rlrun import runner  # lazy: torch and ray only when a job runs

        print(f"[{item.point.index + 1}/{len(planned)}] {item.point.label}")
        t0 = time.time()
        try:
            result = runner.run(item.cfg, item.plan, Path(row["run_dir"]))
            row["status"], row["metrics"] = "done", _scalar_metrics(result)
        except Exception as e:  # keep sweeping; the summary says what failed
            failed += 1
            row["status"], row["error"] = "failed", f"{type(e).__name__}: {e}"
        row["seconds"] = round(time.time() - t0, 1)
        write_summary(root, rows)
    write_summary(root, rows)
    _print_rows([{"#": r["index"], "overrides": r["label"], "status": r["status"],
                  "reward first -> last": _reward_change(r.get("metrics", {})), "steps": r.get("metrics", {}).get("steps", ""),
                  "seconds": r.get("seconds", "")} for r in rows])
    print(f"summary: {root / 'summary.json'} and {root / 'summary.md'}; curves: rlrun compare {root}")
    return 1 if failed else 0


def _reward_change(m: dict) -> str:
    first, last = m.get("reward_first"), m.get("reward_last")
    return "" if first is None or last is None else f"{first:.3f} -> {last:.3f}"


def plan_table(planned: list[Planned]) -> list[dict]:
    return [{"index": p.point.index, "overrides": p.point.label, "gpus": p.plan.trainer_gpus if p.plan.colocate
             else p.plan.trainer_gpus + p.plan.rollout_gpus, "layout": f"TP{p.plan.tp} PP{p.plan.pp} CP{p.plan.cp} "
             f"DP{p.plan.dp}", "batch": f"{p.plan.samples_per_rollout}={p.plan.global_batch_size}x"
             f"{p.plan.steps_per_rollout}", "steps": p.plan.total_steps,
             "peak_gib": round(p.plan.memory_gib["peak"], 1), "fits": p.plan.fits,
             "step_s": _sig(p.plan.cost.get("step_s")), "gpu_h": _sig(p.plan.cost.get("gpu_hours")),
             "basis": p.plan.cost.get("basis")} for p in planned]


def _sig(x: float | None) -> float | None:
    return None if x is None else float(f"{x:.3g}")


def ranked(rows: list[dict]) -> list[dict]:
    """plan_table's rows cheapest first by predicted GPU-hours (then step time), each with its rank; points
    without a prediction last."""
    key = lambda r: (r["gpu_h"] is None, r["gpu_h"] or 0.0, r["step_s"] or 0.0)  # noqa: E731
    return [{"rank": i + 1, **r} for i, r in enumerate(sorted(rows, key=key))]


def sweep_main(a) -> int:
    """CLI entry for -m/--multirun with `run` (default), `plan` or `validate`."""

    with Composer(a.config_dir) as c:
        points = expand(a.overrides, c.group_options)
    planned = validate_points(points, a.config_dir)
    if a.command == "validate":
        print(json.dumps({"valid": True, "points": len(planned)}) if a.json else f"{len(planned)} points valid")
        return 0
    if a.command == "plan":
        if a.json:
            print(json.dumps([{"index": p.point.index, "overrides": list(p.point.overrides), **p.plan.to_dict()}
                              for p in planned], indent=2))
        else:
            _print_rows(ranked(plan_table(planned)))
            print("ranked by predicted GPU-hours (rlrun.config.cost; basis: measured or estimate per point)")
        return 0
    return launch(planned)


def _print_rows(rows: list[dict]) -> None:
    from rich.console import Console
    from rich.table import Table

    t = Table(title=f"sweep: {len(rows)} points", title_justify="left")
    for k in rows[0]:
        t.add_column(k)
    for r in rows:
        t.add_row(*[str(v) for v in r.values()])
    Console(width=160).print(t)
