"""The trainer as a group of Ray actors, one per DP rank, each on the bundle the plan gives it.

The driver calls the group like one backend: it shards batches over the ranks (contiguous
chunks, so rank order = sample order), runs the collective call on every rank at once and
gathers the results back in sample order.
"""
from __future__ import annotations

import sys
import time
from datetime import timedelta
from typing import Callable

import ray
import torch
import torch.distributed as dist

from rlrun.config.kinds import BACKENDS, TRANSPORTS, TransportKind, resolve
from rlrun.config.plan import slots_by_rank
from rlrun.launch.env import runtime_env
from rlrun.launch.placement import Placement
from rlrun.rollout import weights as W
from rlrun.train.base import TrainBatch, TrainerBackend as B
from rlrun.train.profile import StepProfiler, dump_oom_snapshot, oom_message, trace_path
from rlrun.train.torch_backend import set_cpu_threads


def backend_class(name: str):
    """The TrainerBackend class of a train.backend kind (its spec's factory, imported here)."""
    return resolve(BACKENDS[name].factory)


def push_state(state: dict[str, torch.Tensor] | W.Buckets, urls: list[str], *, transport: str | TransportKind,
               version: int | str, bucket_bytes: int, engine_dtype: str | None, device: torch.device,
               backend: str = "gloo", copies: int = 1, tied: tuple[str, ...] = (), resume: bool = True,
               timeout_s: float = 180.0, nccl_env: dict[str, str] | None = None, flush_cache: bool = True,
               keep: dict | None = None, flattened: bool = False, fp8: bool = False, exchange=None,
               fingerprint: bool = True) -> dict:
    """The lead rank's push of its sync state to the engines at `urls` by `transport`'s trainer end
    (rlrun.rollout.transports); returns the state's fingerprint in the engines' dtype (W.Fingerprint),
    the bytes pushed per engine, the push's seconds and its seconds per phase ("phases": rlrun.rollout.engines.group
    .Phases). No urls: only the fingerprint. `state`: a dict, or the
    backend's W.Buckets stream (TrainerBackend.sync_buckets: each bucket made on the GPU when it is pushed).

    Each bucket is moved to `device` (the rank's GPU: CUDA IPC handles / NCCL need device memory)
    and fingerprinted there just before it is sent, so one bucket at a time is staged. `tied`: names
    the engine's model ties to another tensor it receives (lm_head.weight with tied embeddings; SGLang
    skips loading it): fingerprinted, since the engine's state holds them, but not sent.
    Every step is bounded by timeout_s (rollout.weight_sync_timeout_s); nccl_env: the engines' NCCL settings,
    which this rank must share (rlrun.rollout.engines.group.check_nccl_env). flush_cache: the engines flush their
    prefix cache with the last bucket (rlrun.config.sizes.push_flushes_cache). keep: what the transport keeps
    across this rank's pushes (the NCCL group: rlrun.rollout.transports.nccl); None: nothing is kept. flattened: the
    engines read a bucket as one flat buffer (TransportKind.flattened of the engine kind). transport: its name or its
    spec (TrainGroup sends the spec, so that a transport registered in the driver, by a plugin or a test, needs no
    import in the trainer's process). fp8 (rollout.fp8): each bucket is quantized on `device` as it is sent
    (rlrun.rollout.fp8.quantize_bucket: the linear weights as float8_e4m3fn plus their `_scale_inv`), and the
    fingerprint and the bytes are those of what was sent. exchange: this rank's part in a push gathered per engine
    (TransportKind.gathered: _Exchange); `urls` are then the engines this rank posts to, none on the others.
    fingerprint=False: none is computed ("fingerprint" None), for engines that cannot be asked for theirs
    (EngineKind.checksums; SGLang's are checked by weight_version): its per-tensor reductions were most of a push's
    staging on the GPU (2026-11-28, the 0.6B shape: stage 100-128 ms of a 130-150 ms push, docs/benchmarks.md).
    """
    fp = W.Fingerprint(W.dtype_from_name(engine_dtype) if engine_dtype else None) if fingerprint else None
    if fp8:
        from rlrun.rollout.fp8 import quantize_bucket

    def prepare(bucket: list) -> list:
        bucket = [(n, t.to(device)) for n, t in bucket]
        if fp8:
            bucket = quantize_bucket(bucket)
        if fp is not None:
            fp.add(bucket)
        return bucket

    def untied(bucket: list) -> list:
        if fp is not None:
            tied_part = [(n, t.to(device)) for n, t in bucket if n in tied]
            fp.add(quantize_bucket(tied_part) if fp8 else tied_part)
        return [(n, t) for n, t in bucket if n not in tied]

    stream = state.stream if isinstance(state, W.Buckets) else W.buckets(list(state.items()), bucket_bytes)
    named = W.Buckets(b for b in map(untied, stream) if b)
    t0, nbytes, phases = time.perf_counter(), 0, {}
    kind = transport if isinstance(transport, TransportKind) else TRANSPORTS[transport]
    if not urls and exchange is None:
        for bucket in named.stream:
            prepare(bucket)
    elif kind.push is None:
        raise ValueError(f"rollout.weight_sync={kind.name!r} is a file the trainer writes (export_weights), "
                         "not a push from its memory")
    else:
        nbytes = kind.push(named, urls, version=str(version), bucket_bytes=bucket_bytes, prepare=prepare,
                           copies=copies, backend=backend, resume=resume, timeout_s=timeout_s,
                           engine_env=nccl_env, flush_cache=flush_cache, keep={} if keep is None else keep,
                           flattened=flattened, phases=phases,
                           **({"exchange": exchange} if exchange is not None else {}))
    return {"fingerprint": fp.hexdigest() if fp is not None else None, "bytes": nbytes, "seconds": time.perf_counter() - t0, "phases": phases}


