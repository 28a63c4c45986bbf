"""The SGLang kind's start (rlrun.rollout.engines.sglang.engine.start) on a real Ray instance with 4 logical GPUs,
the plan's placement group and rlrun's Placement: every engine's server is launched before any is waited for, so
their start-ups (a minute or more each for SGLang: imports, weights, CUDA graphs) overlap instead of adding up; an
engine whose server fails ends the start with every other engine's server stopped.

What is a test double: the server each engine actor launches (SGLang needs CUDA). The stand-in below marks its
start with its pid, then answers health only once every engine of the test has marked its start: a start that
waited for engine 0 before launching engine 1 would never see engine 0 healthy (its stand-in gives up after 60 s and
exits, and the start fails). No timing is asserted."""
from __future__ import annotations

import os
import sys
import time

import pytest

ray = pytest.importorskip("ray")

from rlrun.config import load  # noqa: E402
from rlrun.config.plan import make_plan  # noqa: E402
from rlrun.launch.env import actor_env, runtime_env  # noqa: E402
from rlrun.launch.placement import Placement  # noqa: E402
from rlrun.rollout.engines.sglang.engine import start  # noqa: E402

pytestmark = [pytest.mark.slow, pytest.mark.timeout(300)]

ENGINES = 3
JOB = ["hardware=h100", "hardware.gpus_per_node=4", "model=tiny", "train.colocate=false", "train.gpus_per_node=1",
       f"rollout.num_gpus={ENGINES}", "rollout.gpus_per_engine=1", "rollout.max_engine_restarts=0"]

# python -c STANDIN MARKS N FAIL_SEED HOLD <SGLang's flags>: marks MARKS/<port> with its pid; exits 3 if its
# --random-seed is FAIL_SEED; HOLD=1: the others never get healthy (an engine still loading, as SGLang for minutes);
# else waits (60 s at most) until N marks exist, then serves 200 on every GET at --host/--port.
STANDIN = r"""
import argparse, os, sys, time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
marks, n, fail, hold = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4] == '1'
p = argparse.ArgumentParser()
p.add_argument('--host'); p.add_argument('--port', type=int); p.add_argument('--random-seed', type=int)
a, _ = p.parse_known_args(sys.argv[5:])
open(os.path.join(marks, str(a.port)), 'w').write(str(os.getpid()))
print('marked', a.port, flush=True)
if a.random_seed == fail:
    print('stand-in: failing as asked', flush=True); sys.exit(3)
while hold:
    time.sleep(1)
t0 = time.time()
while len(os.listdir(marks)) < n:
    if time.time() - t0 > 60:
        print('stand-in: the other engines never started', flush=True); sys.exit(4)
    time.sleep(0.2)
class H(BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.end_headers()
    def log_message(self, *args):
        pass
ThreadingHTTPServer((a.host, a.port), H).serve_forever()
"""


@pytest.fixture(scope="module")
def cluster():
    if ray.is_initialized():
        ray.shutdown()
    ray.init(address="local", num_cpus=4, num_gpus=4,  # logical: one CPU per bundle
             include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _start(tmp_path, fail_seed: int, hold: bool = False, extra: tuple[str, ...] = ()):
    cfg = load([*JOB, *extra])
    plan = make_plan(cfg)
    marks = tmp_path / "marks"
    marks.mkdir()
    placement = Placement(plan, "cuda", timeout_s=60)
    launcher = (sys.executable, "-c", STANDIN, str(marks), str(ENGINES), str(fail_seed), "1" if hold else "0")
    return cfg, plan, placement, marks, lambda: start(cfg, plan, placement, runtime_env(actor_env("cuda", {})),
                                                       str(tmp_path / "model"), str(tmp_path / "logs"),
                                                       launcher=launcher)


def _gone(pid: int, wait_s: float = 30.0) -> bool:
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        try:
            with open(f"/proc/{pid}/status") as f:
                if f.read().split("State:")[1].split()[0] in ("Z", "X"):
                    return True
        except (FileNotFoundError, IndexError):
            return True
        time.sleep(0.2)
    return False


def test_the_engines_start_ups_overlap(cluster, tmp_path):
    cfg, plan, placement, marks, go = _start(tmp_path, fail_seed=-1)
    try:
        assert plan.num_engines == ENGINES
        engines, restart = go()
        try:
            assert len(engines) == ENGINES and all(e.alive() for e in engines)
            assert len({e.url for e in engines}) == ENGINES  # every server on its own port
            assert sorted(os.listdir(marks)) == sorted(e.url.rsplit(":", 1)[1] for e in engines)
        finally:
            for e in engines:
                e.stop()
    finally:
        placement.remove()


def test_an_engine_that_fails_to_start_stops_the_others(cluster, tmp_path):
    cfg, plan, placement, marks, go = _start(tmp_path, fail_seed=load(JOB).run.seed + 1)  # engine 1's seed
    try:
        with pytest.raises(RuntimeError, match=r"(?s)exited with code 3.*failing as asked"):
            go()
        time.sleep(3)  # a server whose actor was killed before it launched it leaves no mark; one it launched, does
        pids = {port: int((marks / port).read_text()) for port in os.listdir(marks)}
        assert pids  # engine 1's own, at least: the first failure ends the start, the others may still be loading
        assert all(_gone(pid) for pid in pids.values()), pids  # and none outlives the failed start
    finally:
        placement.remove()


def test_engines_still_starting_are_killed_at_once_when_another_fails(cluster, tmp_path):
    """Engine 1's server exits; engines 0 and 2 are still loading (their actors busy in start, which takes a stop
    only after it). The start fails at once, without waiting for engine 0 first (in order, it would have waited for
    engine 0's start timeout), and the loading engines are killed at once, not after a graceful stop's 30 s timeout
    each (a failed start with two engines loading took 62 s before)."""
    cfg, plan, placement, marks, go = _start(tmp_path, fail_seed=load(JOB).run.seed + 1, hold=True)  # engine 1's
    try:
        t0 = time.monotonic()
        with pytest.raises(RuntimeError, match=r"(?s)exited with code 3.*failing as asked"):
            go()
        took = time.monotonic() - t0
        deadline = time.monotonic() + 60
        while len(os.listdir(marks)) < ENGINES and time.monotonic() < deadline:
            time.sleep(0.2)  # a killed actor may not have launched its server: nothing to find then
        pids = [int((marks / port).read_text()) for port in os.listdir(marks)]
        assert all(_gone(pid) for pid in pids), pids
        assert took < 45, f"the failed start took {took:.0f} s to return"
    finally:
        placement.remove()


def test_an_engine_not_healthy_within_the_start_timeout_fails_the_start_naming_the_key(cluster, tmp_path):
    """rollout.engine_start_timeout_s bounds each engine's start (a large checkpoint on network storage may need more
    than the default; a hung start must end): the stand-ins never get healthy, the start fails after it."""
    cfg, plan, placement, marks, go = _start(tmp_path, fail_seed=-1, hold=True,
                                             extra=("rollout.engine_start_timeout_s=4",))
    try:
        with pytest.raises(TimeoutError, match=r"not healthy .* after 4s .*rollout\.engine_start_timeout_s"):
            go()
    finally:
        placement.remove()
