"""Weight transports (rollout.weight_sync): how the trainer's weights reach the engines, one module each.

    tensor  (tensor.py)  CUDA IPC handles / shared memory: the engines share the trainer's host (colocated)
    nccl    (nccl.py)    rollout.weight_sync=distributed: a broadcast from trainer rank 0 (NCCL; gloo on the CPU)
    disk    (disk.py)    a safetensors file under the run dir that every engine loads

Each module registers a rlrun.config.kinds.TransportKind that owns both ends (the trainer's push, run on its
lead rank by rlrun.launch.train_group; the engines' receive), its plan rule (`auto` and `rules`, read by
rlrun.config.plan and rlrun validate) and its metrics. rlrun.config.kinds.discover imports every module here, so a new transport
(a delta, LoRA-adapter-only sync) is one more module. Pure at import: no torch, no ray (the ends import what they
run on when they run).
"""
from __future__ import annotations


def bandwidth(nbytes: int, seconds: float) -> dict[str, float]:
    """The metrics of a push from the trainer's memory: bytes per engine / the lead rank's push seconds."""
    if not nbytes:
        return {}
    return {"perf/weight_sync_gb_per_s": nbytes / max(seconds, 1e-9) / 1e9, "perf/weight_sync_gb": nbytes / 1e9}
