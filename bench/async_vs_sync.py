"""The same job run synchronously and asynchronously in one invocation: rollouts per minute and the
share of training hidden behind generation.

    python bench/async_vs_sync.py [overrides...]    # default: the tiny CPU job, 20 rollouts
    python bench/async_vs_sync.py async:rollout.max_staleness=1   # `async:` = the async run only
    python bench/async_vs_sync.py --repeat 3 ...   # 3 pairs, order alternating, median speedup

On a shared machine the load changes between two runs; pairs in alternating order and the median
of their ratios keep that from deciding the result.

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
import statistics
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


def compare(sync: list[dict], asyn: list[dict]) -> dict:
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
    return report


def main(argv: list[str]) -> None:
    repeat = 1
    if argv[:1] == ["--repeat"]:
        repeat, argv = int(argv[1]), argv[2:]
    out = tempfile.mkdtemp(prefix="async_vs_sync_")
    only = [a.removeprefix("async:") for a in argv if a.startswith("async:")]
    common = [*BASE, f"run.output_dir={out}", *(a for a in argv if not a.startswith("async:"))]
    reports = []
    for i in range(repeat):
        first_sync = i % 2 == 0
        a = run([*common, "train.async_train=false"]) if first_sync else None
        b = run([*common, "train.async_train=true", *only])
        a = a or run([*common, "train.async_train=false"])
        reports.append(compare(a, b))
        print(json.dumps(reports[-1], indent=2), flush=True)
    print(json.dumps({"speedups": [r["speedup"] for r in reports],
                      "median_speedup": statistics.median(r["speedup"] for r in reports),
                      "median_hidden_share": statistics.median(r["async"]["hidden_share_of_trainer"]
                                                               for r in reports)}))


if __name__ == "__main__":
    main(sys.argv[1:])
