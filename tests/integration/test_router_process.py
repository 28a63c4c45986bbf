"""The real sglang-router process: routing to hf engines, add/remove workers, no orphan processes."""
import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
import requests

from rlrun.rollout.hf_engine import HFEngine
from rlrun.rollout.hf_server import ThreadedServer
from rlrun.rollout.engines.sglang.router.router import Router
from rlrun.rollout.tiny_model import save_tiny_model


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by its parent) counts as gone
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while pid_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not pid_alive(pid)


@pytest.fixture(scope="module")
def engines(tmp_path_factory):
    model_dir = save_tiny_model(tmp_path_factory.mktemp("tiny"))
    pairs = []
    for seed in (1, 2):
        engine = HFEngine.from_dir(model_dir, seed=seed)
        srv = ThreadedServer(engine)
        srv.start()
        pairs.append((engine, srv))
    yield [srv.url for _, srv in pairs]
    for engine, srv in pairs:
        srv.stop()
        engine.shutdown()


def test_router_routes_to_every_worker_and_removes_them(engines, tmp_path):
    with Router(policy="round_robin", log_dir=tmp_path) as router:
        assert requests.get(f"{router.url}/health", timeout=5).status_code == 200
        for url in engines:
            router.add_worker(url)
        assert set(router.workers()) == set(engines)
        before = [requests.get(f"{u}/server_info").json()["num_requests"] for u in engines]
        for _ in range(4):
            r = requests.post(f"{router.url}/generate", json={"input_ids": [3], "sampling_params": {
                "max_new_tokens": 2}, "return_logprob": True}, timeout=30)
            assert r.status_code == 200 and len(r.json()["meta_info"]["output_token_logprobs"]) >= 1
        after = [requests.get(f"{u}/server_info").json()["num_requests"] for u in engines]
        assert [a - b for a, b in zip(after, before)] == [2, 2]  # round robin over both engines
        assert router.remove_worker(engines[0]) is True
        assert set(router.workers()) == {engines[1]}
        assert router.remove_worker(engines[0]) is False
        pid = router.process.pid
    assert wait_gone(pid), "router process survived Router.stop()"


def test_router_with_initial_worker_urls_and_bad_policy(engines, tmp_path):
    with pytest.raises(ValueError, match="round_robin"):
        Router(policy="least_load")
    with Router(worker_urls=engines, log_dir=tmp_path) as router:
        assert set(router.workers()) == set(engines)


def test_a_port_taken_before_the_router_binds_it_is_retried_then_reported(engines, tmp_path, monkeypatch, capsys):
    """free_port() -> bind is a race: another process may take the port in between. Taken ports are
    handed out here on purpose (a listening socket), first the router's, then the prometheus one."""
    import socket

    import rlrun.rollout.engines.sglang.router.router as router_mod

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        real = router_mod.free_port
        handed = iter([busy, real(), real(), busy])  # (port, prometheus) of the first two tries; then free ones
        monkeypatch.setattr(router_mod, "free_port", lambda host="127.0.0.1": next(handed, None) or real(host))
        with Router(worker_urls=engines, log_dir=tmp_path) as router:
            assert router.port_retries == 2 and router.port != busy
            assert set(router.workers()) == set(engines)
        out = capsys.readouterr().out
        assert f"taken before it bound it ({busy}); retrying on new ports (1/2)" in out
        assert "taken before it bound it (prometheus); retrying on new ports (2/2)" in out
        with pytest.raises(RuntimeError, match=f"rollout.router.port={busy} is in use"):
            Router(port=busy, log_dir=tmp_path).start()  # the user's port: reported at once, not retried


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_router_dies_with_its_parent(tmp_path, sig):
    """A parent killed by SIGTERM (atexit via SystemExit) or SIGKILL (PDEATHSIG) leaves no router."""
    script = textwrap.dedent(f"""
        import signal, sys, time
        signal.signal(signal.SIGTERM, lambda *a: sys.exit(0))  # what the runner installs
        from rlrun.rollout.engines.sglang.router.router import Router
        r = Router(log_dir={str(tmp_path)!r}).start()
        print(r.process.pid, flush=True)
        time.sleep(120)
    """)
    parent = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    try:
        router_pid = int(parent.stdout.readline())
        assert pid_alive(router_pid)
        parent.send_signal(sig)
        parent.wait(timeout=20)
        assert wait_gone(router_pid), f"router {router_pid} orphaned after parent got {sig!r}"
    finally:
        parent.kill()


