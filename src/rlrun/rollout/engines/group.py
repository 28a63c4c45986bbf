"""The fleet: a group of rollout engines behind one router: registration, fleet-wide control, weight pushes
from the trainer's memory, fault tolerance.

An engine is a RolloutEngine (rlrun.rollout.engines.protocol): HFEngineProcess below (a local
subprocess), or an engine kind's adapter around its Ray actor(s) (rlrun.rollout.engines.<kind>.engine).
The group calls each engine's control plane; it compares no kind.
An engine that dies and is restarted from the base checkpoint is brought to the current weights
before the router sends it traffic again:

    dead (process gone, or its kind's probe_path failing `failure_threshold` times in a row)
      -> DELETE it from the router -> restart(i) (a callable from the runner) -> push current
         weights -> POST /workers -> back in rotation
"Push current weights" is the group's `resync(url)` callback when the runner set one (the trainer
pushes them: with the tensor and distributed transports nobody else holds them), else a replay
of the latest state or disk path the group pushed itself. While restarts are deferred
(defer_restarts: the trainer is changing the weights) a restarted engine stays out of the
router with no push; the next sync() includes it and only then admits it.
Requests that were running on the dead engine fail at the client, which retries them through the
router on the remaining engines, so the rollout step completes with every sample.
"""
from __future__ import annotations

import os
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator, Protocol

import requests

from rlrun.config import engine_health as H
from rlrun.rollout import api
from rlrun.rollout import weights as W
from rlrun.rollout.engines.http import HTTPEngine, post as _post, profile as _profile  # noqa: F401 - public
from rlrun.rollout.process import ServerProcess
from rlrun.rollout.routers.protocol import RolloutRouter, build_router

DRAIN_POLL_S = 0.05  # EngineGroup.drain: the interval between /flush_cache tries


class HFEngineProcess(HTTPEngine):
    """`python -m rlrun.rollout.hf_engine` as a child process on this machine. It binds port 0 and
    logs 'READY <url>' (no race for a port picked here and bound later); `url` is known after
    wait_healthy()."""

    def __init__(self, model_dir: str | Path, *, seed: int = 0, log_dir: str | Path = "/tmp/rlrun-engines",
                 host: str = "127.0.0.1", threads: int = 1, max_batch_size: int = 64,
                 device: str = "cpu", dtype: str = "float32", env: dict[str, str] | None = None):
        self.url = ""  # known after wait_healthy()
        argv = [sys.executable, "-m", "rlrun.rollout.hf_engine", "--model-dir", str(model_dir),
                "--host", host, "--port", "0", "--seed", str(seed), "--threads", str(threads),
                "--max-batch-size", str(max_batch_size), "--device", device, "--dtype", dtype]
        self.process = ServerProcess(f"hf engine (seed {seed})", argv, Path(log_dir) / f"hf-engine-seed{seed}.log",
                                     env={**os.environ, **env} if env else None)

    def start(self) -> "HFEngineProcess":
        """Returns at once; wait_healthy() waits (start several, then wait: startups overlap)."""
        self.process.start()
        return self

    def wait_healthy(self, timeout_s: float = 120.0) -> "HFEngineProcess":
        t0 = time.monotonic()
        self.url = self.process.wait_line("READY ", timeout_s)
        self.process.name = f"hf engine {self.url}"
        self.process.wait_healthy(f"{self.url}/health", max(1.0, timeout_s - (time.monotonic() - t0)))
        return self

    def alive(self) -> bool:
        return self.process.alive()

    def kill(self) -> None:
        self.process.kill()

    def stop(self) -> None:
        self.process.stop()


def _nbytes(bucket: list) -> int:
    return sum(t.numel() * t.element_size() for _, t in bucket)


@contextmanager
def _executor(pool: ThreadPoolExecutor | None, n: int) -> Iterator[ThreadPoolExecutor]:
    """The caller's pool, or a fresh one that is shut down without waiting on errors (a post may be
    blocked in a broadcast that will never come)."""
    if pool is not None:
        yield pool
        return
    own = ThreadPoolExecutor(max_workers=max(1, n))
    try:
        yield own
    finally:
        own.shutdown(wait=False)


class Phases:
    """Seconds per phase of one push, added into the caller's dict (None: not kept): `with phases("wait"): ...`.
    push_tensors' phases: pause and resume (the engines' /pause_generation and /continue_generation), stage (the
    buckets made, prepared and serialized on this rank), exchange (a gathered push's collectives), wait (the engines'
    loading that staging did not hide) and load (each bucket's request to the engines, posted to answered, the
    slowest engine's: the engines' whole load, hidden by staging or not; load >> wait means staging hides it)."""

    def __init__(self, into: dict[str, float] | None):
        self.into = into

    def add(self, name: str, seconds: float) -> None:
        if self.into is not None:
            self.into[name] = self.into.get(name, 0.0) + seconds

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.add(name, time.perf_counter() - t0)

    def timed(self, name: str, items: Iterator) -> Iterator:
        """items, each next() counted in phase `name` (a streamed bucket is made when it is asked for)."""
        while True:
            with self(name):
                item = next(items, _END)
            if item is _END:
                return
            yield item


_END = object()


