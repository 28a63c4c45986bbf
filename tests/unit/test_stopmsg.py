"""rlrun.stopmsg: the message a stopped run prints (checkpoint, resume command) and the settings a
resume changed, on real run dirs written by rlrun.config.rundir and checkpoints by rlrun.checkpoint."""
import signal

from rlrun import checkpoint as ckpt
from rlrun.config import load
from rlrun.config.plan import make_plan
from rlrun.config.rundir import prepare_run_dir
from rlrun.stopmsg import resume_changes, stopped


def _start(tmp_path, overrides):
    cfg = load(overrides + [f"run.output_dir={tmp_path}"])
    return cfg, prepare_run_dir(cfg, make_plan(cfg), overrides + [f"run.output_dir={tmp_path}"])


def test_stop_message_names_the_checkpoint_and_the_resume_command(tmp_path):
    cfg, run_dir = _start(tmp_path, ["optim.lr=3e-3", "rollout.stop=['a b']"])
    msg = stopped(cfg, run_dir, signal.SIGINT)
    assert f"[rlrun] stopped by SIGINT; run dir {run_dir}" in msg
    assert "last checkpoint: none yet" in msg and "starts from the beginning" in msg
    # the exact overrides, shell-quoted, with run.resume=auto
    assert msg.endswith(f"resume with: rlrun optim.lr=3e-3 'rollout.stop=['\"'\"'a b'\"'\"']' "
                        f"run.output_dir={tmp_path} run.resume=auto")
    where = ckpt.iter_dir(run_dir / "checkpoints", 4)
    ckpt.write_driver_state(where, ckpt.DriverState(4, {}, [3, [], None], []))
    ckpt.mark_latest(run_dir / "checkpoints", where)
    assert f"last checkpoint: {where} (a resume continues at rollout 4)" in stopped(cfg, run_dir, signal.SIGTERM)


def test_a_resume_command_replaces_the_old_resume_setting(tmp_path):
    cfg, run_dir = _start(tmp_path, ["run.resume=never"])
    assert stopped(cfg, run_dir, signal.SIGINT).endswith(f"rlrun run.output_dir={tmp_path} run.resume=auto")


def test_resume_lists_every_changed_setting(tmp_path):
    cfg, run_dir = _start(tmp_path, ["optim.lr=3e-3"])
    assert resume_changes(cfg, run_dir) == []  # a fresh run dir
    (run_dir / "checkpoints").mkdir()
    again = load(["optim.lr=1e-3", "rollout.temperature=0.8", "run.resume=auto", f"run.output_dir={tmp_path}"])
    assert prepare_run_dir(again, make_plan(again), []) == run_dir
    assert resume_changes(again, run_dir) == ["eval.temperature: 1.0 -> 0.8", "optim.critic_lr: 0.003 -> 0.001",
                                              "optim.lr: 0.003 -> 0.001", "rollout.temperature: 1.0 -> 0.8"]
    third = load(["optim.lr=1e-3", "rollout.temperature=0.8", "run.resume=auto", f"run.output_dir={tmp_path}"])
    prepare_run_dir(third, make_plan(third), [])
    assert resume_changes(third, run_dir) == []  # compared with the previous start, not the first
