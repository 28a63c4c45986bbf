"""A weight sync that cannot complete ends within its bound with a diagnosis (rollout.weight_sync_timeout_s).

The trainer side is rlrun's own (rollout.engines.broadcast_weights over gloo, the CPU stand-in for NCCL); the engine is
a small HTTP server that speaks the endpoints a push uses and misbehaves on purpose: it never joins the group, joins
but never receives, or refuses the bucket. A real engine cannot be made to misbehave on demand, which is why a
stand-in is used here; the real SGLang path is tests/gpu/test_sglang_nccl_sync.py (two GPUs).
"""
import json
import multiprocessing
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from rlrun.rollout import weights as W
from rlrun.rollout.engines.group import WeightSyncStuck, broadcast_weights, check_nccl_env
from rlrun.rollout.process import free_port

BOUND_S = 3.0
SLACK_S = 12.0  # thread start-up, the pause request, gloo's own connect retries: well under the 180 s default


class _Engine(BaseHTTPRequestHandler):
    mode = "never_join"
    groups: list = []

    def log_message(self, *args):  # keep the test output clean
        pass

    def _answer(self, code: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])) or b"{}")
        if self.path == "/init_weights_update_group" and self.mode != "never_join":
            # joins as an SGLang engine does (rank_offset, the group's key layout)
            self.groups.append(W.new_broadcast_group(body["master_address"], body["master_port"], body["rank_offset"],
                                                     body["world_size"], body["group_name"], body["backend"],
                                                     timeout_s=BOUND_S * 4))
        if self.path == "/update_weights_from_distributed":
            if self.mode == "refuse":
                return self._answer(400, {"success": False, "message": "Failed to update parameter online: boom"})
            time.sleep(BOUND_S * 4)  # join_no_recv: never posts its side of the broadcast
        self._answer(200, {"success": True, "message": ""})


def _serve(mode: str, ports) -> None:
    """The stand-in engine, in a process of its own (a process group name is registered once per process)."""
    _Engine.mode = mode
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Engine)
    server.daemon_threads = True
    ports.put(server.server_address[1])
    server.serve_forever()


def _engine(mode: str):
    ctx = multiprocessing.get_context("spawn")
    ports = ctx.Queue()
    proc = ctx.Process(target=_serve, args=(mode, ports), daemon=True)
    proc.start()
    return proc, f"http://127.0.0.1:{ports.get(timeout=60)}"


@pytest.fixture
def engine(request):
    proc, url = _engine(request.param)
    yield url
    proc.kill()
    proc.join(10)


def _push(url: str):
    named = [("a", torch.ones(64)), ("b", torch.zeros(8, 8))]
    t0 = time.monotonic()
    with pytest.raises(WeightSyncStuck) as err:
        broadcast_weights([url], named, "1", master_address="127.0.0.1", master_port=free_port(), backend="gloo",
                          timeout_s=BOUND_S)
    return str(err.value), time.monotonic() - t0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ["never_join"], indirect=True)
def test_an_engine_that_never_joins_ends_the_sync_within_its_bound(engine):
    msg, took = _push(engine)
    assert BOUND_S <= took < BOUND_S + SLACK_S
    assert "joining the gloo group" in msg and "world 2" in msg
    assert f"{engine}: answered" in msg  # the engine said yes and never came: named with what it did
    assert "rollout.weight_sync_timeout_s=3" in msg


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ["join_no_recv"], indirect=True)
def test_an_engine_that_joins_but_never_receives_is_named_with_the_bucket(engine):
    msg, took = _push(engine)
    assert took < BOUND_S + SLACK_S
    assert "bucket 1, the last," in msg and "2 tensors from a" in msg and "load_format=flattened_bucket" in msg
    # the engine's request is still pending, or (gloo's own 3 s send timeout came first) timed out: named either way
    assert f"{engine}: pending" in msg or f"{engine}: failed: HTTPConnectionPool" in msg


