"""The asynchronous loop end to end on the CPU (embedded Ray, trainer and engine on separate logical
GPUs, the real sglang-router): staleness bound and metrics, the data iterator checkpointed at the
trainer's consumption point, and kill -9 then run.resume=auto (none trained twice, none skipped)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from rlrun import checkpoint as ckpt
from rlrun import runner
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]
BASE = ["experiment=tiny-grpo-async-cpu", "logging.wandb.mode=disabled", "logging.progress=false"]
PROMPTS = 16  # rollout.rollout_batch_size of the CPU job


def _position(where: Path) -> int:
    return ckpt.read_driver_state(where).data_state["position"]


def test_async_job_keeps_the_staleness_bound_and_checkpoints_the_consumed_data(tmp_path):
    overrides = [*BASE, f"run.output_dir={tmp_path}", "rollout.num_rollout=6", "rollout.async_buffer_size=2",
                 "rollout.max_staleness=1", "checkpoint.save_interval=3"]
    cfg = load(overrides)
    plan = make_plan(cfg)
    run_dir = prepare_run_dir(cfg, plan, overrides)
    summary = runner.run(cfg, plan, run_dir)
    rows = read_metrics(run_dir / METRICS_FILE)
    assert summary["steps"] == 6 and [r["step"] for r in rows] == list(range(6))
    # the bound holds by admission: nothing had to be dropped, and no trained token lags > 1 version
    assert all(r["async/staleness_max"] <= 1 and r["async/stale_dropped_groups"] == 0 for r in rows)
    assert rows[0]["async/staleness_max"] == 0  # rollout 0: the initial weights, trained at version 0
    assert any(r["async/staleness_max"] == 1 for r in rows)  # the overlap is real: generated one version back
    assert all(r["rollout/kept_samples"] == PROMPTS * 8 for r in rows)
    # the producer ran ahead (buffer 2), yet each checkpoint holds the trainer's consumption point
    assert _position(ckpt.iter_dir(run_dir / "checkpoints", 3)) == 3 * PROMPTS
    assert _position(ckpt.iter_dir(run_dir / "checkpoints", 6)) == 6 * PROMPTS


def _rlrun(tmp_path: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "rlrun.cli", *BASE, f"run.output_dir={tmp_path}", "rollout.num_rollout=8",
            "checkpoint.save_interval=2", "rollout.async_buffer_size=2", *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def test_sigkill_mid_async_run_then_resume_trains_each_rollout_once(tmp_path):
    import time

    proc = _rlrun(tmp_path)
    deadline = time.monotonic() + 300
    while True:  # a committed checkpoint before the end (at 2, 4 or 6), and the producer already past it
        found = sorted(tmp_path.glob("*/*/checkpoints/latest"))
        rows = read_metrics(found[0].parent.parent / METRICS_FILE) if found else []
        k = int(found[0].read_text().removeprefix("iter_")) if found else 0
        if 0 < k < 8 and len(rows) > k:  # whichever the poll sees first: the run's pace is not the test's to choose
            break
        assert proc.poll() is None, proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no checkpoint before the end"
        time.sleep(0.05)
    run_dir = found[0].parent.parent
    os.killpg(proc.pid, signal.SIGKILL)  # the driver and everything it started
    proc.wait(timeout=30)
    resumed = _rlrun(tmp_path, "run.resume=auto")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-3000:]
    at = ckpt.iter_dir(run_dir / "checkpoints", k)
    assert f"resumed from {at} at rollout {k}" in out
    rows = read_metrics(run_dir / METRICS_FILE)
    # rows of the killed run past the checkpoint are re-run: each rollout is trained once after k
    steps = [r["step"] for r in rows]
    assert steps[:k] == list(range(k)) and steps[-(8 - k):] == list(range(k, 8))
    assert sorted(set(steps)) == list(range(8))
    # the queued rollouts died with the run: the resumed producer drew from the checkpoint's position
    assert _position(at) == k * PROMPTS
    assert _position(run_dir / "checkpoints" / "iter_0000008") == 8 * PROMPTS


def test_sigint_stops_the_producer_and_leaves_no_process(tmp_path):
    """The producer thread is mid-rollout when SIGINT arrives: it is stopped (requests aborted), the
    run exits non-zero within the teardown's time, nothing it started outlives it, and the user is told that it
    stopped, where the checkpoint is and the exact command that resumes it (SIGTERM, the sync loop:
    tests/integration/test_resume.py; both signals reach the same handler, runner.StopRequest, whichever loop runs)."""
    import shlex
    import time

    from rlrun.launch.reaper import descendants

    proc = _rlrun(tmp_path)
    deadline = time.monotonic() + 300
    while not [p for p in tmp_path.glob("*/*/" + METRICS_FILE) if len(read_metrics(p)) >= 2]:
        assert proc.poll() is None, f"the run ended (rc {proc.returncode}) before its second step:\n" + \
            proc.stdout.read()[-3000:]
        assert time.monotonic() < deadline, "no second step within 300 s"
        time.sleep(0.1)
    run_dir = next(tmp_path.glob("*/*/" + METRICS_FILE)).parent
    children = descendants(proc.pid)
    proc.send_signal(signal.SIGINT)
    out, _ = proc.communicate(timeout=90)
    assert proc.returncode == 130
    deadline = time.monotonic() + 30
    while [p for p in children if _running(p)]:
        assert time.monotonic() < deadline, "processes outlived the SIGINTed run"
        time.sleep(0.5)
    assert f"[rlrun] stopped by SIGINT; run dir {run_dir}" in out, out[-3000:]
    assert "[rlrun] last checkpoint: " in out
    overrides = [*BASE, f"run.output_dir={tmp_path}", "rollout.num_rollout=8", "checkpoint.save_interval=2",
                 "rollout.async_buffer_size=2"]
    assert f"[rlrun] resume with: {shlex.join(['rlrun', *overrides, 'run.resume=auto'])}" in out, out[-3000:]
    # teardown ran: the plot of the steps so far is drawn
    assert (run_dir / "reward_length.png").is_file()


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False
