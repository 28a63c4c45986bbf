"""Faults injected into the real runner on the CPU (embedded Ray, hf engines as Ray actors, the real
sglang-router, torch trainer ranks over gloo), each caught with its cause named:

    an engine SIGKILLed mid-rollout, an engine SIGSTOPped (stalled) mid-run: out of the router and
        restarting on its bundle; the run ends with every step and every sample
    a trainer rank SIGSTOPped: its peer waits in a collective; the watchdog writes diagnosis.json
        naming it and stops the run (non-zero); run.resume=auto then continues to the last step
    a resume that would train nothing, a broken group id, a reward function returning NaN: stopped by
        their run invariant before anything trains
    a step that blows the weights up (optim.lr=1e30): stopped by the nonfinite invariant within that
        step, before its push and save; run.resume=auto continues from the untouched last checkpoint

Every run of the module shares one Ray session (ray_cpu: the runner reuses a caller's connection), so each pays
for its actors, not for starting and stopping a cluster; the faulted actors die with their run (its teardown
kills them, SIGSTOPped or not), and the next run starts its own.
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import threading
import time
from pathlib import Path

import pytest

from rlrun import runner
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.guard.watchdog import BOARD, DIAGNOSIS_JSON, StallError
from rlrun.launch.reaper import descendants
from rlrun.metrics import METRICS_FILE, read_metrics

pytestmark = [pytest.mark.timeout(600), pytest.mark.slow, pytest.mark.usefixtures("ray_cpu")]

BASE = ["logging.wandb.mode=disabled", "logging.progress=false", "rollout.rollout_batch_size=8",
        "rollout.num_rollout=6", "checkpoint.save_interval=1"]
TWO_ENGINES = ["train.colocate=false", "rollout.num_gpus=2"]


def run(tmp_path, overrides):
    overrides = [f"run.output_dir={tmp_path}", *BASE, *overrides]
    cfg = load(overrides)
    plan = make_plan(cfg)
    run_dir = prepare_run_dir(cfg, plan, overrides)
    return run_dir, runner.run(cfg, plan, run_dir)


def processes(title: str) -> list[int]:
    """This test's Ray workers whose title starts with `title` (ray::<Class>...)."""
    out = []
    for pid in descendants(os.getpid()):
        try:
            if Path(f"/proc/{pid}/cmdline").read_bytes().startswith(f"ray::{title}".encode()):
                out.append(pid)
        except OSError:
            pass
    return sorted(out)


def rows_in(tmp_path) -> int:
    paths = list(Path(tmp_path).glob(f"*/*/{METRICS_FILE}"))
    return len(paths[0].read_text().splitlines()) if paths else 0


def inject(tmp_path, after_rows: int, phase: str | None, act):
    """A thread: once metrics.jsonl has `after_rows` rows and the driver is in `phase` (None: any),
    act(); returns the thread and a dict it fills with what it did."""
    done: dict = {}

    def body():
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline:
            active = {a.phase for a in BOARD.snapshot()[0] if a.part == "driver"}
            if rows_in(tmp_path) >= after_rows and (phase is None or phase in active):
                done.update(act() or {}, at_rows=rows_in(tmp_path), in_phases=sorted(active))
                return
            time.sleep(0.002)
    t = threading.Thread(target=body, daemon=True)
    t.start()
    return t, done


@pytest.mark.parametrize("sig", [signal.SIGKILL, signal.SIGSTOP], ids=["killed", "stalled"])
def test_an_engine_killed_or_stalled_mid_rollout_is_replaced_and_every_step_runs(tmp_path, sig, capfd):
    def act():
        victim = processes("_PlacedHFEngine")[0]
        os.kill(victim, sig)
        return {"victim": victim}
    t, done = inject(tmp_path, 2, "rollout", act)
    run_dir, summary = run(tmp_path, TWO_ENGINES)
    t.join(1)
    assert done.get("victim") and "rollout" in done["in_phases"], done
    assert summary["steps"] == 6
    rows = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in rows] == list(range(6))
    assert all(r["rollout/samples"] == 8 * 8 for r in rows)  # every sample of every rollout
    # the replacement starts outside the group's lock, so the run need not wait for it: it may rejoin after
    # the last row was logged, or not before the run ends (its weights and admission: test_rollout_fault_tolerance.py)
    assert re.search(r"engine \d \(\S+\) is unhealthy: out of the router, restarting it", capfd.readouterr().err)


