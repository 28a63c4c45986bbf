"""The trainer as a group of Ray actors, one per DP rank, each on the bundle the plan gives it.

The driver calls the group like one backend: it shards batches over the ranks (contiguous
chunks, so rank order = sample order), runs the collective call on every rank at once and
gathers the results back in sample order.
"""
from __future__ import annotations

import ray
import torch

from rlrun.config.kinds import BACKENDS, resolve
from rlrun.launch.env import runtime_env
from rlrun.launch.placement import Placement
from rlrun.train.base import TrainBatch


def backend_class(name: str):
    """The TrainerBackend class of a train.backend kind (its spec's factory, imported here)."""
    return resolve(BACKENDS[name].factory)


def push_state(state: dict[str, torch.Tensor], urls: list[str], *, transport: str, version: int | str,
               bucket_bytes: int, engine_dtype: str | None, device: torch.device, backend: str = "gloo",
               copies: int = 1, tied: tuple[str, ...] = (), resume: bool = True, timeout_s: float = 180.0,
               nccl_env: dict[str, str] | None = None, flush_cache: bool = True, sync_group=None) -> dict:
    """The lead rank's push of its sync state to the engines at `urls`; returns the state's
    fingerprint in the engines' dtype (W.Fingerprint), the bytes pushed per engine and the push's
    seconds. No urls: only the fingerprint.

    Each bucket is moved to `device` (the rank's GPU: CUDA IPC handles / NCCL need device memory)
    and fingerprinted there just before it is sent, so one bucket at a time is staged. `tied`: names
    the engine's model ties to another tensor it receives (lm_head.weight with tied embeddings; SGLang
    skips loading it): fingerprinted, since the engine's state holds them, but not sent.
      tensor       /update_weights_from_tensor with SGLang's IPC payload (CUDA IPC on a GPU,
                   shared-memory files on the CPU): engines on this host, i.e. colocated
      distributed  /init_weights_update_group + /update_weights_from_distributed, a broadcast from
                   here (rank 0 of a fresh group; master = this node's IP, a free port)
    Every step is bounded by timeout_s (rollout.weight_sync_timeout_s); nccl_env: the engines' NCCL settings,
    which this rank must share (rlrun.rollout.engines.check_nccl_env). sync_group: the rank's
    rlrun.rollout.engines.BroadcastGroup, kept across pushes (distributed).
    """
    import time

    from rlrun.rollout import engines as E
    from rlrun.rollout import weights as W

    fp = W.Fingerprint(W.dtype_from_name(engine_dtype) if engine_dtype else None)

    def prepare(bucket: list) -> list:
        bucket = [(n, t.to(device)) for n, t in bucket]
        fp.add(bucket)
        return bucket

    named = [(n, t) for n, t in state.items() if n not in tied]
    fp.add([(n, state[n].to(device)) for n in tied if n in state])
    t0, nbytes = time.perf_counter(), 0
    if not urls:
        for bucket in W.buckets(named, bucket_bytes):
            prepare(bucket)
    elif transport == "tensor":
        nbytes = E.push_tensors(urls, named, str(version), transport="ipc", bucket_bytes=bucket_bytes,
                                prepare=prepare, copies=copies, resume=resume, timeout_s=timeout_s,
                                flush_cache=flush_cache)
    elif transport == "distributed":
        import ray

        from rlrun.rollout.process import free_port

        host = ray.util.get_node_ip_address()
        if sync_group is None:  # a caller that keeps none: a group for this push only
            sync_group = E.BroadcastGroup(host, lambda: free_port(host), backend, copies)
        nbytes = E.broadcast_weights(urls, named, str(version), master_address=host, master_port=0,
                                     backend=backend, bucket_bytes=bucket_bytes, prepare=prepare,
                                     ranks_per_engine=copies, timeout_s=timeout_s, engine_env=nccl_env,
                                     flush_cache=flush_cache, group=sync_group)["bytes"]
    else:
        raise ValueError(f"rollout.weight_sync={transport!r}: the trainer pushes tensor or distributed "
                         "(disk goes through export_weights)")
    return {"fingerprint": fp.hexdigest(), "bytes": nbytes, "seconds": time.perf_counter() - t0}


