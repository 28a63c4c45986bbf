"""Kill the default job (as `rlrun` would be run by a user) and resume it; stop it with SIGTERM.

SIGKILL leaves no chance to clean up: the children must still go (Ray's processes share the
driver's fate, the router and engines die with their parent), and `run.resume=auto` must pick the
newest run dir, load its last complete checkpoint and redo the steps after it with the same data
and the same sampling seeds, so a redone step reproduces the killed run's numbers.
"""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rlrun.launch.reaper import descendants
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.timeout(420), pytest.mark.slow]


def _alive(pids: set[int]) -> set[int]:
    def zombie_or_gone(p):
        try:
            return Path(f"/proc/{p}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
        except OSError:
            return True
    return {p for p in pids if not zombie_or_gone(p)}


def _wait_gone(pids: set[int], timeout_s: float) -> set[int]:
    deadline = time.monotonic() + timeout_s
    while _alive(pids) and time.monotonic() < deadline:
        time.sleep(0.5)
    return _alive(pids)


def _rlrun(tmp_path: Path, *extra: str) -> subprocess.Popen:
    args = [sys.executable, "-m", "rlrun.cli", f"run.output_dir={tmp_path}", "rollout.num_rollout=8",
            "checkpoint.save_interval=2", "logging.wandb.mode=disabled", "logging.progress=false", *extra]
    return subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def _wait_for(pred, proc, timeout_s: float, what: str, poll_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"rlrun exited ({proc.returncode}) before {what}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(poll_s)
    pytest.fail(f"timed out waiting for {what}")


def _run_dir(tmp_path: Path) -> Path | None:
    found = sorted(tmp_path.glob("*/*/config.yaml"))
    return found[-1].parent if found else None


def test_sigkill_then_resume_continues_from_the_last_checkpoint(tmp_path):
    keep = "checkpoint.keep_last=1"  # the older checkpoints go as the run saves, before and after the kill
    proc = _rlrun(tmp_path, keep)
    run_dir = _wait_for(lambda: _run_dir(tmp_path), proc, 120, "the run dir")
    latest = run_dir / "checkpoints" / "latest"

    ckpts = run_dir / "checkpoints"

    def checkpointed_and_logged_past_it() -> int:
        """k: the newest checkpoint (2, 4 or 6) once step k is logged too, so the kill lands with a step past the
        checkpoint to redo. Whichever the poll sees first: a step of the idle machine takes ~0.35 s, so the window of
        one given checkpoint (iter_0000004 alone, as this test once waited for) is shorter than a poll now and then,
        and the run ended before the poll saw it."""
        rows = read_metrics(run_dir / METRICS_FILE) if (run_dir / METRICS_FILE).exists() else []
        k = int(latest.read_text().removeprefix("iter_")) if latest.exists() else 0
        return k if 0 < k < 8 and len(rows) > k else 0

    def frozen_at_a_checkpoint() -> int:
        """The driver (which writes metrics.jsonl, `latest` and the prune) stopped with SIGSTOP where
        checkpointed_and_logged_past_it holds and keep_last's prune of that commit is done; the kill then lands in
        exactly the state read here, not in whatever the run reached between a poll and the kill (2026-11-28: an
        asynchronous save's commit can come just before the next save starts, and a kill after the poll found
        iter_0000004 begun beside iter_0000002). Otherwise the driver goes on and the poll goes on."""
        if not checkpointed_and_logged_past_it():
            return 0
        os.kill(proc.pid, signal.SIGSTOP)
        k = checkpointed_and_logged_past_it()
        if k and all(int(p.name[5:]) >= k for p in ckpts.glob("iter_*")):
            return k
        os.kill(proc.pid, signal.SIGCONT)
        return 0

    k = _wait_for(frozen_at_a_checkpoint, proc, 240, "a checkpoint before the last step", poll_s=0.02)
    children = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed_rows = read_metrics(run_dir / METRICS_FILE)
    assert not _wait_gone(children, 30), "processes outlived a SIGKILLed rlrun"

    last, following = f"iter_{k:07d}", f"iter_{k + 2:07d}"
    # keep_last=1 pruned every older checkpoint; the trainer may have begun writing the next one (an uncommitted dir:
    # no driver.json, `latest` not moved), which the resume must not use and its own save of that step replaces
    found = sorted(p.name for p in ckpts.glob("iter_*"))
    assert found in ([last], [last, following]), found
    assert not (ckpts / following / "driver.json").exists() and latest.read_text() == last

    resumed = _rlrun(tmp_path, keep, "run.resume=auto")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-3000:]
    assert f"resumed from {run_dir / 'checkpoints' / last} at rollout {k}" in out
    rows = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in rows] == list(range(8))
    assert (run_dir / "checkpoints" / "latest").read_text() == "iter_0000008"
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*")) == ["iter_0000008"]
    assert f"[rlrun] removed {run_dir / 'checkpoints' / 'iter_0000006'} (checkpoint.keep_last=1)" in out
    # step k ran before the kill and again after the resume: same prompts, seeds and weights
    before, after = killed_rows[k], rows[k]
    for key in ("rollout/reward_mean", "rollout/response_len_mean"):
        assert after[key] == before[key], key
    assert after["train/loss"] == pytest.approx(before["train/loss"], abs=1e-6)


def test_sigterm_stops_cleanly_without_orphans(tmp_path):
    """SIGTERM (`rlrun stop`, Slurm, `ray job stop`) mid-run. SIGINT reaches the same handler (runner.StopRequest):
    tests/integration/test_async.py stops the async loop with it and asserts the same messages and teardown."""
    sig = signal.SIGTERM
    proc = _rlrun(tmp_path)
    run_dir = _wait_for(lambda: _run_dir(tmp_path), proc, 120, "the run dir")
    _wait_for(lambda: (run_dir / METRICS_FILE).exists() and (run_dir / METRICS_FILE).read_text(), proc, 240,
              "the first step")
    children = descendants(proc.pid)
    assert children, "rlrun started no child processes (Ray, router)?"
    os.kill(proc.pid, sig)
    out, _ = proc.communicate(timeout=60)
    assert proc.returncode != 0
    assert not _wait_gone(children, 30), f"orphans after {sig.name}: {sorted(_alive(children))}"
    # the user is told that it stopped, where the checkpoint is and the exact command that resumes it
    assert f"[rlrun] stopped by {sig.name}; run dir {run_dir}" in out, out[-3000:]
    assert "[rlrun] last checkpoint: " in out
    assert f"[rlrun] resume with: rlrun run.output_dir={tmp_path} rollout.num_rollout=8" in out
    # teardown ran: the plot of the steps so far is drawn
    assert (run_dir / "reward_length.png").is_file()