def test_cache_aware_policy_keeps_a_prompt_on_one_engine(engines, tmp_path):
    """rollout.router.policy's default: the n samples of a GRPO group share a prefix, so they go to
    the engine that has it cached (SGLang's radix cache; the hf engine has none)."""
    with Router(policy="cache_aware", worker_urls=engines, log_dir=tmp_path) as router:
        before = [requests.get(f"{u}/server_info").json()["num_requests"] for u in engines]
        for _ in range(6):
            r = requests.post(f"{router.url}/generate", json={"text": "the cat sat on the mat",
                                                              "sampling_params": {"max_new_tokens": 2}}, timeout=30)
            assert r.status_code == 200
        after = [requests.get(f"{u}/server_info").json()["num_requests"] for u in engines]
        assert sorted(a - b for a, b in zip(after, before)) == [0, 6]


class _PausedSGLang:
    """An HTTP worker that answers as a paused SGLang 0.5.16 does: /health (a generating probe, waiting on the pause)
    does not answer within the router's probe timeout, /model_info answers at once. Records every path asked."""

    def __init__(self):
        import http.server
        import threading

        hits = self.hits = []

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):  # noqa: N802 - http.server's name
                hits.append(self.path)
                if self.path == "/health":
                    time.sleep(8)  # the router's probe times out first (--health-check-timeout-secs 5)
                body = b'{"model_path": "m", "is_generation": true}'
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def stop(self):
        self.server.shutdown()


def test_the_router_and_the_monitor_probe_the_engine_kinds_liveness_path(tmp_path):
    """SGLang's /health generates under the lock its pause waits on (and waits out a pause): rlrun's router and
    engine monitor probe EngineKind.probe_path instead (/model_info for SGLang), and the real sglang-router does."""
    from types import SimpleNamespace

    from rlrun.config.kinds import ENGINES
    from rlrun.rollout.engines.http import HTTPEngine
    from rlrun.rollout.engines.sglang.engine import RaySGLangEngine, SGLangEngine
    from rlrun.rollout.routers.protocol import run_router

    assert SGLangEngine.probe_path == RaySGLangEngine.probe_path == ENGINES["sglang"].probe_path == "/model_info"
    rollout = SimpleNamespace(engine="sglang", router=SimpleNamespace(kind="sglang_router", policy="round_robin",
                                                                      host="127.0.0.1", port=None, request_timeout_s=60))
    router = run_router(rollout, tmp_path)
    assert router.flags[router.flags.index("--health-check-endpoint") + 1] == "/model_info"
    worker = _PausedSGLang()
    try:
        probe = HTTPEngine()
        probe.url, probe.probe_path = worker.url, SGLangEngine.probe_path
        assert probe.healthy(timeout_s=2) and worker.hits == ["/model_info"]
        with Router(policy="round_robin", log_dir=tmp_path, health_check_interval_s=1,
                    health_check_endpoint="/model_info") as front:
            front.add_worker(worker.url)
            assert set(front.workers()) == {worker.url}
            registered = len(worker.hits)  # the router asks /health once when it registers a worker (0.3.2)
            time.sleep(3.5)  # three probe rounds of the router
            assert set(front.workers()) == {worker.url}
        probes = worker.hits[registered:]
        assert "/health" not in probes and probes.count("/model_info") >= 3, worker.hits
    finally:
        worker.stop()


def test_a_groups_batched_generate_goes_through_the_router_whole(engines, tmp_path):
    """RolloutClient sends a GRPO group as one /generate in SGLang's list form: the real router forwards it whole to
    one engine and answers one output per sample, in order."""
    import asyncio

    from rlrun.rollout.client import RolloutClient, Sampling

    async def go(url):
        async with RolloutClient(url) as client:
            outs = await asyncio.gather(*(client.generate(input_ids=[3, 4, 5], sampling=Sampling(max_new_tokens=3),
                                                          seed=None) for i in range(4)))
            return outs, client.batches

    with Router(policy="cache_aware", log_dir=tmp_path) as router:
        for url in engines:
            router.add_worker(url)
        before = [requests.get(f"{u}/server_info").json()["num_requests"] for u in engines]
        outs, batches = asyncio.run(go(router.url))
        after = [requests.get(f"{u}/server_info").json()["num_requests"] for u in engines]
    assert batches == 1 and len(outs) == 4 and len({o["meta_info"]["id"] for o in outs}) == 4
    assert all(1 <= len(o["output_ids"]) <= 3 for o in outs)
    assert sorted(a - b for a, b in zip(after, before)) == [0, 4]  # the group on one engine