class _Exchange:
    """A rank's part in one engine's gathered push (rlrun.rollout.engines.group.Exchange): all_gather_object of
    (rank, payload) over a gloo group of the trainer ranks on the engine's GPUs; the sender (the rank on its first GPU)
    returns the payloads in the engine's TP order. One rank: no group, nothing to gather."""

    def __init__(self, rank: int, ranks: tuple[int, ...], group):
        self.rank, self.ranks, self.group, self.calls = rank, ranks, group, 0
        self.sources: list[int] = []  # the ranks that wrote the payloads the sender posted (last bucket), TP order

    def _gather(self, payload: str | None) -> list[tuple[int, str | None]]:
        self.calls += 1
        if self.group is None:
            return [(self.rank, payload)]
        out: list = [None] * len(self.ranks)
        dist.all_gather_object(out, (self.rank, payload), group=self.group)
        return out

    def __call__(self, payload: str | None) -> list[str] | None:
        got = dict(self._gather(payload))
        if self.rank != self.ranks[0] or payload is None:
            return None
        missing = [r for r in self.ranks if got.get(r) is None]
        if missing:
            raise RuntimeError(f"trainer rank(s) {missing} made no payload for this bucket (their push failed: see "
                               f"their error), so the engine's TP ranks on their GPUs ({self.ranks}) cannot get one")
        self.sources = [r for r in self.ranks if r in got]
        return [got[r] for r in self.ranks]

    def join(self) -> None:
        self._gather(None)


