"""Learning-rate schedule: linear warmup, then constant, linear or cosine decay to min_lr.

Same shape as Megatron's OptimizerParamScheduler (warmup from 0, decay over the remaining steps),
so a run moved from slime keeps its curve.
"""
from __future__ import annotations

import math


def lr_at(step: int, *, lr: float, min_lr: float, style: str, warmup: int, total: int) -> float:
    """Learning rate for optimizer step `step` (0-based) of `total` steps."""
    if style not in ("constant", "linear", "cosine"):
        raise ValueError(f"optim.lr_decay_style={style!r} is not one of constant|linear|cosine")
    if warmup > 0 and step < warmup:
        return lr * (step + 1) / warmup
    if style == "constant":
        return lr
    span = max(total - warmup, 1)
    progress = min(max(step - warmup, 0) / span, 1.0)
    if style == "linear":
        return min_lr + (lr - min_lr) * (1.0 - progress)
    return min_lr + 0.5 * (lr - min_lr) * (1.0 + math.cos(math.pi * progress))
