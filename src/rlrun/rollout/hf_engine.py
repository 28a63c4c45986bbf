"""The hf rollout engine: a transformers causal LM behind SGLang's native HTTP API.

HFEngine owns the model and a scheduler thread that runs continuous batching
(generation.RunningBatch): waiting requests join the running batch between decode steps and rows
leave it as they finish. Weight updates take the same lock as a forward step, so they land between
decode steps. The HTTP layer
(hf_server.py) only translates JSON to these methods.

Run standalone:  python -m rlrun.rollout.hf_engine --model-dir DIR --port 0
In Ray:          hf_engine_actor_class() -> ray.remote(HFEngineActor)
"""
from __future__ import annotations

import argparse
import threading
import time
import uuid
from concurrent.futures import Future
from pathlib import Path

import torch

from rlrun.rollout import weights as W
from rlrun.rollout.api import (DEFAULT_WEIGHT_VERSION, MEMORY_TAGS, GenerateItem, GenerateResult,
                               RequestError)
from rlrun.rollout.generation import RunningBatch, Sequence, StopChecker
from rlrun.rollout.routing import RoutingCapture, moe_routers


class HFEngine:
    def __init__(self, model, tokenizer, *, model_path: str | None = None, seed: int = 0,
                 max_batch_size: int = 64, batch_wait_s: float = 0.005,
                 weight_version: str = DEFAULT_WEIGHT_VERSION):
        self.model = model.eval()
        self.tokenizer = tokenizer
        self.model_path = model_path
        self.weight_version = weight_version
        self.max_batch_size = max_batch_size
        self.batch_wait_s = batch_wait_s
        self.released: set[str] = set()
        self._home_device: torch.device | None = None  # where released weights return to
        self.num_requests = 0  # requests accepted (served via /server_info; tests check routing)
        cfg = model.config
        self.vocab_size = cfg.vocab_size
        eos = cfg.eos_token_id if cfg.eos_token_id is not None else tokenizer.eos_token_id
        eos_ids = set(eos if isinstance(eos, list) else ([eos] if eos is not None else []))
        self.stop = StopChecker(tokenizer, eos_ids, cfg.max_position_embeddings)
        self.pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else 0
        self._seeds = torch.Generator().manual_seed(seed)  # per-request seeds when none is given
        self._weights_lock = threading.RLock()
        self._cv = threading.Condition()
        self._queue: list[tuple[Sequence, Future]] = []
        # return_routed_experts (rollout routing replay): hooks on the MoE routers, idle unless a request asks
        self._capture = RoutingCapture(model) if moe_routers(model) else None
        self._batch = RunningBatch(model, self.stop, self.pad_id, self._run_step, capture=self._capture)
        self._futures: dict[int, Future] = {}  # id(seq) -> its HTTP handler's future
        self._running: dict[str, Sequence] = {}  # rid -> sequence in the batch
        self._abort_rids: set[str] = set()
        self._pause_mode: str | None = None
        self._stopping = False
        self._groups: dict[str, object] = {}
        self._thread = threading.Thread(target=self._loop, name="hf-engine-scheduler", daemon=True)
        self._thread.start()

    @property
    def device(self) -> torch.device:
        # read each time: a caller (e.g. a Ray actor placed on a GPU) may move the model after init
        return next(self.model.parameters()).device

    @classmethod
    def from_dir(cls, model_dir: str | Path, *, device: str = "cpu", dtype: str = "float32",
                 **kwargs) -> "HFEngine":
        """device: "cpu" or "cuda[:i]" (in a Ray actor, "cuda" is the actor's GPU); dtype: float32 on
        CPU, bfloat16 on GPU (what SGLang serves)."""
        from transformers import AutoModelForCausalLM, AutoTokenizer

        model = AutoModelForCausalLM.from_pretrained(str(model_dir), dtype=W.dtype_from_name(dtype))
        tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
        return cls(model.to(device), tokenizer, model_path=str(model_dir), **kwargs)

    # ------------------------------------------------------------------ generation
    def new_rid(self) -> str:
        return uuid.uuid4().hex

    def submit(self, items: list[GenerateItem]) -> list[Future]:
        if self.released & self._GENERATION_NEEDS:
            raise RequestError(f"memory {sorted(self.released)} is released (the engine's GPU memory is lent to "
                               f"training); call /resume_memory_occupation before /generate")
        futures = []
        with self._cv:
            self.num_requests += len(items)
            for item in items:
                ids = item.input_ids if item.input_ids is not None else self.tokenizer(item.text)["input_ids"]
                if not ids:
                    raise RequestError(f"request {item.rid}: the prompt is empty")
                bad = [t for t in ids if not 0 <= t < self.vocab_size]
                if bad:
                    raise RequestError(f"request {item.rid}: input_ids {bad[:5]} outside the vocabulary "
                                       f"[0, {self.vocab_size})")
                if item.return_routed_experts and self._capture is None:
                    raise RequestError(f"request {item.rid}: return_routed_experts=true, but the model "
                                       f"({type(self.model).__name__}) has no MoE layers")
                if item.routed_experts_start_len > len(ids):
                    raise RequestError(f"request {item.rid}: routed_experts_start_len={item.routed_experts_start_len} "
                                       f"is higher than the number of input tokens {len(ids)}")
                seed = item.sampling.sampling_seed
                if seed is None:
                    seed = int(torch.randint(0, 2**62, (1,), generator=self._seeds))
                generator = torch.Generator(device=self.device).manual_seed(seed)
                bad = [t for t in item.token_ids_logprob or () if not 0 <= t < self.vocab_size]
                if bad:
                    raise RequestError(f"request {item.rid}: token_ids_logprob {bad[:5]} outside the vocabulary "
                                       f"[0, {self.vocab_size})")
                seq = Sequence(item.rid, list(ids), item.sampling, generator,
                               return_logprob=item.return_logprob, return_routed_experts=item.return_routed_experts,
                               routed_start=item.routed_experts_start_len,
                               token_ids=item.token_ids_logprob if item.return_logprob else None)
                fut: Future = Future()
                self._queue.append((seq, fut))
                futures.append(fut)
            self._cv.notify_all()
        return futures

    def _result(self, seq: Sequence) -> GenerateResult:
        return GenerateResult(rid=seq.rid, text=self.stop.output_text(seq), output_ids=seq.output_ids,
                              prompt_tokens=len(seq.prompt_ids), finish=seq.finish,
                              logprobs=seq.logprobs if seq.return_logprob else None,
                              weight_version=self.weight_version,
                              routed_experts=_base64_int32(seq.routed_experts()) if seq.return_routed_experts else None,
                              token_ids=seq.token_ids,
                              token_ids_logprobs=seq.token_ids_logprobs if seq.token_ids is not None else None)

    def _between_steps(self, active: list[Sequence]) -> None:
        with self._cv:
            while self._pause_mode == "in_place" and not self._stopping:
                self._cv.wait()  # weight updates run now; requests continue afterwards
            for seq in active:
                if seq.rid in self._abort_rids or self._pause_mode in ("abort", "retract") or self._stopping:
                    seq.abort("Aborted by /abort_request or /pause_generation")

    def _run_step(self, fn):
        with self._weights_lock:
            return fn()

    def _next_admissions(self) -> list[Sequence] | None:
        """Blocks until there is work; returns the queued requests that fit into the running batch
        (none while paused), or None when the engine stops."""
        with self._cv:
            while not self._stopping and not len(self._batch) and (not self._queue or self._holding()):
                self._cv.wait()
            if self._stopping:
                return None
            idle = not len(self._batch)
        if idle:
            time.sleep(self.batch_wait_s)  # let a rollout's burst of requests share one prefill
        with self._cv:
            if self._holding():
                return []
            free = self.max_batch_size - len(self._batch)
            taken, self._queue = self._queue[:free], self._queue[free:]
            for seq, fut in taken:
                self._futures[id(seq)] = fut
                self._running[seq.rid] = seq
            return [seq for seq, _ in taken]

    def _resolve(self, seqs: list[Sequence], exc: Exception | None = None) -> None:
        with self._cv:
            for seq in seqs:
                fut = self._futures.pop(id(seq))
                self._running.pop(seq.rid, None)
                self._abort_rids.discard(seq.rid)
                if exc is None:
                    fut.set_result(self._result(seq))
                else:
                    fut.set_exception(exc)

    def _loop(self) -> None:
        """Continuous batching: admit waiting requests, apply aborts/pauses, drop finished rows,
        decode one step; repeat."""
        while True:
            new = self._next_admissions()
            if new is None:
                break
            try:
                if new:
                    self._resolve(self._batch.admit(new))  # max_new_tokens=0 finishes at once
                self._between_steps(self._batch.seqs)
                self._resolve(self._batch.drop_finished())
                if len(self._batch):
                    self._batch.step()
            except Exception as exc:  # a failed step fails the requests in flight, never the scheduler
                self._batch.fail()
                self._resolve_in_flight(exc)
        for seq in self._batch.fail():  # stopping: answer every request still in flight
            seq.abort("engine shutting down")
        self._resolve_in_flight()
        self.abort(abort_all=True)  # and the queued ones

    def _resolve_in_flight(self, exc: Exception | None = None) -> None:
        with self._cv:
            in_flight = [seq for seq in self._running.values() if id(seq) in self._futures]
        self._resolve(in_flight, exc)

    def abort(self, rid: str | None = None, abort_all: bool = False) -> None:
        with self._cv:
            keep = []
            for seq, fut in self._queue:
                if abort_all or seq.rid == rid:
                    seq.abort("Aborted by /abort_request")
                    fut.set_result(self._result(seq))
                else:
                    keep.append((seq, fut))
            self._queue = keep
            self._abort_rids |= set(self._running) if abort_all else ({rid} & set(self._running))

    def pause(self, mode: str) -> None:
        with self._cv:
            self._pause_mode = mode
        if mode in ("abort", "retract"):
            self.abort(abort_all=True)

    def resume(self) -> None:
        with self._cv:
            self._pause_mode = None
            self._cv.notify_all()

    def load(self) -> dict:
        """SGLang's GetLoadReqOutput for this one scheduler (dp_rank 0)."""
        with self._cv:
            running = list(self._running.values())
            return {"dp_rank": 0, "num_reqs": len(running), "num_waiting_reqs": len(self._queue),
                    "num_tokens": sum(len(s.prompt_ids) + len(s.output_ids) for s in running),
                    "ts_tic": time.time()}

    def busy(self) -> bool:
        with self._cv:
            return bool(self._running or self._queue)

    def shutdown(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        self._thread.join(timeout=10)

    # ------------------------------------------------------------------ weights
    def _set_version(self, version: str | None) -> None:
        if version is not None:
            self.weight_version = str(version)

    def load_named(self, named, version: str | None) -> int:
        with self._weights_lock:
            count = W.load_into(self.model, named)
            self._set_version(version)
        return count

    def update_from_disk(self, model_path: str, version: str | None) -> int:
        count = self.load_named(W.load_hf_dir(model_path), version)
        self.model_path = model_path
        return count

    def update_from_tensor(self, payloads: list[str], load_format: str | None, version: str | None) -> int:
        # SGLang sends one payload per TP rank; the hf engine is one rank: all must agree, use [0].
        if len(payloads) != 1:
            raise RequestError(f"serialized_named_tensors has {len(payloads)} entries; the hf engine "
                               f"has tp_size 1 and expects exactly 1")
        return self.load_named(W.deserialize_named_tensors(payloads[0], load_format), version)

    def init_group(self, master_address: str, master_port: int, rank_offset: int, world_size: int,
                   group_name: str, backend: str) -> None:
        # One process = one rank of the weight-sync group (SGLang: rank_offset + tp_rank).
        self._groups[group_name] = W.new_broadcast_group(master_address, master_port, rank_offset,
                                                         world_size, group_name, backend)

    def update_from_distributed(self, names, dtypes, shapes, group_name: str, version: str | None,
                                load_format: str | None = None) -> int:
        if group_name not in self._groups:
            raise RequestError(f"weight update group {group_name!r} does not exist; call "
                               f"/init_weights_update_group first (known: {sorted(self._groups)})")
        if load_format not in (None, W.FLATTENED_BUCKET):
            raise RequestError(f"load_format={load_format!r} is not supported by /update_weights_from_distributed "
                               f"(None: one broadcast per tensor, {W.FLATTENED_BUCKET!r}: one per bucket)")
        # Receive on the GPU even while the weights are released to host memory (NCCL needs device
        # buffers); load_named then copies into wherever the parameters are.
        device = self._home_device or self.device
        torch_dtypes = [W.dtype_from_name(dt) for dt in dtypes]
        if load_format == W.FLATTENED_BUCKET:
            flat = torch.empty(sum(W.tensor_bytes(torch_dtypes, shapes)), dtype=torch.uint8, device=device)
            W.broadcast_tensors(self._groups[group_name], [flat])
            tensors = W.unflatten_bucket(flat, torch_dtypes, shapes)
        else:
            tensors = [torch.empty(shape, dtype=dt, device=device) for dt, shape in zip(torch_dtypes, shapes)]
            W.broadcast_tensors(self._groups[group_name], tensors)
        return self.load_named(list(zip(names, tensors)), version)

    def destroy_group(self, group_name: str) -> None:
        group = self._groups.pop(group_name, None)
        if group is None:
            raise RequestError(f"weight update group {group_name!r} does not exist")
        W.destroy_broadcast_group(group)

    CHECKSUM_KINDS = ("sha256", "fingerprint")

    def checksum(self, kind: str = "sha256") -> str:
        """sha256 of every byte (host side), or the fingerprint (W.Fingerprint, computed on the
        device the weights are on) that the runner compares after every weight sync."""
        if kind not in self.CHECKSUM_KINDS:
            raise RequestError(f"checksum kind {kind!r} unknown; use one of {list(self.CHECKSUM_KINDS)}")
        with self._weights_lock:
            return (W.checksum if kind == "sha256" else W.fingerprint)(self.model.state_dict())

    @property
    def dtype(self) -> str:
        """The dtype the engine holds weights in (a sender fingerprints in it)."""
        return W.dtype_name(next(self.model.parameters()).dtype)

    def weights_by_name(self, name: str, truncate_size: int) -> list:
        state = self.model.state_dict()
        if name not in state:
            raise RequestError(f"no parameter named {name!r}")
        return state[name].detach().flatten()[:truncate_size].tolist()

    # ------------------------------------------------------------------ colocated memory
    # SGLang's /release_memory_occupation frees the GPU memory of the tagged kinds so that a
    # colocated trainer can use it (tags None or [] = all; the server must be idle), and
    # /resume_memory_occupation brings them back. Here:
    #   weights    the parameters and buffers move to host memory (an exact copy; weight updates
    #              and checksums keep working on it) and back to their device on resume;
    #   kv_cache   the hf engine keeps KV only for running requests, so an idle engine holds none:
    #              releasing it returns the allocator's cached blocks to the device;
    #   cuda_graph nothing is captured; accepted for the same request bodies as SGLang.
    # While weights or kv_cache are released no request is admitted and /generate is refused.
    _GENERATION_NEEDS = frozenset({"weights", "kv_cache"})

    def release(self, tags: list[str] | None) -> None:
        tags = set(tags or MEMORY_TAGS)
        with self._cv:
            if self._running:
                raise RequestError(f"release_memory_occupation needs an idle engine, {len(self._running)} requests "
                                   "are running: call /pause_generation (mode abort or retract) or wait for them")
            self.released |= tags  # from here on the scheduler admits nothing (_holding)
        with self._weights_lock:  # no forward is in flight (none is running, none can start)
            if "weights" in tags and self._home_device is None:
                self._home_device = self.device
                self.model.to("cpu")  # on the CPU a no-op: the same tensors stay in place
        _free_device_cache(self._home_device or self.device)

    def resume_memory(self, tags: list[str] | None) -> None:
        tags = set(tags or MEMORY_TAGS)
        with self._weights_lock:
            if "weights" in tags and self._home_device is not None:
                self.model.to(self._home_device)
                self._home_device = None
        with self._cv:
            self.released -= tags
            self._cv.notify_all()  # queued requests may be admitted again

    def _holding(self) -> bool:
        """True while generation must wait: paused, or memory it needs is released."""
        return self._pause_mode is not None or bool(self.released & self._GENERATION_NEEDS)

    def memory_allocated(self) -> int:
        """Bytes the CUDA caching allocator holds for tensors on the engine's device (0 on the CPU)."""
        device = self._home_device or self.device
        return torch.cuda.memory_allocated(device) if device.type == "cuda" else 0


def _base64_int32(ids: torch.Tensor) -> str:
    """SGLang's wire form of routed experts: base64 of the int32 bytes, little-endian (its detokenizer's
    pybase64.b64encode(tensor.numpy().tobytes()))."""
    import base64

    data = ids.to(torch.int32).contiguous().numpy()
    return base64.b64encode(data.astype("<i4", copy=False).tobytes()).decode("ascii")


def _free_device_cache(device: torch.device) -> None:
    """Give the caching allocator's unused blocks back to the device (what a colocated trainer
    needs: memory the engine freed but still caches is invisible to another process)."""
    if device.type == "cuda":
        import gc

        gc.collect()  # drop Python references to freed KV tensors before emptying the cache
        torch.cuda.empty_cache()


class HFEngineActor:
    """Ray actor body: builds the engine and serves it on a free port of the actor's node."""

    def __init__(self, model_dir: str, *, seed: int = 0, host: str = "127.0.0.1", port: int = 0,
                 weight_version: str = DEFAULT_WEIGHT_VERSION, max_batch_size: int = 64,
                 device: str = "cpu", dtype: str = "float32"):
        from rlrun.rollout.hf_server import ThreadedServer

        self.engine = HFEngine.from_dir(model_dir, seed=seed, weight_version=weight_version,
                                        max_batch_size=max_batch_size, device=device, dtype=dtype)
        self.server = ThreadedServer(self.engine, host, port)

    def start(self) -> str:
        return self.server.start()

    def url(self) -> str:
        return self.server.url

    def checksum(self, kind: str = "sha256") -> str:
        return self.engine.checksum(kind)

    def shutdown(self) -> None:
        self.server.stop()
        self.engine.shutdown()


def hf_engine_actor_class():
    import ray

    return ray.remote(HFEngineActor)


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m rlrun.rollout.hf_engine",
                                description="Serve a transformers causal LM with the rollout HTTP API (rlrun.rollout.api).")
    p.add_argument("--model-dir", required=True, help="HF model dir (config.json, safetensors, tokenizer)")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=0, help="0 = a free port (printed as 'READY <url>')")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--weight-version", default=DEFAULT_WEIGHT_VERSION)
    p.add_argument("--max-batch-size", type=int, default=64)
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0 = torch default)")
    p.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    p.add_argument("--dtype", default="float32", help="float32 | bfloat16 | float16")
    args = p.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    from rlrun.rollout.hf_server import serve_forever

    engine = HFEngine.from_dir(args.model_dir, seed=args.seed, weight_version=args.weight_version,
                               max_batch_size=args.max_batch_size, device=args.device, dtype=args.dtype)
    serve_forever(engine, args.host, args.port)


if __name__ == "__main__":
    main()
