"""Trainer-side profiling: torch.profiler chrome traces for debug.profile_steps, and a CUDA memory
snapshot with a clear message when a rank runs out of GPU memory.

    RUN_DIR/profile/rollout_000003/trainer_rank0.json   chrome://tracing or https://ui.perfetto.dev
    RUN_DIR/memory/oom_rank0.pickle                     https://pytorch.org/memory_viz

The snapshot is torch.cuda.memory._dump_snapshot (https://pytorch.org/docs/stable/torch_cuda_memory.html):
without recorded history it still holds every allocator segment and block, i.e. what held the memory.
"""
from __future__ import annotations

from pathlib import Path

import torch

PROFILE_DIR = "profile"
MEMORY_DIR = "memory"


def trace_path(run_dir: str | Path, rollout_id: int, rank: int) -> Path:
    return Path(run_dir) / PROFILE_DIR / f"rollout_{rollout_id:06d}" / f"trainer_rank{rank}.json"


class StepProfiler:
    """One rank's torch.profiler around one rollout's trainer work (CPU, and CUDA when present)."""

    def __init__(self):
        self._prof = None

    def start(self) -> None:
        acts = [torch.profiler.ProfilerActivity.CPU]
        if torch.cuda.is_available():
            acts.append(torch.profiler.ProfilerActivity.CUDA)
        self._prof = torch.profiler.profile(activities=acts, record_shapes=True)
        self._prof.__enter__()

    def stop(self, path: str | Path) -> str:
        if self._prof is None:
            raise RuntimeError("stop_profile without start_profile")
        self._prof.__exit__(None, None, None)
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._prof.export_chrome_trace(str(path))
        self._prof = None
        return str(path)


def oom_message(rank: int, method: str, peak_gib: float, total_gib: float | None, estimate_gib: float | None,
                snapshot: str | None) -> str:
    """The error text of a rank's CUDA OOM: the measured peak beside the plan's estimate, and what to do."""
    est = (f"the plan estimated {estimate_gib:.1f} GiB per trainer GPU (`rlrun plan` shows the breakdown)"
           if estimate_gib is not None else "the plan had no trainer memory estimate")
    cap = f" of {total_gib:.1f} GiB" if total_gib is not None else ""
    where = f"; memory snapshot: {snapshot} (open it in https://pytorch.org/memory_viz)" if snapshot else ""
    return (f"CUDA out of memory on trainer rank {rank} in {method}: measured peak {peak_gib:.1f} GiB{cap}, {est}"
            f"{where}. Lower train.max_tokens_per_gpu or the micro batch, turn on recompute, or use "
            f"optim.state_dtype=bf16 / train.offload=true")


def dump_oom_snapshot(run_dir: str | Path | None, rank: int) -> str | None:
    """Writes the allocator snapshot of this rank; None when there is no run dir or it cannot be written."""
    if run_dir is None:
        return None
    path = Path(run_dir) / MEMORY_DIR / f"oom_rank{rank}.pickle"
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        torch.cuda.memory._dump_snapshot(str(path))
    except Exception as e:  # the OOM itself must still surface; say why there is no snapshot
        print(f"[rlrun] rank {rank}: could not write the memory snapshot {path}: {e}", flush=True)
        return None
    return str(path)
