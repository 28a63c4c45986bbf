"""rollout.weight_sync=tensor: the trainer hands every engine its tensors through SGLang's
/update_weights_from_tensor IPC payload (CUDA IPC handles on a GPU, shared-memory files on the CPU), so the
engines must share the trainer's host: the colocated mode, on one node. auto picks it there.

Gathered per engine (TransportKind.gathered): every trainer rank holds each bucket (the backend's sync_buckets), so
the ranks on an engine's GPUs each serialize their own copy and the engine's TP rank j gets a handle to memory on its
own GPU, the payload of the rank on the engine's GPU j; the rank on the engine's first GPU gathers them and posts the
list (engine_ranks says which ranks; rlrun.launch.train_group runs it). slime does the same
(update_weight_from_tensor.py: each rank serializes, gather_object to the engine's source rank). An engine GPU with no
trainer rank: the lead rank's own copy goes to every engine, as one payload per TP rank (CUDA IPC across GPUs)."""
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
        yield Problem("rollout.weight_sync", f"weight_sync=tensor hands each engine the trainer's memory on its GPUs "
                      f"through CUDA IPC, which does not cross nodes, but train.num_nodes={t.num_nodes}"
                      + ("; colocated engines spanning nodes need the feature rlrun lacks: slime gathers each "
                         "engine's per-GPU CUDA-IPC payloads from the trainer ranks on that engine's GPUs, on every "
                         "node (update_weight_from_tensor.py, _send_to_colocated_engine)" if spans else ""),
                      "set rollout.weight_sync=disk (a run dir on a shared filesystem) or use one node", r.weight_sync)


Slot = tuple[int, int]  # (node, gpu) of the plan's placement: colocated roles on one slot share its GPU


def engine_ranks(trainer: dict[int, list[Slot]], engines: dict[int, list[Slot]],
                 copies: int) -> dict[int, tuple[int, ...] | None]:
    """engine -> the trainer ranks whose payloads it gets, one per engine TP rank in TP order (the rank on the engine's
    GPU j serializes TP rank j's); the first is the engine's sender (it gathers them and posts the request). copies:
    payloads per request (the engine's TP size; 1 for an engine that reads one payload). None for an engine one of
    whose first `copies` GPUs holds no trainer rank (nobody has that GPU's copy: the lead rank's push instead)."""
    on: dict[Slot, int] = {}
    for rank, where in sorted(trainer.items(), reverse=True):  # two ranks on one slot: the lower one
        for slot in where:
            on[slot] = rank
    out: dict[int, tuple[int, ...] | None] = {}
    for engine, where in sorted(engines.items()):
        ranks = [on.get(slot) for slot in where[:copies]]
        out[engine] = None if len(ranks) < copies or None in ranks else tuple(ranks)
    return out


def push(named: list, urls: list[str], *, version: str, bucket_bytes: int, prepare, copies: int = 1,
         backend: str = "gloo", resume: bool = True, timeout_s: float = 180.0, engine_env: dict | None = None,
         flush_cache: bool = True, keep: dict | None = None, flattened: bool = False, exchange=None,
         phases: dict | None = None) -> int:
    """Trainer end: bucket by bucket, pause (in place) -> /update_weights_from_tensor -> continue (the engine
    end is SGLang's own endpoint, or the hf engine's reading of the same payload). flattened: each bucket as one
    buffer with one IPC handle (SGLang's load_format="flattened_bucket"), the next bucket staged while the engines
    load the previous one; else one handle per tensor. exchange: this rank's part in its engine's gathered push
    (rlrun.rollout.engines.group.push_tensors); urls are then the engines this rank sends to (none: it only serializes
    its copy for its engine's sender)."""
    from rlrun.rollout import weights as W
    from rlrun.rollout.engines.group import push_tensors

    return push_tensors(urls, named, version, transport="ipc", bucket_bytes=bucket_bytes, prepare=prepare,
                        copies=copies, resume=resume, timeout_s=timeout_s, flush_cache=flush_cache,
                        load_format=W.FLATTENED_BUCKET if flattened else None, exchange=exchange, phases=phases)


SPEC = TRANSPORTS.register(TransportKind(NAME, auto=auto, rules=rules, push=push, metrics=bandwidth,
                                         flattened=lambda kind: kind.flattened_ipc, gathered=engine_ranks))
