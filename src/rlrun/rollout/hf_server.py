"""HTTP layer of the hf engine: SGLang's native endpoints on starlette + uvicorn.

Status codes and bodies follow sglang/srt/entrypoints/http_server.py (0.5.10.post1): weight
endpoints answer {"success", "message"} with 200/400, /generate answers the SGLang output dict
(a list for batch requests), bad requests answer 400 {"error": {"message"}}.
POST /pull_weights is slime's SGLang patch's endpoint (docker/patch/latest/sglang-pull_weights.patch at slime 624b824,
the same body; rollout.weight_sync=delta). rlrun extension (not in SGLang): GET /rlrun/weights_checksum[?kind=sha256|fingerprint], used by
tests and the runner to prove an engine holds exactly the trainer's weights (answers the checksum,
its kind, the engine's weight dtype and weight_version).
"""
from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rlrun.rollout import api
from rlrun.rollout.delta import pull as pull_weights
from rlrun.rollout.api import RequestError


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": {"message": message}}, status_code=status)


async def _body(request: Request) -> dict:
    raw = await request.body()
    if not raw:
        return {}
    try:
        body = await request.json()
    except ValueError as exc:
        raise RequestError(f"body is not JSON ({exc})") from exc
    if not isinstance(body, dict):
        raise RequestError(f"body must be a JSON object, got {type(body).__name__}")
    return body


def _checked(handler):
    """A malformed request is the caller's error: 400 naming the endpoint and field, never a 500."""
    async def wrapped(request: Request):
        try:
            return await handler(request)
        except KeyError as exc:
            return _error(400, f"{request.url.path}: missing field {exc}")
        except (RequestError, TypeError, ValueError) as exc:
            return _error(400, f"{request.url.path}: {exc}")
    return wrapped


