"""`rlrun plan --calibrate RUN_DIR...`: refit the cost model's constants (conf/calibration.yaml, rlrun.config.cost)
to runs' metrics.jsonl + config.yaml + plan.json, and write the table back. No torch, no ray."""
from __future__ import annotations

from pathlib import Path

from rlrun.config.cost import (PHASES, _merge, component_scale, load_table, measured_phases, predict, predicted_phases,
                               workload)
from rlrun.config.plan import weight_sync
from rlrun.config.schema import RunConfig


def load_run(run_dir: Path) -> tuple[RunConfig, dict, list[dict]]:
    """A run dir's resolved config, plan.json and metrics rows (no torch, no ray)."""
    import json

    import yaml

    cfg = RunConfig.model_validate(with_later_defaults(yaml.safe_load((run_dir / "config.yaml").read_text())))
    plan = json.loads((run_dir / "plan.json").read_text()) if (run_dir / "plan.json").exists() else {}
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    return cfg, plan, rows


def with_later_defaults(raw: dict, base: dict | None = None) -> dict:
    """A saved config written before a setting existed (e.g. rollout.delta): that setting's default from conf/ filled
    in, every value the run had kept as it was."""
    if base is None:
        from rlrun.config.compose import compose

        base = compose([]).raw
    out = dict(raw)
    for key, default in base.items():
        if key not in out:
            out[key] = default
        elif isinstance(default, dict) and isinstance(out[key], dict) and default:
            out[key] = with_later_defaults(out[key], default)
    return out


RIDGE = 0.01  # pull of each component's scale towards the phase's common scale (relative-error units, see fit_scales)


def _solve(m: list[list[float]], v: list[float]) -> list[float]:
    """m x = v by Gaussian elimination with partial pivoting (a few unknowns; no numpy in the plan)."""
    n = len(v)
    a = [row[:] + [v[i]] for i, row in enumerate(m)]
    for c in range(n):
        p = max(range(c, n), key=lambda r: abs(a[r][c]))
        a[c], a[p] = a[p], a[c]
        for r in range(c + 1, n):
            f = a[r][c] / a[c][c]
            a[r] = [x - f * y for x, y in zip(a[r], a[c])]
    x = [0.0] * n
    for r in range(n - 1, -1, -1):
        x[r] = (a[r][n] - sum(a[r][j] * x[j] for j in range(r + 1, n))) / a[r][r]
    return x


def fit_scales(rows: list[tuple[dict[str, float], float]], ridge: float = RIDGE) -> float | dict[str, float]:
    """One phase's scale from (its unscaled components, measured seconds) per run. First the common scale g = the
    geometric mean of measured / predicted; then per component t_c minimising
    sum_runs (g sum_c t_c x_c / measured - 1)^2 + ridge sum_c (t_c - 1)^2 (relative errors: a run's share of
    the phase decides how its components move; with one run, or components that do not vary between the runs,
    t stays 1), clipped at 0.02. Returns g, or {component: g t_c} when more than one component carries time."""
    import math
    from statistics import fmean

    rows = [(x, y) for x, y in rows if y > 0 and sum(x.values()) > 0]
    if not rows:
        return 1.0
    g = math.exp(fmean(math.log(y / sum(x.values())) for x, y in rows))
    comps = sorted({c for x, y in rows for c, v in x.items() if v > 1e-3 * y})
    if len(comps) < 2 or len(rows) < 2:
        return round(g, 4)
    a = [[g * x.get(c, 0.0) / y for c in comps] for x, y in rows]
    m = [[sum(r[i] * r[j] for r in a) + (ridge if i == j else 0.0) for j in range(len(comps))] for i in range(len(comps))]
    v = [sum(r[i] for r in a) + ridge for i in range(len(comps))]
    t = _solve(m, v)
    return {c: round(g * max(ti, 0.02), 4) for c, ti in zip(comps, t)} | {"*": round(g, 4)}


