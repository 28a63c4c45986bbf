"""`rlrun plan --calibrate RUN_DIR...`: refit the cost model's constants (conf/calibration.yaml, rlrun.config.cost)
to runs' metrics.jsonl + config.yaml + plan.json, and write the table back. No torch, no ray."""
from __future__ import annotations

from pathlib import Path

from rlrun.config.cost import PHASES, _merge, load_table, measured_phases, predict, predicted_phases
from rlrun.config.plan import weight_sync
from rlrun.config.schema import RunConfig


def load_run(run_dir: Path) -> tuple[RunConfig, dict, list[dict]]:
    """A run dir's resolved config, plan.json and metrics rows (no torch, no ray)."""
    import json

    import yaml

    cfg = RunConfig.model_validate(yaml.safe_load((run_dir / "config.yaml").read_text()))
    plan = json.loads((run_dir / "plan.json").read_text()) if (run_dir / "plan.json").exists() else {}
    metrics = run_dir / "metrics.jsonl"
    rows = [json.loads(line) for line in metrics.read_text().splitlines() if line.strip()] if metrics.exists() else []
    return cfg, plan, rows


def calibrate(run_dirs: list[Path], table: dict | None = None) -> tuple[dict, list[dict]]:
    """Refit, per hardware profile of the runs: scale[phase] = geometric mean over the runs of measured /
    predicted with scale 1; step_overhead_s = the median step_core minus the phases' medians;
    response_fraction = mean response / max_response_len. Returns (the fitted entries, an overlay that
    load_table merges over conf/calibration.yaml: a profile that was an estimate becomes measured, its source
    the runs; one report row per run and phase: predicted before, after, measured)."""
    import copy
    import math
    import time
    from statistics import fmean

    table = copy.deepcopy(load_table() if table is None else table)
    runs = []
    for d in run_dirs:
        cfg, plan, rows = load_run(Path(d))
        if not rows:
            raise ValueError(f"{d}: no metrics.jsonl rows to calibrate from")
        runs.append((Path(d), cfg, plan.get("weight_sync") or weight_sync(cfg), measured_phases(rows)))
    overlay, report = {}, []
    for hw in sorted({cfg.hardware.name for _, cfg, _, _ in runs}):
        mine = [x for x in runs if x[1].hardware.name == hw]
        old = table.get(hw) or {"scaled_from": table.get("fallback", "h100")}
        raw = {**table, hw: {**old, "scale": {ph: 1.0 for ph in PHASES}}}
        ratios: dict[str, list[float]] = {}
        extra, fracs = [], []
        for d, cfg, transport, meas in mine:
            pred = predicted_phases(predict(cfg, transport, raw))
            for ph in PHASES:
                if meas.get(ph, 0) > 0 and pred.get(ph, 0) > 0:
                    ratios.setdefault(ph, []).append(meas[ph] / pred[ph])
            if "step_core" in meas:
                extra.append(meas["step_core"] - sum(meas.get(ph, 0.0) for ph in PHASES if ph not in ("eval", "save")))
            if "response_len" in meas:
                fracs.append(min(meas["response_len"] / cfg.rollout.max_response_len, 1.0))
        fit: dict = {"basis": "measured",
                     "source": f"fitted by rlrun plan --calibrate at {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC "
                               f"to {len(mine)} run(s) (fitted_from); constants: "
                               + (old.get("source") or f"{old.get('scaled_from')}'s, scaled"),
                     "fitted_from": [str(d) for d, *_ in mine],
                     "scale": {ph: round(math.exp(fmean(math.log(x) for x in ratios[ph])), 4) if ph in ratios else 1.0
                               for ph in PHASES}}
        if hw not in table:  # a profile without an entry: the fit keeps the fallback's constants under it
            fit["scaled_from"] = old["scaled_from"]
        if extra:
            fit["step_overhead_s"] = round(max(fmean(extra), 0.0), 4)
        if fracs:
            fit["assume"] = {"response_fraction": round(fmean(fracs), 4)}
        before = {str(d): predicted_phases(predict(cfg, tr, table)) for d, cfg, tr, _ in mine}
        table[hw] = _merge(old, fit)
        overlay[hw] = fit
        for d, cfg, transport, meas in mine:
            after = predicted_phases(predict(cfg, transport, table))
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
            "# by rlrun.config.cost.load_table. Per profile: the runs (fitted_from), per-phase scale = measured / predicted.\n")
    path.write_text(head + yaml.safe_dump({**old, **overlay}, sort_keys=False, width=120))
