"""rlrun.rollout.engines.starting.start_all: every engine is launched before any is waited for (their start-ups
overlap), all are waited for at once and the first failure ends the start; an engine whose Ray actor dies of a system
cause while it starts (its node lost: tests/integration/test_engine_node_loss.py's cluster lost a node so on a loaded
2-core machine, 2026-11-29) is launched again up to rollout.max_engine_restarts times; its own creation error is
raised at once; whatever ends a start, every engine launched so far is stopped."""
import threading

import pytest
from ray.exceptions import ActorDiedError

from rlrun.rollout.engines.starting import start_all


def _death(own: bool = False) -> ActorDiedError:
    e = ActorDiedError()  # no cause given: Ray's system-level death (a node lost, a process killed)
    e._actor_init_failed = own  # what Ray sets when the actor's own __init__ raised
    return e


class Kind:
    """Engines as strings "e<i>.<launch count>". dies[i]: deaths of engine i's waits before one succeeds; fail: the
    engine whose server exits; hold: engines whose waits block until they are stopped (still loading), then raise as
    a killed actor does. Every launch, wait and stop is kept in `log` (waits run in threads: compare as sets)."""

    def __init__(self, dies=None, own=False, fail=None, hold=()):
        self.dies, self.own, self.fail, self.hold = dict(dies or {}), own, fail, set(hold)
        self.log, self.launches, self.stopped = [], {}, {}
        self.lock = threading.Lock()

    def launch(self, i):
        with self.lock:
            self.launches[i] = self.launches.get(i, 0) + 1
            engine = f"e{i}.{self.launches[i]}"
            self.log.append(f"launch {i}")
            self.stopped[engine] = threading.Event()
        return engine

    def wait(self, engine):
        i = int(engine[1:].split(".")[0])
        with self.lock:
            self.log.append(f"wait {engine}")
            assert len([x for x in self.log if x.startswith("launch")]) >= len(self.launches)
        if i in self.hold:
            assert self.stopped[engine].wait(timeout=30), f"{engine} was never stopped"
            raise _death()
        if self.fail == i:
            raise RuntimeError(f"engine {i}'s server exited with code 1")
        with self.lock:
            if self.dies.get(i, 0) > 0:
                self.dies[i] -= 1
                raise _death(self.own)
        return engine + " started"

    def stop(self, engine):
        with self.lock:
            self.log.append(f"stop {engine}")
        self.stopped[engine.removesuffix(" started")].set()

    def start(self, n, restarts):
        return start_all(n, self.launch, self.wait, self.stop, restarts)

    def stops(self):
        return sorted(x for x in self.log if x.startswith("stop"))


def test_every_engine_is_launched_before_any_is_waited_for():
    k = Kind()
    assert k.start(3, restarts=0) == ["e0.1 started", "e1.1 started", "e2.1 started"]
    assert k.log[:3] == ["launch 0", "launch 1", "launch 2"]
    assert sorted(k.log[3:]) == ["wait e0.1", "wait e1.1", "wait e2.1"]


def test_a_system_death_while_starting_launches_the_engine_again_and_says_so(capsys):
    k = Kind(dies={1: 2})
    assert k.start(2, restarts=3) == ["e0.1 started", "e1.3 started"]
    ones = [x for x in k.log if x.endswith(" 1") or "e1." in x]
    assert ones == ["launch 1", "wait e1.1", "stop e1.1", "launch 1", "wait e1.2", "stop e1.2", "launch 1",
                    "wait e1.3"]
    err = capsys.readouterr().err
    assert err.count("[rlrun] engine 1 died while it started") == 2
    assert "(restart 1 of rollout.max_engine_restarts=3)" in err and "(restart 2 of" in err


def test_the_restarts_are_bounded_and_every_launched_engine_is_stopped():
    k = Kind(dies={0: 5})
    with pytest.raises(ActorDiedError):
        k.start(2, restarts=2)
    assert k.launches == {0: 3, 1: 1}  # the first launch and two restarts
    # engine 1 (up, or still starting when engine 0's last death is seen) would outlive the run
    assert [x.removesuffix(" started") for x in k.stops()] == ["stop e0.1", "stop e0.2", "stop e0.3", "stop e1.1"]
    k = Kind(dies={0: 1})
    with pytest.raises(ActorDiedError):
        k.start(1, restarts=0)
    assert k.launches == {0: 1}


def test_an_error_of_the_engines_own_creation_is_raised_at_once():
    k = Kind(dies={0: 1}, own=True)
    with pytest.raises(ActorDiedError):
        k.start(1, restarts=3)
    assert k.launches == {0: 1}


def test_a_later_engine_that_fails_stops_the_ones_already_started():
    """An engine's own failure (its server exits) ends the start; the engines started before it and the ones still
    starting are all stopped (the SGLang kind's start left them running before, 2026-11-29)."""
    k = Kind(fail=1)
    with pytest.raises(RuntimeError, match="engine 1's server exited"):
        k.start(3, restarts=2)
    assert k.launches == {0: 1, 1: 1, 2: 1}
    # engine 2 may or may not be up when engine 1's failure is seen (their waits run at once): stopped either way
    assert [x.removesuffix(" started") for x in k.stops()] == ["stop e0.1", "stop e1.1", "stop e2.1"]


def test_the_first_failure_ends_the_start_while_earlier_engines_still_load():
    """Engine 2 fails at once while engines 0 and 1 are still loading (their waits block until stopped): the start
    raises engine 2's error without waiting for them (in order, it waited for engine 0 to be up first: minutes)."""
    k = Kind(fail=2, hold={0, 1})
    with pytest.raises(RuntimeError, match="engine 2's server exited"):
        k.start(3, restarts=1)
    assert k.stops() == ["stop e0.1", "stop e1.1", "stop e2.1"]
    assert k.launches == {0: 1, 1: 1, 2: 1}  # the held engines' deaths by that stop are not restarted


def test_a_launch_that_raises_stops_the_engines_launched_before_it():
    k = Kind()
    launch = k.launch

    def launch_fails_at_2(i):
        if i == 2:
            raise ValueError("no bundle for engine 2")
        return launch(i)
    with pytest.raises(ValueError, match="no bundle"):
        start_all(3, launch_fails_at_2, k.wait, k.stop, 0)
    assert k.log == ["launch 0", "launch 1", "stop e0.1", "stop e1.1"]


def test_no_engines():
    assert start_all(0, Kind().launch, Kind().wait, Kind().stop, 1) == []


def test_a_watch_that_raises_ends_the_start_and_stops_every_engine():
    """watch(): the runner's check of the trainer ranks that build beside the engines' start (TrainGroup.check): a
    rank's failed build ends the start at once, every engine launched stopped."""
    k = Kind(hold={0, 1})
    calls = []

    def watch():
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("trainer rank 1: CUDA out of memory while building the model")
    with pytest.raises(RuntimeError, match="trainer rank 1"):
        start_all(2, k.launch, k.wait, k.stop, 1, watch=watch)
    assert k.stops() == ["stop e0.1", "stop e1.1"] and len(calls) == 2