def calibrate(run_dirs: list[Path], table: dict | None = None, ridge: float = RIDGE,
              hardware: str | None = None) -> tuple[dict, list[dict]]:
    """Refit, per hardware profile of the runs: scale[phase] (fit_scales: the common measured / predicted, and
    with several runs per component) from each run predicted at its own measured response length
    (cost.workload); step_overhead_s = the mean step_core minus the phases' medians; response_fraction = mean
    response / max_response_len. Returns (the fitted entries, an overlay that load_table merges over
    conf/calibration.yaml: a profile that was an estimate becomes measured, its source the runs; one report row
    per run and phase: predicted before, after, measured). `hardware`: the profile the runs ran on when their
    configs name another one (e.g. an h100 recipe run on an H200; the peak FLOP/s stays the config's)."""
    import copy
    import time
    from statistics import fmean

    table = copy.deepcopy(load_table() if table is None else table)
    runs = []
    for d in run_dirs:
        cfg, plan, rows = load_run(Path(d))
        if hardware and cfg.hardware.name != hardware:
            cfg = cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update={"name": hardware})})
        if not rows:
            raise ValueError(f"{d}: no metrics.jsonl rows to calibrate from")
        runs.append((Path(d), cfg, plan.get("weight_sync") or weight_sync(cfg), measured_phases(rows)))
    overlay, report = {}, []
    for hw in sorted({cfg.hardware.name for _, cfg, _, _ in runs}):
        mine = [x for x in runs if x[1].hardware.name == hw]
        old = table.get(hw) or {"scaled_from": table.get("fallback", "h100")}
        raw = {**table, hw: {**old, "scale": {ph: 1.0 for ph in PHASES}}}
        per_phase: dict[str, list[tuple[dict, float]]] = {}
        extra, fracs = [], []
        for d, cfg, transport, meas in mine:
            parts = predict(cfg, transport, raw, workload=workload(meas))["unscaled_parts_s"]
            for ph in PHASES:
                if meas.get(ph, 0) > 0 and ph in parts:
                    per_phase.setdefault(ph, []).append((parts[ph], meas[ph]))
            if "step_core" in meas:
                extra.append(meas["step_core"] - sum(meas.get(ph, 0.0) for ph in PHASES if ph not in ("eval", "save")))
            if "response_len" in meas:
                fracs.append(min(meas["response_len"] / cfg.rollout.max_response_len, 1.0))
        fit: dict = {"basis": "measured",
                     "source": f"fitted by rlrun plan --calibrate at {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC "
                               f"to {len(mine)} run(s) (fitted_from); constants: "
                               + (old.get("source") or f"{old.get('scaled_from')}'s, scaled"),
                     "fitted_from": [str(d) for d, *_ in mine],
                     "scale": {ph: fit_scales(per_phase[ph], ridge) if ph in per_phase else 1.0 for ph in PHASES}}
        if "eval" in per_phase:  # eval is generation: predicted with the rollout's component scales, then its own
            ro = fit["scale"]["rollout"]
            fit["scale"]["eval"] = fit_scales([({p: x * component_scale(ro, p) for p, x in parts.items()}, y)
                                               for parts, y in per_phase["eval"]], ridge)
        if hw not in table:  # a profile without an entry: the fit keeps the fallback's constants under it
            fit["scaled_from"] = old["scaled_from"]
        if extra:
            fit["step_overhead_s"] = round(max(fmean(extra), 0.0), 4)
        if fracs:
            fit["assume"] = {"response_fraction": round(fmean(fracs), 4)}
        before = {str(d): predicted_phases(predict(cfg, tr, table, workload=workload(m))) for d, cfg, tr, m in mine}
        table[hw] = _merge(old, fit)
        table[hw]["scale"] = fit["scale"]  # replaced, not merged: a component the fit left out is not kept
        overlay[hw] = fit
        for d, cfg, transport, meas in mine:
            after = predicted_phases(predict(cfg, transport, table, workload=workload(meas)))
            for ph in (*PHASES, "step_core"):
                if ph in meas:
                    report.append({"run": str(d), "hardware": hw, "phase": ph, "measured_s": round(meas[ph], 4),
                                   "before_s": round(before[str(d)].get(ph, 0.0), 4),
                                   "after_s": round(after.get(ph, 0.0), 4)})
    return overlay, report


def write_overlay(overlay: dict, path: Path) -> None:
    """The fitted entries, merged into what `path` already holds (other profiles' fits stay)."""
    import yaml

    old = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    head = ("# Fitted by `rlrun plan --calibrate RUN_DIR...` (rlrun.config.calibrate): merged over conf/calibration.yaml\n"
            "# by rlrun.config.cost.load_table. Per profile: the runs (fitted_from), per-phase scale = measured / predicted\n"
            "# (a number, or per component with '*' the phase's common scale).\n")
    path.write_text(head + yaml.safe_dump({**old, **overlay}, sort_keys=False, width=120))