@contextmanager
def _paused(urls: list[str], pool: ThreadPoolExecutor, resume: bool = True,
            timeout_s: float = 600.0, phases: Phases | None = None) -> Iterator[None]:
    """pause_generation(in_place) -> body -> continue_generation on every engine: running requests
    wait between decode steps while the weights change and then go on (none is lost); a push that fails leaves
    them paused (half-replaced weights must not generate; the caller stops the run or pushes again).
    resume=False leaves them paused: the caller continues them once their KV cache is back (a
    request scheduled into released KV memory crashes SGLang 0.5.16's scheduler)."""
    phases = phases or Phases(None)
    body = api.pause_generation_body("in_place")
    with phases("pause"):
        list(pool.map(lambda url: _post(url, "/pause_generation", body, timeout_s), urls))
    yield
    # only after a complete push: engines whose weights are half replaced (a failed push) must not generate
    if resume:
        with phases("resume"):
            list(pool.map(lambda url: _post(url, "/continue_generation", {}, timeout_s), urls))


def _payload(bucket: list, transport: str, load_format: str | None = None) -> tuple[str, list]:
    """A bucket's /update_weights_from_tensor payload, plus what must stay alive until the engines
    answered (IPC payloads map the sender's memory). load_format "flattened_bucket" (ipc only): one buffer and
    one handle for the whole bucket (SGLang's FlattenedTensorBucket form); None: one handle per tensor."""
    if load_format not in (None, W.FLATTENED_BUCKET) or (load_format is not None and transport != "ipc"):
        raise ValueError(f"load_format={load_format!r} with transport {transport!r}: only the ipc transport has a "
                         f"{W.FLATTENED_BUCKET!r} form")
    if transport == "serialized":
        return W.serialize_named_tensors(bucket), []
    if transport == "ipc":
        return W.serialize_ipc_flattened(bucket) if load_format else W.serialize_ipc(bucket)
    raise ValueError(f"weight transport {transport!r} unknown: serialized | ipc")


Prepare = Callable[[list], list]  # bucket -> bucket, run on each bucket before it is sent


class Exchange(Protocol):
    """A trainer rank's part in a push gathered per engine (rlrun.launch.train_group): each call is a collective over
    the trainer ranks on one engine's GPUs, every one calling it once per bucket and once more at the end."""
    calls: int  # collectives joined so far

    def __call__(self, payload: str | None) -> list[str] | None:
        """This rank's payload of a bucket (None: it failed, or the end) -> on the engine's sender the payloads in the
        engine's TP order (it raises when one is missing), elsewhere None. Its end also tells every rank that the
        sender's engines answered for the bucket before (the sender joins it only after their answers)."""

    def join(self) -> None:
        """The same collective with nothing to give or check (a failed rank's remaining calls)."""


def push_tensors(urls: list[str], named: "list[tuple[str, object]] | W.Buckets", version: str, *,
                 transport: str = "ipc", bucket_bytes: int = 256 << 20, prepare: Prepare | None = None, copies: int = 1,
                 pool: ThreadPoolExecutor | None = None, resume: bool = True, timeout_s: float = 600.0,
                 flush_cache: bool = True, load_format: str | None = None, exchange: Exchange | None = None,
                 phases: dict[str, float] | None = None) -> int:
    """A full state (HF names) to every engine through /update_weights_from_tensor, between pause
    (in_place) and continue; returns the bytes pushed (per engine). phases: filled with the push's seconds per phase
    (Phases: pause, stage, exchange, wait, resume), where a push's time goes.

    Bucket by bucket: `prepare` (the trainer: move it to its GPU, fingerprint it there), one payload
    (load_format="flattened_bucket": one buffer and one IPC handle per bucket, _payload), one request per engine.
    The next bucket is staged while the engines load the previous one (double buffering: at most two buckets are
    staged; a bucket's memory is released once every engine answered for it). The
    last bucket carries `version` and flush_cache: engines tag samples with the new version only
    once the whole state is in. copies: payloads per request (SGLang wants one per TP rank).
    resume=False: the engines stay paused afterwards (see _paused). Each engine request is bounded by timeout_s
    (a timeout names the bucket and the engine). flush_cache=False: requests may be running (paused in place, the
    async loop): SGLang 0.5.16 flushes only a fully idle engine and asserts on failure, which kills its scheduler.

    exchange (a push gathered per engine): the request's payloads are those the trainer ranks on the engine's GPUs
    made of their own copies, one per TP rank (exchange), in place of `copies` times this rank's. Every such rank runs
    this; the engine's sender with the engine's urls, the others with none. A rank keeps bucket i staged until the
    exchange of bucket i + 1, which the sender joins only once its engines answered for bucket i (so at most two
    buckets are staged on every rank). A rank that fails goes on joining its exchanges to the stream's end, so that
    the others never wait on it, and then raises; the sender refuses a bucket one of whose payloads is missing."""
    taken = [0]

    def counted(items: Iterator) -> Iterator:
        for item in items:
            taken[0] += 1
            yield item

    parts = counted(W.with_last(W.as_buckets(named, bucket_bytes)))  # named: (name, tensor) pairs or a Buckets stream
    if exchange is None:
        return _push_buckets(urls, parts, version, transport, prepare, lambda payload: [payload] * copies, pool,
                             resume, timeout_s, flush_cache, load_format, phases=Phases(phases))
    try:
        return _push_buckets(urls, parts, version, transport, prepare, exchange, pool, resume, timeout_s,
                             flush_cache, load_format, end=lambda: exchange(None), phases=Phases(phases))
    except BaseException:
        # the others' order: bucket k taken (a collective for megatron: its TP gather), then its exchange; so first
        # the exchange of a bucket taken but not exchanged, then each remaining bucket and its exchange, then the end
        try:
            for _ in range(taken[0] - exchange.calls):
                exchange.join()
            for _ in parts:
                exchange.join()
            exchange.join()
        except Exception:  # noqa: BLE001 - the group itself failed (a rank gone): the first error is the one to raise
            pass
        raise


def _push_buckets(urls: list[str], parts: Iterator, version: str, transport: str, prepare: Prepare | None,
                  share: Callable[[str], list[str] | None], pool: ThreadPoolExecutor | None, resume: bool,
                  timeout_s: float, flush_cache: bool, load_format: str | None,
                  end: Callable[[], object] = lambda: None, phases: "Phases | None" = None) -> int:
    """push_tensors' loop over (bucket, last) `parts`: share(payload) -> the request's payloads (None: this rank posts
    none); end() after the last bucket's answers."""
    how = f"{transport} push" + (f", load_format={load_format}" if load_format else "")
    phases = phases or Phases(None)

    def stage() -> tuple[list, bool, str, list] | None:
        """The next bucket made (a TP gather for megatron), prepared and serialized; None after the last."""
        with phases("stage"):
            item = next(parts, None)
            if item is None:
                return None
            bucket, last = item
            bucket = prepare(bucket) if prepare else bucket
            return (bucket, last, *_payload(bucket, transport, load_format))

    nbytes, i = 0, 0
    with _executor(pool, len(urls)) as ex, _paused(urls, ex, resume, timeout_s, phases):
        staged = stage()
        with phases("exchange"):
            payloads = share(staged[2]) if staged is not None else None
        while staged is not None:
            bucket, last, _, keepalive = staged
            posts = {}
            if payloads is not None:
                body = api.update_weights_from_tensor_body(payloads, version if last else None,
                                                           load_format=load_format, flush_cache=last and flush_cache)
                posts = {url: ex.submit(_timed_post, url, "/update_weights_from_tensor", body, timeout_s) for url in urls}
            try:
                staged = None if last else stage()  # while the engines load bucket i
            finally:  # even when staging failed: the engines may still be reading bucket i
                with phases("wait"):  # what staging did not hide of the engines' load
                    _bounded(lambda: None, timeout_s, f"{_which(i, last)} ({_nbytes(bucket) / 2**20:.1f} MiB, "
                                                      f"{len(bucket)} tensors from {bucket[0][0]}; {how})", posts)
            if posts:
                phases.add("load", max(f.result()[1] for f in posts.values()))
            # the engines answered for bucket i: the next one's payloads (gathered: its exchange is what tells the
            # other ranks that bucket i may go), or the end
            with phases("exchange"):
                payloads = end() if staged is None else share(staged[2])
            nbytes, i = nbytes + _nbytes(bucket), i + 1
            del keepalive, bucket  # every engine has copied it: free it
            if transport == "ipc":
                W.release_sent()  # ... for real: torch holds sent CUDA blocks until collected
    return nbytes


def _timed_post(url: str, path: str, body: dict, timeout_s: float) -> tuple[object, float]:
    """_post and its seconds, posted to answered."""
    t0 = time.perf_counter()
    return _post(url, path, body, timeout_s), time.perf_counter() - t0


def _which(i: int, last: bool) -> str:
    """A bucket in a diagnosis (a streamed push does not know its count before the end)."""
    return f"bucket {i + 1}" + (", the last," if last else "")


