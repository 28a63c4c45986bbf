"""TrainGroup.check on real Ray object refs: the ranks' build calls (one per rank) as the runner leaves them while the
engines start beside them (TrainGroup(wait=False)). check() raises a rank's failed build at once while another rank
is still building, and returns at once while none has failed; ready() waits for all."""
from __future__ import annotations

import time

import pytest

ray = pytest.importorskip("ray")

from rlrun.launch.train_group import TrainGroup  # noqa: E402

pytestmark = pytest.mark.timeout(180)


@ray.remote(num_cpus=0)
def _build(seconds: float, error: str | None = None) -> None:
    time.sleep(seconds)
    if error:
        raise RuntimeError(error)


def _group(*builds) -> TrainGroup:
    group = object.__new__(TrainGroup)  # the ranks' actors are not needed: check/ready read only the build refs
    group._init = list(builds)
    return group


def test_check_raises_a_failed_build_while_another_still_builds(ray_cpu):
    slow = _build.remote(60)
    group = _group(_build.remote(0), slow, _build.remote(0, "rank 2: CUDA out of memory while building the model"))
    deadline = time.monotonic() + 60
    while True:  # the failing build ends in about a Ray task's start; the slow one runs on
        try:
            group.check()
        except RuntimeError as e:
            assert "rank 2: CUDA out of memory" in str(e)
            break
        assert time.monotonic() < deadline, "check() never raised the failed build"
        time.sleep(0.2)
    ray.cancel(slow, force=True)


def test_check_returns_at_once_while_no_build_failed_and_ready_waits(ray_cpu):
    slow = _build.remote(60)
    group = _group(_build.remote(0), slow)
    t0 = time.monotonic()
    group.check()
    assert time.monotonic() - t0 < 20  # a poll (ray.wait, timeout 0), not a wait for the 60 s build
    ray.cancel(slow, force=True)
    group = _group(_build.remote(0), _build.remote(1))
    assert group.ready() is group and group._init == []
    group.check()  # built: nothing left to check