def build_app(engine) -> Starlette:
    def weight_op(fn):
        """SGLang's weight endpoints: {"success", "message"}; failures are 400, never 500."""
        async def handler(request: Request):
            try:
                body = await _body(request)
                message = await asyncio.to_thread(fn, body)
            except Exception as exc:  # noqa: BLE001 - reported to the caller, like SGLang does
                return JSONResponse({"success": False, "message": f"{type(exc).__name__}: {exc}"},
                                    status_code=400)
            return JSONResponse({"success": True, "message": message})
        return handler

    async def generate(request: Request):
        items, is_batch = api.parse_generate_request(await _body(request), engine.new_rid)
        futures = engine.submit(items)
        waiting = [asyncio.wrap_future(f) for f in futures]
        try:
            while not all(w.done() for w in waiting):
                await asyncio.wait(waiting, timeout=0.5)
                if await request.is_disconnected():  # as SGLang: a client that left aborts its work
                    for item in items:
                        engine.abort(rid=item.rid)
            results = [w.result() for w in waiting]
        except Exception as exc:  # noqa: BLE001
            return _error(500, f"generation failed: {type(exc).__name__}: {exc}")
        out = [r.to_json() for r in results]
        return JSONResponse(out if is_batch else out[0])

    async def health(request: Request):
        return Response(status_code=200)

    async def health_generate(request: Request):
        # Like SGLang: a busy engine is healthy (it is making progress); an idle one must generate.
        if engine.busy():
            return Response(status_code=200)
        item = api.GenerateItem(rid=f"HEALTH_CHECK_{time.time()}", input_ids=[0], text=None,
                                sampling=api.parse_sampling_params({"max_new_tokens": 1, "temperature": 0.0}),
                                return_logprob=False)
        try:
            await asyncio.wait_for(asyncio.wrap_future(engine.submit([item])[0]), timeout=20)
        except Exception:  # noqa: BLE001
            return Response(status_code=503)
        return Response(status_code=200)

    async def model_info(request: Request):
        cfg = engine.model.config
        return JSONResponse({
            "model_path": engine.model_path, "tokenizer_path": engine.model_path, "is_generation": True,
            "preferred_sampling_params": None, "weight_version": engine.weight_version,
            "has_image_understanding": False, "has_audio_understanding": False,
            "model_type": cfg.model_type, "architectures": cfg.architectures,
        })

    async def server_info(request: Request):
        return JSONResponse({"model_path": engine.model_path, "weight_version": engine.weight_version,
                             "tp_size": 1, "engine": "rlrun-hf", "max_batch_size": engine.max_batch_size,
                             "num_requests": engine.num_requests,
                             "released_memory": sorted(engine.released), "weight_dtype": engine.dtype,
                             "memory_allocated_bytes": engine.memory_allocated()})

    async def get_load(request: Request):
        return JSONResponse([engine.load()])  # one entry per data-parallel scheduler, as SGLang

    async def weight_version(request: Request):
        # Removed in SGLang 0.5.10 (404 there, use /model_info); kept here for older clients.
        return JSONResponse({"weight_version": engine.weight_version})

    async def flush_cache(request: Request):
        # no prefix cache to flush; SGLang's answer otherwise: 400 while a request runs or waits (it flushes only an
        # idle engine), which EngineGroup.drain waits on
        if engine.busy():
            return Response("Cache not flushed: requests are running or waiting.\n", status_code=400)
        return Response("Cache flushed.\n", status_code=200)

    async def abort_request(request: Request):
        body = await _body(request)
        engine.abort(rid=body.get("rid"), abort_all=bool(body.get("abort_all", False)))
        return Response(status_code=200)

    async def pause_generation(request: Request):
        engine.pause(api.pause_generation_body((await _body(request)).get("mode", "abort"))["mode"])
        return JSONResponse({"message": "Generation paused successfully.", "status": "ok"})

    async def continue_generation(request: Request):
        engine.resume()
        return JSONResponse({"message": "Generation continued successfully.", "status": "ok"})

    async def update_weight_version(request: Request):
        body = await _body(request)
        if body.get("abort_all_requests", True):
            engine.abort(abort_all=True)
        engine.weight_version = str(body["new_version"])
        return JSONResponse({"success": True, "message": f"Weight version updated to {body['new_version']}",
                             "new_version": engine.weight_version})

    async def weights_by_name(request: Request):
        body = await _body(request)
        return JSONResponse(engine.weights_by_name(body["name"], int(body.get("truncate_size", 100))))

    async def checksum(request: Request):
        kind = request.query_params.get("kind", "sha256")
        value = await asyncio.to_thread(engine.checksum, kind)
        return JSONResponse({"checksum": value, "kind": kind, "dtype": engine.dtype,
                             "weight_version": engine.weight_version})

    def memory(fn):
        async def handler(request: Request):
            tags = api.memory_occupation_body((await _body(request)).get("tags"))["tags"]
            await asyncio.to_thread(fn, tags)  # moving weights to/from the host takes a while
            return Response(status_code=200)
        return handler

    def disk(b):
        n = engine.update_from_disk(b["model_path"], b.get("weight_version"))
        return f"Succeeded to update model weights ({n} tensors)."

    def pull(b):
        # the delta transport's engine end (slime's /pull_weights body): this host's local checkpoint brought to
        # target_version of the stream under source_dir (rlrun.rollout.delta.pull); /update_weights_from_disk loads it
        n = pull_weights(b["local_checkpoint_dir"], b["source_dir"], int(b["target_version"]),
                         base_dir=engine.model_path)
        return f"Pulled weight version {int(b['target_version'])} ({n} versions applied)."

    def tensor(b):
        n = engine.update_from_tensor(b["serialized_named_tensors"], b.get("load_format"), b.get("weight_version"))
        return f"Succeeded to update model weights ({n} tensors)."

    def init_group(b):
        engine.init_group(b["master_address"], int(b["master_port"]), int(b["rank_offset"]),
                          int(b["world_size"]), b.get("group_name", "weight_update_group"),
                          b.get("backend", "nccl"))
        return "Succeeded to initialize custom process group."

    def distributed(b):
        n = engine.update_from_distributed(b["names"], b["dtypes"], b["shapes"],
                                           b.get("group_name", "weight_update_group"), b.get("weight_version"),
                                           b.get("load_format"))
        return f"Succeeded to update parameter online ({n} tensors)."

    def destroy_group(b):
        engine.destroy_group(b.get("group_name", "weight_update_group"))
        return "Succeeded to destroy custom process group."

    async def no_profiler(request: Request):
        return _error(501, f"{request.url.path}: the hf engine has no profiler")

    both = ["GET", "POST"]
    routes = [
        Route("/generate", generate, methods=["POST", "PUT"]),
        Route("/health", health), Route("/health_generate", health_generate),
        Route("/get_model_info", model_info), Route("/model_info", model_info),
        Route("/get_server_info", server_info), Route("/server_info", server_info),
        Route("/get_load", get_load),
        Route("/get_weight_version", weight_version), Route("/weight_version", weight_version),
        Route("/flush_cache", flush_cache, methods=both),
        Route("/abort_request", abort_request, methods=["POST"]),
        Route("/pause_generation", pause_generation, methods=["POST"]),
        Route("/continue_generation", continue_generation, methods=["POST"]),
        Route("/update_weight_version", update_weight_version, methods=["POST"]),
        Route("/get_weights_by_name", weights_by_name, methods=both),
        Route("/release_memory_occupation", memory(engine.release), methods=both),
        Route("/resume_memory_occupation", memory(engine.resume_memory), methods=both),
        Route("/update_weights_from_disk", weight_op(disk), methods=["POST"]),
        Route("/pull_weights", weight_op(pull), methods=["POST"]),
        Route("/update_weights_from_tensor", weight_op(tensor), methods=["POST"]),
        Route("/init_weights_update_group", weight_op(init_group), methods=["POST"]),
        Route("/update_weights_from_distributed", weight_op(distributed), methods=["POST"]),
        Route("/destroy_weights_update_group", weight_op(destroy_group), methods=["POST"]),
        Route("/rlrun/weights_checksum", checksum),
        Route("/start_profile", no_profiler, methods=["POST"]), Route("/stop_profile", no_profiler, methods=["POST"]),
    ]
    return Starlette(routes=[Route(r.path, _checked(r.endpoint), methods=r.methods) for r in routes])


