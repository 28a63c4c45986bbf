"""Predicted (rlrun.config.cost) vs measured per phase for run dirs (e.g. tools/device/sglang.sh's `steps` item).

    python3 tools/device/predict_vs_measured.py RUN_DIR... [--out DIR] [--base FILE]

For each run, each prediction at the run's own measured response length (cost.workload): with the shipped
constants (conf/calibration.yaml, or --base: a calibration file to start from instead, e.g. the constants as
they were before a refit), leave-one-out (the constants refitted by rlrun.config.calibrate to the other runs
only, then this run predicted) and fitted to all the runs; measured = the medians of its metrics.jsonl after the
first (warm-up) step. Prints a markdown table (also DIR/predict.md) and writes DIR/calibration.fitted.yaml
fitted to all the runs. Pure Python, no torch."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

import yaml

from rlrun.config.calibrate import calibrate, load_run, write_overlay
from rlrun.config.cost import PHASES, _merge, load_table, measured_phases, predict, predicted_phases, workload

ROWS = (*PHASES, "step_core")


def _with(table: dict, overlay: dict) -> dict:
    out = {**table, **{k: _merge(table.get(k, {}), v) for k, v in overlay.items()}}
    for k, v in overlay.items():
        out[k]["scale"] = v.get("scale", {})
    return out


def _predicted(cfg, transport: str, table: dict, wl: dict) -> dict[str, float]:
    return predicted_phases(predict(cfg, transport, table, workload=wl))


def _err(p: float | None, m: float) -> str:
    return "-" if p is None else f"{p:.3f} ({(p - m) / m:+.0%})"


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("."))
    ap.add_argument("--base", type=Path, help="a calibration file (the shipped layout) to start from instead of conf/")
    ap.add_argument("--hardware", help="the profile the runs ran on when their configs name another one")
    a = ap.parse_args()
    shipped = yaml.safe_load(a.base.read_text()) if a.base else load_table()
    runs = [(d, *load_run(d)) for d in a.runs]
    overlay_all, _ = calibrate([d for d, *_ in runs], shipped, hardware=a.hardware)
    fitted = _with(shipped, overlay_all)
    lines = ["| run | phase | measured s | predicted (base constants) | leave-one-out fit | fitted to all |",
             "|---|---|---|---|---|---|"]
    worst: dict[str, dict[str, float]] = {"loo": {}, "all": {}}
    for d, cfg, plan, rows in runs:
        if a.hardware and cfg.hardware.name != a.hardware:
            cfg = cfg.model_copy(update={"hardware": cfg.hardware.model_copy(update={"name": a.hardware})})
        meas = measured_phases(rows)
        transport = plan.get("weight_sync", "tensor")
        wl = workload(meas)
        others = [o for o, *_ in runs if o != d]
        tables = (shipped, _with(shipped, calibrate(others, shipped, hardware=a.hardware)[0]) if others else None, fitted)
        preds = [_predicted(cfg, transport, t, wl) if t is not None else {} for t in tables]
        for ph in ROWS:
            m = meas.get(ph)
            if not m or m < 1e-3:  # a phase the run does not have (log_probs of one-step GRPO: ~30 us of bookkeeping)
                continue
            p0, p1, p2 = (x.get(ph) for x in preds)
            for key, p in (("loo", p1), ("all", p2)):
                if p is not None:
                    worst[key][ph] = max(worst[key].get(ph, 0.0), abs(p - m) / m)
            shape = (f"{cfg.model.name} {cfg.rollout.rollout_batch_size}x{cfg.rollout.n_samples_per_prompt}x"
                     f"{cfg.rollout.max_response_len}" + (f", mean response {meas['response_len']:.0f}"
                                                          if "response_len" in meas else ""))
            lines.append(f"| {d.parent.name} ({shape}) | {ph} | {m:.3f} | {_err(p0, m)} | {_err(p1, m)} | "
                         f"{_err(p2, m)} |")
    lines.append("")
    for key, name in (("loo", "leave-one-out"), ("all", "fitted to all")):
        lines.append(f"worst {name} error per phase: " + json.dumps({k: round(v, 3) for k, v in worst[key].items()}))
    text = "\n".join(lines)
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "predict.md").write_text(text + "\n")
    write_overlay(overlay_all, a.out / "calibration.fitted.yaml")
    print(f"fitted to all {len(runs)} runs: {a.out / 'calibration.fitted.yaml'}")


if __name__ == "__main__":
    main()
