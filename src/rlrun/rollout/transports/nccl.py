"""rollout.weight_sync=distributed: trainer rank 0 broadcasts every bucket to the engines over a process group
made for weight sync and kept across pushes (NCCL on GPUs, gloo on the CPU; SGLang's /init_weights_update_group +
/update_weights_from_distributed). For engines on GPUs of their own: auto picks it when not colocated (NCCL
refuses two ranks of one group on one GPU, which colocated engine 0 and trainer rank 0 would be)."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.kinds import TRANSPORTS, TransportKind
from rlrun.rollout.transports import bandwidth

NAME = "distributed"


def auto(cfg) -> bool:
    return not cfg.train.colocate


def rules(cfg) -> Iterator[Problem]:
    if cfg.train.colocate and cfg.hardware.vendor != "cpu":
        yield Problem("rollout.weight_sync", "weight_sync=distributed broadcasts over NCCL from trainer rank 0, and "
                      "NCCL refuses two ranks of one group on one GPU, which colocated engine 0 and trainer rank 0 "
                      "are", "set rollout.weight_sync=tensor (or auto) for colocated runs", cfg.rollout.weight_sync)


def push(named: list, urls: list[str], *, version: str, bucket_bytes: int, prepare, copies: int = 1,
         backend: str = "nccl", resume: bool = True, timeout_s: float = 180.0, engine_env: dict | None = None,
         flush_cache: bool = True, keep: dict | None = None, flattened: bool = True,
         phases: dict | None = None) -> int:
    """Trainer end: a group {trainer rank 0, every engine's ranks} (master = this node's IP, a free port), one
    broadcast per bucket while every engine receives it (engine end: its /update_weights_from_distributed).
    keep: this rank's state across pushes, where the group stays (BroadcastGroup: rebuilt only when the engines
    change, dropped after a failure; building one cost ~1 s per push on two H200s); None: a group for this push
    only. Each step is bounded by timeout_s; engine_env: the engines' NCCL settings, which this rank must share
    (group.check_nccl_env). flattened: one uint8 broadcast per bucket (load_format="flattened_bucket"), else one per
    tensor."""
    import ray

    from rlrun.rollout import weights as W
    from rlrun.rollout.engines.group import BroadcastGroup, broadcast_weights
    from rlrun.rollout.process import free_port

    host = ray.util.get_node_ip_address()
    keep = {} if keep is None else keep
    if keep.get("group") is None:
        keep["group"] = BroadcastGroup(host, lambda: free_port(host), backend, copies)
    return broadcast_weights(urls, named, version, master_address=host, master_port=0, backend=backend,
                             bucket_bytes=bucket_bytes, prepare=prepare, ranks_per_engine=copies, timeout_s=timeout_s,
                             engine_env=engine_env, flush_cache=flush_cache, group=keep["group"],
                             load_format=W.FLATTENED_BUCKET if flattened else None, phases=phases)["bytes"]


SPEC = TRANSPORTS.register(TransportKind(NAME, auto=auto, rules=rules, push=push, metrics=bandwidth,
                                         flattened=lambda kind: kind.flattened_broadcast))
