"""How a rank's samples become micro-batches, and the loss normaliser of a step; shared by every
trainer backend so that torch and megatron see the same micro-batches for the same batch."""
from __future__ import annotations

import torch

from rlrun.train.dist import all_reduce_sum


def to_device(t: torch.Tensor, device, dtype: torch.dtype | None = None) -> torch.Tensor:
    """A host tensor on `device` without stalling the GPU queue. A copy from pageable memory
    waits for every kernel already queued (e.g. the forward pass in flight) before it starts, so
    Python cannot run ahead; from pinned memory the copy is queued like a kernel. The caching host
    allocator keeps the pinned buffer until the copy has run."""
    if dtype is not None:
        t = t.to(dtype)
    if torch.device(device).type != "cuda":
        return t.to(device)
    return t.pin_memory().to(device, non_blocking=True)


def group_samples(lengths: list[int], max_tokens: int | None, micro_batch_size: int) -> list[list[int]]:
    """Sample indices of each micro-batch (each list ascending).

    max_tokens=None: micro_batch_size samples each, in order. Otherwise dynamic batching: rows of
    at most max_tokens tokens, filled first-fit over the samples sorted longest first, so rows
    come out even and few (fewer micro-batches = fewer kernel launches per token). A sample longer than
    max_tokens gets a row of its own (slime/utils/dp_schedule.py build_dp_schedule does the same)."""
    if max_tokens is None:
        return [list(range(i, min(i + micro_batch_size, len(lengths)))) for i in range(0, len(lengths), micro_batch_size)]
    rows: list[list[int]] = []
    room: list[int] = []
    for i in sorted(range(len(lengths)), key=lambda i: -lengths[i]):
        n = lengths[i]
        if n > max_tokens:  # alone in a micro-batch of its own, as slime's dp_schedule places it
            rows.append([i])
            room.append(0)
            continue
        k = next((r for r, free in enumerate(room) if free >= n), None)
        if k is None:
            rows.append([])
            room.append(max_tokens)
            k = len(rows) - 1
        rows[k].append(i)
        room[k] -= n
    return [sorted(r) for r in rows]


def micro_batches(train_cfg, lengths: list[int], max_tokens: int) -> list[list[int]]:
    """group_samples as train.use_dynamic_batch_size / micro_batch_size say."""
    return group_samples(lengths, max_tokens if train_cfg.use_dynamic_batch_size else None,
                         train_cfg.micro_batch_size)


def loss_normalizer(loss_mask: list[torch.Tensor], per_token: bool, device, group=None) -> float:
    """The global divisor of the step's loss (rlrun.algo.losses.aggregate): loss tokens
    (calculate_per_token_loss) or samples with at least one loss token (an all-masked sample
    counts in neither: docs/algorithms.md), summed over the DP ranks of `group`. The masks are
    host tensors, so the only device sync is the one all-reduce, before any forward."""
    local = sum(float(m.sum()) for m in loss_mask) if per_token else float(sum(bool(m.any()) for m in loss_mask))
    return float(all_reduce_sum(torch.tensor([local], dtype=torch.float64, device=device), group))
