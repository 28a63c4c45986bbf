"""The async loop's control flow against the recording stand-in of test_loop.py, with a producer
whose samples carry the version the stand-in engines serve: pushes every update_weights_interval,
the data state saved is the trainer's consumption point, the staleness bound, stale groups dropped."""
from __future__ import annotations

from contextlib import contextmanager
from types import SimpleNamespace

import pytest
from test_loop import _Run

from rlrun.loops import LOOPS, loop_for
from rlrun.loops.async_loop import run
from rlrun.rollout.handle import PolicyVersion

ASYNC = ["train.async_train=true", "train.colocate=false", "rollout.num_gpus=1"]


class _Prompts:
    def __init__(self, per_rollout):
        self.position, self.per_rollout = 0, per_rollout

    def state_dict(self):
        return {"position": self.position}

    def load_state_dict(self, state):
        self.position = state["position"]


class _AsyncRun(_Run):
    """Samples carry the served version (or `fixed`); the trainer's block pushes when told to."""

    def __init__(self, overrides, fixed=-1):
        super().__init__([*ASYNC, *overrides])
        self.versions, self.fixed, self.saved = PolicyVersion(), fixed, {}
        self.prompts = _Prompts(self.cfg.rollout.rollout_batch_size)
        self.engines = SimpleNamespace(abort_all=lambda: None)
        self.rollout = self

    def collect(self, rollout_id, sampling):
        samples, _, info = super().collect(rollout_id, sampling)
        self.prompts.position += self.prompts.per_rollout
        version = self.versions.version if self.fixed == -1 else self.fixed
        for s in samples:
            s.token_versions = [version] * len(s.response_tokens)
        return samples, samples, info

    @contextmanager
    def training(self, version, timer, push=True):
        yield
        self.calls.append(("block", version, push))
        if push:
            self.versions.set(version)

    def push_all(self, version):
        self.calls.append(("push_only", version))
        self.versions.set(version)

    def save(self, rollout_id, data_state):
        self.saved[rollout_id] = data_state["position"]


def test_the_registry_picks_the_loop_of_train_async_train():
    assert loop_for(_AsyncRun([]).cfg) is LOOPS["async"] and loop_for(_Run([]).cfg) is LOOPS["sync"]


def test_pushes_every_interval_and_at_the_end_and_saves_the_consumed_data_position():
    r = _AsyncRun(["rollout.num_rollout=5", "rollout.update_weights_interval=2", "rollout.max_staleness=1",
                   "rollout.async_buffer_size=2", "checkpoint.save_interval=1"])
    assert run(r.parts()) == {"steps": 5}
    assert [c for c in r.calls if c[0] == "block"] == [
        ("block", 1, False), ("block", 2, True), ("block", 3, False), ("block", 4, True), ("block", 5, True)]
    # the producer ran ahead (buffer 2), but each save holds the position after the rollout it trained
    assert r.saved == {i: (i + 1) * r.cfg.rollout.rollout_batch_size for i in range(5)}
    lag = [m["async/staleness_max"] for _, m in r.logged]
    assert max(lag) <= 1 and all(m["async/stale_dropped_groups"] == 0 for _, m in r.logged)


def test_max_staleness_zero_makes_every_rollout_on_policy():
    r = _AsyncRun(["rollout.num_rollout=4", "rollout.max_staleness=0", "rollout.async_buffer_size=3"])
    run(r.parts())
    assert [m["async/staleness_max"] for _, m in r.logged] == [0.0] * 4


def test_groups_older_than_the_bound_are_dropped_and_counted_and_the_version_still_advances():
    """Samples that claim the initial weights (version 0) whatever the engines serve: from rollout 2
    on they are 2+ versions old, over max_staleness=1, so dropped; the trainer then only pushes."""
    r = _AsyncRun(["rollout.num_rollout=4", "rollout.max_staleness=1"], fixed=None)
    run(r.parts())
    groups = r.cfg.rollout.rollout_batch_size
    assert [m["async/stale_dropped_groups"] for _, m in r.logged] == [0, 0, groups, groups]
    assert [m["rollout/kept_samples"] for _, m in r.logged][2:] == [0.0, 0.0]
    assert [c for c in r.calls if c[0] in ("block", "push_only")] == [
        ("block", 1, True), ("block", 2, True), ("push_only", 3), ("push_only", 4)]


def test_a_producer_error_reaches_the_trainer():
    r = _AsyncRun(["rollout.num_rollout=3"])
    r.collect = lambda rollout_id, sampling: 1 / 0
    with pytest.raises(RuntimeError, match="the rollout producer failed: division by zero"):
        run(r.parts())


def test_validate_refuses_async_with_colocate_with_a_fix(capsys):
    from rlrun.cli import main

    assert main(["validate", "train.async_train=true", "train.colocate=true"]) == 2
    err = capsys.readouterr()
    text = err.out + err.err
    assert "train.async_train" in text and "fix: set train.colocate=false" in text
    assert main(["validate", *ASYNC, "rollout.partial_rollout=true", "rollout.max_staleness=2"]) == 0
