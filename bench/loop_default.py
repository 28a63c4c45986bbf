"""Time the default job (or any overrides) end to end and summarise its metrics.jsonl.

    python bench/loop_default.py                       # `rlrun` defaults (tiny model, toy task, CPU)
    python bench/loop_default.py hardware=h100 model=qwen3-0.6b checkpoint.random_init=true rollout.num_rollout=3 ...
    python bench/loop_default.py --summarise RUN_DIR    # only summarise an existing run dir

Prints setup time (config -> first step: Ray, actors, router), loop time, mean seconds per phase,
tokens/s and the mean reward of the first and last 5 steps; the results go to docs/benchmarks.md.
"""
from __future__ import annotations

import json
import statistics
import sys
import time
from pathlib import Path

from rlrun.metrics import METRICS_FILE, read_metrics


def summarise(run_dir: Path, wall_s: float | None = None) -> dict:
    rows = read_metrics(run_dir / METRICS_FILE)
    rewards = [r["rollout/reward_mean"] for r in rows]
    w = min(5, len(rows))
    phases = sorted({k for r in rows for k in r if k.startswith(("time/", "perf/"))})
    out = {"run_dir": str(run_dir), "steps": len(rows), "loop_s": sum(r["time/step_s"] for r in rows),
           "reward_first5": statistics.fmean(rewards[:w]), "reward_last5": statistics.fmean(rewards[-w:]),
           **{f"mean {k}": statistics.fmean(r[k] for r in rows if k in r) for k in phases}}
    if wall_s is not None:
        out["wall_s"] = wall_s
        out["setup_and_teardown_s"] = wall_s - out["loop_s"]
    return out


def main(argv: list[str]) -> None:
    if argv[:1] == ["--summarise"]:
        print(json.dumps(summarise(Path(argv[1])), indent=2))
        return
    from rlrun import runner
    from rlrun.config import load
    from rlrun.config.plan import make_plan
    from rlrun.config.rundir import prepare_run_dir

    t0 = time.perf_counter()
    cfg = load(argv)
    plan = make_plan(cfg)
    run_dir = prepare_run_dir(cfg, plan, argv)
    runner.run(cfg, plan, run_dir)
    print(json.dumps(summarise(run_dir, time.perf_counter() - t0), indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
