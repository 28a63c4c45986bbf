"""Issue 6 acceptance (CPU): real sglang-router in front of 3 hf engine processes; 256 requests
complete; an engine SIGKILLed mid-rollout is detected, its requests retried on the others, the
engine restarted, given the current weights and re-registered; every sample is present."""
import asyncio
import time

import pytest
import requests

from rlrun.rollout import weights as W
from rlrun.rollout.client import RolloutClient, Sampling
from rlrun.rollout.engines.group import local_engine_group
from rlrun.rollout.engines.http import HTTPEngine
from rlrun.rollout.tiny_model import build_model, save_tiny_model

pytestmark = pytest.mark.slow

N_ENGINES, N_REQUESTS = 3, 256


@pytest.fixture
def cluster(tmp_path):
    model_dir = save_tiny_model(tmp_path / "tiny", seed=0)
    with local_engine_group(model_dir, N_ENGINES, router="sglang_router", log_dir=tmp_path / "logs", seed=100,
                            health_interval_s=0.3, startup_timeout_s=120) as group:
        yield group


def in_flight(url: str) -> int:
    """Requests running or queued on an engine (waits until there is one, up to 10 s)."""
    deadline = time.monotonic() + 10
    while True:
        load = requests.get(f"{url}/get_load", timeout=10).json()[0]
        n = load["num_reqs"] + load["num_waiting_reqs"]
        if n or time.monotonic() > deadline:
            return n
        time.sleep(0.005)


def test_rollout_survives_an_engine_killed_mid_way(cluster):
    group = cluster
    trainer_state = build_model(seed=42).state_dict()  # "the trainer's weights after step 1"
    group.update_weights_from_tensor(list(trainer_state.items()), version="1", bucket_bytes=32 << 10)
    expected = W.checksum(trainer_state)
    assert set(group.checksums().values()) == {expected}
    victim = group.engines[1]
    killed_at = {}

    async def rollout():
        async with RolloutClient(group.router.url, max_concurrency=48, max_retries=8, backoff_s=0.2,
                                 request_timeout_s=60) as client:
            sampling = Sampling(max_new_tokens=12, temperature=1.0)
            done = 0

            async def one(i):
                nonlocal done
                out = await client.generate(input_ids=[3 + i % 20, 4, 5], sampling=sampling)
                done += 1
                if done == 40:  # a fifth of the way in: kill an engine with requests in flight
                    killed_at["done"] = done
                    killed_at["in_flight"] = await asyncio.to_thread(in_flight, victim.url)
                    victim.kill()
                return out

            outs = await asyncio.gather(*(one(i) for i in range(N_REQUESTS)))
            return outs, client.retries

    t0 = time.monotonic()
    outs, retries = asyncio.run(rollout())
    elapsed = time.monotonic() - t0
    assert killed_at["done"] == 40 and killed_at["in_flight"] > 0
    assert len(outs) == N_REQUESTS
    assert all(o["meta_info"]["finish_reason"]["type"] in ("stop", "length") for o in outs)
    assert all(len(o["output_ids"]) == len(o["meta_info"]["output_token_logprobs"]) >= 1 for o in outs)
    assert {o["meta_info"]["weight_version"] for o in outs} == {"1"}
    print(f"\n256 requests in {elapsed:.1f}s with one engine killed; client retries: {retries}")

    # the monitor restarts the dead engine and brings it to the current weights
    deadline = time.monotonic() + 60
    while group.restarts < 1 and time.monotonic() < deadline:
        time.sleep(0.2)
    assert group.restarts == 1
    new = group.engines[1]
    assert new is not victim and new.alive()
    assert group.versions()[new.url] == "1"
    assert group.checksums()[new.url] == expected
    assert new.url in group.router.workers()
    # and it serves traffic with the current version
    r = requests.post(f"{new.url}/generate", json={"input_ids": [3], "sampling_params": {"max_new_tokens": 2}},
                      timeout=30)
    assert r.json()["meta_info"]["weight_version"] == "1"


class _InProcessEngine(HTTPEngine):
    """An hf engine served from this process: a RolloutEngine (HTTPEngine's control plane + alive/stop)."""

    def __init__(self, model_dir):
        from rlrun.rollout.hf_engine import HFEngine
        from rlrun.rollout.hf_server import ThreadedServer

        self.engine = HFEngine.from_dir(model_dir)
        self.server = ThreadedServer(self.engine)
        self.url = self.server.start()
        self.stopped = False

    def alive(self):
        return not self.stopped

    def stop(self):
        if not self.stopped:
            self.stopped = True
            self.server.stop()
            self.engine.shutdown()