class _Rank:
    """Ray actor body: builds the backend inside the worker process and forwards calls."""

    def __init__(self, backend: str, cfg, rank: int, world_size: int, gpu_id: int | None, total_steps: int,
                 run_dir: str | None = None, memory_estimate_gib: float | None = None):
        from rlrun.train.profile import StepProfiler
        from rlrun.train.torch_backend import set_cpu_threads

        set_cpu_threads()
        self.rank = rank
        self.device = torch.device("cpu") if gpu_id is None else torch.device("cuda", gpu_id)
        self.rank, self.run_dir, self.memory_estimate_gib = rank, run_dir, memory_estimate_gib
        self.profiler = StepProfiler()
        self.impl = backend_class(backend)(cfg, rank=rank, world_size=world_size, gpu_id=gpu_id,
                                           total_steps=total_steps)

    def __repr__(self) -> str:  # Ray shows it as the actor's repr_name (dashboard, ray.util.state)
        return f"trainer rank {self.rank}"

    def call(self, method: str, *args, **kwargs):
        try:
            return getattr(self.impl, method)(*args, **kwargs)
        except torch.cuda.OutOfMemoryError as e:
            from rlrun.train.profile import dump_oom_snapshot, oom_message

            snapshot = dump_oom_snapshot(self.run_dir, self.rank)
            gib = 2**30
            total = torch.cuda.get_device_properties(self.device).total_memory / gib
            raise RuntimeError(oom_message(self.rank, method, torch.cuda.max_memory_allocated(self.device) / gib,
                                           total, self.memory_estimate_gib, snapshot)) from e

    def start_profile(self) -> None:
        self.profiler.start()

    def stop_profile(self, rollout_id: int) -> str:
        from rlrun.train.profile import trace_path

        return self.profiler.stop(trace_path(self.run_dir or ".", rollout_id, self.rank))

    def export_weights(self, path: str | None, lead: bool) -> str | None:
        """On the lead rank: checksum of the sync state and, with `path`, the state written there
        as an HF safetensors file. Other ranks only take part (state_dict_for_sync may be a
        collective, e.g. a TP gather) and return None.

        The weights go from this actor to the engines through the local disk: they never pass
        through the driver, and safetensors is what update_weights_from_disk reads. The checksum
        is taken in the engines' dtype (the hf engine holds fp32), so a bf16 export still matches.
        """
        from pathlib import Path

        from safetensors.torch import save_file

        from rlrun.rollout.weights import checksum

        state = self.impl.state_dict_for_sync()
        if not lead:
            return None
        if path is not None:
            Path(path).mkdir(parents=True, exist_ok=True)
            tmp = Path(path) / "model.safetensors.tmp"
            save_file(state, str(tmp))
            tmp.replace(Path(path) / "model.safetensors")  # engines never read a half-written file
        return checksum({k: v.float() if v.is_floating_point() else v for k, v in state.items()})


    def push_weights(self, urls: list[str], lead: bool, how: dict) -> dict | None:
        """state_dict_for_sync on every rank (a collective for megatron); the lead rank pushes it
        to the engines itself (push_state), so the tensors never pass through the driver."""
        state = self.impl.state_dict_for_sync()
        if not lead:
            return None
        if how["transport"] == "distributed" and getattr(self, "_sync_group", None) is None:
            import ray

            from rlrun.rollout import engines as E
            from rlrun.rollout.process import free_port

            host = ray.util.get_node_ip_address()
            self._sync_group = E.BroadcastGroup(host, lambda: free_port(host), how["backend"], how["copies"])
        return push_state(state, urls, device=self.device, sync_group=getattr(self, "_sync_group", None), **how)


