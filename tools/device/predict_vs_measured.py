"""Predicted (rlrun.config.cost) vs measured per phase for run dirs of tools/device/sglang.sh's `steps` item.

    python3 tools/device/predict_vs_measured.py RUN_DIR... [--out DIR]

For each run: the prediction with the shipped constants (conf/calibration.yaml), and leave-one-out: the constants
refitted (rlrun.config.calibrate) to the other runs only, then this run predicted; measured = the means of its
metrics.jsonl after the first (warm-up) step. Prints a markdown table (also DIR/predict.md) and writes
DIR/calibration.fitted.yaml fitted to all the runs (copy it to conf/ to ship it). Pure Python, no torch."""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from rlrun.config.calibrate import calibrate, load_run, write_overlay
from rlrun.config.cost import PHASES, _merge, load_table, measured_phases, predict, predicted_phases

ROWS = (*PHASES, "step_core")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("runs", nargs="+", type=Path)
    ap.add_argument("--out", type=Path, default=Path("."))
    a = ap.parse_args()
    shipped = load_table()
    runs = [(d, *load_run(d)) for d in a.runs]
    lines = ["| run | phase | measured s | predicted (shipped) | error | predicted (leave-one-out fit) | error |",
             "|---|---|---|---|---|---|---|"]
    worst: dict[str, float] = {}
    for d, cfg, plan, rows in runs:
        meas = measured_phases(rows)
        transport = plan.get("weight_sync", "tensor")
        base = predicted_phases(predict(cfg, transport, shipped))
        others = [o for o, *_ in runs if o != d]
        if others:
            overlay, _ = calibrate(others, shipped)
            loo = predicted_phases(predict(cfg, transport, {**shipped, **{k: _merge(shipped.get(k, {}), v)
                                                                        for k, v in overlay.items()}}))
        else:
            loo = {}
        for ph in ROWS:
            m = meas.get(ph)
            if not m or m < 1e-3:  # a phase the run does not have (log_probs of one-step GRPO: ~30 us of bookkeeping)
                continue
            p0, p1 = base.get(ph, 0.0), loo.get(ph)
            e0 = (p0 - m) / m
            e1 = None if p1 is None else (p1 - m) / m
            if e1 is not None:
                worst[ph] = max(worst.get(ph, 0.0), abs(e1))
            lines.append(f"| {cfg.model.name} {cfg.rollout.rollout_batch_size}x{cfg.rollout.n_samples_per_prompt}x"
                         f"{cfg.rollout.max_response_len} | {ph} | {m:.3f} | {p0:.3f} | {e0:+.0%} | "
                         + ("-" if p1 is None else f"{p1:.3f}") + " | " + ("-" if e1 is None else f"{e1:+.0%}") + " |")
    lines.append("")
    lines.append("worst leave-one-out error per phase: " + json.dumps({k: round(v, 3) for k, v in worst.items()}))
    text = "\n".join(lines)
    print(text)
    a.out.mkdir(parents=True, exist_ok=True)
    (a.out / "predict.md").write_text(text + "\n")
    overlay, _ = calibrate([d for d, *_ in runs], shipped)
    write_overlay(overlay, a.out / "calibration.fitted.yaml")
    print(f"fitted to all {len(runs)} runs: {a.out / 'calibration.fitted.yaml'}")


if __name__ == "__main__":
    main()
