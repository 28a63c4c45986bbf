"""Train-only replay reproduces the default job's trainer metrics exactly, from the records the run wrote
(logging.rollout_records=all), with no engines; the same run writes a profile trace for
debug.profile_steps and TensorBoard event files."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlrun import runner
from rlrun.config import load
from rlrun.config.errors import ConfigError
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.metrics import METRICS_FILE, read_metrics
from rlrun.records import RecordsWriter
from rlrun.replay import replay

pytestmark = [pytest.mark.timeout(400), pytest.mark.slow]
KEYS = ("train/loss", "train/grad_norm", "train/entropy", "train/train_rollout_logp_abs_diff")


@pytest.fixture(scope="module")
def recorded_run(tmp_path_factory, ray_cpu):
    tmp = tmp_path_factory.mktemp("rec")
    overrides = [f"run.output_dir={tmp}", "rollout.num_rollout=3", "checkpoint.save_interval=1",
                 "logging.wandb.mode=disabled", "logging.progress=false", "logging.rollout_records=all",
                 "logging.tensorboard=true", "debug.profile_steps=[1]"]
    cfg = load(overrides)
    plan = make_plan(cfg)
    run_dir = prepare_run_dir(cfg, plan, overrides)
    runner.run(cfg, plan, run_dir)
    return run_dir


def _series(run_dir, steps):
    rows = {r["step"]: r for r in read_metrics(Path(run_dir) / METRICS_FILE)}
    return [[rows[s][k] for k in KEYS] for s in steps]


def test_replay_reproduces_loss_and_grad_norm_exactly(recorded_run):
    s = replay(recorded_run, [])
    assert s["steps"] == 3 and s["matches"] == {"train/loss": 3, "train/grad_norm": 3} and s["changed"] == {}
    assert _series(recorded_run, range(3)) == _series(s["run_dir"], range(3))  # exact: same batches, same math


def test_replay_from_a_checkpoint_reproduces_the_tail(recorded_run):
    s = replay(recorded_run, [], rollouts="1:3")
    assert [r["step"] for r in read_metrics(Path(s["run_dir"]) / METRICS_FILE)] == [1, 2]
    assert _series(recorded_run, [1, 2]) == _series(s["run_dir"], [1, 2])


def test_an_override_changes_the_replayed_updates(recorded_run, tmp_path, capsys):
    from rlrun.cli import main

    assert main(["replay", str(recorded_run), "--rollouts", "0:2", "optim.lr=1e-2", f"run.output_dir={tmp_path}"]) == 0
    out = capsys.readouterr().out
    # the overrides change the training: equality with the original run is not reported (the on-policy loss is
    # ~0 at any lr, so "equal" would say nothing); the change is named instead
    assert "equal to the original run" not in out
    assert "not compared with the original run: the overrides change the training (" in out
    assert "optim.lr 0.003 -> 0.01" in out  # (and optim.critic_lr, derived from it)
    (run_dir,) = (tmp_path / "replay").iterdir()  # run.output_dir honoured (was RUN_DIR/replay anyway)
    base, new = _series(recorded_run, [0, 1]), _series(run_dir, [0, 1])
    assert base[0] == new[0]  # step 0 runs on the initial weights either way
    assert base[1][1] != new[1][1]  # grad norm after one step at another lr


def test_profile_trace_and_tensorboard_events(recorded_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    trace = recorded_run / "profile" / "rollout_000001" / "trainer_rank0.json"
    assert json.loads(trace.read_text())["traceEvents"]
    assert not (recorded_run / "profile" / "rollout_000000").exists()
    acc = EventAccumulator(str(recorded_run / "tensorboard"))
    acc.Reload()
    rewards = [r["rollout/reward_mean"] for r in read_metrics(recorded_run / METRICS_FILE)]
    got = [e.value for e in acc.Scalars("rollout/reward_mean")]
    # TensorBoard stores float32: equal to the float64 series within float32 rounding (2^-24 relative)
    assert got == pytest.approx(rewards, rel=2**-24, abs=0)


def test_overrides_of_the_recorded_rollouts_are_refused(recorded_run):
    with pytest.raises(ConfigError) as e:
        replay(recorded_run, ["rollout.n_samples_per_prompt=4", "optim.lr=1e-2", "data.rm_type=math",
                              "rollout.num_rollout=2"])
    assert [(p.path, p.value) for p in e.value.problems] == [("rollout.n_samples_per_prompt", "4"),
                                                              ("data.rm_type", "math"), ("rollout.num_rollout", "2")]
    assert "--rollouts" in e.value.problems[2].fix


def test_replay_from_an_unsaved_rollout_is_refused_before_ray(recorded_run, tmp_path):
    import shutil

    copy = tmp_path / "run"
    shutil.copytree(recorded_run, copy, ignore=shutil.ignore_patterns("replay", "iter_0000002"))
    with pytest.raises(ConfigError, match=r"no checkpoint iter_0000002 \(saved: \[1, 3\]\)"):
        replay(copy, [], rollouts="2:3")


def test_replay_says_when_the_run_kept_fewer_records(tmp_path):
    (tmp_path / "config.yaml").write_text("{}\n")
    RecordsWriter(tmp_path, "sample", 8)
    with pytest.raises(ConfigError, match="logging.rollout_records=all"):
        replay(tmp_path, [])
    with pytest.raises(ConfigError, match="is not a run dir"):
        replay(tmp_path / "typo", [])


def test_show_reports_the_real_run_with_its_records(recorded_run):
    import pyarrow.parquet as pq

    from rlrun.report import show

    out = show(recorded_run)
    page = out.read_text()
    assert out == recorded_run / "report.html" and "rollout/reward_mean" in page and "train/grad_norm" in page
    assert "3 record files" in page  # every rollout was recorded (logging.rollout_records=all)
    last = pq.read_table(recorded_run / "rollouts" / "rollout_000002.parquet").to_pylist()
    assert len(last) == 128 and all(r["weight_version"] == 2 for r in last)  # generated after 2 weight pushes