class TrainGroup:
    def __init__(self, cfg, plan, placement: Placement, env: dict[str, str], run_dir: str | None = None):
        if plan.tp * plan.pp * plan.cp != 1 and not BACKENDS[cfg.train.backend].model_parallel:
            raise ValueError(f"train.backend={cfg.train.backend} is data-parallel only, but the plan has tp={plan.tp} "
                             f"pp={plan.pp} cp={plan.cp}; use parallelism=tp1 or train.backend=megatron")
        self.world = plan.trainer_gpus
        self._cls = backend_class(cfg.train.backend)
        actor = ray.remote(_Rank)
        self.actors = []
        for rank in range(self.world):
            gpus = placement.gpu_ids("trainer", rank)
            opts = placement.options("trainer", rank)
            self.actors.append(actor.options(**opts, runtime_env=runtime_env(env)).remote(
                cfg.train.backend, cfg, rank, self.world, gpus[0] if gpus else None, plan.total_steps,
                run_dir, plan.memory_gib.get("trainer")))
        addr, port = ray.get(self.actors[0].call.remote("master_address"))
        self._all("init", addr, port)

    def _all(self, method: str, *args) -> list:
        return ray.get([a.call.remote(method, *args) for a in self.actors])

    def _sharded(self, method: str, batch: TrainBatch, *args) -> list:
        return ray.get([a.call.remote(method, batch.shard(r, self.world), *args) for r, a in enumerate(self.actors)])

    def compute_log_probs(self, batch: TrainBatch, which: str = "actor") -> list[torch.Tensor]:
        return [lp for shard in self._sharded("compute_log_probs", batch, which) for lp in shard]

    def compute_values(self, batch: TrainBatch) -> list[torch.Tensor]:
        return [v for shard in self._sharded("compute_values", batch) for v in shard]

    def train_step(self, batch: TrainBatch) -> dict[str, float]:
        if len(batch) < self.world:
            raise ValueError(f"a step of {len(batch)} samples cannot feed {self.world} DP ranks; "
                             f"raise train.global_batch_size")
        return self._sharded("train_step", batch)[0]  # metrics are all-reduced: every rank agrees

    def state_dict_for_sync(self) -> dict[str, torch.Tensor]:
        return self._all("state_dict_for_sync")[0]  # a collective for some backends: every rank calls

    def export_weights(self, path: str | None) -> str:
        """Rank 0 writes the sync state under `path` (None: only checksum it); returns its checksum.

        Backends whose export is a collective (megatron: TP gather, PP exchange) run it on every
        rank; the torch backend's replicas are identical, so rank 0 alone exports.
        """
        return ray.get([a.export_weights.remote(path, i == 0) for i, a in enumerate(self._sync_ranks())])[0]

    def push_weights(self, urls: list[str], *, transport: str, version: int | str, bucket_bytes: int,
                     engine_dtype: str | None, backend: str, copies: int = 1, tied: tuple[str, ...] = (),
                     resume: bool = True, timeout_s: float = 180.0, nccl_env: dict[str, str] | None = None,
                     flush_cache: bool = True) -> dict:
        """Rank 0 pushes the sync state to `urls` (see push_state); returns its fingerprint, bytes and
        seconds. Every rank takes part where the export is a collective. resume=False: the engines
        stay paused after a tensor push (their KV cache is still released: rlrun.parts.offload)."""
        how = dict(transport=transport, version=version, bucket_bytes=bucket_bytes, engine_dtype=engine_dtype,
                   backend=backend, copies=copies, tied=tied, resume=resume, timeout_s=timeout_s, nccl_env=nccl_env,
                   flush_cache=flush_cache)
        return ray.get([a.push_weights.remote(urls, i == 0, how) for i, a in enumerate(self._sync_ranks())])[0]

    def _sync_ranks(self) -> list:
        return self.actors if getattr(self._cls, "sync_is_collective", True) else self.actors[:1]

    def start_profile(self) -> None:
        ray.get([a.start_profile.remote() for a in self.actors])

    def stop_profile(self, rollout_id: int) -> list[str]:
        """Every rank's chrome trace of this rollout's trainer work (rlrun.train.profile.trace_path)."""
        return ray.get([a.stop_profile.remote(rollout_id) for a in self.actors])

    def offload(self) -> None:
        """train.offload: every rank's parameters, grads and optimizer state to host memory."""
        self._all("offload")

    def onload(self) -> None:
        self._all("onload")

    def save(self, path: str) -> None:
        self._all("save", path)

    def load(self, path: str) -> None:
        self._all("load", path)

    def shutdown(self) -> None:
        for a in self.actors:
            ray.kill(a)
        self.actors = []