@pytest.mark.timeout(60)
@pytest.mark.parametrize("engine", ["refuse"], indirect=True)
def test_an_engine_that_refuses_the_bucket_ends_the_sync_at_once(engine):
    msg, took = _push(engine)
    assert took < BOUND_S + SLACK_S
    assert "an engine's request failed" in msg and "boom" in msg


def test_mismatched_nccl_cumem_is_refused_before_anything_starts(monkeypatch):
    monkeypatch.delenv("NCCL_CUMEM_ENABLE", raising=False)
    with pytest.raises(WeightSyncStuck, match=r"NCCL_CUMEM_ENABLE=unset \(NCCL default 1\) here, 0 in the engines"):
        check_nccl_env({"NCCL_CUMEM_ENABLE": "0"})
    monkeypatch.setenv("NCCL_CUMEM_ENABLE", "0")
    check_nccl_env({"NCCL_CUMEM_ENABLE": "0"})  # agreeing ranks pass
    check_nccl_env({})  # an engine kind that says nothing constrains nothing


def test_the_plan_gives_every_gpu_actor_the_engines_nccl_settings():
    from rlrun.config import load
    from rlrun.config.plan import make_plan

    base = ["hardware=h100", "model=qwen3-0.6b", "checkpoint.random_init=true"]
    # a profile without the variable still gets SGLang's value (EngineKind.nccl_env) for trainer and engines
    assert make_plan(load(base + ["~hardware.env.NCCL_CUMEM_ENABLE"])).env["NCCL_CUMEM_ENABLE"] == "0"
    # the user's hardware.env wins (and reaches the engines too, which keep a value their env has)
    assert make_plan(load(base + ["hardware.env.NCCL_CUMEM_ENABLE=1"])).env["NCCL_CUMEM_ENABLE"] == "1"
    assert "NCCL_CUMEM_ENABLE" not in make_plan(load([])).env  # CPU: no NCCL


ASYNC = ["train.async_train=true", "train.colocate=false", "rollout.num_gpus=1"]


@pytest.mark.parametrize("overrides, flush", [([], True), (ASYNC, False), (ASYNC + ["rollout.partial_rollout=true"], True)])
def test_a_push_flushes_the_prefix_cache_only_when_no_request_can_be_running(overrides, flush):
    """The async loop pushes while requests are paused in place: SGLang 0.5.16 flushes only an idle engine and its
    scheduler dies on the failed flush ("Cache flush failed after updating weights", seen on two H200s 2026-11-28;
    again in the sync loop at rollout 34 of 60, when the engine was still finishing the rollout's last batch). So the
    update never asks SGLang to flush; push_all drains the engines first (waits until idle, flushed) where the loop
    allows it: the sync loop, and the async loop with partial_rollout (its requests are aborted first)."""
    from contextlib import nullcontext
    from rlrun.config import load
    from rlrun.config.kinds import ENGINES, TRANSPORTS
    from rlrun.config.plan import make_plan
    from rlrun.parts.weight_sync import WeightSync

    cfg = load(overrides)
    sync = object.__new__(WeightSync)  # push_args reads only the config, the plan, the engine kind and the transport
    sync.cfg, sync.plan, sync.kind, sync.engine_dtype = cfg, make_plan(cfg), ENGINES[cfg.rollout.engine], None
    sync.transport = TRANSPORTS[sync.plan.weight_sync]
    assert sync.push_args(3)["flush_cache"] is False

    calls = []

    class Engines:
        def abort_all(self):
            calls.append("abort")

        def sync(self, push):  # EngineGroup.sync: push(urls of the live engines)
            push(["http://e0"])

    sync.engines, sync.versions = Engines(), type("V", (), {"pushing": lambda self, v: nullcontext()})()
    sync.push = lambda version, urls, want, resume, drain: calls.append(("push", urls, drain))
    sync.push_all(3)
    # drain=True: WeightSync.push waits on EngineGroup.drain(urls) before pushing (tests/unit/test_engine_drain.py)
    assert calls == ["abort"] * cfg.rollout.partial_rollout + [("push", ["http://e0"], flush)]
