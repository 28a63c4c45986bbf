"""rlrun.rollout.engines.starting: an engine whose Ray actor dies of a system cause while it starts (its node lost:
tests/integration/test_engine_node_loss.py's cluster lost a node so on a loaded 2-core machine, 2026-11-29) is
started again up to rollout.max_engine_restarts times; its own creation error is raised at once."""
import pytest
from ray.exceptions import ActorDiedError

from rlrun.rollout.engines.starting import start_surviving_node_loss


def _dies(times: int, own: bool = False):
    calls = []

    def start():
        calls.append(1)
        if len(calls) <= times:
            e = ActorDiedError()  # no cause given: Ray's system-level death (a node lost, a process killed)
            e._actor_init_failed = own  # what Ray sets when the actor's own __init__ raised
            raise e
        return f"engine after {len(calls)} starts"
    return start, calls


def test_a_system_death_while_starting_starts_the_engine_again_and_says_so(capsys):
    start, calls = _dies(2)
    assert start_surviving_node_loss(4, start, restarts=3) == "engine after 3 starts"
    err = capsys.readouterr().err
    assert err.count("[rlrun] engine 4 died while it started") == 2
    assert "(restart 1 of rollout.max_engine_restarts=3)" in err and "(restart 2 of" in err


def test_the_restarts_are_bounded_and_the_last_death_is_raised():
    start, calls = _dies(5)
    with pytest.raises(ActorDiedError):
        start_surviving_node_loss(0, start, restarts=2)
    assert len(calls) == 3  # the first start and two restarts
    start, calls = _dies(1)
    with pytest.raises(ActorDiedError):
        start_surviving_node_loss(0, start, restarts=0)
    assert len(calls) == 1


def test_an_error_of_the_engines_own_creation_is_raised_at_once():
    start, calls = _dies(1, own=True)
    with pytest.raises(ActorDiedError):
        start_surviving_node_loss(0, start, restarts=3)
    assert len(calls) == 1
