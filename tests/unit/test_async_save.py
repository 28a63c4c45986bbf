"""checkpoint.async_save on the torch backend (CPU, in-process) and the driver's commit.

The snapshot is taken at the save point: the steps trained while the background writer runs change nothing in
the files, which hold exactly what a blocking save writes and load back to the state of the save point. A run
SIGKILLed while its background write is in flight resumes from the previous complete checkpoint
(`latest` moves only after every rank's files are complete: rlrun.parts.checkpoints)."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from train_fixtures import toy_batch, torch_backend
from rlrun import checkpoint as ckpt
from rlrun.parts.checkpoints import Checkpoints
from rlrun.train.async_save import BackgroundWriter, host_copy

_PPO = ("algo=ppo", "optim.lr=1e-3")  # actor, critic and both optimizers: every file the save writes


def _files(path: Path) -> dict:
    """What a torch-backend checkpoint holds, by file: weights, optimizer state, step, critic."""
    weights = {}
    for f in sorted((path / "model").glob("*.safetensors")):
        weights.update(load_file(str(f)))
    state = torch.load(path / "trainer_state.pt", weights_only=False)
    return {"weights": weights, "state": state, "critic": load_file(str(path / "critic.safetensors"))}


def _equal(a, b) -> bool:
    if torch.is_tensor(a):
        return torch.is_tensor(b) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, dict):
        return isinstance(b, dict) and a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return len(a) == len(b) and all(_equal(x, y) for x, y in zip(a, b))
    return a == b


def test_async_save_writes_the_save_points_state_while_training_goes_on(tmp_path, monkeypatch):
    b = torch_backend(*_PPO)
    batch = toy_batch(returns=(1.0, 0.0, 1.0, 0.0))
    b.train_step(batch.with_(values=b.compute_values(batch)))
    b.save(str(tmp_path / "sync"))  # the reference: a blocking save at this point
    at_save = {k: v.clone() for k, v in b.model.state_dict().items()}

    from rlrun.train import torch_backend as tb

    gate, real_save_file = threading.Event(), tb.save_file
    monkeypatch.setattr(tb, "save_file", lambda *a, **k: (gate.wait(30), real_save_file(*a, **k))[1])
    b.save_async(str(tmp_path / "async"))
    assert not b.save_done()  # the writer waits on the gate: the save returned before its files exist
    b.train_step(batch.with_(values=b.compute_values(batch)))  # training goes on, in place
    assert not _equal(at_save, b.model.state_dict())
    gate.set()
    b.wait_save()
    assert b.save_done()
    assert _equal(_files(tmp_path / "sync"), _files(tmp_path / "async"))
    # and it loads back to the save point, as the blocking save does
    fresh = torch_backend(*_PPO)
    fresh.load(str(tmp_path / "async"))
    assert _equal(at_save, fresh.model.state_dict()) and fresh.step == 1


def test_a_failed_background_write_is_raised_by_the_next_call():
    w = BackgroundWriter()
    w.start(lambda: 1 / 0)
    with pytest.raises(RuntimeError, match="background checkpoint write failed: ZeroDivisionError"):
        w.wait()
    w.start(lambda: None)
    w.wait()  # raised once, then it writes again


def test_host_copy_owns_its_tensors():
    x = torch.arange(4.0)
    nested = {"a": [x, (x, 3)], "b": "s"}
    out = host_copy(nested)
    x.add_(1)
    assert out["a"][0].tolist() == [0.0, 1.0, 2.0, 3.0] and out["a"][1][1] == 3 and out["b"] == "s"
    assert out["a"][0].data_ptr() != x.data_ptr()


class _SlowTrainer:
    """A trainer whose background write is held until released (the commit must wait for it)."""

    def __init__(self):
        self.release, self.saves = threading.Event(), []

    def save_async(self, path):
        Path(path).mkdir(parents=True)
        self.saves.append(path)

    def save_done(self):
        return self.release.is_set()


def test_latest_moves_only_after_the_write_is_done(tmp_path):
    from rlrun.config import load

    cfg = load([f"checkpoint.save={tmp_path}", "checkpoint.keep_last=1"])
    trainer = _SlowTrainer()
    c = Checkpoints(cfg, tmp_path, trainer)
    c.save(0, {"position": 4})
    time.sleep(0.2)
    assert ckpt.find_latest(tmp_path) is None and not (ckpt.iter_dir(tmp_path, 1) / "driver.json").exists()
    trainer.release.set()
    assert c.latest() == str(ckpt.iter_dir(tmp_path, 1))
    assert ckpt.read_driver_state(ckpt.iter_dir(tmp_path, 1)).data_state == {"position": 4}


_KILLED_MID_SAVE = textwrap.dedent('''
    import sys, time
    sys.path.insert(0, {tests!r})
    from train_fixtures import toy_batch, torch_backend
    from rlrun.parts.checkpoints import Checkpoints
    from rlrun.train import torch_backend as tb
    b = torch_backend("checkpoint.save={save}", "optim.lr=1e-3")
    c = Checkpoints(b.cfg, {save!r}, b)
    batch = toy_batch()
    b.train_step(batch)
    c.save(0, {{"position": 1}})  # complete: committed by the commit thread
    c.latest()
    b.train_step(batch)
    real = tb.save_file
    def stuck(tensors, filename, metadata=None):  # half a file, then the write hangs
        open(filename, "wb").write(b"partial")
        print("WRITING", flush=True)
        time.sleep(600)
    tb.save_file = stuck
    c.save(1, {{"position": 2}})
    print("SAVED", flush=True)
    b.train_step(batch)  # training goes on while the write is in flight
    print("TRAINED", flush=True)
    time.sleep(600)
''')


def test_a_run_killed_during_an_async_save_resumes_from_the_last_complete_checkpoint(tmp_path):
    save = tmp_path / "ckpts"
    script = _KILLED_MID_SAVE.format(tests=str(Path(__file__).parent), save=str(save))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(Path(__file__).parents[2] / "src"),
                                                        os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, env=env)
    seen = []
    try:
        for line in proc.stdout:
            seen.append(line)
            if "TRAINED" in line:
                break
        else:
            pytest.fail("the child ended early:\n" + "".join(seen)[-3000:])
        # the save returned while its write hung (two threads print: their lines may interleave, so words are looked
        # for, not whole lines; a clean-clone run once read "WRITINGSAVED")
        out = "".join(seen)
        assert "WRITING" in out and "SAVED" in out
        os.kill(proc.pid, signal.SIGKILL)
    finally:
        proc.kill()
        proc.wait(timeout=30)
    assert (ckpt.iter_dir(save, 2) / "trainer" / "model" / "model.safetensors").read_bytes() == b"partial"
    assert ckpt.find_latest(save) == ckpt.iter_dir(save, 1)  # the half-written iter_0000002 is never named
    from rlrun.config import load

    fresh = torch_backend("optim.lr=1e-3")
    state = Checkpoints(load([f"checkpoint.save={save}", "run.resume=auto"]), save, fresh).restore()
    assert state.next_rollout == 1 and state.data_state == {"position": 1}
    # the weights are those after the first step: replay it from the same init
    ref = torch_backend("optim.lr=1e-3")
    ref.train_step(toy_batch())
    assert _equal(ref.model.state_dict(), fresh.model.state_dict()) and fresh.step == 1
