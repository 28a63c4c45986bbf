"""rollout.weight_sync=distributed: trainer rank 0 broadcasts every bucket to the engines over a process group
made for the push (NCCL on GPUs, gloo on the CPU; SGLang's /init_weights_update_group +
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
         backend: str = "nccl", resume: bool = True, timeout_s: float = 180.0, engine_env: dict | None = None) -> int:
    """Trainer end: a fresh group {trainer rank 0, every engine's ranks} (master = this node's IP, a free
    port), one broadcast per bucket while every engine receives it (engine end: its
    /update_weights_from_distributed), then the group is destroyed. Each step is bounded by timeout_s;
    engine_env: the engines' NCCL settings, which this rank must share (group.check_nccl_env)."""
    import ray

    from rlrun.rollout.engines.group import broadcast_weights
    from rlrun.rollout.process import free_port

    host = ray.util.get_node_ip_address()
    return broadcast_weights(urls, named, version, master_address=host, master_port=free_port(host), backend=backend,
                             bucket_bytes=bucket_bytes, prepare=prepare, group_name=f"rlrun_sync_{version}",
                             ranks_per_engine=copies, timeout_s=timeout_s, engine_env=engine_env)["bytes"]


SPEC = TRANSPORTS.register(TransportKind(NAME, auto=auto, rules=rules, push=push, metrics=bandwidth))