def _bind(host: str, port: int) -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))  # port 0: the kernel picks a free one, with no race against others
    sock.set_inheritable(True)
    return sock


def _server(engine, sock: socket.socket) -> uvicorn.Server:
    config = uvicorn.Config(build_app(engine), log_level="warning", access_log=False,
                            timeout_keep_alive=30, limit_concurrency=None)
    return uvicorn.Server(config)


class ThreadedServer:
    """uvicorn in a background thread (inside a Ray actor or a test)."""

    def __init__(self, engine, host: str = "127.0.0.1", port: int = 0):
        self.sock = _bind(host, port)
        self.url = f"http://{host}:{self.sock.getsockname()[1]}"
        self.server = _server(engine, self.sock)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [self.sock]},
                                       name="hf-engine-http", daemon=True)

    def start(self, timeout_s: float = 30.0) -> str:
        self.thread.start()
        deadline = time.monotonic() + timeout_s
        while not self.server.started:
            if time.monotonic() > deadline or not self.thread.is_alive():
                raise RuntimeError(f"hf engine HTTP server at {self.url} did not start in {timeout_s}s")
            time.sleep(0.02)
        return self.url

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(timeout=10)
        self.sock.close()


def serve_forever(engine, host: str, port: int) -> None:
    """Standalone process: prints 'READY <url>' once listening (launchers wait for that line)."""
    sock = _bind(host, port)
    server = _server(engine, sock)
    url = f"http://{host}:{sock.getsockname()[1]}"

    async def announce():
        while not server.started:
            await asyncio.sleep(0.02)
        print(f"READY {url}", flush=True)

    async def run():
        await asyncio.gather(server.serve(sockets=[sock]), announce())

    try:
        asyncio.run(run())
    finally:
        engine.shutdown()
        sys.stdout.flush()
