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


def _wait_for(pred, proc, timeout_s: float, what: str):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        if proc.poll() is not None:
            pytest.fail(f"rlrun exited ({proc.returncode}) before {what}:\n{proc.stdout.read()[-3000:]}")
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}")


def _run_dir(tmp_path: Path) -> Path | None:
    found = sorted(tmp_path.glob("*/*/config.yaml"))
    return found[-1].parent if found else None


def test_sigkill_then_resume_continues_from_the_last_checkpoint(tmp_path):
    keep = "checkpoint.keep_last=1"  # the older checkpoints go as the run saves, before and after the kill
    proc = _rlrun(tmp_path, keep)
    run_dir = _wait_for(lambda: _run_dir(tmp_path), proc, 120, "the run dir")
    latest = run_dir / "checkpoints" / "latest"

    def checkpointed_and_logged_past_it():  # a checkpoint at 4 and step 4 already logged
        rows = read_metrics(run_dir / METRICS_FILE) if (run_dir / METRICS_FILE).exists() else []
        return latest.exists() and latest.read_text() == "iter_0000004" and len(rows) >= 5

    _wait_for(checkpointed_and_logged_past_it, proc, 240, "checkpoint iter_0000004")
    children = descendants(proc.pid)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(timeout=30)
    killed_rows = read_metrics(run_dir / METRICS_FILE)
    assert not _wait_gone(children, 30), "processes outlived a SIGKILLed rlrun"

    assert sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*")) == ["iter_0000004"]

    resumed = _rlrun(tmp_path, keep, "run.resume=auto")
    out, _ = resumed.communicate(timeout=300)
    assert resumed.returncode == 0, out[-3000:]
    assert f"resumed from {run_dir / 'checkpoints' / 'iter_0000004'} at rollout 4" in out
    rows = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in rows] == list(range(8))
    assert (run_dir / "checkpoints" / "latest").read_text() == "iter_0000008"
    assert sorted(p.name for p in (run_dir / "checkpoints").glob("iter_*")) == ["iter_0000008"]
    assert f"[rlrun] removed {run_dir / 'checkpoints' / 'iter_0000006'} (checkpoint.keep_last=1)" in out
    # step 4 ran before the kill and again after the resume: same prompts, seeds and weights
    before, after = killed_rows[4], rows[4]
    for key in ("rollout/reward_mean", "rollout/response_len_mean"):
        assert after[key] == before[key], key
    assert after["train/loss"] == pytest.approx(before["train/loss"], abs=1e-6)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_signal_stops_cleanly_without_orphans(tmp_path, sig):
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