def test_a_hung_trainer_rank_is_diagnosed_then_the_run_resumes_to_the_end(tmp_path):
    opts = ["train.gpus_per_node=2", "checks.watchdog.floor_s=5", "checks.watchdog.first_s=120",
            "checks.watchdog.poll_s=1"]

    def act():
        victim = processes("_Rank")[-1]
        os.kill(victim, signal.SIGSTOP)
        return {"victim": victim}
    t, done = inject(tmp_path, 2, None, act)
    t0 = time.monotonic()
    with pytest.raises(StallError) as e:
        run(tmp_path, opts)
    took = time.monotonic() - t0
    t.join(1)
    assert done.get("victim"), done
    run_dir = next(Path(tmp_path).glob("*/*/" + DIAGNOSIS_JSON)).parent
    d = json.loads((run_dir / DIAGNOSIS_JSON).read_text())
    assert d["stalled"]["phase"] in ("train", "log_probs") and d["cause"]["kind"] == "rank_in_collective", d["cause"]
    assert str(done["victim"]) in d["cause"]["text"] and "stopped" in d["cause"]["text"]  # the rank not in it
    assert d["collect_s"] < 60
    assert "likely cause" in str(e.value)
    assert took < 300
    stopped_at = len(read_metrics(run_dir / METRICS_FILE))
    assert 2 <= stopped_at < 6
    # resume: the newest checkpoint (save_interval=1) is the last step that finished
    run_dir2, summary = run(tmp_path, [*opts, "run.resume=auto"])
    assert run_dir2 == run_dir
    rows = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in rows] == list(range(6))


BREAK_GROUPS = '''
from rlrun.rollout.generate_api import single_turn


async def generate(handle, sample, sampling):
    out = await single_turn(handle, sample, sampling)
    if sample.group_id == 1:  # a generate function that loses the group id of one prompt
        out.group_id = -1
    return out
'''


NAN_REWARD = '''
def reward(response, label, metadata=None):  # a user's reward function that divides by zero somewhere
    return float("nan")
'''


def _tree_digest(d: Path) -> dict[str, str]:
    import hashlib

    return {str(p.relative_to(d)): hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(d.rglob("*")) if p.is_file()}


def test_a_resume_that_would_train_nothing_or_blows_the_loss_up_is_stopped_by_its_check_then_resumes(tmp_path):
    """One finished 2-rollout run, resumed three times:

    - with rollout.num_rollout=2: it would train nothing; the resume_trains invariant stops it before anything
      runs or is logged;
    - with optim.lr=1e30 up to rollout 4 (the torch backend): the step's Adam update moves every weight by
      ~1e30, their norm overflows fp32 (inf) and the next step's gradients are NaN
      (tests/unit/test_train_backend.py). The nonfinite invariant stops the run on that very step
      (train/param_norm=inf), before its push and save: the newest checkpoint is the previous rollout's, byte
      for byte;
    - with a sane lr up to rollout 4: it runs to the last step.
    Then two new runs: a generate function that breaks a group id, and a reward function returning NaN, are
    each stopped at rollout 0 by their invariant (group ids; nonfinite, at the samples, naming them)."""
    from rlrun import checkpoint as ckpt
    from rlrun.guard.invariants import InvariantError

    run_dir, summary = run(tmp_path, ["rollout.num_rollout=2"])
    assert summary["steps"] == 2
    t0 = time.monotonic()
    with pytest.raises(InvariantError, match="resumes at rollout 2 but rollout.num_rollout=2") as e:
        run(tmp_path, ["rollout.num_rollout=2", "run.resume=auto"])
    assert e.value.check == "resume_trains" and time.monotonic() - t0 < 120
    assert len(read_metrics(run_dir / METRICS_FILE)) == 2  # nothing ran, nothing was logged twice

    save_dir = next(run_dir.glob("checkpoints"))
    last = ckpt.find_latest(save_dir)
    before = _tree_digest(last)
    t0 = time.monotonic()
    with pytest.raises(InvariantError, match=r"'nonfinite' failed at rollout 2: non-finite train/param_norm=inf") as e:
        run(tmp_path, ["rollout.num_rollout=4", "run.resume=auto", "optim.lr=1e30"])
    assert e.value.check == "nonfinite" and time.monotonic() - t0 < 300
    assert ckpt.find_latest(save_dir) == last and _tree_digest(last) == before  # nothing saved, nothing changed
    assert [r["step"] for r in read_metrics(run_dir / METRICS_FILE)] == [0, 1]  # the blown-up step was not logged
    run_dir2, summary = run(tmp_path, ["rollout.num_rollout=4", "run.resume=auto"])
    assert run_dir2 == run_dir and summary["steps"] == 4
    rows = read_metrics(run_dir / METRICS_FILE)
    assert [r["step"] for r in rows] == [0, 1, 2, 3]
    assert all(math.isfinite(r["train/loss"]) and math.isfinite(r["train/param_norm"]) for r in rows)

    fn = tmp_path / "broken.py"
    fn.write_text(BREAK_GROUPS)
    with pytest.raises(InvariantError, match=r"failed at rollout 0: group ids broken: 8 samples have no group id"):
        run(tmp_path / "b", [f"rollout.generate_fn={fn}:generate"])
    fn = tmp_path / "nan_reward.py"
    fn.write_text(NAN_REWARD)
    with pytest.raises(InvariantError, match=r"'nonfinite' failed at rollout 0: non-finite rewards of samples"):
        run(tmp_path / "r", [f"data.rm_type={fn}:reward"])