def test_a_restart_that_fails_is_retried_with_backoff(tmp_path):
    from rlrun.rollout.engines.group import EngineGroup
    from rlrun.rollout.engines.sglang.router.router import Router

    model_dir = save_tiny_model(tmp_path / "tiny")
    attempts = []

    def restart(i):
        attempts.append(time.monotonic())
        if len(attempts) == 1:
            raise RuntimeError("no GPU free (injected)")
        return _InProcessEngine(model_dir)

    with Router(log_dir=tmp_path) as router:
        group = EngineGroup(router, [_InProcessEngine(model_dir)], restart, health_interval_s=0.1,
                            failure_threshold=1).start()
        try:
            group.engines[0].stop()  # the engine dies
            deadline = time.monotonic() + 30
            while group.restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert group.restarts == 1 and len(attempts) == 2
            assert "no GPU free (injected)" in group.last_error
            assert attempts[1] - attempts[0] >= 1.9  # waited 2 s after the first failure
            assert set(router.workers()) == {group.engines[0].url}
        finally:
            group.stop()


def test_an_engine_that_keeps_failing_is_given_up_after_max_restarts(tmp_path):
    """rollout.max_engine_restarts=2: the third failure calls on_fatal, naming the engine (its node)."""
    from rlrun.rollout.engines.group import EngineGroup
    from rlrun.rollout.engines.sglang.router.router import Router

    model_dir = save_tiny_model(tmp_path / "tiny")
    fatal = []

    def restart(i):  # every restart fails (a broken node)
        raise RuntimeError("the node's GPU is gone (injected)")

    with Router(log_dir=tmp_path) as router:
        first = _InProcessEngine(model_dir)
        first.node = "10.0.0.7"
        group = EngineGroup(router, [first], restart, health_interval_s=0.1, failure_threshold=1, max_restarts=2)
        group.on_fatal = fatal.append
        group.start()
        try:
            first.stop()
            deadline = time.monotonic() + 30  # two failed restarts: backoffs of 2 s and 4 s
            while not fatal and time.monotonic() < deadline:
                time.sleep(0.05)
            assert group.restarts == 0 and len(fatal) == 1
            assert fatal[0].startswith("engine 0 on node 10.0.0.7 failed again after 2 restart(s) "
                                       "(rollout.max_engine_restarts=2); last restart error: restarting engine 0 "
                                       "failed (2x): the node's GPU is gone (injected)"), fatal
            time.sleep(0.5)
            assert len(fatal) == 1  # said once; the group stops restarting
        finally:
            group.stop()


def test_a_slow_restart_does_not_hold_up_weight_pushes(tmp_path):
    """An engine dies and its restart takes long (a Ray actor waiting for its bundle to leave a lost node):
    meanwhile the driver's defer_restarts() and sync() return at once, the push going to the live engine
    only; the replacement then gets the weights the others serve (resync) and joins the router."""
    import threading

    from rlrun.rollout.engines.group import EngineGroup
    from rlrun.rollout.engines.sglang.router.router import Router

    model_dir = save_tiny_model(tmp_path / "tiny")
    started, release = threading.Event(), threading.Event()

    def restart(i):
        started.set()
        release.wait(60)  # the slow part: released by the test once the push went through
        return _InProcessEngine(model_dir)

    with Router(log_dir=tmp_path) as router:
        a, b = _InProcessEngine(model_dir), _InProcessEngine(model_dir)
        group = EngineGroup(router, [a, b], restart, health_interval_s=0.1, failure_threshold=1).start()
        pushed = []
        group.resync = lambda url: pushed.append(("resync", url))
        try:
            a.stop()
            assert started.wait(30)
            t0 = time.monotonic()
            group.defer_restarts()
            group.sync(lambda urls: pushed.append(("push", urls)))
            took = time.monotonic() - t0
            # the push skips the engine being restarted, and neither call waited for the restart (released only
            # below): both take milliseconds; 5 s leaves room for a loaded machine, a wait for the restart is 60 s
            assert took < 5 and pushed == [("push", [b.url])] and not release.is_set()
            assert set(router.workers()) == {b.url}  # the dead engine left the router before the restart
            release.set()
            deadline = time.monotonic() + 30
            while group.restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            new = group.engines[0]
            assert group.restarts == 1 and new is not a and pushed[-1] == ("resync", new.url)
            assert set(router.workers()) == {new.url, b.url}
        finally:
            release.set()
            group.stop()