class _Rank:
    """Ray actor body: builds the backend inside the worker process and forwards calls."""

    def __init__(self, backend: str, cfg, rank: int, world_size: int, gpu_id: int | None, total_steps: int,
                 run_dir: str | None = None, memory_estimate_gib: float | None = None):
        set_cpu_threads()
        self.rank = rank
        self.device = torch.device("cpu") if gpu_id is None else torch.device("cuda", gpu_id)
        self.rank, self.run_dir, self.memory_estimate_gib = rank, run_dir, memory_estimate_gib
        self.profiler = StepProfiler()
        self.transport_state: dict[str, dict] = {}  # push_weights: each transport's state across pushes
        self.impl = backend_class(backend)(cfg, rank=rank, world_size=world_size, gpu_id=gpu_id,
                                           total_steps=total_steps)

    def __repr__(self) -> str:  # Ray shows it as the actor's repr_name (dashboard, ray.util.state)
        return f"trainer rank {self.rank}"

    def call(self, method: str, *args, **kwargs):
        try:
            return getattr(self.impl, method)(*args, **kwargs)
        except torch.cuda.OutOfMemoryError as e:
            snapshot = dump_oom_snapshot(self.run_dir, self.rank)
            gib = 2**30
            total = torch.cuda.get_device_properties(self.device).total_memory / gib
            raise RuntimeError(oom_message(self.rank, method, torch.cuda.max_memory_allocated(self.device) / gib,
                                           total, self.memory_estimate_gib, snapshot)) from e

    def start_profile(self) -> None:
        self.profiler.start()

    def stop_profile(self, rollout_id: int) -> str:
        return self.profiler.stop(trace_path(self.run_dir or ".", rollout_id, self.rank))

    def export_weights(self, path: str | None, lead: bool, transport: TransportKind | None = None,
                       args: dict | None = None) -> str | None:
        """On the lead rank: checksum of the sync state and, with `path`, the state written there
        by the file transport `transport`'s trainer end (an HF safetensors file). Other ranks only take part (state_dict_for_sync may be a
        collective, e.g. a TP gather) and return None. args: the transport's settings (TransportKind.file_args); what
        it keeps across this rank's writes lives in transport_state (a delta's snapshot).

        The weights go from this actor to the engines through the local disk: they never pass
        through the driver, and safetensors is what update_weights_from_disk reads. The checksum
        is taken in the engines' dtype (the hf engine holds fp32), so a bf16 export still matches.
        """
        state = self.impl.state_dict_for_sync()
        if not lead:
            return None
        if path is not None:
            if transport is None or transport.write is None:
                raise ValueError("export_weights to a path needs a file transport (a TransportKind with write)")
            transport.write(state, path, self.transport_state.setdefault(transport.name, {}), **(args or {}))
        return W.checksum({k: v.float() if v.is_floating_point() else v for k, v in state.items()})


    def push_weights(self, urls: list[str], lead: bool, how: dict, gathered: dict | None = None) -> dict | None:
        """sync_buckets on every rank (a collective for megatron: each bucket's TP gather); the lead rank pushes each
        bucket to the engines itself as it comes (push_state), so the tensors never pass through the driver. Every
        rank iterates the stream to its end, the lead too when its push fails: a rank that stopped early would leave
        the others waiting in the next bucket's gather, and the failure must reach the driver, not hang it.

        gathered (TrainGroup._gathered: a push gathered per engine): "groups", every engine's trainer ranks in its TP
        order; "mine", this rank's engine's when that engine is pushed now; "urls", the engines this rank sends to.
        The ranks of a pushed engine each make their own payloads of each bucket and its sender posts them; the lead
        rank of no pushed engine only fingerprints."""
        stream = self.impl.sync_buckets(how["bucket_bytes"])
        exchange = None
        if gathered is not None:
            exchange = self._exchange(gathered["groups"], gathered["mine"], how["timeout_s"])
            urls = gathered["urls"] if exchange is not None else []
        if not lead and exchange is None:
            for _ in stream:
                pass
            return None
        # what the transport keeps across this rank's pushes (the NCCL group: rebuilt only when the engines change)
        keep = self.transport_state.setdefault(how["transport"].name, {})
        try:
            out = push_state(W.Buckets(stream), urls, device=self.device, keep=keep, exchange=exchange, **how)
        finally:
            for _ in stream:  # the rest of the gathers, so that the other ranks return (nothing left after a push)
                pass
        out["sources"] = {url: exchange.sources for url in urls} if exchange is not None else {}
        return out

    def _exchange(self, groups: list[tuple[int, ...]], mine: tuple[int, ...] | None,
                  timeout_s: float) -> _Exchange | None:
        """This rank's _Exchange for its engine (None: no engine of its is pushed). The gloo groups are made once per
        set of engines' ranks, by every rank in the same order (torch's new_group is a collective of the default
        group); bounded by twice the push's bound (a rank waits in a gather while the sender waits for its engines)."""
        made = self.transport_state.setdefault("gathered", {})
        key = tuple(groups)
        if key not in made:
            made[key] = {ranks: dist.new_group(list(ranks), backend="gloo", timeout=timedelta(seconds=2 * timeout_s))
                         for ranks in groups if len(ranks) > 1}
        return None if mine is None else _Exchange(self.rank, mine, made[key].get(mine))


