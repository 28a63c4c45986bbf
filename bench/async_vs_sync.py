"""The same job run synchronously and asynchronously in one invocation: rollouts per minute and the
share of training hidden behind generation.

    python bench/async_vs_sync.py [overrides...]    # default: the tiny CPU job, 20 rollouts

Both runs use the same disaggregated placement (trainer and engine on separate logical GPUs:
train.colocate=false rollout.num_gpus=1), seed and samples; only train.async_train differs.
Loop time = the sum of the steps' time/step_s (setup and teardown excluded).
Sync: generation (time/rollout_s) and the trainer (the rest of the step) run one after the other.
Async: the producer's generation (time/produce_s) overlaps the trainer; what the trainer waited for
is time/rollout_wait_s, so the overlap = produce - wait, and the share of the trainer's time hidden
behind generation = overlap / (loop - wait).
"""
from __future__ import annotations

import json
import sys
import tempfile

from rlrun.metrics import METRICS_FILE, read_metrics

BASE = ["train.colocate=false", "rollout.num_gpus=1", "logging.wandb.mode=disabled", "logging.progress=false",
        "rollout.num_rollout=20", "checkpoint.save_interval=null"]


def run(overrides: list[str]) -> list[dict]:
    from rlrun import runner
    from rlrun.config import load
    from rlrun.config.plan import make_plan
    from rlrun.config.rundir import prepare_run_dir

    cfg = load(overrides)
    plan = make_plan(cfg)
    run_dir = prepare_run_dir(cfg, plan, overrides)
    runner.run(cfg, plan, run_dir)
    return read_metrics(run_dir / METRICS_FILE)


def main(argv: list[str]) -> None:
    out = tempfile.mkdtemp(prefix="async_vs_sync_")
    common = [*BASE, f"run.output_dir={out}", *argv]
    sync = run([*common, "train.async_train=false"])
    asyn = run([*common, "train.async_train=true"])
    sum_ = lambda rows, k: sum(r.get(k, 0.0) for r in rows)  # noqa: E731
    loop_sync, loop_async = sum_(sync, "time/step_s"), sum_(asyn, "time/step_s")
    wait, produce = sum_(asyn, "time/rollout_wait_s"), sum_(asyn, "time/produce_s")
    trainer_async = loop_async - wait
    report = {
        "rollouts": len(sync),
        "sync": {"loop_s": loop_sync, "rollouts_per_min": 60 * len(sync) / loop_sync,
                 "generate_s": sum_(sync, "time/rollout_s"), "trainer_s": loop_sync - sum_(sync, "time/rollout_s"),
                 "reward_last5": sum(r["rollout/reward_mean"] for r in sync[-5:]) / 5},
        "async": {"loop_s": loop_async, "rollouts_per_min": 60 * len(asyn) / loop_async, "produce_s": produce,
                  "wait_s": wait, "trainer_s": trainer_async,
                  "hidden_share_of_trainer": max(0.0, produce - wait) / trainer_async if trainer_async else 0.0,
                  "staleness_mean": sum_(asyn, "async/staleness_mean") / len(asyn),
                  "reward_last5": sum(r["rollout/reward_mean"] for r in asyn[-5:]) / 5},
    }
    report["speedup"] = report["async"]["rollouts_per_min"] / report["sync"]["rollouts_per_min"]
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main(sys.argv[1:])
