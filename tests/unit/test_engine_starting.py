"""rlrun.rollout.engines.starting.start_all: every engine is launched before any is waited for (their start-ups
overlap); an engine whose Ray actor dies of a system cause while it starts (its node lost:
tests/integration/test_engine_node_loss.py's cluster lost a node so on a loaded 2-core machine, 2026-11-29) is
launched again up to rollout.max_engine_restarts times; its own creation error is raised at once; whatever ends a
start, every engine launched so far is stopped."""
import pytest
from ray.exceptions import ActorDiedError


from rlrun.rollout.engines.starting import start_all


def _death(own: bool = False) -> ActorDiedError:
    e = ActorDiedError()  # no cause given: Ray's system-level death (a node lost, a process killed)
    e._actor_init_failed = own  # what Ray sets when the actor's own __init__ raised
    return e


class Kind:
    """Engines as strings "e<i>.<launch count>"; `dies[i]` deaths of engine i's waits before one succeeds; the order
    of every launch, wait and stop is kept in `log`."""

    def __init__(self, dies=None, own=False, fail=None):
        self.dies, self.own, self.fail = dict(dies or {}), own, fail
        self.log, self.launches = [], {}

    def launch(self, i):
        self.launches[i] = self.launches.get(i, 0) + 1
        self.log.append(f"launch {i}")
        return f"e{i}.{self.launches[i]}"

    def wait(self, engine):
        self.log.append(f"wait {engine}")
        i = int(engine[1:].split(".")[0])
        if self.fail == i:
            raise RuntimeError(f"engine {i}'s server exited with code 1")
        if self.dies.get(i, 0) > 0:
            self.dies[i] -= 1
            raise _death(self.own)
        return engine + " started"

    def stop(self, engine):
        self.log.append(f"stop {engine}")

    def start(self, n, restarts):
        return start_all(n, self.launch, self.wait, self.stop, restarts)


def test_every_engine_is_launched_before_any_is_waited_for():
    k = Kind()
    assert k.start(3, restarts=0) == ["e0.1 started", "e1.1 started", "e2.1 started"]
    assert k.log == ["launch 0", "launch 1", "launch 2", "wait e0.1", "wait e1.1", "wait e2.1"]


def test_a_system_death_while_starting_launches_the_engine_again_and_says_so(capsys):
    k = Kind(dies={1: 2})
    assert k.start(2, restarts=3) == ["e0.1 started", "e1.3 started"]
    assert k.log[:4] == ["launch 0", "launch 1", "wait e0.1", "wait e1.1"]
    assert k.log[4:] == ["stop e1.1", "launch 1", "wait e1.2", "stop e1.2", "launch 1", "wait e1.3"]
    err = capsys.readouterr().err
    assert err.count("[rlrun] engine 1 died while it started") == 2
    assert "(restart 1 of rollout.max_engine_restarts=3)" in err and "(restart 2 of" in err


def test_the_restarts_are_bounded_and_every_launched_engine_is_stopped():
    k = Kind(dies={0: 5})
    with pytest.raises(ActorDiedError):
        k.start(2, restarts=2)
    assert k.launches == {0: 3, 1: 1}  # the first launch and two restarts
    assert k.log[-2:] == ["stop e0.3", "stop e1.1"]  # the dead one, then the other, which would outlive the run
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
    """An engine's own failure (its server exits) ends the start; the engines before it, already healthy, and the
    ones after it, launched, are all stopped (the SGLang kind's start left them running before, 2026-11-29)."""
    k = Kind(fail=1)
    with pytest.raises(RuntimeError, match="engine 1's server exited"):
        k.start(3, restarts=2)
    assert k.launches == {0: 1, 1: 1, 2: 1}
    assert sorted(x for x in k.log if x.startswith("stop")) == ["stop e0.1 started", "stop e1.1", "stop e2.1"]


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