class TrainGroup:
    def __init__(self, cfg, plan, placement: Placement, env: dict[str, str], run_dir: str | None = None,
                 wait: bool = True):
        """The ranks' actors, each asked to build its backend (model, optimizer, process group); wait=False returns
        before they have (ready() waits), so that the engines' start can overlap the trainer's."""
        if plan.tp * plan.pp * plan.cp != 1 and not BACKENDS[cfg.train.backend].model_parallel:
            raise ValueError(f"train.backend={cfg.train.backend} is data-parallel only, but the plan has tp={plan.tp} "
                             f"pp={plan.pp} cp={plan.cp}; use parallelism=tp1 or train.backend=megatron")
        self.world = plan.trainer_gpus
        self._cls = backend_class(cfg.train.backend)
        # role -> rank -> its plan slots (node, gpu): colocated roles on one slot share its GPU (TransportKind.gathered)
        self._slots = {role: slots_by_rank(plan.placement, role) for role in ("trainer", "engine")}
        self._said: set[str] = set()  # log lines said once
        actor = ray.remote(_Rank)
        self.actors = []
        for rank in range(self.world):
            gpus = placement.gpu_ids("trainer", rank)
            opts = placement.options("trainer", rank)
            self.actors.append(actor.options(**opts, runtime_env=runtime_env(env)).remote(
                cfg.train.backend, cfg, rank, self.world, gpus[0] if gpus else None, plan.total_steps,
                run_dir, plan.memory_gib.get("trainer")))
        # rank 0's address goes to every rank's init as object refs: nothing here waits for a rank
        addr, port = self.actors[0].call.options(num_returns=2).remote(B.master_address.__name__)
        self._init = [a.call.remote(B.init.__name__, addr, port) for a in self.actors]
        if wait:
            self.ready()

    def check(self) -> None:
        """Raises the error of a rank whose build failed, without waiting for the others (a watch for work that runs
        beside the build: the engines' start)."""
        if self._init:
            done, _ = ray.wait(self._init, num_returns=len(self._init), timeout=0)
            ray.get(done)

    def ready(self) -> "TrainGroup":
        """Every rank built (raises the first rank's error)."""
        if self._init:
            ray.get(self._init)
            self._init = []
        return self

    def _all(self, method: Callable, *args) -> list:
        """TrainerBackend `method` on every rank (named by the contract's own function: a rename fails here)."""
        return ray.get([a.call.remote(method.__name__, *args) for a in self.actors])

    def _sharded(self, method: Callable, batch: TrainBatch, *args) -> list:
        return ray.get([a.call.remote(method.__name__, batch.shard(r, self.world), *args)
                        for r, a in enumerate(self.actors)])

    def compute_log_probs(self, batch: TrainBatch, which: str = "actor") -> list[torch.Tensor]:
        return [lp for shard in self._sharded(B.compute_log_probs, batch, which) for lp in shard]

    def compute_values(self, batch: TrainBatch) -> list[torch.Tensor]:
        return [v for shard in self._sharded(B.compute_values, batch) for v in shard]

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        if len(batch) < self.world:
            raise ValueError(f"a step of {len(batch)} samples cannot feed {self.world} DP ranks; "
                             f"raise train.global_batch_size")
        return self._sharded(B.train_step, batch)[0]  # metrics are all-reduced: every rank agrees

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        return self._all(B.state_dict_for_sync)[0]  # a collective for some backends: every rank calls

    def export_weights(self, path: str | None, transport: str | None = None, args: dict | None = None) -> str:
        """Rank 0 writes the sync state under `path` by the file transport `transport` (path None: only
        checksum it), with its settings `args` (TransportKind.file_args); returns its checksum.

        Backends whose export is a collective (megatron: TP gather, PP exchange) run it on every
        rank; the torch backend's replicas are identical, so rank 0 alone exports.
        """
        kind = TRANSPORTS[transport] if transport else None  # the spec travels (see push_state)
        return ray.get([a.export_weights.remote(path, i == 0, kind, args)
                        for i, a in enumerate(self._sync_ranks())])[0]

    def push_weights(self, urls: list[str], *, transport: str, version: int | str, bucket_bytes: int,
                     engine_dtype: str | None, backend: str, copies: int = 1, tied: tuple[str, ...] = (),
                     resume: bool = True, timeout_s: float = 180.0, nccl_env: dict[str, str] | None = None,
                     flush_cache: bool = True, flattened: bool = False, fp8: bool = False,
                     engines: list[int] | None = None, fingerprint: bool = True) -> dict:
        """Rank 0 pushes the sync state to `urls` (see push_state); returns its fingerprint, bytes and
        seconds, and "sources": url -> the trainer ranks whose payloads it got (one per engine TP rank). Every rank
        takes part where the export is a collective. resume=False: the engines
        stay paused after a tensor push (their KV cache is still released: rlrun.parts.offload). fp8: each bucket
        is quantized on the lead rank's GPU as it is pushed (push_state). engines: the engine id of each url; with a
        transport gathered per engine (TransportKind.gathered), each engine's TP ranks get the payloads the trainer
        ranks on their own GPUs made, posted by the engine's sender rank (_gathered), each sender pushing its engines
        at once with the others; the fingerprint is rank 0's (every rank's copy is the same bytes); fingerprint=False:
        none (push_state's), for engines that cannot be asked for theirs."""
        kind = TRANSPORTS[transport]
        how = dict(transport=kind, version=version, bucket_bytes=bucket_bytes,
                   engine_dtype=engine_dtype, backend=backend, copies=copies, tied=tied, resume=resume,
                   timeout_s=timeout_s, nccl_env=nccl_env, flush_cache=flush_cache, flattened=flattened, fp8=fp8,
                   fingerprint=fingerprint)
        roles = self._gathered(kind, urls, engines, copies)
        if roles is None:
            out = ray.get([a.push_weights.remote(urls, i == 0, how) for i, a in enumerate(self._sync_ranks())])[0]
            return dict(out, sources={url: [0] * copies for url in urls})
        outs = [o for o in ray.get([a.push_weights.remote(urls, i == 0, how, role)
                                    for i, (a, role) in enumerate(zip(self.actors, roles))]) if o is not None]
        sources = {url: ranks for o in outs for url, ranks in o["sources"].items()}
        # bytes per engine and the push's seconds: the slowest sender's (rank 0 sends nothing when its engine is not
        # pushed, e.g. a restarted engine's resync)
        return dict(outs[0], sources=sources, bytes=max(o["bytes"] for o in outs),
                    seconds=max(o["seconds"] for o in outs))

    def _gathered(self, kind: TransportKind, urls: list[str], engines: list[int] | None,
                  copies: int) -> list[dict] | None:
        """Each rank's part in a push gathered per engine (_Rank.push_weights), or None for the lead rank's push:
        the transport is not gathered, nothing is pushed, the urls' engines are not known, or a GPU of some engine
        holds no trainer rank (said once)."""
        if kind.gathered is None or not urls or engines is None:
            return None
        ranks = kind.gathered(self._slots["trainer"], self._slots["engine"], copies)
        lost = [e for e, r in ranks.items() if r is None]
        if lost or any(e not in ranks for e in engines):
            if kind.name not in self._said:
                self._said.add(kind.name)
                print(f"[rlrun] weight sync {kind.name}: engine(s) {lost or sorted(set(engines) - set(ranks))} have a "
                      f"GPU with no trainer rank on it, so trainer rank 0 sends its own copy to every engine's TP ranks "
                      f"(read across GPUs) instead of each engine getting its payloads from the ranks on its GPUs",
                      file=sys.stderr, flush=True)
            return None
        if "gathered" not in self._said:
            self._said.add("gathered")
            print(f"[rlrun] weight sync {kind.name}: gathered per engine, each engine's TP ranks get the copies of the "
                  f"trainer ranks on their GPUs: " + "; ".join(f"engine {e} <- ranks {list(r)} (sent by rank {r[0]})"
                                                              for e, r in ranks.items()), file=sys.stderr, flush=True)
        pushed = set(engines)
        groups = [ranks[e] for e in sorted(ranks)]
        return [{"groups": groups,
                 "mine": next((g for e, g in ranks.items() if rank in g and e in pushed), None),
                 "urls": [url for url, e in zip(urls, engines) if ranks[e][0] == rank]}
                for rank in range(self.world)]

    def _sync_ranks(self) -> list:
        return self.actors if self._cls.sync_is_collective else self.actors[:1]

    def start_profile(self) -> None:
        ray.get([a.start_profile.remote() for a in self.actors])

    def stop_profile(self, rollout_id: int) -> list[str]:
        """Every rank's chrome trace of this rollout's trainer work (rlrun.train.profile.trace_path)."""
        return ray.get([a.stop_profile.remote(rollout_id) for a in self.actors])

    def offload(self) -> None:
        """train.offload: every rank's parameters, grads and optimizer state to host memory."""
        self._all(B.offload)

    def onload(self) -> None:
        self._all(B.onload)

    def save(self, path: str) -> None:
        self._all(B.save, path)

    def save_async(self, path: str) -> None:
        """Every rank snapshots its share of a checkpoint and writes it in the background (checkpoint.async_save);
        save_done() says when every rank's files are complete."""
        self._all(B.save_async, path)

    def save_done(self) -> bool:
        return all(self._all(B.save_done))

    def wait_save(self) -> None:
        self._all(B.wait_save)

    def load(self, path: str) -> None:
        self._all(B.load, path)

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []
