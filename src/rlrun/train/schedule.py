"""Learning-rate schedule: linear warmup, then constant, linear or cosine decay to min_lr.

Same shape as Megatron's OptimizerParamScheduler (warmup from 0, decay over the remaining steps),
so a run moved from slime keeps its curve.
"""
from __future__ import annotations

import math


def warmup_iters(optim, total: int) -> int:
    """optim.lr_warmup_iters, or optim.lr_warmup_fraction of the run's `total` optimizer steps (Megatron-LM's
    --lr-warmup-fraction: lr_warmup_steps = fraction x lr_decay_steps, the run's length when --lr-decay-iters is
    absent, as in slime's scripts), whole steps."""
    fraction = getattr(optim, "lr_warmup_fraction", None)
    return int(fraction * total) if fraction is not None else optim.lr_warmup_iters


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