class EngineGroup:
    def __init__(self, router: RolloutRouter, engines: list, restart: Callable[[int], object], *,
                 health_interval_s: float = H.HEALTH_INTERVAL_S, failure_threshold: int = H.FAILURE_THRESHOLD,
                 health_timeout_s: float = H.HEALTH_TIMEOUT_S,
                 max_restarts: int | None = None):
        self.router = router
        self.engines = list(engines)
        self.restart_fn = restart
        self.health_interval_s = health_interval_s
        self.failure_threshold = failure_threshold
        self.health_timeout_s = health_timeout_s
        self.restarts = 0
        self.weight_version = api.DEFAULT_WEIGHT_VERSION
        self._named: list | None = None  # latest from_tensor state (HF names), replayed on restart
        self._transport = "serialized"
        self._bucket_bytes = 256 << 20
        self._load_format: str | None = None
        self._disk_path: str | None = None  # or the latest checkpoint dir pushed from disk
        self._failures = [0] * len(self.engines)
        self._failed_restarts = [0] * len(self.engines)
        self._retry_at = [0.0] * len(self.engines)
        self.last_error: str | None = None  # the latest failed restart, for the runner's logs
        # rollout.max_engine_restarts: restart attempts per engine before the group gives up on it
        # and calls on_fatal(message) (the runner's watchdog stops the run, naming the node)
        self.max_restarts = max_restarts
        self._attempts = [0] * len(self.engines)
        self.fatal: str | None = None
        self.on_fatal: Callable[[str], None] | None = None
        # resync(url): brings a restarted engine to the weights the others serve (set by the runner)
        self.resync: Callable[[str], None] | None = None
        self._deferring = False  # restarts wait for the next sync() (the trainer changes weights)
        self._held: set[int] = set()  # restarted while deferring: out of the router until sync()
        self._down: set[int] = set()  # found dead by the monitor, not replaced yet: pushes skip them
        self._joining: dict[str, object] = {}  # url -> a restarted engine getting its weights before it joins
        self._joining_at: dict[str, int] = {}  # url -> that engine's id
        self._lock = threading.RLock()  # weight pushes and replacements never interleave
        self._stop = threading.Event()
        self._monitor = threading.Thread(target=self._watch, name="engine-monitor", daemon=True)
        self._pool = ThreadPoolExecutor(max_workers=max(4, len(self.engines)))

    @property
    def urls(self) -> list[str]:
        return [e.url for e in self.engines]

    def index_of(self, url: str) -> int:
        """The engine id (its place in the plan) of the engine at `url`, a restarted one getting its weights too."""
        if url in self._joining_at:
            return self._joining_at[url]
        return self.urls.index(url)

    def start(self, register_timeout_s: float = 60.0) -> "EngineGroup":
        for url in self.urls:
            self.router.add_worker(url, wait_s=0)
        self.router.wait_for_workers(self.urls, register_timeout_s)
        self._monitor.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._monitor.is_alive():
            self._monitor.join(timeout=10)
        for engine in self.engines:
            engine.stop()
        self._pool.shutdown(wait=False)

    # ------------------------------------------------------------------ weights
    def _push(self, urls: list[str], named: list, version: str, transport: str, bucket_bytes: int,
              load_format: str | None = None) -> None:
        push_tensors(urls, named, version, transport=transport, bucket_bytes=bucket_bytes, pool=self._pool,
                     load_format=load_format)

    def update_weights_from_tensor(self, named: list[tuple[str, "object"]], version: str,
                                   bucket_bytes: int = 256 << 20, transport: str = "serialized",
                                   load_format: str | None = None) -> None:
        """Pushes a full state (HF names) to every engine, bucketed, between pause and continue.

        transport "serialized": bytes in the HTTP body (any host); "ipc": SGLang's own payload
        (shared memory / CUDA IPC, engines on this host: the colocated mode; load_format="flattened_bucket": one
        buffer per bucket). The state is kept for restarts: do not modify `named` in place afterwards (pass
        copies)."""
        with self._lock:
            self._push(self.urls, named, str(version), transport, bucket_bytes, load_format)
            self._named, self._disk_path, self.weight_version = named, None, str(version)
            self._transport, self._bucket_bytes, self._load_format = transport, bucket_bytes, load_format

    def _engines(self, urls: list[str] | None = None) -> list:
        if urls is None:
            return list(self.engines)
        by_url = {**self._joining, **{e.url: e for e in self.engines}}
        return [by_url[u] for u in urls]

    def _every(self, fn: Callable[[object], object], urls: list[str] | None = None) -> list:
        """fn(engine) on every engine (or those at urls) at once; results in order."""
        return list(self._pool.map(fn, self._engines(urls)))

    def update_weights_from_disk(self, model_path: str, version: str, urls: list[str] | None = None) -> None:
        """Every engine (or those at `urls`) loads the HF checkpoint dir `model_path`."""
        with self._lock:
            self._every(lambda e: e.load_weights(model_path, str(version)), urls)
            self._named, self._disk_path, self.weight_version = None, model_path, str(version)

    def pull_weights(self, local_dir: str, source_dir: str, version: int, urls: list[str] | None = None) -> None:
        """Every engine (or those at `urls`) brings its hosts' local checkpoint to `version` of the delta stream
        under source_dir (rollout.weight_sync=delta); update_weights_from_disk(local_dir) then loads it."""
        self._every(lambda e: e.pull_weights(local_dir, source_dir, version), urls)

    def pause(self, mode: str = "abort") -> None:
        """Pause every engine (abort: in-flight requests end with finish_reason abort)."""
        self._every(lambda e: e.pause(mode))

    def start_profile(self, output_dir: str) -> list[str]:
        """Every engine's profiler (torch profiler traces into output_dir, on the engine's host); returns the
        engines that cannot profile (the hf engine)."""
        return [e.url for e, ok in zip(self.engines, self._every(lambda e: e.start_profile(output_dir))) if not ok]

    def stop_profile(self) -> None:
        self._every(lambda e: e.stop_profile())

    def abort_all(self) -> None:
        """In-flight and queued requests end at once with finish_reason abort and the tokens generated so
        far (partial rollout)."""
        self._every(lambda e: e.abort())

    def continue_generation(self) -> None:
        self._every(lambda e: e.continue_generation())

    def drain(self, timeout_s: float, urls: list[str] | None = None, poll_s: float = DRAIN_POLL_S,
              must: bool = True) -> float:
        """Waits until every engine (or those at `urls`) is idle and has dropped its prefix cache (/flush_cache until
        it answers 200); returns the seconds waited. SGLang 0.5.16 asserts an idle engine in release_memory_occupation
        and in the flush of a weight update, and its scheduler dies on the assertion; an engine can still be busy when
        the rollout's last answer is in (its overlap scheduler finishes the batch after answering, or requests the
        rollout dropped still run). Past timeout_s: WeightSyncStuck naming each busy engine and its load (must=False:
        returns then, the engines perhaps still busy: a best-effort settle before a call that blocks new requests)."""
        t0 = time.monotonic()
        busy = self._engines(urls)
        while busy:
            busy = [e for e, idle in zip(busy, self._pool.map(lambda e: e.flush_cache(), busy)) if not idle]
            if busy and time.monotonic() - t0 > timeout_s:
                if not must:
                    break
                raise WeightSyncStuck(
                    f"engines still busy {timeout_s:.0f} s after the rollout ended (rollout.weight_sync_timeout_s): "
                    + "; ".join(f"{e.url}: {_load(e.url)}" for e in busy)
                    + ". Their weights and memory cannot change while requests run: find what keeps sending "
                      "(a custom rollout function's requests outliving the rollout?) or raise the bound")
            if busy:
                time.sleep(poll_s)
        return time.monotonic() - t0

    def release_memory(self, tags: list[str] | None = None) -> None:
        """Colocated training: engines free weights/kv_cache/cuda_graph (None = all) while the trainer
        runs (SGLang frees GPU memory only with enable_memory_saver = rollout.offload)."""
        self._every(lambda e: e.release_memory(tags))

    def resume_memory(self, tags: list[str] | None = None) -> None:
        self._every(lambda e: e.resume_memory(tags))

    def checksums(self, kind: str = "sha256", urls: list[str] | None = None) -> dict[str, str]:
        """Each engine's checksum of the weights it holds (kinds with checksums: the hf engine)."""
        engines = self._engines(urls)
        return dict(zip([e.url for e in engines], self._every(lambda e: e.checksum(kind), urls)))

    def versions(self, urls: list[str] | None = None) -> dict[str, str]:
        engines = self._engines(urls)
        return dict(zip([e.url for e in engines], self._every(lambda e: e.version(), urls)))

    def weight_dtype(self) -> str:
        """The dtype the engines hold their weights in; they must agree."""
        dtypes = set(self._every(lambda e: e.weight_dtype()))
        if len(dtypes) != 1:
            raise RuntimeError(f"engines hold weights in different dtypes {sorted(dtypes)}; they must agree")
        return dtypes.pop()

    # ------------------------------------------------------------------ fault tolerance
    def _healthy(self, engine) -> bool:
        return engine.alive() and engine.healthy(self.health_timeout_s)

    def _watch(self) -> None:
        while not self._stop.wait(self.health_interval_s):
            for i, engine in enumerate(list(self.engines)):
                if self._stop.is_set():
                    return
                if time.monotonic() < self._retry_at[i]:
                    continue  # a restart of this engine failed recently: back off
                self._failures[i] = 0 if self._healthy(engine) else self._failures[i] + 1
                if self._failures[i] >= self.failure_threshold and self.fatal is None:
                    if self.max_restarts is not None and self._attempts[i] >= self.max_restarts:
                        self._give_up(i, engine)
                        continue
                    self._attempts[i] += 1
                    self._down.add(i)
                    print(f"[rlrun] engine {i} ({engine.url}) is unhealthy: out of the router, restarting it "
                          f"(attempt {self._attempts[i]})", file=sys.stderr, flush=True)
                    self._leave_router(engine)
                    try:
                        self.replace(i)
                        self._failed_restarts[i] = 0
                    except Exception as exc:  # noqa: BLE001 - keep watching; retried after a backoff
                        self._failed_restarts[i] += 1
                        wait = min(60.0, 2.0 ** self._failed_restarts[i])
                        self._retry_at[i] = time.monotonic() + wait
                        self.last_error = f"restarting engine {i} failed ({self._failed_restarts[i]}x): {exc}"
                        print(f"[rlrun] {self.last_error}; next try in {wait:.0f}s", file=sys.stderr, flush=True)

    def _leave_router(self, engine) -> None:
        """A dead engine leaves the router at once, outside the lock: a weight push holding the lock
        (it may wait on that very engine) must not keep the router sending requests to it."""
        try:
            self.router.remove_worker(engine.url)
        except Exception as exc:  # noqa: BLE001 - replace() removes it again under the lock
            print(f"[rlrun] removing dead engine {engine.url} from the router failed: {exc}", file=sys.stderr,
                  flush=True)

    def _give_up(self, i: int, engine) -> None:
        node = getattr(engine, "node", None) or engine.url
        self.fatal = (f"engine {i} on node {node} failed again after {self._attempts[i]} restart(s) "
                      f"(rollout.max_engine_restarts={self.max_restarts})"
                      + (f"; last restart error: {self.last_error}" if self.last_error else ""))
        print(f"[rlrun] {self.fatal}", file=sys.stderr, flush=True)
        if self.on_fatal is not None:
            self.on_fatal(self.fatal)

    def replace(self, i: int) -> None:
        """Takes engine i out of the router, restarts it, brings it to the current weights, re-adds it
        (or, while restarts are deferred, holds it out of the router until the next sync()).

        The restart itself (a new process or Ray actor loading the model: minutes for a large one, and
        up to its start timeout when its bundle waits for Ray to move it off a lost node) runs outside
        the lock: weight pushes and defer_restarts() go on meanwhile (a push skips the dead engine,
        see sync()); only the new engine's weights and its admission are serialized with them."""
        t0 = time.monotonic()
        old = self.engines[i]
        self.router.remove_worker(old.url)
        old.stop()
        new = self.restart_fn(i)
        started_s = time.monotonic() - t0
        if self._stop.is_set():  # the run ended while it restarted: stop() did not see it
            new.stop()
            return
        with self._lock:
            if self._deferring:
                self.engines[i] = new  # sync() pushes the new weights to it, then admits it
                self._held.add(i)
                self._down.discard(i)
                self._failures[i] = 0
                self.restarts += 1
                return
            self._joining[new.url], self._joining_at[new.url] = new, i
            try:
                if self.resync is not None:
                    self.resync(new.url)
                elif self._named is not None:
                    self._push([new.url], self._named, self.weight_version, self._transport, self._bucket_bytes,
                               self._load_format)
                elif self._disk_path is not None:
                    new.load_weights(self._disk_path, self.weight_version)
            except Exception:
                new.stop()  # never leave an engine with stale weights running
                raise
            finally:
                self._joining.pop(new.url, None)
                self._joining_at.pop(new.url, None)
            self.engines[i] = new
            self._down.discard(i)
            self._failures[i] = 0
            self.router.add_worker(new.url)
            self.restarts += 1
            print(f"[rlrun] engine {i} ({old.url}) was unhealthy: restarted at {new.url} with weight version "
                  f"{self.weight_version if self.resync is None else 'the current one'}, back in the router "
                  f"({self.restarts} restart(s) so far; started in {started_s:.0f} s, back after "
                  f"{time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)

    def defer_restarts(self) -> None:
        """From now until the next sync(), a restarted engine gets no weights and no traffic: the
        trainer is changing the weights, and a push now would give it a version newer than the
        others serve (or wait behind the trainer's work). Waits for a restarted engine's weight push
        in progress (not for the restart itself: replace())."""
        with self._lock:
            self._deferring = True

    def sync(self, push: Callable[[list[str]], None]) -> None:
        """push(urls) to every engine, held restarts included, with no restart interleaving; then
        held engines join the router and restarts are no longer deferred. Engines the monitor found
        dead and is restarting are skipped (a push to a dead engine fails, or waits on it in a
        collective): the replacement gets these weights when it is back (resync)."""
        with self._lock:
            up = [e.url for i, e in enumerate(self.engines) if i not in self._down]
            try:
                push(up or self.urls)
            except Exception:
                # an engine that died (its node lost) fails the push for all: push to the live ones;
                # the monitor restarts the dead ones and brings them to these weights (resync)
                dead = sorted(self._down | {i for i, e in enumerate(self.engines) if not self._healthy(e)})
                if not dead or len(dead) == len(self.engines):
                    raise
                for i in dead:
                    self._held.discard(i)
                    self.router.remove_worker(self.engines[i].url)
                print(f"[rlrun] weight push: engines {dead} are dead; pushing to the others (they restart and "
                      f"get these weights)", file=sys.stderr, flush=True)
                push([e.url for i, e in enumerate(self.engines) if i not in dead])
            for i in sorted(self._held):
                self.router.add_worker(self.engines[i].url)
            self._held.clear()
            self._deferring = False

    @property
    def held(self) -> list[str]:
        """URLs of restarted engines waiting for the next sync() (not in the router)."""
        return [self.engines[i].url for i in sorted(self._held)]


def _load(url: str) -> str:
    """An engine's /get_load as a short text (for a diagnosis; never raises)."""
    try:
        loads = requests.get(f"{url}/get_load", timeout=10).json()
        loads = loads if isinstance(loads, list) else [loads]
        return ", ".join(f"{x.get('num_reqs', '?')} running / {x.get('num_waiting_reqs', '?')} waiting" for x in loads)
    except Exception as e:  # noqa: BLE001 - a diagnosis must not raise
        return f"load unknown ({type(e).__name__})"


class WeightSyncStuck(RuntimeError):
    """A weight push that could not complete within its bound (rollout.weight_sync_timeout_s), or an engine that
    gave up on its side of a collective: the message names the transport, the step (group join or bucket) and what
    each engine did, so a stuck sync ends with a diagnosis instead of a silent wait."""


NCCL_DEFAULTS = {"NCCL_CUMEM_ENABLE": "1"}  # NCCL's own value when the variable is unset (cuMem on, NCCL >= 2.19)


def check_nccl_env(engine_env: dict[str, str] | None) -> None:
    """Every rank of an NCCL group must run with the same NCCL_CUMEM_ENABLE: a trainer with NCCL's cuMem allocator
    on and an SGLang engine with it off (SGLang sets 0 unless --enable-symm-mem) never finish their first
    collective. engine_env: the values the engines run with (EngineKind.nccl_env under the plan's env)."""
    bad = {k: (os.environ.get(k), v) for k, v in (engine_env or {}).items()
           if os.environ.get(k, NCCL_DEFAULTS.get(k)) != v}
    if bad:
        detail = "; ".join(f"{k}={'unset (NCCL default ' + NCCL_DEFAULTS.get(k, '?') + ')' if mine is None else mine} "
                           f"here, {theirs} in the engines" for k, (mine, theirs) in bad.items())
        raise WeightSyncStuck(f"NCCL weight sync refused before it could hang: {detail}. Every rank of the weight-sync "
                              f"group must agree: set {', '.join(f'{k}={v[1]}' for k, v in bad.items())} in the "
                              f"trainer's environment before its first NCCL communicator (rlrun's actors get it from "
                              f"the plan's env; hardware.env sets it for trainer and engines alike)")


def _state(futures: dict[str, Future]) -> str:
    """What each engine's request did so far: answered, failed (why) or still pending."""
    def one(f: Future) -> str:
        if not f.done():
            return "pending"
        return "answered" if f.exception() is None else f"failed: {str(f.exception())[:300]}"
    return "; ".join(f"{url}: {one(f)}" for url, f in futures.items())


def _bounded(fn: Callable[[], object], timeout_s: float, step: str, requests_: dict[str, Future],
             abort: Callable[[], None] = lambda: None) -> object:
    """fn() (a collective: it may block in NCCL's communicator set-up) in a daemon thread, bounded: raises
    WeightSyncStuck when it is not done within timeout_s, or as soon as an engine's request for this step fails
    (that engine will never post its side). Then waits for the engines' answers within the same bound.
    abort() runs before raising (frees the group so that the blocked thread can return)."""
    done, out = threading.Event(), {}

    def run() -> None:
        try:
            out["value"] = fn()
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            out["error"] = exc
        finally:
            done.set()

    deadline = time.monotonic() + timeout_s
    threading.Thread(target=run, name=f"weight-sync {step}", daemon=True).start()

    def fail(why: str) -> WeightSyncStuck:
        abort()
        return WeightSyncStuck(f"weight sync stuck at {step}: {why} (rollout.weight_sync_timeout_s={timeout_s:g}); "
                               f"engines: {_state(requests_)}")

    while not done.wait(0.05):
        if any(f.done() and f.exception() is not None for f in requests_.values()):
            raise fail("an engine's request failed, so its side of the collective will never come")
        if time.monotonic() > deadline:
            raise fail(f"the trainer's side did not finish within {timeout_s:g} s")
    if "error" in out:
        abort()
        raise WeightSyncStuck(f"weight sync failed at {step}: {out['error']!r} (rollout.weight_sync_timeout_s="
                              f"{timeout_s:g} also bounds the group's own waits); engines: {_state(requests_)}") \
            from out["error"]
    for f in requests_.values():
        try:
            f.result(timeout=max(0.0, deadline - time.monotonic()))
        except FutureTimeout:
            raise fail(f"the engines did not answer within {timeout_s:g} s") from None
        except Exception:  # noqa: BLE001 - named per engine by fail()
            raise fail("an engine's request failed") from None
    return out.get("value")


class BroadcastGroup:
    """The trainer's end of an NCCL/gloo weight-sync group, kept across pushes (as slime keeps its group): building
    one costs the engines' /init_weights_update_group and a new communicator, ~1 s per push on two H200s
    (docs/benchmarks.md), more than the copy task's whole transfer. `ensure` rebuilds it only when the engines
    change (a restart, a push to a subset), `drop` forgets it after a failure (the engines' side may be stuck)."""

    def __init__(self, master_address: str, port: Callable[[], int], backend: str, ranks_per_engine: int = 1):
        self.master_address, self.port, self.backend = master_address, port, backend
        self.ranks_per_engine = ranks_per_engine
        self.urls: tuple[str, ...] = ()
        self.group = None
        self.name = ""
        self.builds = 0

    def ensure(self, urls: list[str], timeout_s: float) -> None:
        if self.group is not None and tuple(urls) == self.urls:
            return
        self.close(timeout_s)
        world, port = 1 + len(urls) * self.ranks_per_engine, self.port()
        self.builds += 1
        name = f"rlrun_weight_sync_{os.getpid()}_{self.builds}"
        with _executor(None, len(urls)) as pool:
            joins = {url: pool.submit(_post, url, "/init_weights_update_group", api.init_weights_update_group_body(
                self.master_address, port, 1 + i * self.ranks_per_engine, world, group_name=name,
                backend=self.backend), timeout_s) for i, url in enumerate(urls)}
            self.group = _bounded(lambda: W.new_broadcast_group(self.master_address, port, 0, world, name,
                                                                self.backend, timeout_s=timeout_s),
                                  timeout_s, f"joining the {self.backend} group {name!r} (world {world}, "
                                             f"{self.master_address}:{port})", joins)
        self.urls, self.name = tuple(urls), name

    def drop(self) -> None:
        """After a failed push: abort the local end; the engines' ends are left to their restart or teardown."""
        if self.group is not None:
            W.abort_broadcast_group(self.group)
        self.group, self.urls = None, ()

    def close(self, timeout_s: float = 30.0) -> None:
        """Frees both ends (engines that no longer answer are skipped: they are dead or restarting)."""
        if self.group is None:
            return
        for url in self.urls:
            try:
                _post(url, "/destroy_weights_update_group", api.destroy_weights_update_group_body(self.name), timeout_s)
            except Exception:  # noqa: BLE001 - a dead engine took its end of the group with it
                pass
        W.destroy_broadcast_group(self.group)
        self.group, self.urls = None, ()


def broadcast_weights(engine_urls: list[str], named: "list[tuple[str, object]] | W.Buckets", version: str, *,
                      master_address: str, master_port: int | Callable[[], int], backend: str,
                      bucket_bytes: int = 256 << 20, prepare: Prepare | None = None,
                      ranks_per_engine: int = 1, load_format: str | None = W.FLATTENED_BUCKET,
                      timeout_s: float = 180.0, engine_env: dict[str, str] | None = None,
                      flush_cache: bool = True, group: BroadcastGroup | None = None,
                      phases: dict[str, float] | None = None) -> dict:
    """The disaggregated path, run by trainer rank 0: a process group {trainer=0, engine i = ranks
    1+i*k .. (i+1)*k} (k = ranks_per_engine: an SGLang engine joins with one rank per TP rank), then
    per bucket one /update_weights_from_distributed per engine while rank 0 broadcasts the
    bucket as one flattened uint8 buffer (SGLang's load_format="flattened_bucket": one collective
    per bucket, not one per tensor; load_format=None: one per tensor, SGLang's other format),
    between pause (in_place) and continue. `prepare` and the
    version on the last bucket as in push_tensors. Returns timing and bytes for bandwidth reports.

    group: a BroadcastGroup kept by the caller across pushes (reused while the engines are the same); None: a group
    for this push only (master_port: a port, or a callable that picks one).
    Bounded: joining the group and each bucket (the collective and the engines' answers) get timeout_s each; past
    it, or when an engine's request fails, the group is aborted and WeightSyncStuck names the step and every
    engine's state. engine_env: the NCCL settings the engines run with (check_nccl_env, before anything starts).
    flush_cache: as in push_tensors. phases (Phases): pause, group (joined or reused), stage (buckets made, prepared,
    flattened), broadcast (the collective and the engines' answers), resume."""
    if backend == "nccl":
        check_nccl_env(engine_env)
    phases_ = Phases(phases)
    own = group is None
    if own:
        group = BroadcastGroup(master_address, master_port if callable(master_port) else lambda: master_port,
                               backend, ranks_per_engine)
    parts = W.with_last(W.as_buckets(named, bucket_bytes))  # named: (name, tensor) pairs, or a W.Buckets stream
    try:
        with _executor(None, len(engine_urls)) as pool, _paused(engine_urls, pool, timeout_s=timeout_s,
                                                                phases=phases_):
            with phases_("group"):
                group.ensure(engine_urls, timeout_s)
            t0, nbytes = time.perf_counter(), 0
            for i, (bucket, last) in enumerate(phases_.timed("stage", parts)):
                with phases_("stage"):
                    bucket = prepare(bucket) if prepare else bucket
                body = api.update_weights_from_distributed_body(
                    [n for n, _ in bucket], [W.dtype_name(t.dtype) for _, t in bucket],
                    [list(t.shape) for _, t in bucket], str(version) if last else None, group_name=group.name,
                    flush_cache=last and flush_cache, load_format=load_format)
                posts = {url: pool.submit(_post, url, "/update_weights_from_distributed", body, timeout_s)
                         for url in engine_urls}
                with phases_("stage"):
                    tensors = [t.contiguous() for _, t in bucket]
                    sent = [W.flatten_bucket(tensors)] if load_format == W.FLATTENED_BUCKET else tensors
                with phases_("broadcast"):
                    _bounded(lambda: W.broadcast_tensors(group.group, sent), timeout_s,
                             f"{_which(i, last)} ({_nbytes(bucket) / 2**20:.1f} MiB, {len(bucket)} tensors "
                             f"from {bucket[0][0]}; {backend} broadcast, load_format={load_format})", posts,
                             group.drop)
                nbytes += _nbytes(bucket)
            seconds = time.perf_counter() - t0
            if own:
                group.close(timeout_s)
    except BaseException:
        group.drop()
        raise
    return {"bytes": nbytes, "seconds": seconds, "gb_per_s": nbytes / seconds / 1e9 if seconds else 0.0}


@contextmanager
def local_engine_group(model_dir: str | Path, n: int, *, router: str, log_dir: str | Path, seed: int = 0,
                       policy: str = "round_robin", health_interval_s: float = 0.5,
                       startup_timeout_s: float = 600.0, **engine_kwargs) -> Iterator[EngineGroup]:
    """n hf engine processes on this machine behind a fresh router of kind `router` (rollout.router.kind, whose
    policies include `policy`), with restart on failure
    (engine i restarts with its original seed). For benchmarks, tests and single-node runs
    without Ray. Everything started here is stopped on exit."""
    def launch(i: int) -> HFEngineProcess:
        return HFEngineProcess(model_dir, seed=seed + i, log_dir=log_dir, **engine_kwargs).start()

    engines = [launch(i) for i in range(n)]  # start all, then wait: startups overlap
    front = build_router(router, policy=policy, log_dir=log_dir, health_check_interval_s=1)
    group = None
    try:
        for engine in engines:
            engine.wait_healthy(startup_timeout_s)
        front.start()
        group = EngineGroup(front, engines, lambda i: launch(i).wait_healthy(startup_timeout_s),
                            health_interval_s=health_interval_s).start()
        yield group
    finally:
        if group is not None:
            group.stop()  # also stops engines that replaced dead ones
        for engine in engines:
            engine.stop()
        front.stop()
