"""rollout.weight_sync=tensor: trainer rank 0 hands every engine its tensors through SGLang's
/update_weights_from_tensor IPC payload (CUDA IPC handles on a GPU, shared-memory files on the CPU), so the
engines must share the trainer's host: the colocated mode, on one node. auto picks it there."""
from __future__ import annotations

from typing import Iterator

from rlrun.config.errors import Problem
from rlrun.config.kinds import TRANSPORTS, TransportKind
from rlrun.rollout.transports import bandwidth

NAME = "tensor"


def auto(cfg) -> bool:
    return cfg.train.colocate and cfg.train.num_nodes == 1


def rules(cfg) -> Iterator[Problem]:
    r, t = cfg.rollout, cfg.train
    if not t.colocate:
        yield Problem("rollout.weight_sync", "weight_sync=tensor hands the engines CUDA IPC handles (shared "
                      "memory on the CPU) of the trainer's tensors, so trainer and engines must share GPUs, but "
                      "train.colocate is false",
                      "set rollout.weight_sync=distributed (or auto), or train.colocate=true",
                      r.weight_sync)
    elif t.num_nodes > 1:
        spans = r.gpus_per_engine > t.gpus_per_node
        yield Problem("rollout.weight_sync", f"weight_sync=tensor is pushed by trainer rank 0 to every engine through "
                      f"CUDA IPC, which does not cross nodes, but train.num_nodes={t.num_nodes}"
                      + ("; colocated engines spanning nodes need the feature rlrun lacks: slime gathers each "
                         "engine's per-GPU CUDA-IPC payloads from the trainer ranks on that engine's GPUs, on every "
                         "node (update_weight_from_tensor.py, _send_to_colocated_engine)" if spans else ""),
                      "set rollout.weight_sync=disk (a run dir on a shared filesystem) or use one node", r.weight_sync)


def push(named: list, urls: list[str], *, version: str, bucket_bytes: int, prepare, copies: int = 1,
         backend: str = "gloo", resume: bool = True, timeout_s: float = 180.0, engine_env: dict | None = None,
         flush_cache: bool = True, keep: dict | None = None, flattened: bool = False) -> int:
    """Trainer end: bucket by bucket, pause (in place) -> /update_weights_from_tensor -> continue (the engine
    end is SGLang's own endpoint, or the hf engine's reading of the same payload). flattened: each bucket as one
    buffer with one IPC handle (SGLang's load_format="flattened_bucket"), the next bucket staged while the engines
    load the previous one; else one handle per tensor."""
    from rlrun.rollout import weights as W
    from rlrun.rollout.engines.group import push_tensors

    return push_tensors(urls, named, version, transport="ipc", bucket_bytes=bucket_bytes, prepare=prepare,
                        copies=copies, resume=resume, timeout_s=timeout_s, flush_cache=flush_cache,
                        load_format=W.FLATTENED_BUCKET if flattened else None)


SPEC = TRANSPORTS.register(TransportKind(NAME, auto=auto, rules=rules, push=push, metrics=bandwidth,
                                         flattened=lambda kind: kind.flattened_ipc))
